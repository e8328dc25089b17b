"""The stats mirrors in every mode: forward (db.jvp) equals reverse, and second derivatives (their partials are
recorded calls) equal differences of the gradient, in x and in shape parameters of sf, logsf, ppf and entropy."""

import numpy as np
import pytest

import dualbroadcast as db

pytest.importorskip("scipy")
from dualbroadcast.scipy import stats

X = np.array([0.4, 1.3, 2.2])
Q = np.array([0.2, 0.7])
FUNCTIONS = {
    "norm.logsf in loc": (lambda m: np.sum(stats.norm.logsf(X, m, 1.3)), 0.2),
    "norm.ppf in scale": (lambda s: np.sum(stats.norm.ppf(Q, 0.1, s)), 1.3),
    "chi2.ppf in df": (lambda d: np.sum(stats.chi2.ppf(Q, d)), 3.3),
    "chi2.logsf in df": (lambda d: np.sum(stats.chi2.logsf(X, d)), 3.3),
    "gamma.sf in a": (lambda a: np.sum(stats.gamma.sf(X, a)), 2.5),
    "lognorm.cdf in s": (lambda s: np.sum(stats.lognorm.cdf(X, s)), 0.7),
    "laplace.logsf in x": (lambda x: stats.laplace.logsf(x, 0.1, 1.2), 0.9),
    "expon.entropy in scale": (lambda s: stats.expon(scale=s).entropy(), 1.7),
    "t.entropy in df": (lambda d: stats.t.entropy(d), 3.3),
    "beta.entropy in b": (lambda b: stats.beta.entropy(2.0, b), 1.5),
    "poisson.entropy in mu": (lambda m: stats.poisson.entropy(m), 2.5),
    "poisson.logsf in mu": (lambda m: np.sum(stats.poisson.logsf(np.array([0.0, 2.0, 5.0]), m)), 2.5),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_forward_equals_reverse_and_the_hessian_differences_of_the_gradient(name):
    f, p = FUNCTIONS[name]
    g = db.gradient(f, p)
    assert db.jvp(f, (p,), (1.0,))[1] == pytest.approx(g, rel=1e-12)
    h = 1e-5
    expected = (db.gradient(f, p + h) - db.gradient(f, p - h)) / (2 * h)
    assert db.hessian(f, p) == pytest.approx(expected, rel=1e-6, abs=1e-9)
