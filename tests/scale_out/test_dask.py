"""Dask arrays (issue 17): `db.sum`/`db.broadcast` over chunks and `db.sum_blocks`, against the same programs
on the data in memory and against hand-written gradients; one pass over the data; bounded memory; the
threaded scheduler and a `dask.distributed` cluster of worker processes; the errors."""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import dualbroadcast as db  # noqa: E402
from dualbroadcast import chunked, kernels  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = {np.float64: 1e-10, np.float32: 2e-4}


def close(a, b, dtype=np.float64):
    scale = max(np.max(np.abs(b)), 1e-30)
    np.testing.assert_allclose(a, b, rtol=TOL[dtype], atol=TOL[dtype] * scale)


def model(x, a, w, c):
    return a * np.exp(-w * x) + np.sin(c * x)


@st.composite
def problems(draw):
    """A Dask argument of drawn shape and chunks, and small arguments broadcast against it: a scalar, an array
    along its last axis or of size 1 there, and a NumPy array along its first (chunked) axis or a scalar."""
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    n = draw(st.integers(1, 40))
    m = draw(st.sampled_from([None, 1, 3]))
    shape = (n,) if m is None else (n, m)
    rows = draw(st.integers(1, n))
    cols = () if m is None else (draw(st.integers(1, m)),)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.uniform(0.5, 2.0, size=shape).astype(dtype)
    w = rng.uniform(0.5, 1.5, size=draw(st.sampled_from([(), shape[-1:], (1,) * len(shape)]))).astype(dtype)
    c_shape = draw(st.sampled_from([(), (n,) + (1,) * (len(shape) - 1)]))
    c = rng.uniform(0.5, 1.5, size=c_shape).astype(dtype)
    a = dtype(rng.uniform(0.5, 2.0))
    return x, da.from_array(x, chunks=(rows,) + cols), a, w, c, dtype


@settings(max_examples=25, deadline=None)
@given(problems(), st.sampled_from(["all", "cut w", "data too"]))
def test_sum_gradient_equals_the_program_in_memory(problem, which):
    x, d, a, w, c, dtype = problem

    def loss(data, a, w, c):
        return (db.sum(model, data, a, w, c) - 1) ** 2

    if which == "data too":  # the Dask argument differentiated as well: its gradient lazy, with its chunks
        v, g = db.value_and_gradient(loss, d, a, w, c)
        v0, g0 = db.value_and_gradient(loss, x, a, w, c)
        assert isinstance(g[0], da.Array) and g[0].chunks == d.chunks and g[0].dtype == dtype
        g = (g[0].compute(),) + g[1:]
    else:
        wrt = db.cut(w) if which == "cut w" else w
        v, g = db.value_and_gradient(loss, db.cut(d), a, wrt, c)
        v0, g0 = db.value_and_gradient(loss, db.cut(x), a, wrt, c)
    close(v, v0, dtype)
    assert np.result_type(v) == dtype
    for gi, g0i in zip(g, g0):
        if g0i is None:
            assert gi is None
            continue
        close(gi, g0i, dtype)
        assert np.result_type(gi) == dtype and np.shape(gi) == np.shape(g0i)


def test_sum_gradient_equals_the_hand_written_one():
    """The issue's model: d/da (Σ a e^(-b r) - t)² = 2 (e - t) Σ e^(-b r), d/db = -2 (e - t) Σ a r e^(-b r)."""
    r_np = np.random.default_rng(1).uniform(2.0, 6.0, 10_000)
    r = da.from_array(r_np, chunks=1_500)
    target = 3.0

    def loss(theta):
        e = db.sum(lambda r, a, b: a * np.exp(-b * r), r, theta["a"], theta["b"])
        return (e - target) ** 2

    theta = {"a": 1.3, "b": 0.5}
    v, g = db.value_and_gradient(loss, theta)
    e = np.sum(theta["a"] * np.exp(-theta["b"] * r_np))
    close(v, (e - target) ** 2)
    close(g["a"], 2 * (e - target) * np.sum(np.exp(-theta["b"] * r_np)))
    close(g["b"], -2 * (e - target) * np.sum(theta["a"] * r_np * np.exp(-theta["b"] * r_np)))
    assert type(g["a"]) is float  # Python floats in, Python floats out, as in memory


