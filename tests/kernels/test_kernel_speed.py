"""The blocked kernels' speed-ups give the gradients they gave before: a sum's partial kept without its literal
factor (`broadcast_pullbacks.unscaled_kernel`), constants as blocks for the loops that want two arrays
(`kernel_source._splatted`), a buffer reused in place by a ufunc (`_assign_buffers`), and chunks handed to worker
threads (`kernels._Worker`)."""

import importlib

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels

BROADCAST = importlib.import_module("dualbroadcast.broadcast")


def rho(x):
    return np.exp(-3 * (x + 1))


def wave(x, a):
    """Partials with literal factors in both arguments: ``-2.5 sin(ax) · a`` and ``-2.5 sin(ax) · x``."""
    return 2.5 * np.cos(a * x) + 0.5 * a


def energy(p):
    return p**2 + p**3 + 0.25 * p**4


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15 * np.max(np.abs(b)))


def tape_gradient(f, *args, outer=energy):
    """The same gradient on the tape, operation by operation (no kernel)."""
    return db.gradient(lambda *a: outer(np.sum(f(*a))), *args)


@pytest.mark.parametrize("n", [100, 40_000, 200_000])
@pytest.mark.parametrize("backend", [None, "numpy", "blocked", "numexpr"])
def test_unscaled_partials_give_the_gradient_of_the_tape(n, backend):
    x = np.random.default_rng(n).random(n)
    a = np.random.default_rng(1).random(n)

    def fused(x):
        return energy(db.sum(rho, x, backend=backend))

    for _ in range(3):  # the first call, then a plan or recycled buffers
        close(db.gradient(fused, x), tape_gradient(rho, x))
    for _ in range(3):  # two arguments, both partials scaled
        for got, want in zip(db.gradient(lambda x, a: -0.5 * db.sum(wave, x, a, backend=backend), x, a),
                             tape_gradient(wave, x, a, outer=lambda s: -0.5 * s)):
            close(got, want)
    kernel = next(k for k in BROADCAST.KERNEL_CACHE.values() if k.name == "rho" and k.reduce and len(k.outputs) == 2)
    assert BROADCAST.unscaled_kernel(kernel)[1] == [-3]  # the partial the kernel computes is exp(..) alone


def test_unscaled_partials_in_a_scalar_argument_and_in_float32():
    x = np.random.default_rng(0).random(70_000).astype(np.float32)
    a = np.float32(0.7)
    for backend in [None, "numpy", "blocked", "numexpr"]:
        got = db.gradient(lambda x, a: db.sum(wave, x, a, backend=backend), x, a)
        want = db.gradient(lambda x, a: np.sum(wave(x, a)), x, a)
        assert [g.dtype for g in got] == [np.float32, np.float32]
        np.testing.assert_allclose(got[0], want[0], rtol=2e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4)  # a float32 sum of 70,000 terms


def test_an_input_partial_is_not_unscaled():
    """``Σ x²``'s partial ``2x``: without its factor the partial would be x itself, which a kernel copies (no pass
    saved), so it keeps its factor; the caller's x is never multiplied in place."""
    x = np.random.default_rng(0).random(100_000)
    before = x.copy()
    for backend in [None, "blocked"]:
        close(db.gradient(lambda x: db.sum(lambda v: 3 * v * v, x, backend=backend), x), 6 * before)
    np.testing.assert_array_equal(x, before)


def test_unscaled_partials_through_prepared_programs_hvp_and_jvp():
    x = np.random.default_rng(0).random(150_000)
    v = np.random.default_rng(1).random(150_000)

    def fused(x):
        return energy(db.sum(rho, x))

    def plain(x):
        return energy(np.sum(rho(x)))

    want = tape_gradient(rho, x)
    for f in (fused, plain):  # a recorded db.sum, and a forward region (regions.py) of the same kernel
        prepared = db.prepare_gradient(f, x)
        for _ in range(3):
            close(prepared(x), want)
        out = np.empty_like(x)
        prepared(x, out=(out,))
        close(out, want)
        value, gradient = prepared.value_and_gradient(x)
        close(value, plain(x))
        close(gradient, want)
    close(db.hvp(fused, x, v), db.hvp(plain, x, v))
    value, tangent = db.jvp(fused, (x,), (v,))
    close(value, plain(x))
    close(tangent, db.jvp(plain, (x,), (v,))[1])
    close(db.gradient(lambda x: db.gradient(fused, x) @ v, x), db.hvp(plain, x, v))  # reverse over reverse


