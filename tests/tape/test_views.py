"""Basic slices of a tracked array are unrecorded views: every way a view can be used still gives
the gradient that finite differences and a view-free formulation give."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.context import ACTIVE_TAPE
from dualbroadcast.tape import Tape

X = np.random.default_rng(0).uniform(0.5, 1.5, (4, 5))
WEIGHTS = np.random.default_rng(1).standard_normal((4, 5))

# Each model reads X through basic slices in one way; its twin computes the same with np.take on a
# copy of X's columns/rows, which is recorded the ordinary way.
MODELS = {
    "column products in a loop": lambda X: sum(np.dot(X[:, j], X[:, j - 1]) for j in range(1, 5)),
    "slice of a slice": lambda X: np.sum(X[1:][:, ::2] ** 2),
    "view used twice": lambda X: np.sum(X[2] * X[2] * WEIGHTS[2]),
    "views on both sides": lambda X: np.sum(X[0] * X[3] - X[1] / X[2]),
    "negative step and new axis": lambda X: np.sum(X[::-1, None, 1:3] * WEIGHTS[:, None, 1:3]),
    "ellipsis and an int": lambda X: np.sum(np.exp(X[..., 3])),
    "rows by iteration": lambda X: sum(np.sum(np.sin(row) * w) for row, w in zip(X, WEIGHTS)),
    "stacked columns": lambda X: np.sum(np.stack([X[:, 0], X[:, 4]]) ** 3),
    "split of a view": lambda X: np.sum(np.split(X[:, 1:5], 2, axis=1)[1] * 2.0),
    "advanced index of a view": lambda X: np.sum(X[1][[0, 0, 3]] ** 2),
    "view into a broadcast kernel": lambda X: db.sum(lambda a, b: np.exp(a) * b, X[:, 1], X[:, 2]),
    "reduction and matmul of views": lambda X: np.sum(X[:2, :4] @ X[2:, :4].T) + np.sum(X[1:3], axis=0)[2],
    "0-d view as the result": lambda X: X[1:, 2][..., 1] * 3.0,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_view_gradient_matches_finite_differences(name):
    db.check_gradient(MODELS[name], X)


@pytest.mark.parametrize("name", list(MODELS))
def test_view_gradient_matches_the_recorded_getitem(name):
    """The same model with every slice recorded (as inside a prepared recording) gives the same gradient."""
    expected = db.prepare_gradient(MODELS[name], X)(X)  # prepared recording records every getitem
    np.testing.assert_allclose(db.gradient(MODELS[name], X), expected, rtol=1e-13, atol=1e-13)


def test_view_is_not_recorded_and_its_consumer_adds_into_the_base():
    tape = Tape()
    token = ACTIVE_TAPE.set(tape)
    try:
        x = tape.leaf(X)
        column = x[:, 2]
        assert column.slice_index is not None and column.index == x.index and len(tape.records) == 1
        y = column * 2.0
        assert [parent for parent, _ in tape.records[y.index][0]] == [x.index]
    finally:
        ACTIVE_TAPE.reset(token)


def test_pullback_of_a_view_output_and_of_views_in_a_tree():
    y, back = db.pullback(lambda X: X[1:3, ::2], X)
    expected = np.zeros_like(X)
    expected[1:3, ::2] = 1.0
    np.testing.assert_array_equal(back(np.ones_like(y)), expected)
    y, back = db.pullback(lambda X: {"a": X[0], "b": (X[0], X[:, 1])}, X)
    g = back({"a": np.ones(5), "b": (np.full(5, 2.0), np.ones(4))})
    expected = np.zeros_like(X)
    expected[0] = 3.0
    expected[:, 1] += 1.0
    np.testing.assert_array_equal(g, expected)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.tuples(st.integers(0, 3), st.integers(1, 4)).filter(lambda r: r[0] < r[1]),
    cols=st.tuples(st.integers(0, 4), st.integers(1, 5), st.integers(1, 2)).filter(lambda c: c[0] < c[1]),
    uses=st.integers(1, 3),
)
def test_random_slices_used_several_times(rows, cols, uses):
    """Any basic slice, consumed several times and mixed with the whole array."""
    index = (slice(*rows), slice(*cols))

    def f(X):
        v = X[index]
        return sum(np.sum(np.tanh(v * (k + 1))) for k in range(uses)) + np.sum(X * X) * 0.1

    expected = 0.2 * X
    part = np.zeros_like(X)
    part[index] = sum((k + 1) / np.cosh(X[index] * (k + 1)) ** 2 for k in range(uses))
    np.testing.assert_allclose(db.gradient(f, X), expected + part, rtol=1e-12)


def test_zero_dimensional_views_in_scalar_arithmetic():
    """``x[0, ...]`` is a 0-d view; scalar arithmetic on it records a number as its partial,
    which must still reach the base's buffer through the view."""
    x = np.array([1.5, 2.0, 3.0])

    def f(x):  # sums and differences of views: identity and negation pullbacks through a view
        return x[0, ...] * 2.0 + x[1, ...] ** 3 / x[2, ...] + (x[2, ...] + 1.0) - x[0, ...]

    want = np.array([1.0, 3 * x[1] ** 2 / x[2], -x[1] ** 3 / x[2] ** 2 + 1.0])
    np.testing.assert_allclose(db.gradient(f, x), want, rtol=1e-14)
    assert db.check_gradient(f, x) < 1