def test_broadcast_of_a_dask_array_is_a_dask_array():
    x = np.linspace(0.0, 1.0, 30).reshape(10, 3)
    d = da.from_array(x, chunks=(4, 2))
    y = db.broadcast(lambda x, w: np.tanh(w * x), d, np.array([1.0, 2.0, 3.0]))
    assert isinstance(y, da.Array) and y.chunks == d.chunks
    close(y.compute(), np.tanh(np.array([1.0, 2.0, 3.0]) * x))
    assert db.sum(lambda x: x**2, d) == pytest.approx(np.sum(x**2), rel=1e-12)  # outside a gradient: the value


def test_broadcast_inside_a_gradient_then_sum():
    x = np.random.default_rng(2).uniform(size=(12, 2))
    d = da.from_array(x, chunks=(5, 1))

    def loss(a, data):
        y = db.broadcast(lambda x, a: a * np.exp(-x), data, a)
        return db.sum(lambda y, a: (y - a) ** 2, y, a)

    for a in (1.5, np.array([0.5, 2.0])):
        ga, gd = db.gradient(loss, a, d)
        ga0, gd0 = db.gradient(loss, a, x)
        close(ga, ga0)
        assert isinstance(gd, da.Array) and gd.chunks == d.chunks
        close(gd.compute(), gd0)


def counted_halves():
    """(the chunk locations made so far, 1000 halves in 10 Dask chunks that append to it when made)."""
    computed = []

    def block(b, block_info=None):
        computed.append(block_info[None]["chunk-location"])
        return np.full(b.shape, 0.5)

    return computed, da.zeros(1_000, chunks=100).map_blocks(block, dtype=float)


def test_value_and_gradient_take_one_pass_over_the_data():
    computed, d = counted_halves()
    v, g = db.value_and_gradient(lambda a, b: db.sum(lambda x, a, b: a * np.exp(b * x), d, a, b), 2.0, 1.0)
    assert sorted(computed) == [(k,) for k in range(10)]  # each chunk made once: value and partials together
    close(v, 2000 * np.exp(0.5))
    close(g[1], 2000 * 0.5 * np.exp(0.5))


def test_pullback_and_kernel_log():
    d = da.from_array(np.arange(1.0, 7.0), chunks=2)
    y, back = db.pullback(lambda a: db.sum(lambda x, a: a * x, d, a), np.array([2.0]))
    close(y, 42.0)
    close(back(1.0), [21.0])
    with db.kernel_log() as calls:
        db.gradient(lambda a: db.sum(lambda x, a: a * x, d, a), 1.0)
    assert [(c.backend, c.width, c.size) for c in calls] == [("dask", 1, 6)]


