"""The regularized incomplete gamma functions are constant in ``a`` at x = 0 (P = 0) and x = inf (P = 1): their
partial in ``a`` is 0 there, as the central differences in ``a`` are (`rules.scipy_special`'s ``constant``)."""

import numpy as np
import pytest

import dualbroadcast as db

sc = pytest.importorskip("scipy.special")


@pytest.mark.parametrize("func", [sc.gammainc, sc.gammaincc])
@pytest.mark.parametrize("x", [0.0, np.inf])
def test_the_partial_in_a_is_zero_where_the_function_is_constant(func, x):
    a = np.array([0.5, 1.0, 2.0, 7.5])
    xs = np.full_like(a, x)
    got = db.gradient(lambda a: np.sum(func(a, xs)), a)
    h = 1e-6
    central = (func(a + h, xs) - func(a - h, xs)) / (2 * h)
    np.testing.assert_array_equal(central, 0.0)
    np.testing.assert_array_equal(got, central)