# The sweep gathers the cotangents g * partial of a scalar result's views of one base and adds them in
# one scatter when every index is a row ``X[j]`` or a column ``X[:, j]``; any other index mix is added
# one by one.  Either way the gradient must be the hand-accumulated one.
VIEW_INDEX = st.one_of(
    st.integers(-4, 3).map(lambda j: j),  # a row, negative ones included
    st.integers(-5, 4).map(lambda j: (slice(None), j)),  # a column
    st.sampled_from([(1, slice(None)), (slice(1, 3), 2), (Ellipsis, 0), (slice(None), slice(0, 4))]),
)


def _hand_gradient_of_view_dots(X, Y, pairs):
    """∂/∂X and ∂/∂Y of sum_k (k + 1) * dot(X[a_k].ravel(), Y[b_k].ravel()), accumulated one by one."""
    gX, gY = np.zeros_like(X), np.zeros_like(Y)
    for k, (a, b) in enumerate(pairs):
        gX[a] += (k + 1) * Y[b].reshape(np.shape(X[a]))
        gY[b] += (k + 1) * X[a].reshape(np.shape(Y[b]))
    return gX, gY


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(st.tuples(VIEW_INDEX, VIEW_INDEX), min_size=1, max_size=12),
    dtype=st.sampled_from([np.float64, np.float32]),
)
def test_gathered_view_products_match_the_hand_accumulation(pairs, dtype):
    rng = np.random.default_rng(len(pairs))
    X = rng.standard_normal((4, 5)).astype(dtype)
    Y = rng.standard_normal((4, 5)).astype(dtype)
    pairs = [(a, b) for a, b in pairs if np.size(X[a]) == np.size(Y[b])]  # dot needs equal lengths

    def f(X, Y):
        total = 0.0
        for k, (a, b) in enumerate(pairs):
            u, v = X[a], Y[b]
            u = u if np.ndim(X[a]) == 1 else u.ravel()
            v = v if np.ndim(Y[b]) == 1 else v.ravel()
            total = total + np.dot(u, v) * float(k + 1)
        return total

    if not pairs:
        return
    gX, gY = db.gradient(f, X, Y)
    hX, hY = _hand_gradient_of_view_dots(X.astype(np.float64), Y.astype(np.float64), pairs)
    tol = 1e-4 if dtype is np.float32 else 1e-12
    assert gX.dtype == dtype and gY.dtype == dtype
    np.testing.assert_allclose(gX, hX, rtol=tol, atol=tol)
    np.testing.assert_allclose(gY, hY, rtol=tol, atol=tol)


def test_gathered_column_products_of_a_loop_with_repeats():
    """The slice workload's shape: every column of y0 meets every column of several yt, many repeats,
    for bases that are inputs (a list of arrays) and bases that are recorded results."""
    rng = np.random.default_rng(3)
    ys = list(rng.standard_normal((5, 6, 7)))

    def f(ys, scale):
        ys = ys if scale is None else [y * scale for y in ys]
        total = 0.0
        for y in ys:
            for j in range(-7, 7):  # each column twice, once by a negative index
                total = total + np.dot(ys[0][:, j], y[:, j])
        return total

    expected = 2 * np.broadcast_to(ys[0], (5, 6, 7)).copy()
    expected[0] += 2 * np.sum(ys, axis=0)
    np.testing.assert_allclose(db.gradient(f, ys, db.cut(None))[0], list(expected), rtol=1e-12)
    np.testing.assert_allclose(db.gradient(f, ys, db.cut(3.0))[0], list(9 * expected), rtol=1e-12)
    prepared = db.prepare_gradient(f, ys, db.cut(3.0))(ys, db.cut(3.0))
    np.testing.assert_allclose(db.gradient(f, ys, db.cut(3.0))[0], prepared[0], rtol=1e-12)


