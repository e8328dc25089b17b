"""`db.hessian`'s paths against the one it replaced, against central differences and against JAX.

`hessian` records the gradient once and sweeps its tape once for all the rows (`sweeps.backward_rows`: every
cotangent with a leading axis of rows, the pullbacks the sweep knows in one NumPy call each, any other row by
row); inside another gradient it sweeps once per row (`_rows_one_by_one`), recorded there.  The path it
replaced, one pullback of the gradient per row, is kept here as `old_hessian`, the reference: hypothesis
draws pytrees, cut leaves, float32, 0-d and Python floats, kernels on each backend, views and indices of
every kind, broadcasting and Python control flow, and every rule case goes through both.
"""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast import pytree
from dualbroadcast.api import _marked_like

from ..cases import all_cases, reset_streams
from ..modes.test_second_order import AT_A_TIE, NOT_TWICE
from ..rules.test_rules import projection


def old_hessian(f, x):
    """The Hessian as `db.hessian` computed it before: one pullback of the gradient per element of ``x``."""
    g, back = db.pullback(lambda y: db.gradient(f, *_marked_like((x,), (y,))), x)
    leaves, treedef = pytree.flatten(x)
    active = pytree.leaf_activity(treedef)
    g_leaves, g_def = pytree.flatten(g)
    blocks = []
    for i, leaf in enumerate(leaves):
        rows = []
        for e in np.ndindex(np.shape(leaf)) if active[i] else ():
            cotangent = [None if gl is None else np.zeros(np.shape(gl), np.result_type(gl)) for gl in g_leaves]
            cotangent[i][e] = 1
            rows.append(pytree.flatten(back(pytree.unflatten(g_def, cotangent)))[0])
        blocks.append([np.reshape(np.array([row[j] for row in rows]), np.shape(leaf) + np.shape(other))
                       if active[i] and active[j] else None for j, other in enumerate(leaves)])
    if treedef is pytree.LEAF:
        return float(blocks[0][0]) if type(x) is float else blocks[0][0]
    return pytree.unflatten(treedef, [pytree.unflatten(treedef, row) for row in blocks])