def test_unscaled_partials_over_dask_chunks():
    da = pytest.importorskip("dask.array")
    x = np.random.default_rng(0).random(100_000)
    a = 0.8
    got = db.gradient(lambda a: db.sum(wave, da.from_array(x, chunks=30_000), a), a)
    want = db.gradient(lambda a: np.sum(wave(x, a)), a)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", [lambda v: np.arctan2(v, 2.0), lambda v: np.arctan2(1.5, v),
                               lambda v: np.maximum(v, 0.5) ** 2.5, lambda v: np.minimum(0.25, v) * v],
                         ids=["arctan2(v, c)", "arctan2(c, v)", "max and power", "min"])
def test_constants_as_blocks_compute_what_numpy_computes(f, dtype):
    """A literal operand of arctan2/power/maximum/minimum is a scratch block holding it: the same results, bit
    for bit, as the whole-array kernel's (and the blocked sums as close as any)."""
    x = np.random.default_rng(0).uniform(0.1, 1.0, 3 * kernels.BLOCK + 17).astype(dtype)
    blocked = db.broadcast(f, x, backend="blocked")
    np.testing.assert_array_equal(blocked, f(x))
    got = db.gradient(lambda x: db.sum(f, x, backend="blocked"), x)
    want = db.gradient(lambda x: db.sum(f, x, backend="numpy"), x)
    np.testing.assert_array_equal(got, want)


def test_a_worker_thread_raises_in_the_caller_and_is_used_again(monkeypatch):
    monkeypatch.setattr(kernels, "THREADS", 2)
    bounds = kernels.chunk_bounds(4 * kernels.BLOCK)
    assert len(bounds) == 3

    def run(start, stop, block):
        if start:
            raise ValueError("in the worker's chunk")
        return (stop - start,)

    with pytest.raises(ValueError, match="worker's chunk"):
        kernels.run_in_threads(run, bounds, kernels.BLOCK, [], [[], []])
    workers = list(kernels._idle_workers)
    assert workers  # given back after the error
    total = kernels.run_in_threads(lambda start, stop, block: (stop - start,), bounds, kernels.BLOCK, [], [[], []])
    assert total == (4 * kernels.BLOCK,)
    assert kernels._idle_workers == workers  # the same thread again, none started


@pytest.mark.parametrize("n", [kernels.BLOCK // 2, kernels.BLOCK, 3 * kernels.BLOCK])
def test_a_kernel_into_its_output_from_half_a_block(n):
    """`Kernel.into` writes a blocked kernel's value into the given array wherever blocked is eligible (a single
    block too), ``out`` one of the inputs or not; the hvp's cotangent kernel runs so."""
    x = np.random.default_rng(0).random(n)
    v = np.random.default_rng(1).random(n)
    db.broadcast(rho, x)
    kernel = next(k for k in BROADCAST.KERNEL_CACHE.values() if k.name == "rho" and not k.reduce)
    out = np.empty(n)
    assert kernel.into(out, [x]) is out
    np.testing.assert_array_equal(out, rho(x))
    y = x.copy()
    assert kernel.into(y, [y]) is y  # over its own input
    np.testing.assert_array_equal(y, rho(x))
    close(db.hvp(lambda x: energy(db.sum(rho, x)), x, v), db.hvp(lambda x: energy(np.sum(rho(x))), x, v))


def test_chunks_are_counted_in_bytes(chunk_counts):
    """Two threads from ``CHUNK_BLOCKS`` float64 blocks' bytes a chunk: a float32 kernel, half as costly per
    element, splits from twice the elements (measured at 100352 elements: float64 two, float32 one)."""
    n = int(2 * kernels.CHUNK_BLOCKS * kernels.BLOCK) + 64  # splits in float64, not in float32
    for dtype in (np.float64, np.float32):
        x = np.random.default_rng(0).random(n).astype(dtype)
        got = db.gradient(lambda x: db.sum(rho, x, backend="blocked"), x)
        np.testing.assert_allclose(got, -3 * rho(x), rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert chunk_counts == [2, 1]
