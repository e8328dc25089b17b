"""The reductions' calling forms and clear errors that the rule sweep does not reach: the ufunc methods
(NumPy's defaults, which differ from the functions', ``out=``, ``indices=``), ``outer`` on constants and
scalars, and the keywords whose derivative is not supported."""

import numpy as np
import pytest

import dualbroadcast as db

from ..cases import stable_id

RNG = np.random.default_rng(3)
A = RNG.uniform(-2, 2, (3, 4))
W = RNG.standard_normal(4)


def test_ufunc_reduce_reduces_axis_0_by_default_as_numpy_does():
    """np.add.reduce(x) is np.sum(x, axis=0), not np.sum(x): a rule taking np.sum's default would give
    every element the sum of the cotangent."""
    g = db.gradient(lambda x: np.sum(np.add.reduce(x) * W), A)
    np.testing.assert_array_equal(g, np.broadcast_to(W, A.shape))
    g = db.gradient(lambda x: np.sum(np.maximum.reduce(x) * W), A)
    np.testing.assert_array_equal(g, (A.max(axis=0) == A) * W)
    g = db.gradient(lambda x: np.sum(np.add.accumulate(x) * np.arange(3.0)[:, None]), A)
    np.testing.assert_array_equal(g, np.broadcast_to([[3.0], [3.0], [2.0]], A.shape))


@pytest.mark.parametrize("method, function", [
    (np.add.reduce, np.sum), (np.multiply.reduce, np.prod), (np.maximum.reduce, np.max),
    (np.minimum.reduce, np.min), (np.fmax.reduce, np.nanmax), (np.fmin.reduce, np.nanmin),
], ids=stable_id)
@pytest.mark.parametrize("axis", [0, 1, -1, None, (0, 1)])
def test_ufunc_reduce_is_the_function_with_the_same_axis(method, function, axis):
    f = lambda x: np.sum(method(x, axis=axis, keepdims=True) * np.arange(1.0, 1.0 + np.size(method(A, axis))))
    g = lambda x: np.sum(function(x, axis=axis, keepdims=True) * np.arange(1.0, 1.0 + np.size(method(A, axis))))
    np.testing.assert_array_equal(db.gradient(f, A), db.gradient(g, A))


def test_ufunc_reduce_with_initial_and_where():
    mask = A > 0
    g = db.gradient(lambda x: np.add.reduce(x, axis=None, initial=5.0, where=mask), A)
    np.testing.assert_array_equal(g, mask.astype(float))


def test_add_reduceat_indices_by_name_or_position():
    expected = db.gradient(lambda x: np.sum(np.add.reduceat(x, [0, 2], axis=1) * [[1.0, 2.0]]), A)
    np.testing.assert_array_equal(expected, np.broadcast_to([1.0, 1.0, 2.0, 2.0], A.shape))
    g = db.gradient(lambda x: np.sum(np.add.reduceat(x, indices=[0, 2], axis=1) * [[1.0, 2.0]]), A)
    np.testing.assert_array_equal(g, expected)


def test_add_reduceat_with_indices_that_do_not_increase():
    """indices [2, 1, 3] sum x[2] alone (the next index is not larger), then x[1:3], then x[3:]."""
    x = np.arange(1.0, 5.0)
    weights = np.array([10.0, 100.0, 1000.0])
    np.testing.assert_array_equal(np.add.reduceat(x, [2, 1, 3]), [3.0, 5.0, 4.0])
    g = db.gradient(lambda v: np.sum(np.add.reduceat(v, [2, 1, 3]) * weights), x)
    np.testing.assert_array_equal(g, [0.0, 100.0, 110.0, 1000.0])


@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.hypot, np.maximum])
def test_outer_with_a_constant_or_a_scalar(ufunc):
    x, c = A[0], np.array([0.5, -1.5])
    for f in (lambda v: ufunc.outer(v, c), lambda v: ufunc.outer(c, v), lambda v: ufunc.outer(v, v),
              lambda v: ufunc.outer(v[0], 2.5)):
        weights = RNG.standard_normal(np.shape(f(x)))
        db.check_gradient(lambda v: np.sum(f(v) * weights), x)


def test_outer_of_a_comparison_is_a_constant():
    g = db.gradient(lambda v: np.sum(v * np.sum(np.greater.outer(v, v), axis=1)), A[0])
    np.testing.assert_array_equal(g, np.sum(np.greater.outer(A[0], A[0]), axis=1))


# --- clear errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x: np.add.reduce(x, out=np.empty(4)),
    lambda x: np.add.accumulate(x, out=np.empty((3, 4))),
], ids=["reduce", "accumulate"])
def test_a_ufunc_method_into_out_is_a_mutation_error(f):
    with pytest.raises(db.InPlaceMutationError, match="out="):
        db.gradient(lambda x: np.sum(f(x)), A)