def assert_same_hessian(got, want, rtol=1e-12, atol=1e-12):
    """The same structure, None where ``want`` has None, each block of the same type, shape and dtype, and close."""
    if want is None:
        assert got is None
        return
    if isinstance(want, (dict, list, tuple)):
        assert type(got) is type(want)
        assert (list(got) == list(want)) if isinstance(want, dict) else len(got) == len(want)
        for key in (want if isinstance(want, dict) else range(len(want))):
            assert_same_hessian(got[key], want[key], rtol, atol)
        return
    assert type(got) is type(want)
    assert np.shape(got) == np.shape(want) and np.result_type(got) == np.result_type(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def leaves_of(p):
    """The leaves of a container of arrays (tracked or not), in order."""
    if isinstance(p, dict):
        return [leaf for key in p for leaf in leaves_of(p[key])]
    if isinstance(p, (list, tuple)):
        return [leaf for item in p for leaf in leaves_of(item)]
    return [p]


def values(draw, shape, dtype):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    value = rng.uniform(-1.2, 1.2, size=shape).astype(dtype)
    return value if shape else dtype(value)


SHAPES = st.sampled_from([(), (1,), (3,), (2, 1), (2, 3), (1, 2, 2)])


@st.composite
def trees(draw, dtype=np.float64):
    """A pytree of 1 to 4 leaves (arrays of every rank from 0-d, NumPy scalars, Python floats) in dicts,
    tuples and lists, maybe cut with some leaves uncut."""
    def leaf():
        if dtype is np.float64 and draw(st.integers(0, 4)) == 0:
            return float(values(draw, (), np.float64))
        return values(draw, draw(SHAPES), dtype)

    kind = draw(st.sampled_from(["dict", "tuple", "list", "nested"]))
    n = draw(st.integers(1, 3))
    if kind == "dict":
        tree = {f"k{i}": leaf() for i in range(n)}
    elif kind == "tuple":
        tree = tuple(leaf() for _ in range(n))
    elif kind == "list":
        tree = [leaf() for _ in range(n)]
    else:
        tree = {"a": (leaf(), [leaf()]), "b": leaf()}
    if draw(st.booleans()):  # cut, some leaves kept variables
        keep = draw(st.lists(st.booleans(), min_size=len(leaves_of(tree)), max_size=len(leaves_of(tree))))
        if not any(keep):
            keep[0] = True
        marks = iter(keep)

        def mark(p):
            if isinstance(p, dict):
                return {k: mark(v) for k, v in p.items()}
            if isinstance(p, (list, tuple)):
                return type(p)(mark(v) for v in p)
            return db.uncut(p) if next(marks) else p

        tree = db.cut(mark(tree))
    return tree


def program(seed):
    """A scalar function of a pytree that couples every leaf, with Python control flow on tracked values."""
    def f(p):
        total = 0.0
        for k, leaf in enumerate(leaves_of(p)):
            w = np.random.default_rng(seed + k).uniform(0.5, 1.5, np.shape(leaf))
            s = np.sum(np.sin(leaf * w) * leaf) + np.sum(leaf) ** 2 / (k + 2)
            if s > 0:  # a branch taken on a tracked value's value
                s = s * np.cos(s)
            else:
                s = np.exp(s) - s
            total = total + s * (1 + 0.1 * total)
        return total

    return f


@settings(max_examples=60, deadline=None)
@given(trees(), st.integers(0, 1000))
def test_pytrees_with_cut_leaves_and_control_flow_match_the_old_path(tree, seed):
    f = program(seed)
    assert_same_hessian(db.hessian(f, tree), old_hessian(f, tree))


@settings(max_examples=25, deadline=None)
@given(trees(np.float32), st.integers(0, 1000))
def test_float32_stays_float32_and_matches_the_old_path(tree, seed):
    f = program(seed)
    assert_same_hessian(db.hessian(f, tree), old_hessian(f, tree), rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.data(), SHAPES, st.integers(0, 1000))
def test_arrays_and_scalars_against_central_differences_of_the_gradient(data, shape, seed):
    x = values(data.draw, shape, np.float64)
    if shape == () and data.draw(st.booleans()):
        x = float(x)
    f = program(seed)
    h = db.hessian(f, x)
    assert type(h) is (float if type(x) is float else np.ndarray)
    step = 1e-6
    n = int(np.prod(shape))
    columns = []
    for k in range(n):
        e = np.zeros(n)
        e[k] = step
        plus = db.gradient(f, (np.ravel(x) + e).reshape(shape) if shape else type(x)(x + e[0]))
        minus = db.gradient(f, (np.ravel(x) - e).reshape(shape) if shape else type(x)(x - e[0]))
        columns.append(np.ravel((np.asarray(plus) - np.asarray(minus)) / (2 * step)))
    np.testing.assert_allclose(np.reshape(h, (n, n)), np.array(columns).T, rtol=1e-5, atol=1e-6)


# --- the pullbacks the sweep takes in one call: views, indices, broadcasting, kernels ---------------------
def loops_over_rows(x):
    """Rows of a matrix in a loop (unrecorded views, scalar products of views)."""
    x = x.reshape(x.shape[0], -1)
    total = 0.0
    for i in range(x.shape[0]):
        total = total + np.dot(x[i], x[i]) * x[i, 0] + np.sin(x[i, -1]) * x[0, i % x.shape[1]]
    return total


INDEXED = {
    "rows in a loop": loops_over_rows,
    "repeated integers": lambda x: np.sum(np.exp(x[[0, 0, 1]]) * x[[1, 0, 0]]),
    "a mask": lambda x: np.sum(x[x > 0] ** 3) + np.sum(x) ** 2,
    "two adjacent arrays": lambda x: np.sum(np.sin(x[[0, 1], [1, 0]]) * x[0, 0]),
    "arrays apart": lambda x: np.sum(np.cos(x[[0, 1], :, [1, 0]]) * x[0, :, 0]) if x.ndim == 3 else np.sum(x ** 3),
    "slices and a column": lambda x: np.sum(x[1:] * x[:-1]) + np.sum(x[:, 0] ** 2 * x[:, -1]),
    "broadcast against a scalar": lambda x: np.sum(np.exp(x[0, 0] * x) * x[-1]),
    "reductions and matmul": lambda x: np.sum(np.tanh(x @ np.swapaxes(x, -1, -2))) + np.max(np.sum(x, axis=-1)),
}


@pytest.mark.parametrize("name", INDEXED)
@settings(max_examples=10, deadline=None)
@given(st.data(), st.sampled_from([(2, 2), (3, 2), (2, 3, 2), (3, 3)]))
def test_views_indices_and_broadcasting_match_the_old_path(name, data, shape):
    x = values(data.draw, shape, np.float64)
    f = INDEXED[name]
    assert_same_hessian(db.hessian(f, x), old_hessian(f, x))


def exp_poly(c, xs, backend):
    """E(c) = Σ exp(c0 + c1 x + ... + c9 x^9) through db.sum: a second-order kernel of width 10."""
    def term(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
        inner = c5 + x * (c6 + x * (c7 + x * (c8 + x * c9)))
        return np.exp(c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * inner)))))

    return db.sum(term, db.cut(xs), *[c[k] for k in range(10)], backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
@settings(max_examples=4, deadline=None)
@given(st.sampled_from([1, 7, 1000, 40_000]), st.integers(0, 1000), st.sampled_from([np.float64, np.float32]))
def test_second_order_kernels_on_each_backend_match_the_formula_and_the_old_path(backend, n, seed, dtype):
    rng = np.random.default_rng(seed)
    xs = rng.uniform(-1, 1, n).astype(dtype)
    c = rng.uniform(-0.1, 0.1, 10).astype(dtype)
    with db.kernel_log() as calls:
        h = db.hessian(lambda c: exp_poly(c, xs, backend), c)
    assert [(k.width, k.second) for k in calls] == [(10, 55)]
    assert h.dtype == dtype
    x64 = xs.astype(np.float64)
    powers = x64[None, :] ** np.arange(10)[:, None]
    want = (powers * np.exp(np.polyval(c[::-1].astype(np.float64), x64))) @ powers.T
    rtol = 1e-4 if dtype is np.float32 else 1e-10
    np.testing.assert_allclose(h, want, rtol=rtol, atol=rtol * np.max(np.abs(want)))
    if n < 10_000:
        assert_same_hessian(h, old_hessian(lambda c: exp_poly(c, xs, backend), c), rtol=rtol, atol=0)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 30), st.integers(0, 1000), st.booleans())
