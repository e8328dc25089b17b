"""`derivatives.all_finite` (a replay's guard that a partial is finite, and `is_finite` of an array) is
``np.isfinite(value).all()`` for every dtype and layout, where the sum of squares it reads first overflows too."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from dualbroadcast.derivatives import DOT_CHECK_MAX, all_finite, is_finite

CASES = [
    np.array([1.0, -2.0]), np.array([1e200, -1e200]), np.array([np.inf, 1.0]), np.array([-np.inf, np.inf]),
    np.array([np.nan, 0.0]), np.array([], float), np.array(np.inf), np.array(3.0), np.ones((4, 6))[:, ::2],
    np.array([[1.0, np.nan], [2.0, 3.0]]).T, np.array([1e30, 2.0], np.float32), np.array([300.0], np.float16),
    np.array([np.inf], np.float16), np.array([1e200 + 1e200j]), np.array([1.0 + np.inf * 1j]),
    np.array([np.nan + 0j]), np.array([1, 2]), np.array([True]), np.array([1e4000], np.longdouble),
    np.ones(DOT_CHECK_MAX + 1), np.r_[np.ones(DOT_CHECK_MAX), np.nan], np.r_[np.ones(DOT_CHECK_MAX - 1), np.inf],
]


@pytest.mark.parametrize("value", CASES, ids=lambda v: f"{v.dtype}{v.shape}")
def test_all_finite_is_isfinite_all(value):
    assert all_finite(value) is (value.dtype.kind not in "fc" or bool(np.isfinite(value).all()))
    assert is_finite(value) is all_finite(value)


@given(arrays(st.sampled_from([np.float64, np.float32, np.complex128]), array_shapes(min_dims=0, max_dims=3),
              elements=st.floats(allow_nan=True, allow_infinity=True, width=32)))
def test_all_finite_of_any_array(value):
    assert all_finite(value) is bool(np.isfinite(value).all())
    assert all_finite(value.T) is bool(np.isfinite(value).all())