# --- db.pullback of a Dask-array result ---------------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(problems(), st.booleans(), st.booleans())
def test_pullback_of_a_broadcast_result_equals_the_program_in_memory(problem, dask_cotangent, with_sum):
    """``db.pullback`` of ``db.broadcast`` over a Dask array (and, in a tuple, a ``db.sum`` with its own cotangent):
    ``y`` a Dask array, ``back`` lazy in the Dask argument and NumPy in the others, as in memory."""
    x, d, a, w, c, dtype = problem
    ct = np.random.default_rng(1).normal(size=x.shape).astype(dtype)

    def f(data, a, w, c):
        y = db.broadcast(model, data, a, w, c)
        return (y, db.sum(lambda x, a: a * x**2, data, a)) if with_sum else y

    seed = da.from_array(ct, chunks=max(1, x.shape[0] // 3)) if dask_cotangent else ct
    seed = (seed, dtype(2.5)) if with_sum else seed
    y, back = db.pullback(f, d, a, w, c)
    y0, back0 = db.pullback(f, x, a, w, c)
    y, y0 = (y, y0) if with_sum else ((y,), (y0,))
    assert isinstance(y[0], da.Array) and y[0].chunks == d.chunks
    close(y[0].compute(), y0[0], dtype)
    if with_sum:
        close(y[1], y0[1], dtype)
    g, g0 = back(seed), back0((ct, dtype(2.5)) if with_sum else ct)
    assert isinstance(g[0], da.Array) and g[0].chunks == d.chunks and g[0].dtype == dtype
    close(g[0].compute(), g0[0], dtype)
    for gi, g0i in zip(g[1:], g0[1:]):
        assert type(gi) is type(g0i) and np.shape(gi) == np.shape(g0i) and np.result_type(gi) == dtype
        close(gi, g0i, dtype)


def test_pullback_of_a_broadcast_against_finite_differences():
    x = np.random.default_rng(8).uniform(0.5, 2.0, size=(9, 2))
    d = da.from_array(x, chunks=(4, 2))
    ct = np.random.default_rng(9).normal(size=x.shape)
    theta = (1.3, np.array([0.7, 1.1]), 0.9)
    _, back = db.pullback(lambda th: db.broadcast(model, d, *th), theta)
    g = back(ct)
    h = 1e-6
    for k, t in enumerate(theta):
        for i in np.ndindex(np.shape(t)):
            step = np.zeros(np.shape(t))
            step[i] = h
            moved = [list(theta), list(theta)]
            moved[0][k], moved[1][k] = t + step, t - step
            fd = np.sum(ct * (model(x, *moved[0]) - model(x, *moved[1]))) / (2 * h)
            np.testing.assert_allclose(np.asarray(g[k])[i], fd, rtol=1e-6)


def test_pullback_of_a_broadcast_takes_one_pass_over_the_data():
    computed, d = counted_halves()
    f = lambda a, b: db.broadcast(lambda x, a, b: a * np.exp(b * x), d, a, b)
    y, back = db.pullback(f, 2.0, np.array([1.0]))
    assert computed == [] and isinstance(y, da.Array)  # y is lazy
    ga, gb = back(np.ones(1_000))
    assert sorted(computed) == [(k,) for k in range(10)]  # both small cotangents from one dask.compute
    close(ga, 1000 * np.exp(0.5))
    close(gb, [1000 * 2.0 * 0.5 * np.exp(0.5)])
    with pytest.raises(db.ShapeMismatchError, match="shape"):
        back(np.ones(999))


# --- db.prepare_gradient: the plain path per call (a replay could save 0.1 ms of a call's 19 ms or more) -------
def test_prepared_gradients_over_dask_arrays_evaluate_each_call():
    rng = np.random.default_rng(10)
    x, x2 = rng.uniform(1.0, 2.0, 100), rng.uniform(1.0, 2.0, 70)
    d, d2 = da.from_array(x, chunks=30), da.from_array(x2, chunks=(20, 50))
    f = lambda a, data: (db.sum(lambda x, a: a * np.exp(-a * x), data, a) - 1.0) ** 2
    state = {"data": d}
    g = lambda a: f(a, state["data"])  # the data a global (here a dict's entry) the program reads
    prog = db.prepare_gradient(g, 1.5)
    for a in (1.5, 0.7):
        close(prog(a), db.gradient(f, a, db.cut(x))[0])
        close(prog.value_and_gradient(a)[0], f(a, x))
    state["data"] = d2  # new data: read on every call, never baked into a replay
    close(prog(0.7), db.gradient(f, 0.7, db.cut(x2))[0])
    both = db.prepare_gradient(f, 1.5, d)  # the data an argument: its gradient lazy, as db.gradient's
    for data, plain in ((d, x), (d2, x2)):
        ga, gd = both(1.5, data)
        ga0, gd0 = db.gradient(f, 1.5, plain)
        close(ga, ga0)
        assert isinstance(gd, da.Array) and gd.chunks == data.chunks
        close(gd.compute(), gd0)
    assert db.prepare_gradient(f, 1.5, db.cut(d))(1.5, db.cut(d2))[1] is None
    close(db.prepare_hvp(g, 1.5)(1.5, 2.0), db.hvp(lambda a: f(a, x2), 1.5, 2.0))
    blocks = lambda w: db.sum_blocks(lambda b, w: np.sum(np.sin(b * w)) ** 2, d, w)
    close(db.prepare_gradient(blocks, 1.5)(0.5), db.gradient(lambda w: sum(
        np.sum(np.sin(x[i:i + 30] * w)) ** 2 for i in range(0, 100, 30)), 0.5))
    assert prog.recordings == both.recordings == 0


# --- db.jvp, db.hvp, db.hessian: the small arguments' derivatives per chunk, tree-summed --------------------
def second_order_loss(data, theta):
    a, w, c = theta
    return (db.sum(model, data, a, w, c) - 1) ** 2


@settings(max_examples=15, deadline=None)
@given(problems(), st.booleans())
def test_higher_order_derivatives_equal_the_program_in_memory(problem, cut_w):
    """db.hessian, db.hvp (reverse over forward) and db.jvp of a db.sum over a Dask array in its small arguments,
    against the same calls on the data in memory, and the Hessian against finite differences of the gradient."""
    x, d, a, w, c, dtype = problem
    def spans(t):  # along an axis Dask chunks: not a small argument (cut here)
        return any(s > 1 and len(ch) > 1 for s, ch in zip(np.shape(t)[::-1], d.chunks[::-1]))

    theta = (a, db.cut(w) if cut_w or spans(w) else w, db.cut(c) if spans(c) else c)
    tangents = tuple(np.ones_like(t) for t in (a, w, c))
    for call in [lambda f: db.hessian(f, theta), lambda f: db.hvp(f, theta, tangents),
                 lambda f: db.jvp(f, (theta,), (tangents,))]:
        got = call(lambda th: second_order_loss(d, th))
        expected = call(lambda th: second_order_loss(x, th))
        for g, e in zip(*(pytree_leaves(r) for r in (got, expected))):
            assert np.result_type(g) == np.result_type(e) and np.shape(g) == np.shape(e)
            close(g, e, dtype)
    if dtype is np.float64 and not spans(w) and not spans(c):  # H's column of a: central differences of ∇
        h = 1e-5
        grad = lambda a: db.gradient(lambda th: second_order_loss(x, th), (a, w, c))
        column = [(p - m) / (2 * h) for p, m in zip(grad(a + h), grad(a - h))]
        for got, fd in zip(db.hessian(lambda th: second_order_loss(d, th), (a, w, c))[0], column):
            np.testing.assert_allclose(np.reshape(got, np.shape(fd)), fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))


def pytree_leaves(tree):
    leaves = []
    stack = [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, (tuple, list)):
            stack.extend(reversed(t))
        elif t is not None:
            leaves.append(t)
    return leaves


def test_the_issues_hessian_of_ten_parameters():
    """The issue's model with ten parameters (`benchmarks.scale_out.term`): the Hessian of (Σ term - 1)² over a
    Dask array equals the in-memory one (the row of 2e7 points is `python -m benchmarks.scale_out`'s)."""
    from benchmarks.scale_out import THETA, loss_of
    r_np = np.random.default_rng(7).uniform(2.0, 6.0, 200_000)
    r = da.from_array(r_np, chunks=30_000)
    theta = np.array(THETA)
    with db.kernel_log() as calls:
        h = db.hessian(lambda c: loss_of(db, r)(list(c)), theta)
    h0 = db.hessian(lambda c: loss_of(db, r_np)(list(c)), theta)
    close(h, h0)
    assert [c.backend for c in calls] == ["dask"]  # one db.sum over the chunks
    v = np.linspace(-1.0, 1.0, 10)
    close(db.hvp(lambda c: loss_of(db, r)(list(c)), theta, v), h0 @ v)


def test_a_gradient_inside_a_gradient():
    x = np.linspace(0.5, 2.0, 10)
    d = da.from_array(x, chunks=4)
    inner = lambda data, b: db.gradient(lambda a: db.sum(lambda x, a, c: a * x**2 * c, data, a, 1.5) ** 2, 1.0) * b
    both = lambda data, b: db.gradient(lambda a: db.sum(lambda x, a, b: a * x**2 * b, data, a, b) ** 2, 1.0)
    for f in (inner, both):  # the inner gradient's db.sum: tracked by one tape of level 1, or by both tapes
        close(db.gradient(lambda b: f(d, b), 2.0), db.gradient(lambda b: f(x, b), 2.0))


def test_higher_order_of_sum_blocks():
    x = np.random.default_rng(4).normal(size=(50, 3))
    d = da.from_array(x, chunks=(12, 3))
    f = lambda b, w, s: np.sum(np.sin(b @ w) ** 2) * s
    w, v = np.array([0.3, -0.2, 0.5]), np.array([1.0, 2.0, -1.0])
    loss = lambda data: (lambda w: f(data, w, 1.5) ** 2)
    close(db.hessian(lambda w: db.sum_blocks(f, d, w, 1.5) ** 2, w), db.hessian(loss(x), w))
    close(db.hvp(lambda w: db.sum_blocks(f, d, w, 1.5) ** 2, w, v), db.hvp(loss(x), w, v))
    close(db.jvp(lambda w: db.sum_blocks(f, d, w, 1.5) ** 2, (w,), (v,)), db.jvp(loss(x), (w,), (v,)))


def test_higher_order_errors():
    d = da.ones(10, chunks=5)
    f = lambda a: db.sum(lambda x, a: a * x**3, d, a) ** 2
    with pytest.raises(db.UnsupportedFunctionError, match="order 3"):
        db.gradient(lambda a: db.hessian(f, a), 1.0)
    with pytest.raises(db.UnsupportedFunctionError, match=r"db\.broadcast over Dask arrays inside db\.jvp"):
        db.jvp(lambda a: db.sum(lambda y: y, db.broadcast(lambda x, a: a * x, d, a)), (1.0,), (1.0,))
    with pytest.raises(db.UnsupportedFunctionError, match="spans the chunked axis"):
        db.hessian(lambda c: db.sum(lambda x, c: c * x**2, d, c) ** 2, np.ones(10))
    cube = lambda d: db.sum(lambda x: x**3, d)
    for call in [lambda: db.hessian(cube, d), lambda: db.hvp(cube, d, d), lambda: db.jvp(cube, (d,), (d,))]:
        with pytest.raises(db.UnsupportedFunctionError, match="not the Dask arrays"):
            call()


# --- db.sum_blocks ----------------------------------------------------------------------------------------
def mlp_loss(block, p):
    x, t = block
    h = np.tanh(x @ p["W1"] + p["b1"])
    return np.sum((h @ p["W2"] + p["b2"] - t) ** 2)


def mlp_problem(rows=3_000, features=8, hidden=16, chunk=700, seed=3):
    rng = np.random.default_rng(seed)
    x, t = rng.normal(size=(rows, features)), rng.normal(size=rows)
    params = {"W1": rng.normal(size=(features, hidden)) * 0.3, "b1": np.zeros(hidden),
              "W2": rng.normal(size=hidden) * 0.3, "b2": 0.1}
    return x, t, (da.from_array(x, chunks=(chunk, 4)), da.from_array(t, chunks=chunk)), params


def test_sum_blocks_of_an_mlp_equals_the_gradient_in_memory():
    x, t, data, params = mlp_problem()
    v, g = db.value_and_gradient(lambda p: db.sum_blocks(mlp_loss, data, p) / len(t), params)
    v0, g0 = db.value_and_gradient(lambda p: mlp_loss((x, t), p) / len(t), params)
    close(v, v0)
    for k in params:
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-10, atol=1e-10 * np.max(np.abs(g0[k])))
        assert type(g[k]) is type(g0[k])
    close(db.sum_blocks(mlp_loss, data, params), mlp_loss((x, t), params))  # outside a gradient: the value


