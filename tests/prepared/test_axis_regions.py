"""Forward regions summed along axes, and regions whose inputs broadcast against each other (`axis_sums.AxisSum`):
``np.sum(v, axis=k)`` (keepdims, negative and several axes), ``np.mean`` after elementwise chains between arrays of
different shapes, matmul epilogues, and ``np.max`` along an axis with ties after a fused chain.  Each model is
replayed fused and unfused (`FUSE_REGIONS` off) on every backend, in float64 and float32, against central
differences and ``jax.grad``; the tests also check which regions were fused and along which axes, so that a model
that stopped being fused, or an axis sum taken for a whole sum, fails here."""

import numpy as np
import pytest

from dualbroadcast import kernels
from dualbroadcast.kernels import BACKENDS

from .test_forward_regions import _check, _unfused

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

ROWS, COLUMNS = 1536, 72  # 110,592 elements: blocks of rows on two chunks in float64, several blocks each


@pytest.fixture(params=BACKENDS)
def backend(request):
    kernels.set_backend(request.param)
    yield request.param
    kernels.set_backend(None)


def _arrays(dtype, *shapes, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(-1, 1, shape).astype(dtype) for shape in shapes)


def logsumexp_rows(xp):
    def f(a, m):
        return xp.sum(xp.log(xp.sum(xp.exp(a - m), axis=1)) + 0.5 * m[:, 0])
    return f


def keepdims_negative_axis(xp):
    def f(a, b):
        return xp.sum(xp.sum(xp.sin(a) * b, axis=-1, keepdims=True) ** 2)
    return f


def columns_of_a_bias(xp):
    def f(a, c, b):
        return xp.sum(xp.sum(xp.exp(a * c + b), axis=0) ** 2)
    return f


def mean_of_columns(xp):
    def f(a, m, w):
        return xp.sum(xp.mean(xp.cos(a) * m + w, axis=0, keepdims=True) ** 3)
    return f


def mean_of_several_axes(xp):
    def f(a, w):
        return xp.mean(xp.exp(a * w), axis=(-1, 0)) * 3.0
    return f


def epilogue(xp):
    def f(X, W, b):
        return xp.sum(xp.tanh(X @ W + b) @ W.T)
    return f


MODELS = [
    # (model, argument shapes, positions differentiated, the axes of its regions in order: None for a whole sum)
    (logsumexp_rows, [(ROWS, COLUMNS), (ROWS, 1)], (0, 1), [(1,), None]),
    (keepdims_negative_axis, [(ROWS, COLUMNS), (COLUMNS,)], (0, 1), [(1,), None]),
    (columns_of_a_bias, [(ROWS, COLUMNS), (ROWS, 1), (COLUMNS,)], (0, 1, 2), [(0,), None]),
    (mean_of_columns, [(ROWS, COLUMNS), (ROWS, 1), (1, COLUMNS)], (0, 1, 2), [(0,), None]),
    (mean_of_several_axes, [(ROWS, COLUMNS), (COLUMNS,)], (0, 1), [(0, 1)]),
    (epilogue, [(ROWS, 16), (16, COLUMNS), (COLUMNS,)], (0, 1, 2), [()]),
]


def test_a_chain_of_several_small_inputs_stays_as_recorded():
    """A mixture's log densities: four parameters of shape (k,) in a chain of seven steps, whose forward-mode
    partials would cost more passes than the steps' adjoints (`regions._full_operations`): not one region."""
    import dualbroadcast as db

    x, mu, log_sigma, log_w = _arrays(np.float64, (ROWS, 1), (COLUMNS,), (COLUMNS,), (COLUMNS,))

    def f(mu, log_sigma, log_w):
        z = (x - mu) / np.exp(log_sigma)
        return np.sum((-0.5 * z * z - log_sigma + log_w) @ np.ones(COLUMNS))

    prog = db.prepare_gradient(f, mu, log_sigma, log_w)
    prog(mu, log_sigma, log_w)
    (program,) = {id(v): v for v in prog.variants.values()}.values()
    assert [len(r.steps) for r in program[-1].regions] == [3]  # (x - mu) / exp(log_sigma) only: 5 passes


def _axes(program):
    return [None if r.axes is None else r.axes.axes for r in program.regions]


def _jax_gradients(model, args, positions):
    f = model(jnp)
    return jax.grad(lambda *a: f(*a), argnums=positions)(*map(jnp.asarray, args))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("model", "shapes", "positions", "axes"), MODELS, ids=[m[0].__name__ for m in MODELS])
def test_a_chain_summed_along_axes(backend, dtype, model, shapes, positions, axes):
    args = _arrays(dtype, *shapes)
    f = model(np)

    def differentiated(*a):  # the arguments not in ``positions`` cut
        return f(*[x if k in positions else _cut(x) for k, x in enumerate(a)])

    prog, program = _check(differentiated, args, positions, regions=len(axes))
    assert _axes(program) == axes
    grads = prog(*args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    expected = _jax_gradients(model, [np.float64(a) if a.ndim == 0 else a.astype(np.float64) for a in args], positions)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for k, e in zip(positions, expected):
        g = grads[k]
        assert g.dtype == dtype and g.shape == args[k].shape
        np.testing.assert_allclose(g, np.asarray(e), rtol=tol, atol=tol * np.max(np.abs(e)))


def _cut(x):
    import dualbroadcast as db

    return db.cut(x)


def test_an_axis_sum_is_not_a_whole_sum(backend):
    """Σᵢ (Σⱼ exp aᵢⱼ)² has the gradient 2 sᵢ exp aᵢⱼ (sᵢ the row's sum): a whole sum would give 2 S exp aᵢⱼ."""
    import dualbroadcast as db

    (a,) = _arrays(np.float64, (ROWS, COLUMNS))

    def f(a):
        return np.sum(np.sum(np.exp(a), axis=1) ** 2)

    prog = db.prepare_gradient(f, a)
    grad = prog(a)
    (program,) = {id(v): v for v in prog.variants.values()}.values()
    assert _axes(program[-1]) == [(1,), None]
    assert "region(np.exp, np.sum) along axes (1,)" in str(db.explain(prog, a))
    np.testing.assert_allclose(grad, 2 * np.sum(np.exp(a), axis=1, keepdims=True) * np.exp(a), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_along_an_axis_with_ties(backend, dtype):
    """A fused chain read by ``np.max(v, axis=1)``: tied maxima share the cotangent equally, as the tape's rule
    (tests/test_conventions.py) and JAX do, fused or not."""
    import dualbroadcast as db

    rng = np.random.default_rng(3)
    a = (np.round(rng.uniform(-1, 1, (ROWS, COLUMNS)) * 4) / 4).astype(dtype)  # many ties in each row
    b = np.round(rng.uniform(-1, 1, COLUMNS) * 4).astype(dtype) / 4

    def model(xp):
        def f(a, b):
            v = xp.maximum(a * 2.0 + b, 0.5)  # ties at 0.5 too
            return xp.sum(xp.max(v, axis=1) * xp.arange(ROWS, dtype=v.dtype))
        return f

    f = model(np)
    prog = db.prepare_gradient(f, a, b)
    grads = prog(a, b)
    (program,) = {id(v): v for v in prog.variants.values()}.values()
    assert _axes(program[-1]) == [(), None]  # the chain (b broadcast), then the weighted sum of the maxima
    _, (_, expected) = _unfused(f, a, b)
    for g, e in zip(grads, expected):
        np.testing.assert_array_equal(g, e)  # the same selection and the same shares, to the bit
    for g, e in zip(grads, jax.grad(model(jnp), argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-5 if dtype == np.float32 else 1e-12)