@pytest.mark.parametrize("f, match", [
    (lambda x: np.subtract.reduce(x), r"np\.subtract\.reduce has no derivative rule"),
    (lambda x: np.multiply.reduceat(x, [0, 1]), r"np\.multiply\.reduceat has no derivative rule"),
    (lambda x: np.add.at(x, [0], 1.0), r"np\.add\.at mutates"),
], ids=["subtract.reduce", "multiply.reduceat", "add.at"])
def test_a_method_without_a_rule_is_a_clear_error(f, match):
    with pytest.raises(db.DifferentiationError, match=match):
        db.gradient(lambda x: np.sum(f(x)), A)


@pytest.mark.parametrize("method", ["lower", "nearest", "hazen"])
def test_a_differentiated_q_with_another_method_than_linear_is_an_error(method):
    with pytest.raises(db.UnsupportedFunctionError, match="method='linear'"):
        db.gradient(lambda q: np.sum(np.quantile(A, q, method=method)), 0.3)


def test_a_differentiated_q_with_linear_is_the_slope_between_order_statistics():
    s = np.sort(A.ravel())
    position = 0.3 * (s.size - 1)
    below = int(position)
    np.testing.assert_allclose(db.gradient(lambda q: np.quantile(A, q), 0.3), (s.size - 1) * (s[below + 1] - s[below]))
    np.testing.assert_allclose(db.gradient(lambda q: np.percentile(A, q), 30.0),
                               (s.size - 1) * (s[below + 1] - s[below]) / 100)


@pytest.mark.parametrize("f, match", [
    (lambda x: np.median(x, overwrite_input=True), "overwrite_input"),
    (lambda x: np.quantile(x, 0.5, overwrite_input=True), "overwrite_input"),
    (lambda x: np.quantile(x, 0.5, method="inverted_cdf", weights=np.ones_like(A)), "weights"),
], ids=["median overwrite_input", "quantile overwrite_input", "quantile weights"])
def test_keywords_without_a_derivative_are_clear_errors(f, match):
    with pytest.raises(db.UnsupportedFunctionError, match=match):
        db.gradient(lambda x: np.sum(f(x)), A)


def test_average_returned_matches_jax_in_both_results():
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    w = RNG.uniform(0.5, 1.5, A.shape[1])
    cotangent = (RNG.standard_normal(A.shape[0]), RNG.standard_normal(A.shape[0]))
    _, back = db.pullback(lambda a, w: np.average(a, 1, w, True), A, w)
    _, expected = jax.vjp(lambda a, w: jnp.average(a, 1, w, True), A, w)
    for got, e in zip(back(cotangent), expected(cotangent)):
        np.testing.assert_allclose(got, e, rtol=1e-12)


def test_nanquantile_of_a_2d_q_over_several_axes_is_an_error():
    """NumPy lays this result out with q's first axis last (its shape is not q.shape + the kept shape),
    so a gradient placed by the documented layout would be silently wrong."""
    x = RNG.uniform(-2, 2, (4, 2, 3))
    q = np.array([[0.2, 0.5, 0.7], [0.1, 0.3, 0.9]])
    assert np.nanquantile(x, q, axis=(0, 1)).shape != np.quantile(x, q, axis=(0, 1)).shape  # NumPy's quirk
    with pytest.raises(db.UnsupportedFunctionError, match="flattened"):
        db.gradient(lambda v: np.sum(np.nanquantile(v, q, axis=(0, 1))), x)
    g = db.gradient(lambda v: np.sum(np.nanquantile(v, q.ravel(), axis=(0, 1))), x)  # the way around
    np.testing.assert_allclose(g, db.gradient(lambda v: np.sum(np.quantile(v, q, axis=(0, 1))), x), rtol=1e-14)


def test_cov_weights_are_constants_only():
    with pytest.raises(db.UnsupportedFunctionError, match="not differentiable"):
        db.gradient(lambda w: np.sum(np.cov(A, None, True, False, None, None, w)), np.ones(4))


MASKED = np.ma.masked


def kernel_reading_masked(r):
    return r * 2.0 if MASKED is not None else r


def test_a_kernel_reading_numpy_ma_masked():
    """A kernel's cache key reads what its code reaches (here a global; through a primitive, the whole rule
    table and so np.nanmedian's implementation, which names np.ma.masked, whose own tobytes raises)."""
    assert db.sum(kernel_reading_masked, A) == np.sum(2.0 * A)
    np.testing.assert_array_equal(db.gradient(lambda x: db.sum(kernel_reading_masked, x), A), np.full_like(A, 2.0))
