"""Kernel-layer contracts: a pullback may overwrite its partials, so they never alias user data."""

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels
from dualbroadcast.program import KernelStep

BACKENDS = ["numpy", "blocked", "numexpr"]
N = 70_000  # large enough that every backend is eligible


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", [False, True])
def test_partial_equal_to_an_input_does_not_alias_it(backend, reduce):
    y = np.linspace(1.0, 2.0, N)
    original = y.copy()
    op = db.sum if reduce else db.broadcast

    def f(x):
        return np.sum(op(lambda a, b: a * b, x, db.cut(y), backend=backend) * 2.0)

    g = db.gradient(f, np.ones(N))
    np.testing.assert_array_equal(y, original)
    np.testing.assert_allclose(g, 2.0 * original)


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_equal_to_the_value_does_not_alias_it(backend):
    seen = {}

    def f(x):
        out = db.broadcast(np.exp, x, backend=backend)  # ∂exp/∂x is exp itself
        seen["value"] = out.value
        return np.sum(out * 3.0)

    g = db.gradient(f, np.zeros(N))
    np.testing.assert_array_equal(seen["value"], np.ones(N))
    np.testing.assert_allclose(g, np.full(N, 3.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pullback_called_twice_gives_the_same_cotangent(backend):
    x = np.linspace(0.0, 1.0, N)
    _, back = db.pullback(lambda x: db.sum(lambda r: np.exp(-3 * (r + 1)), x, backend=backend), x)
    first = back(1.0)
    np.testing.assert_allclose(back(2.0), 2 * first)
    np.testing.assert_allclose(first, -3 * np.exp(-3 * (x + 1)))


# --- the blocked backend: one block without a loop, several blocks with one ------------------
def _kernel_step(f, *args):
    """The kernel step a prepared program recorded for ``f``."""
    (program,) = [p for programs in db.prepare_gradient(f, *args).variants.values() for p in programs]
    return next(s for s in program.steps if type(s) is KernelStep)


KERNELS = {  # name -> (loss of a kernel, extra arguments): literals, copies, where, hoisting, sums
    "rho summed": (lambda x, c, y: db.sum(lambda r: np.exp(-3 * (r + 1)), x), ()),
    "partial is the value": (lambda x, c, y: np.sum(db.broadcast(np.exp, x)), ()),
    "literal partial": (lambda x, c, y: np.sum(db.broadcast(lambda r: r * 0.1, x)), ()),
    "where, weak scalar": (
        lambda x, c, y: np.sum(db.broadcast(lambda a, b: np.where(a > b, a * b, a - 2.5), x, db.cut(c))), ()),
    "scalar parameter summed": (
        lambda x, c, y: db.sum(lambda a, k, z: k * a**2 + np.maximum(a, 0.5) * z, x, c, db.cut(y)), ()),
}


def _run_kernel(step, values, active_shapes):
    shape = np.broadcast_shapes(*[np.shape(v) for v in values])
    size = int(np.prod(shape))
    value, partials = step.kernel.blocked_runner(values, shape, size, active_shapes, owned=False)(*values)
    return [np.asarray(value)] + [np.asarray(p) for p in partials]


def _kernel_inputs(name, shape, dtype):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    y = rng.uniform(-1.0, 1.0, (1,) + shape if len(shape) == 1 else shape).astype(dtype)  # (1, n) with (n,)
    loss, _ = KERNELS[name]
    step = _kernel_step(loss, x, 0.25, y)
    values = [x if type(r) is int and k == 0 else (0.25 if k == 1 and len(step.refs) > 1 else y)
              for k, r in enumerate(step.refs)]
    active_shapes = [np.shape(values[i]) for i in step.active]
    return step, values, active_shapes


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("shape", [(5, 7), (kernels.BLOCK - 1,), (kernels.BLOCK,), (kernels.BLOCK + 1,)], ids=str)
def test_blocked_kernel_equals_whole_array_kernel_around_the_block_size(shape, name, dtype):
    step, values, active_shapes = _kernel_inputs(name, shape, dtype)
    blocked = _run_kernel(step, values, active_shapes)
    call_shape = np.broadcast_shapes(*[np.shape(v) for v in values])
    size = int(np.prod(call_shape))
    whole = step.kernel.run("numpy", values, call_shape, size, active_shapes)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    summed = [step.reduce] + [step.reduce and np.prod(s) == 1 for s in active_shapes]
    # a literal partial: one number there
    for got, expected, total in zip(blocked, [whole[0]] + list(whole[1]), summed):
        if total:  # block sums are added in another order
            np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * size)
        else:  # the same operations on the same elements
            np.testing.assert_array_equal(got, np.broadcast_to(expected, got.shape))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("shape", [(3, 33), (100,), (128,)], ids=str)
def test_single_block_kernel_equals_the_looped_kernel(shape, name, dtype, monkeypatch):
    step, values, active_shapes = _kernel_inputs(name, shape, dtype)
    single = _run_kernel(step, values, active_shapes)
    monkeypatch.setattr(kernels, "BLOCK", 32)  # the same call now runs in several blocks
    looped = _run_kernel(step, values, active_shapes)
    for a, b, summed in zip(single, looped, [step.reduce] + [step.reduce and np.prod(s) == 1 for s in active_shapes]):
        assert a.dtype == b.dtype and a.shape == b.shape
        if summed:  # block sums are added in another order
            np.testing.assert_allclose(a, b, rtol=1e-5 if dtype == np.float32 else 1e-12)
        else:
            np.testing.assert_array_equal(a, b)


def test_single_block_kernel_reuses_its_buffers():
    x = np.linspace(0.0, 1.0, 100)
    step = _kernel_step(KERNELS["rho summed"][0], x, 0.25, x)
    run = step.kernel.blocked_runner([x], x.shape, x.size, [x.shape])
    first = run(x)[1][0]
    assert run(2 * x)[1][0] is first  # owned: the same partial buffer, overwritten
    np.testing.assert_allclose(first, -3 * np.exp(-3 * (2 * x + 1)))