def test_gathered_products_of_mixed_dtypes_keep_each_arguments_dtype():
    """float32 columns dotted with float64 ones: float64 partials and cotangents gathered into a float32
    buffer, and float32 ones into a float64 buffer."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 4)).astype(np.float32)
    Y = rng.standard_normal((6, 4))

    def f(X, Y):
        return sum(np.dot(X[:, j], Y[:, k]) * (j + 1.0) for j in range(4) for k in range(4))

    gX, gY = db.gradient(f, X, Y)
    weights = np.arange(1.0, 5.0)
    assert gX.dtype == np.float32 and gY.dtype == np.float64
    np.testing.assert_allclose(gX, np.outer(Y.sum(axis=1), weights), rtol=1e-5)
    np.testing.assert_allclose(gY, np.outer(X.astype(np.float64) @ weights, np.ones(4)), rtol=1e-5)


# A scalar product of two views, or of a view and a constant, is recorded without edges: its
# partials wait in the tape's view_products for their bases.  A product of a view and any other
# tracked value keeps its edges and is gathered by the sweep.  Both must meet in one base's buffer.
PRODUCT_KINDS = ["two views", "view and constant", "view and tracked value", "unused"]


@settings(max_examples=60, deadline=None)
@given(
    terms=st.lists(st.tuples(st.sampled_from(PRODUCT_KINDS), VIEW_INDEX, VIEW_INDEX), min_size=1, max_size=10),
    recorded_bases=st.booleans(),
)
def test_products_of_views_with_constants_tracked_values_and_unused_results(terms, recorded_bases):
    """Views of the inputs, or (``recorded_bases``) of recorded results, whose products the sweep
    adds when it reaches them."""
    rng = np.random.default_rng(len(terms))
    X, Y, C = (rng.standard_normal((4, 5)) for _ in range(3))
    terms = [(kind, a, b) for kind, a, b in terms if np.size(X[a]) == np.size(Y[b])]

    def f(X, Y):
        if recorded_bases:
            X, Y = X + 0.0, Y + 0.0
        total = 0.0
        for k, (kind, a, b) in enumerate(terms):
            u = X[a].ravel() if np.ndim(X[a]) != 1 else X[a]
            v = {"two views": Y[b], "view and constant": C[b], "view and tracked value": Y[b] * 1.0,
                 "unused": Y[b]}[kind]
            v = v.ravel() if np.ndim(Y[b]) != 1 else v
            product = np.dot(u, v)
            if kind != "unused":
                total = total + product * float(k + 1)
        return total + np.sum(X[0])  # a result even when every product is unused

    gX, gY = np.zeros_like(X), np.zeros_like(Y)
    gX[0] += 1.0
    for k, (kind, a, b) in enumerate(terms):
        other = C if kind == "view and constant" else Y
        if kind != "unused":
            gX[a] += (k + 1) * other[b].reshape(np.shape(X[a]))
        if kind in ("two views", "view and tracked value"):
            gY[b] += (k + 1) * X[a].reshape(np.shape(Y[b]))
    got = db.gradient(f, X, Y)
    np.testing.assert_allclose(got[0], gX, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], gY, rtol=1e-12, atol=1e-12)
    _, back = db.pullback(f, X, Y)
    for _ in range(2):  # the held products are read, not used up, by each sweep
        again = back(1.0)
        np.testing.assert_allclose(again[0], gX, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(again[1], gY, rtol=1e-12, atol=1e-12)


def test_a_product_of_views_as_the_result_and_as_an_explained_operation():
    X = np.random.default_rng(6).standard_normal((3, 4))
    want = np.zeros_like(X)
    want[:, 0], want[:, 2] = X[:, 2], X[:, 0]
    np.testing.assert_allclose(db.gradient(lambda X: np.dot(X[:, 0], X[:, 2]), X), want, rtol=1e-14)
    report = db.explain(lambda X: np.dot(X[:, 0], X[:, 2]) + np.dot(X[0], X[1]), X)
    assert [(op.name, op.active) for op in report.operations] == [("np.dot", 2), ("np.dot", 2), ("np.add", 2)]


def test_scatter_add_sums_repeated_positions():
    """The batched add of view products: rows at repeated positions (a loop visiting a column twice) are all
    added, as np.add.at would."""
    from dualbroadcast.sweeps import scatter_add

    rows = np.arange(10.0).reshape(5, 2)
    for positions in ([2, 0, 2, 2, 1], [3, 3, 0, 0, 3], [1, -3, 0, 1, 1]):
        got, want = np.zeros((4, 2)), np.zeros((4, 2))
        scatter_add(got, positions, rows)
        np.add.at(want, np.array(positions) % 4, rows)
        np.testing.assert_array_equal(got, want)
