"""``x ** 2``'s pullback (rules/elementwise.py `square_pullback`) takes a cotangent that is one number (a sum's)
by a shortcut, ``(2g) · x``, and any other by ``g · 2x``: both against the hand derivative ``2 w x``."""

import numpy as np
import pytest

import dualbroadcast as db

X = np.array([0.3, -1.2, 0.8, 1.5])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weights", [None, np.array([2.0, -1.0, 0.5, 3.0])], ids=["one number", "an array"])
def test_the_square_pullback_with_either_cotangent(dtype, weights):
    x = X.astype(dtype)
    got = db.gradient(lambda x: np.sum(x ** 2) if weights is None else np.sum(x ** 2 * weights), x)
    np.testing.assert_allclose(got, 2 * (1.0 if weights is None else weights) * x, rtol=1e-6)
    assert got.dtype == dtype