def test_sum_kernels_of_scalars_and_arrays_match_the_old_path(k, n, seed, with_array):
    """A db.sum of k scalar coefficients (and maybe a full-size array beside them)."""
    rng = np.random.default_rng(seed)
    xs = rng.uniform(-1, 1, n)
    params = {"c": tuple(rng.uniform(-0.5, 0.5, k)), "y": rng.uniform(-1, 1, n) if with_array else db.cut(xs)}

    def f(p):
        def term(x, y, *c):
            total = 0.0
            for j, cj in enumerate(c):
                total = total + cj * np.sin((j + 1) * x + y * cj)
            return np.exp(0.3 * total) * (1 + y * y)

        return db.sum(term, db.cut(xs), p["y"], *p["c"])

    assert_same_hessian(db.hessian(f, params), old_hessian(f, params), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("budget", [1, 12, 40, 200])
@settings(max_examples=10, deadline=None)
@given(trees(), st.integers(0, 1000))
def test_rows_swept_in_chunks_where_cotangents_grow_large(budget, tree, seed):
    """With a small `sweeps.ROW_ELEMENTS`, the rows are swept a few at a time (and one at a time where a single
    row fills it): the same Hessian."""
    f = program(seed)
    want = old_hessian(f, tree)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(db.sweeps, "ROW_ELEMENTS", budget)
        got = db.hessian(f, tree)
    assert_same_hessian(got, want)


@pytest.mark.parametrize("budget", [1, 40, 200])
def test_rows_in_chunks_through_an_outer_product(budget):
    """Cotangents of 24 elements a row: at 200, rows 8 and 2 at a time; at 40 and 1, one at a time."""
    def f(p):
        return np.sum(np.sin(p["a"][:4]) * p["b"]) * np.sum(p["a"] ** 2) + np.sum(np.outer(p["a"], p["b"]) ** 2)

    p = {"a": np.linspace(0, 1, 6), "b": np.linspace(1, 2, 4)}
    want = old_hessian(f, p)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(db.sweeps, "ROW_ELEMENTS", budget)
        assert_same_hessian(db.hessian(f, p), want)


# --- inside another gradient: one sweep per row, recorded there ---------------------------------------
@settings(max_examples=15, deadline=None)
@given(st.data(), st.sampled_from([(), (2,), (3,), (2, 2)]), st.integers(0, 1000))
def test_a_hessian_inside_a_gradient_against_central_differences(data, shape, seed):
    x = values(data.draw, shape, np.float64)
    f = program(seed)
    w = np.random.default_rng(seed).standard_normal(shape + shape)

    def weighted(x):
        return np.sum(db.hessian(f, x) * w)

    got = db.gradient(weighted, x)
    step = 1e-5
    want = np.zeros(shape)
    for index in np.ndindex(shape):
        e = np.zeros(shape)
        e[index] = step
        want[index] = (weighted(x + e) - weighted(x - e)) / (2 * step)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_hessian_of_a_pytree_inside_a_gradient():
    def f(p):
        return np.sum(np.sin(p["a"])) * p["b"] ** 2 + p["a"][0] * p["b"]

    def picked(x):
        return db.hessian(f, {"a": x, "b": 2.0})["a"]["b"][0]  # 2b cos(a0) + 1

    x = np.array([0.3, 0.5, 0.7])
    np.testing.assert_allclose(db.gradient(picked, x), [-4 * np.sin(0.3), 0.0, 0.0], rtol=1e-13)


# --- JAX ----------------------------------------------------------------------------------------------
def jax_numpy():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax, jax.numpy


JAX_PAIRS = {
    "rosenbrock": lambda np_: lambda x: np_.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
    "logsumexp": lambda np_: lambda x: np_.log(np_.sum(np_.exp(x * x[0]))),
    "quadratic form": lambda np_: lambda x: np_.tanh(x @ np_.outer(x, x) @ x) + np_.prod(np_.cos(x)),
    "exp of a linear model": lambda np_: lambda x: np_.sum(np_.exp(np_.linspace(-1, 1, 32).reshape(4, 8)[
        :, : x.shape[0]] @ x)),
}


@functools.cache
def jax_hessian(name):
    """JAX's Hessian of the pair ``name``, compiled once per shape."""
    jax, jnp = jax_numpy()
    return jax.jit(jax.hessian(JAX_PAIRS[name](jnp)))


@pytest.mark.parametrize("name", JAX_PAIRS)
@settings(max_examples=10, deadline=None)
@given(st.data(), st.sampled_from([2, 5]))
def test_against_jax_hessian(name, data, n):
    jax_numpy()
    x = values(data.draw, (n,), np.float64)
    want = np.asarray(jax_hessian(name)(x))
    np.testing.assert_allclose(db.hessian(JAX_PAIRS[name](np), x), want, rtol=1e-10, atol=1e-10)


def test_a_pytree_against_jax_hessian():
    jax, jnp = jax_numpy()

    def f(np_):
        return lambda p: np_.sum(np_.exp(p["w"] @ p["v"])) * p["s"] ** 2

    p = {"s": 0.7, "v": np.array([0.1, -0.3]), "w": np.array([[0.5, 0.2], [-0.4, 0.9], [0.3, 0.3]])}
    want = jax.jit(jax.hessian(f(jnp)))(p)
    got = db.hessian(f(np), p)
    for i in p:
        for j in p:
            np.testing.assert_allclose(got[i][j], np.asarray(want[i][j]), rtol=1e-12, atol=1e-14)


# --- every rule: the one sweep for all rows against one sweep per row -----------------------------------
CASES = [c for c in all_cases() if str(c) not in AT_A_TIE]


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_every_rule_case_matches_the_old_path(case, data):
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    seed = data.draw(st.integers(0, 1000))

    def f(a):
        return projection(fn(*a), seed)

    try:
        want = old_hessian(f, tuple(args))
    except (db.UnsupportedFunctionError, db.ValueConversionError) as error:
        assert str(case) in NOT_TWICE
        with pytest.raises(type(error)):
            db.hessian(f, tuple(args))
        return
    assert_same_hessian(db.hessian(f, tuple(args)), want, rtol=1e-10, atol=1e-10)
