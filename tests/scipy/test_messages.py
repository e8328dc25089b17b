"""The error of a SciPy function that turns a tracked value into a plain array names the function and its
mirror, or says what to do without one."""

import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
import scipy.special
import scipy.stats

import dualbroadcast as db
from dualbroadcast.errors import ValueConversionError

MIRRORED = [
    (lambda k: np.sum(scipy.integrate.odeint(lambda y, t: -k * y, np.ones(1), [0.0, 1.0])),
     "scipy.integrate.odeint", "dualbroadcast.scipy.integrate.odeint"),
    (lambda k: np.sum(scipy.integrate.solve_ivp(lambda t, y: -k * y, (0, 1), np.ones(1)).y),
     "scipy.integrate.solve_ivp", "dualbroadcast.scipy.integrate.solve_ivp"),
    (lambda k: scipy.stats.norm.logpdf(k), "scipy.stats.norm.logpdf", "dualbroadcast.scipy.stats.norm.logpdf"),
    (lambda k: scipy.special.logsumexp(k), "scipy.special.logsumexp", "dualbroadcast.scipy.special.logsumexp"),
    (lambda k: np.sum(scipy.linalg.expm(k * np.eye(2))), "scipy.linalg.expm", "dualbroadcast.scipy.linalg.expm"),
]


@pytest.mark.parametrize("f, name, mirror", MIRRORED)
def test_names_the_mirror(f, name, mirror):
    with pytest.raises(ValueConversionError, match=f"^{name} turned a tracked value.*call its mirror {mirror} "):
        db.gradient(f, 1.0)


def test_without_a_mirror_says_what_to_do():
    with pytest.raises(ValueConversionError, match=r"^scipy.stats.chi2.logpdf turned .*has no mirror of it: write "
                                                   r"it with NumPy functions.*db.defvjp.*db.cut"):
        db.gradient(lambda k: scipy.stats.chi2.logpdf(k, 3), 1.0)


def test_outside_scipy_the_general_message():
    with pytest.raises(ValueConversionError, match=r"np\.stack"):
        db.gradient(lambda x: np.sum(np.array([x, x])), 1.0)
