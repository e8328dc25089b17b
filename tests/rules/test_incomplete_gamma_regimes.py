"""∂ⁿP(a, x)/∂aⁿ uses the series of P for x <= 1 even where x > a: there, as x -> 0, Cephes' continued
fraction of Q converges to the wrong digits (1e-3 relative at a = 1e-5, x = 1e-3); against mpmath."""

import numpy as np
import pytest

import dualbroadcast as db

sc = pytest.importorskip("scipy.special")
mpmath = pytest.importorskip("mpmath")

A = np.array([1e-8, 1e-5, 1e-3, 0.01, 0.1, 0.5])  # a < x < 1: the regime the series alone covers
X = np.array([1e-6, 1e-3, 1e-2, 0.02, 0.2, 1.0])


def mpmath_derivative_in_a(a, x, order):
    """∂ⁿP(a, x)/∂aⁿ by mpmath at 40 digits."""
    with mpmath.workdps(40):
        return np.array([float(mpmath.diff(lambda s: mpmath.gammainc(s, 0, b, regularized=True), c, order))
                         for c, b in zip(a, x)])


def test_the_partial_in_a_for_small_x_above_a():
    want = mpmath_derivative_in_a(A, X, 1)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(sc.gammainc(a, X)), A), want, rtol=1e-12)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(sc.gammaincc(a, X)), A), -want, rtol=1e-12)


def test_the_second_partial_in_a_for_small_x_above_a():
    """The Hessian of a sum of elementwise P is diagonal: its product with ones is ∂²P/∂a²."""
    got = db.hvp(lambda a: np.sum(sc.gammainc(a, X)), A, np.ones_like(A))
    np.testing.assert_allclose(got, mpmath_derivative_in_a(A, X, 2), rtol=1e-11)