def test_sum_blocks_of_many_views_of_one_array_on_threads():
    """da.from_array's blocks view one array, and each block's gradient makes the constants it reads read-only
    for a while: two threads must not thaw a view while the other holds its base read-only (it raised)."""
    x, t, data, params = mlp_problem(rows=4_000, chunk=50)
    g0 = db.gradient(lambda p: mlp_loss((x, t), p), params)
    for _ in range(3):
        g = db.gradient(lambda p: db.sum_blocks(mlp_loss, data, p), params)
    for k in params:
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-10, atol=1e-10 * np.max(np.abs(g0[k])))
    scales = np.random.default_rng(6).uniform(size=(2, 8))
    f = lambda block, w, scale: np.sum(np.tanh(block[0] @ (w * scale)))  # scale: a constant view, every task's
    g = db.gradient(lambda w: db.sum_blocks(f, data, w, scales[1]), np.ones(8))
    close(g, db.gradient(lambda w: f((x, t), w, scales[1]), np.ones(8)))
    assert x.flags.writeable and scales.flags.writeable


def test_sum_blocks_of_one_array_with_cut_params():
    x = np.random.default_rng(4).normal(size=(50, 3))
    d = da.from_array(x, chunks=(12, 3))
    f = lambda b, w, s: np.sum(np.sin(b @ w) * s)
    gw, gs = db.gradient(lambda w, s: db.sum_blocks(f, d, w, s), np.ones(3), db.cut(2.0))
    close(gw, db.gradient(lambda w: f(x, w, 2.0), np.ones(3)))
    assert gs is None


