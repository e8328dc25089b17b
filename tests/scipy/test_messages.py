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
    (lambda k: scipy.stats.chi2.logsf(2.0, k), "scipy.stats.chi2.logsf", "dualbroadcast.scipy.stats.chi2.logsf"),
    (lambda k: np.sum(scipy.linalg.eigh(k * np.eye(2), eigvals_only=True)), "scipy.linalg.eigh",
     "dualbroadcast.scipy.linalg.eigh"),
    (lambda k: scipy.special.logsumexp(k), "scipy.special.logsumexp", "dualbroadcast.scipy.special.logsumexp"),
    (lambda k: np.sum(scipy.linalg.expm(k * np.eye(2))), "scipy.linalg.expm", "dualbroadcast.scipy.linalg.expm"),
]


@pytest.mark.parametrize("f, name, mirror", MIRRORED)
def test_names_the_mirror(f, name, mirror):
    with pytest.raises(ValueConversionError, match=f"^{name} turned a tracked value.*call its mirror {mirror} "):
        db.gradient(f, 1.0)


def test_without_a_mirror_says_what_to_do():
    with pytest.raises(ValueConversionError, match=r"^scipy.stats.cauchy.logpdf turned .*has no mirror of it: write "
                                                   r"it with NumPy functions.*db.defvjp.*db.cut"):
        db.gradient(lambda k: scipy.stats.cauchy.logpdf(k, 3), 1.0)


def test_outside_scipy_the_general_message():
    with pytest.raises(ValueConversionError, match=r"np\.stack"):
        db.gradient(lambda x: np.sum(np.array([x, x])), 1.0)


def test_a_conversion_in_the_users_own_code_that_scipy_calls_back_is_not_scipys():
    """np.array([x]) in a constraint SciPy's minimize calls: the user's conversion, the general message (what
    to write instead), not a message blaming scipy.optimize.minimize."""
    import scipy.optimize

    def g(x):
        return np.array([1.0 - np.sum(x**2)])

    with pytest.raises(db.ValueConversionError) as error:
        scipy.optimize.minimize(lambda x: np.sum(x**2), np.full(2, 0.5), method="SLSQP",
                                constraints={"type": "ineq", "fun": g, "jac": lambda x: db.jacobian(g, x)})
    assert "np.stack([x, y]) for np.array([x, y])" in str(error.value)
    assert "scipy.optimize" not in str(error.value)
