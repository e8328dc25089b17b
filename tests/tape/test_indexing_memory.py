"""Slicing a tracked array costs O(its size) in the backward pass, not O(its size) per slice.

The pullback of ``x[index]`` adds its cotangent into one gradient buffer per
parent; a loop over k slices of an (m, k) array must therefore allocate O(m*k)
in total while pulling back, not a dense (m, k) cotangent per slice, O(m*k*k).
Memory is measured with tracemalloc over the backward pass alone (`db.pullback`
traces the forward pass first).
"""

import sys
import tracemalloc

import numpy as np
import pytest

import dualbroadcast as db

M = 4096  # elements per slice
SLICES = (16, 64)


def column_loop(weights):
    """``sum_j w_j * sum(X[:, j])`` over the k columns of an (m, k) array."""

    def f(X):
        total = 0.0
        for j in range(X.shape[1]):
            total = total + np.sum(X[:, j] * weights[j])
        return total

    return f


def row_loop(weights):
    """``sum_i w_i * sum(row_i)`` over ``for row in X`` of a (k, m) array."""

    def f(X):
        total = 0.0
        for w, row in zip(weights, X):
            total = total + np.sum(row * w)
        return total

    return f


def dense_column_loop(weights):
    """The column loop with a dense one-hot mask per column: a dense cotangent per slice."""

    def f(X):
        total = 0.0
        for j in range(X.shape[1]):
            total = total + np.sum(X * (np.arange(X.shape[1]) == j) * weights[j])
        return total

    return f


LOOPS = {
    "columns": (column_loop, lambda k: (M, k), lambda w, k: np.broadcast_to(w, (M, k))),
    "rows": (row_loop, lambda k: (k, M), lambda w, k: np.broadcast_to(w[:, None], (k, M))),
}


def backward_allocation(f, x):
    """``(gradient, peak, total)``: bytes allocated by the backward pass of ``f`` at ``x``.

    ``peak`` is the highest memory above the level before the pass.  ``total`` adds up,
    over the intervals between consecutive function calls and returns (Python and C),
    how far memory rose within the interval, so a temporary made and freed counts too.
    """
    y, back = db.pullback(f, x)
    seed = np.ones_like(y)
    total = peak = 0

    def profile(frame, event, arg):
        nonlocal total, peak, level
        current, highest = tracemalloc.get_traced_memory()
        total += highest - level
        peak = max(peak, highest - base)
        tracemalloc.reset_peak()
        level = current

    tracemalloc.start()
    try:
        base = level = tracemalloc.get_traced_memory()[0]
        sys.setprofile(profile)
        try:
            grad = back(seed)
        finally:
            sys.setprofile(None)
        profile(None, "end", None)
    finally:
        tracemalloc.stop()
    return grad, peak, total


def measure(loop, k, dtype=np.float64):
    make_f, shape_of, expected = LOOPS[loop]
    weights = np.linspace(-1.0, 1.0, k)
    x = np.random.default_rng(k).standard_normal(shape_of(k)).astype(dtype)
    grad, peak, total = backward_allocation(make_f(weights), x)
    return x, grad, expected(weights, k), peak, total


@pytest.mark.parametrize("loop", LOOPS)
def test_backward_of_k_slices_allocates_o_of_the_array(loop):
    figures = {}
    for k in SLICES:
        x, _, _, peak, total = measure(loop, k)
        figures[k] = (peak / x.nbytes, total / x.nbytes)
        assert peak <= 2.5 * x.nbytes, f"k={k}: peak {peak} bytes for a {x.nbytes}-byte array"
        assert total <= 4 * x.nbytes, f"k={k}: {total} bytes allocated for a {x.nbytes}-byte array"
    # O(m*k) keeps total/size flat as k grows 4x; O(m*k*k) would multiply it by 4
    assert figures[SLICES[1]][1] <= 1.5 * figures[SLICES[0]][1], figures


def test_measurement_sees_a_dense_cotangent_per_slice():
    """The meter is sound: per-slice dense cotangents, made and freed, show up in ``total``."""
    k = SLICES[0]
    x = np.random.default_rng(0).standard_normal((M, k))
    _, peak, total = backward_allocation(dense_column_loop(np.ones(k)), x)
    assert total >= k * x.nbytes, (peak, total)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("loop", LOOPS)
def test_gradient_of_slice_loop_is_exact(loop, dtype):
    x, grad, expected, _, _ = measure(loop, SLICES[0], dtype)
    assert grad.shape == x.shape and grad.dtype == dtype
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


def test_index_array_changed_after_indexing_does_not_change_the_gradient():
    x = np.arange(1.0, 6.0)

    def f(x):
        idx = np.array([0, 1])
        total = 0.0
        for _ in range(3):
            total = total + np.sum(x[idx] ** 2)
            idx += 1  # the user reuses the index array in place
        return total

    expected = np.zeros(5)
    for start in range(3):
        expected[start : start + 2] += 2 * x[start : start + 2]
    np.testing.assert_allclose(db.gradient(f, x), expected)


def column_products(weights, constant):
    """``sum_j w_j * (dot(X[:, j], X[:, j - 1]) + dot(X[:, j], constant[:, j]))``: scalar products of
    slices, whose partials the tape holds for X and adds in batches when the sweep reaches it."""

    def f(X):
        total = 0.0
        for j in range(X.shape[1]):
            total = total + (np.dot(X[:, j], X[:, j - 1]) + np.dot(X[:, j], constant[:, j])) * weights[j]
        return total

    return f


def test_backward_of_k_slice_products_allocates_o_of_the_array():
    """Three rows per column (two from its pair products, one from the constant's), stacked, sorted by
    position and summed: under ten copies of the array in total, flat in k, and at any moment the
    buffer plus one batch: without batches the peak was 7 copies."""
    m = db.sweeps.BATCH_ELEMENTS // 4  # four products' rows to a batch
    figures = {}
    for k in SLICES:
        rng = np.random.default_rng(k)
        x, constant, weights = rng.standard_normal((m, k)), rng.standard_normal((m, k)), np.linspace(-1.0, 1.0, k)
        grad, peak, total = backward_allocation(column_products(weights, constant), x)
        expected = weights * (np.roll(x, 1, axis=1) + constant) + np.roll(weights * x, -1, axis=1)
        np.testing.assert_allclose(grad, expected, rtol=1e-10, atol=1e-12)
        figures[k] = (peak / x.nbytes, total / x.nbytes)
        assert peak <= 2.5 * x.nbytes, f"k={k}: peak {peak} bytes for a {x.nbytes}-byte array"
        assert total <= 10 * x.nbytes, f"k={k}: {total} bytes allocated for a {x.nbytes}-byte array"
    assert figures[SLICES[1]][1] <= 1.5 * figures[SLICES[0]][1], figures