def test_sum_blocks_errors():
    x = da.ones((10, 2), chunks=(5, 2))
    with pytest.raises(ValueError, match="equal chunks along the first axis"):
        db.sum_blocks(lambda b, w: np.sum(b[0] * w), (x, da.ones(10, chunks=3)), 1.0)
    with pytest.raises(TypeError, match=r"dask\.array\.from_array"):
        db.sum_blocks(lambda b, w: np.sum(b * w), np.ones(3), 1.0)
    with pytest.raises(db.UnsupportedFunctionError, match="not its data"):
        db.gradient(lambda d: db.sum_blocks(lambda b: np.sum(b), d), x)


# --- errors: never a silent computation of the whole array ------------------------------------------------
@pytest.mark.parametrize("program", [
    lambda w, d: np.sum(d @ w),
    lambda w, d: np.sum(d * w),
    lambda w, d: np.sum(w * d),
    lambda w, d: np.sum(np.sort(d, axis=0) @ w),
])
def test_a_dask_array_meeting_a_tracked_value_is_a_clear_error(program):
    d = da.ones((10, 3), chunks=5)
    with pytest.raises(db.UnsupportedFunctionError, match=r"db\.sum_blocks.*\.compute\(\)"):
        db.gradient(program, np.ones(3), d)


@pytest.mark.parametrize("program", [
    lambda d: np.sum(d),
    lambda d: db.sum(lambda x: x, np.sort(d)),
    lambda d: db.sum(lambda x: x, d * 2.0),
    lambda d: db.sum(lambda x: x, d[:3]),
    lambda d: db.sum(lambda x: x, -d),
])
def test_numpy_on_a_differentiated_dask_array_is_a_clear_error(program):
    with pytest.raises(db.UnsupportedFunctionError, match=r"cannot run chunk by chunk.*db\.sum_blocks"):
        db.gradient(program, da.ones(10, chunks=5))


