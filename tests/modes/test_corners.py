"""Corners the older tests did not visit: `x.view`, `y += v` across dtypes, a Hessian over leaves that are one
array."""

import itertools

import numpy as np
import pytest

import dualbroadcast as db


def test_view_of_a_tracked_value_is_the_value():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(db.gradient(lambda a: np.sum(a.view(np.float64) * a), x), 2 * x)
    np.testing.assert_array_equal(db.gradient(lambda a: np.sum(a[1:].view() ** 2), x), [0, 4, 6])


def test_view_with_another_dtype_is_a_clear_error():
    with pytest.raises(db.ValueConversionError, match="astype"):
        db.gradient(lambda a: np.sum(a.view(np.int64)), np.ones(3))


@pytest.mark.parametrize("y_dtype, v_dtype", list(itertools.product([np.float32, np.float64], repeat=2)))
def test_augmented_assignment_keeps_numpy_in_place_dtype(y_dtype, v_dtype):
    """``y += v`` keeps y's dtype, as NumPy's in-place add does (float32 y, float64 v: float32)."""
    x = np.array([0.1, 0.7, -1.3], y_dtype)
    v = np.array([1e-9, 0.25, 3.0], v_dtype)
    seen = []

    def f(a, b):
        y = a * 2
        y += b
        seen.append(y.dtype)
        return np.sum(y * y)

    gx, gv = db.gradient(f, x, v)
    y = x * 2
    y += v  # NumPy: y stays y_dtype
    assert seen == [np.dtype(y_dtype)] and gx.dtype == y_dtype and gv.dtype == v_dtype
    np.testing.assert_allclose(gx, 4 * y, rtol=1e-6)
    np.testing.assert_allclose(gv, 2 * y, rtol=1e-6)


def test_hessian_over_leaves_that_are_one_array():
    """Two leaves of a pytree that are the same array get one seed each: neither overwrites the other."""
    jax = pytest.importorskip("jax")
    x = np.array([0.5, -1.5, 2.0])

    def f(p):
        return np.sum(p["a"] ** 2 * p["b"]) + np.sum(np.sin(p["a"] * p["b"]))

    def jf(p):
        return jax.numpy.sum(p["a"] ** 2 * p["b"]) + jax.numpy.sum(jax.numpy.sin(p["a"] * p["b"]))

    ours = db.hessian(f, {"a": x, "b": x})
    with jax.enable_x64(True):
        theirs = jax.hessian(jf)({"a": jax.numpy.asarray(x), "b": jax.numpy.asarray(x)})
    for i in "ab":
        for j in "ab":
            np.testing.assert_allclose(ours[i][j], np.asarray(theirs[i][j]), rtol=1e-12, err_msg=f"H[{i}][{j}]")


@pytest.mark.parametrize("func", [np.std, np.var])
@pytest.mark.parametrize("shape, axis", [((0,), None), ((2, 0), 1), ((3, 4), None), ((3, 4), 0), ((3, 4), 1)])
def test_tangent_of_var_and_std_matches_jax_and_is_nan_over_an_empty_slice(func, shape, axis):
    """As mean's: NaN over an empty slice, where the value is NaN too (was the empty sum's 0; JAX gives NaN for
    std there and 0 for var)."""
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(len(shape) + (axis or 0))
    x, t = rng.standard_normal(shape), rng.standard_normal(shape)
    _, ours = db.jvp(lambda a: func(a, axis=axis), (x,), (t,))
    with jax.enable_x64(True):
        jfunc = getattr(jax.numpy, func.__name__)
        _, theirs = jax.jvp(lambda a: jfunc(a, axis=axis), (jax.numpy.asarray(x),), (jax.numpy.asarray(t),))
    assert np.all(np.isnan(ours)) == (x.size == 0)
    if x.size:
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-12)
