"""The compositions of NumPy functions (selections, unique values, set operations, functions applied along
axes) against jax.vjp, and the conventions where equal values tie."""

import numpy as np
import pytest

import dualbroadcast as db

RNG = np.random.default_rng(5)
A = RNG.standard_normal((3, 4))
V = RNG.standard_normal(6)
INDEX = np.array([[0, 2, 1, 1], [2, 0, 0, 1], [1, 1, 2, 0]])
MASK = A > 0


def cases():
    import jax.numpy as jnp

    return [
        ("choose", lambda x, y: np.choose(INDEX, [x, y, 2 * x]), lambda x, y: jnp.choose(INDEX, [x, y, 2 * x]),
         (A, A[0])),
        ("compress", lambda x: np.compress([True, False, True], x, axis=0),
         lambda x: jnp.compress(np.array([True, False, True]), x, axis=0), (A,)),
        ("extract", lambda x: np.extract(MASK, x), lambda x: jnp.extract(MASK, x, size=int(MASK.sum())), (A,)),
        ("sort_complex", np.sort_complex, jnp.sort_complex, (V + 1j * V[::-1],)),
        ("trim_zeros", lambda x: np.trim_zeros(x * np.array([0, 1, 1, 0, 1, 0.0])),
         lambda x: jnp.trim_zeros(x * jnp.array([0, 1, 1, 0, 1, 0.0])), (V,)),
        ("apply_along_axis", lambda x: np.apply_along_axis(lambda v: np.cumsum(v) * v[0], 1, x),
         lambda x: jnp.apply_along_axis(lambda v: jnp.cumsum(v) * v[0], 1, x), (A,)),
        ("apply_over_axes", lambda x: np.apply_over_axes(np.sum, x, [0, 1]),
         lambda x: jnp.apply_over_axes(jnp.sum, x, [0, 1]), (A,)),
        ("unique", np.unique, lambda x: jnp.unique(x, size=x.size), (V,)),
        ("union1d", np.union1d, lambda x, y: jnp.union1d(x, y, size=x.size + y.size), (V[:4], V[3:] + 1)),
        ("bincount", lambda w: np.bincount(np.array([0, 3, 3, 1, 0, 5]), w),
         lambda w: jnp.bincount(np.array([0, 3, 3, 1, 0, 5]), w, length=6), (V,)),
    ]


@pytest.mark.parametrize("index", range(10))
def test_pullback_matches_jax_vjp(index):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    name, numpy_f, jax_f, args = cases()[index]
    y, back = db.pullback(numpy_f, *args)
    expected_y, expected_back = jax.vjp(jax_f, *args)
    np.testing.assert_allclose(y, expected_y, rtol=1e-12, err_msg=name)
    cotangent = RNG.standard_normal(np.shape(y))
    if np.iscomplexobj(y):
        cotangent = cotangent + 1j * RNG.standard_normal(np.shape(y))
    got = back(cotangent)
    for g, e in zip(got if len(args) > 1 else (got,), expected_back(cotangent)):
        np.testing.assert_allclose(g, e, rtol=1e-12, err_msg=name)


# --- conventions where equal values tie ----------------------------------------------------------------------
def test_a_unique_value_takes_the_gradient_of_its_first_occurrence():
    """np.unique's value is the element np.unique(..., return_index=True) names: the first of the equal ones."""
    x = np.array([2.0, 1.0, 2.0, 3.0, 1.0])
    values, first = np.unique(x, return_index=True)
    weights = np.arange(1.0, len(values) + 1)
    expected = np.zeros_like(x)
    expected[first] = weights
    for unique in (np.unique, np.unique_values, lambda x: np.unique_all(x).values):
        np.testing.assert_array_equal(db.gradient(lambda x: np.sum(unique(x) * weights), x), expected)


def test_an_intersection_value_takes_half_from_each_array():
    """A value in both arrays is a tie between them, split as ties are (np.maximum): half to each array's first
    occurrence of it."""
    a, b = np.array([1.0, 4.0, 2.0, 4.0]), np.array([4.0, 5.0, 1.0])
    values, ia, ib = np.intersect1d(a, b, return_indices=True)
    weights = np.arange(1.0, len(values) + 1)
    expected_a, expected_b = np.zeros_like(a), np.zeros_like(b)
    expected_a[ia], expected_b[ib] = weights / 2, weights / 2
    got_a, got_b = db.gradient(lambda a, b: np.sum(np.intersect1d(a, b) * weights), a, b)
    np.testing.assert_array_equal(got_a, expected_a)
    np.testing.assert_array_equal(got_b, expected_b)


def test_unique_rows_are_a_clear_error():
    with pytest.raises(db.UnsupportedFunctionError, match="axis"):
        db.gradient(lambda x: np.sum(np.unique(x, axis=0)), A)