# --- scheduling: kernels' threads, the core import, memory, a cluster -------------------------------------
def test_a_task_limits_the_kernels_threads():
    assert chunked._in_task(kernels.KERNEL_THREADS.get) == chunked.TASK_THREADS
    assert chunked._in_task(lambda: len(kernels.chunk_bounds(10**8)) - 1) == chunked.TASK_THREADS
    assert kernels.KERNEL_THREADS.get() is None  # the caller's context is untouched


def wait_until_no_task_runs(seconds=60):
    """A task an earlier test started on a Dask thread may still be ending (on a loaded machine, seconds later):
    while it runs, the process's BLAS limit is its, and a new task does not set it again."""
    deadline = time.monotonic() + seconds
    while chunked._BLAS_LIMIT.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not chunked._BLAS_LIMIT.running, f"a Dask task of an earlier test still runs after {seconds} s"


def test_a_task_limits_blas_threads_while_it_runs():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas = lambda: [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    wait_until_no_task_runs()
    before = blas()
    with threadpoolctl.threadpool_limits(2, user_api="blas"):  # more than a task's, whatever the machine
        outside = blas()
        assert chunked._in_task(blas) == [chunked.TASK_THREADS] * len(outside)
        assert chunked._in_task(lambda: chunked._in_task(blas)) == [chunked.TASK_THREADS] * len(outside)
        assert blas() == outside  # restored when the last task ends
    assert blas() == before


def run_python(source):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_package_imports_without_dask():
    assert run_python("""
        import sys
        import dualbroadcast as db, numpy as np
        db.gradient(lambda x: db.sum(lambda x: x * x, x), np.ones(3))
        print("dask" in sys.modules)
    """).strip() == "False"


def test_peak_memory_is_bounded_by_the_chunk_not_the_data():
    """2e7 points (160 MB if materialised) in chunks of 1e6 (8 MB): ten parameters' value and gradient in far
    less memory than the data (bounded by a few chunks per worker thread)."""
    n, chunk = 20_000_000, 1_000_000
    out = run_python(f"""
        import resource
        import numpy as np, dask.array as da, dualbroadcast as db
        r = da.random.default_rng(0).uniform(2.0, 6.0, size={n}, chunks={chunk})
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        def loss(c):
            e = db.sum(lambda r, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9: c0 * np.exp(-c1 * r) + c2 * np.exp(-c3 * r)
                       + c4 / (r + c5) + c6 * r + c7 * r * r + c8 * np.cos(c9 * r), r, *c)
            return (e - 1.0) ** 2
        v, g = db.value_and_gradient(loss, [0.1 * (k + 1) for k in range(10)])
        assert np.isfinite(v) and len(g) == 10
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    """)
    extra = int(out.split()[-1])
    chunk_bytes = 8 * chunk
    assert extra < 40e6 + 6 * chunk_bytes < 8 * n, f"peak RSS grew by {extra / 1e6:.0f} MB"


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_on_a_distributed_cluster(client):
    rng = np.random.default_rng(5)
    x = rng.uniform(1.0, 2.0, size=(4_000, 2))
    d = da.from_array(x, chunks=(1_000, 2))
    loss = lambda w, data: (db.sum(lambda x, w: np.exp(-w * x), data, w) - 1.0) ** 2
    w = np.array([0.5, 1.5])
    v, g = db.value_and_gradient(loss, w, d)
    v0, g0 = db.value_and_gradient(loss, w, x)
    close(v, v0)
    close(g[0], g0[0])
    close(g[1].compute(), g0[1])  # the lazy gradient of the data, computed on the workers
    xs, t, data, params = mlp_problem(rows=800, chunk=200)
    g = db.gradient(lambda p: db.sum_blocks(mlp_loss, data, p), params)
    g0 = db.gradient(lambda p: mlp_loss((xs, t), p), params)
    for k in params:
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-10, atol=1e-10 * np.max(np.abs(g0[k])))
    _, back = db.pullback(lambda w, data: db.broadcast(lambda x, w: np.exp(-w * x), data, w), w, d)
    _, back0 = db.pullback(lambda w, data: db.broadcast(lambda x, w: np.exp(-w * x), data, w), w, x)
    ct = rng.normal(size=x.shape)
    (gw, gd), (gw0, gd0) = back(ct), back0(ct)
    close(gw, gw0)
    close(gd.compute(), gd0)
    theta = (1.5, np.array([0.5, 1.5]))  # the higher-order API: each chunk's Hessian on a worker
    loss2 = lambda th, data: (db.sum(lambda x, a, w: a * np.exp(-w * x), data, *th) - 1.0) ** 2
    h, h0 = db.hessian(lambda th: loss2(th, d), theta), db.hessian(lambda th: loss2(th, x), theta)
    for row, row0 in zip(h, h0):
        for b, b0 in zip(row, row0):
            close(b, b0)
    workers = client.run(lambda: __import__("dualbroadcast").__file__)
    assert all(path.startswith(ROOT) for path in workers.values())  # the tasks ran this package's kernels there


def test_a_guard_after_a_sum_over_chunks_gives_its_zero_as_in_memory():
    """The cotangent 0 of a guard written after the sum, times sqrt's infinite or NaN partial, is 0 (docs/design.md,
    Conventions at kinks): for the chunked argument (a lazy partial) and for a scalar one (a computed partial)."""
    x = np.array([-1.0, 0.0, 1.0, 4.0] * 4)
    chunked_x = da.from_array(x, chunks=4)

    def guarded(a, s):
        return np.where(False, db.sum(lambda r, k: np.sqrt(r) * k, a, s), 0.0)

    with np.errstate(all="ignore"):
        for a in (x, chunked_x):
            gx, gs = db.gradient(guarded, a, 2.0)
            np.testing.assert_array_equal(np.asarray(gx), np.zeros_like(x))
            assert gs == 0.0
        unguarded = np.asarray(db.gradient(lambda a: db.sum(np.sqrt, a), chunked_x))
    assert np.isnan(unguarded[0]) and np.isinf(unguarded[1])  # the partials are NaN and ∞ there
