"""dualbroadcast.scipy.linalg: SciPy's values; gradients against JAX's (jax.scipy.linalg) where JAX has the
function, else central differences."""

import inspect

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.scipy import linalg

from ..tape.test_fast_paths import central as central_differences

RNG = np.random.default_rng(3)
N = 4
A = RNG.normal(size=(N, N)) / 2
SPD = A @ A.T + N * np.eye(N)
B = RNG.normal(size=(N, 2))
W = RNG.normal(size=(N, N))
W2 = RNG.normal(size=(N, 2))



def check(loss, *args, rtol=1e-6):
    """The gradient of ``loss`` in each argument against central differences."""
    grads = db.gradient(loss, *args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for i, g in enumerate(grads):
        expected = central_differences(lambda x, i=i: loss(*args[:i], x, *args[i + 1:]), args[i])
        np.testing.assert_allclose(g, expected, rtol=rtol, atol=rtol * np.max(np.abs(expected)))


CASES = {
    "expm": (lambda a: np.sum(W * linalg.expm(a)), (A,)),
    "sqrtm": (lambda a: np.sum(W * linalg.sqrtm(a)), (SPD,)),
    "logm": (lambda a: np.sum(W * linalg.logm(a)), (SPD,)),
    "expm_frechet": (lambda a, e: np.sum(W * linalg.expm_frechet(a, e, compute_expm=False)), (A, W.T.copy())),
    "solve_triangular": (lambda a, b: np.sum(W2 * linalg.solve_triangular(a, b, lower=True)), (np.tril(SPD), B)),
    "solve_triangular_trans": (lambda a, b: np.sum(W2 * linalg.solve_triangular(a, b, trans="T")), (np.triu(SPD), B)),
    "solve_triangular_unit": (lambda a, b: np.sum(W2[:, 0] * linalg.solve_triangular(a, b, unit_diagonal=True)),
                              (np.triu(A), B[:, 0].copy())),
    "solve_sylvester": (lambda a, b, q: np.sum(W * linalg.solve_sylvester(a, b, q)), (SPD, SPD.T + 1.0, W.T.copy())),
    "solve_continuous_lyapunov": (lambda a, q: np.sum(W * linalg.solve_continuous_lyapunov(a, q)),
                                  (A - 3 * np.eye(N), SPD)),
    "cho_solve": (lambda a, b: np.sum(W2 * linalg.cho_solve(linalg.cho_factor(a), b)), (SPD, B)),
    "cho_solve_lower": (lambda a, b: np.sum(W2 * linalg.cho_solve(linalg.cho_factor(a, lower=True), b)), (SPD, B)),
    "lu_solve": (lambda a, b: np.sum(W2 * linalg.lu_solve(linalg.lu_factor(a), b)), (A + np.eye(N), B)),
    "lu_factor": (lambda a: np.sum(W * linalg.lu_factor(a)[0]), (A,)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_against_differences(name):
    loss, args = CASES[name]
    check(loss, *args)


def test_solve_banded():
    lower, upper = 1, 2
    ab = RNG.normal(size=(lower + upper + 1, 5)) + np.array([[0], [0], [4], [0]])
    b = RNG.normal(size=5)
    check(lambda ab, b: np.sum(np.arange(5.0) * linalg.solve_banded((lower, upper), ab, b)), ab, b)
    np.testing.assert_array_equal(linalg.solve_banded((lower, upper), ab, b),
                                  scipy.linalg.solve_banded((lower, upper), ab, b))


def test_values_are_scipys():
    for mirror, original, args in [(linalg.expm, scipy.linalg.expm, (A,)), (linalg.sqrtm, scipy.linalg.sqrtm, (SPD,)),
                                   (linalg.logm, scipy.linalg.logm, (SPD,)),
                                   (linalg.solve_sylvester, scipy.linalg.solve_sylvester, (SPD, SPD, W))]:
        np.testing.assert_array_equal(mirror(*args), original(*args))
    np.testing.assert_array_equal(linalg.lu_solve(linalg.lu_factor(A), B),
                                  scipy.linalg.lu_solve(scipy.linalg.lu_factor(A), B))
    np.testing.assert_allclose(linalg.cho_solve(linalg.cho_factor(SPD), B),
                               scipy.linalg.cho_solve(scipy.linalg.cho_factor(SPD), B), rtol=1e-14)


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jsl = jax.scipy.linalg  # its sqrtm has no derivative (schur's): checked against differences above
    pairs = [
        (lambda a: np.sum(W * linalg.expm(a)), lambda a: (W * jsl.expm(a)).sum(), A),
        (lambda b: np.sum(W2 * linalg.solve_triangular(np.tril(SPD), b, lower=True)),
         lambda b: (W2 * jsl.solve_triangular(np.tril(SPD), b, lower=True)).sum(), B),
        (lambda a: np.sum(W2 * linalg.lu_solve(linalg.lu_factor(a), B)),
         lambda a: (W2 * jsl.lu_solve(jsl.lu_factor(a), B)).sum(), A + np.eye(N)),
    ]
    for ours, theirs, x in pairs:
        expected = np.asarray(jax.grad(theirs)(x))
        np.testing.assert_allclose(db.gradient(ours, x), expected, rtol=1e-6, atol=1e-8)
    # cho_factor reads one triangle: the gradients agree along symmetric directions (their symmetric parts)
    ours = db.gradient(lambda a: np.sum(W2 * linalg.cho_solve(linalg.cho_factor(a), B)), SPD)
    expected = np.asarray(jax.grad(lambda a: (W2 * jsl.cho_solve(jsl.cho_factor(a), B)).sum())(SPD))
    np.testing.assert_allclose(ours + ours.T, expected + expected.T, rtol=1e-6, atol=1e-8)


def test_mirrors_have_scipys_signatures():
    from dualbroadcast.scipy import integrate

    for module, extra in ((linalg, []), (integrate, ["sensitivity"])):
        for original, mirror in module.MIRRORS.items():
            theirs = list(inspect.signature(original).parameters)
            ours = list(inspect.signature(mirror).parameters)
            assert [p for p in ours if p not in extra] == theirs, mirror.__name__


# --- eigh and its subsets ----------------------------------------------------------------------------------------
def symmetric_eigh_loss(eigh, xp, weights):
    """A loss of the eigenpairs ``eigh`` returns for the symmetric part of its argument, each vector's sign fixed
    (its first component positive), so it is a function of the matrix."""
    def loss(b):
        w, v = eigh((b + b.T) / 2)
        return xp.sum(w * weights[0, : w.shape[0]]) + xp.sum(weights[:, : v.shape[1]] * v * xp.sign(v[:1]))

    return loss


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 6), data=st.data())
def test_eigh_subset_by_index_against_jax(n, data):
    """A subset's eigenvectors move along every other eigenvector: the gradient equals JAX's of the full
    eigh restricted to the same pairs."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo, n - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    b, weights = rng.normal(size=(n, n)), rng.normal(size=(n, n))
    ours = symmetric_eigh_loss(lambda a: linalg.eigh(a, subset_by_index=[lo, hi]), np, weights)

    def theirs_eigh(a):
        w, v = jax.numpy.linalg.eigh(a)
        return w[lo:hi + 1], v[:, lo:hi + 1]

    theirs = symmetric_eigh_loss(theirs_eigh, jax.numpy, weights)
    np.testing.assert_allclose(db.gradient(ours, b), np.asarray(jax.grad(theirs)(b)), rtol=1e-8, atol=1e-10)


def test_eigh_subset_by_value_and_eigvals_only_against_differences():
    """SciPy reads the lower triangle (``lower=True``) or the upper one: the gradient lies in it."""
    values = scipy.linalg.eigh(SPD, eigvals_only=True)
    interval = (values[0] + 1e-3, values[2] + 1e-3)  # the 2nd and 3rd: (lo, hi]
    for lower in (True, False):
        loss = symmetric_eigh_loss(lambda a: linalg.eigh(a, lower=lower, subset_by_value=interval), np, W)
        triangle = np.tril if lower else np.triu
        check(lambda a: loss(2 * triangle(a)), SPD)  # a one-triangle function seen whole
        g = db.gradient(lambda a: np.sum(linalg.eigh(a, lower=lower, eigvals_only=True, subset_by_index=(1, 2)) ** 2),
                        SPD)
        assert np.all(g == triangle(g))
        check(lambda a: np.sum(linalg.eigh(triangle(a), lower=lower, eigvals_only=True, subset_by_index=(1, 2)) ** 2),
              SPD)


def test_eigh_values_are_scipys_and_b_is_a_clear_error():
    for kwargs in ({}, {"subset_by_index": (1, 2)}, {"subset_by_value": (2.0, 9.0)}, {"eigvals_only": True},
                   {"eigvals_only": True, "subset_by_index": (0, 0)}, {"lower": False, "driver": "evr"}):
        ours = db.pullback(lambda a: linalg.eigh(a, **kwargs), SPD)[0]
        theirs = scipy.linalg.eigh(SPD, **kwargs)
        if not isinstance(theirs, tuple):
            ours, theirs = (ours,), (theirs,)
        for o, t in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(np.asarray(o), t)
    with pytest.raises(db.UnsupportedFunctionError, match="generalized problem"):
        db.gradient(lambda a: np.sum(linalg.eigh(a, SPD)[0]), SPD)
