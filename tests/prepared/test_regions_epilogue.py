"""A matrix product's epilogue (`regions.EpilogueOf`, `regions_epilogue`): ``tanh(X @ W + b)`` run with its product in
blocks of rows forward, and its adjoint (``(1 - t²) · g`` summed to ``b`` and multiplied into ``X.T`` and ``W.T``) in
the same blocks backward.  Each candidate (the separate steps, the blocks on the cores, on one thread) is forced in
turn on the fused plan, and the gradient checked against ``jax.grad`` and plain `db.gradient` on random shapes,
dtypes, bias shapes and operand layouts; a region whose product something else reads is not an epilogue."""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast import axis_sums, kernels, region_runners, regions, regions_epilogue, replay
from dualbroadcast.kernels import Bucket
from dualbroadcast.regions_epilogue import EPILOGUE, EPILOGUE_ONE_THREAD, SEPARATE

replay_forward = importlib.import_module("dualbroadcast.replay_forward")
replay_backward = importlib.import_module("dualbroadcast.replay_backward")
jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

CANDIDATES = (SEPARATE, EPILOGUE, EPILOGUE_ONE_THREAD)


@pytest.fixture
def small_epilogues(monkeypatch):
    """Epilogues from one element, in two chunks on two cores of blocks of two rows, whatever the sizes."""
    monkeypatch.setattr(regions, "BROADCAST_MIN", 1)
    for module in (replay, region_runners, replay_forward, replay_backward, regions_epilogue):
        monkeypatch.setattr(module, "CHOSEN_MIN", 1)

    def two_chunks(size, itemsize=8, threads=None):
        chunks = min(2, threads or 2, size)
        return [size * c // chunks for c in range(chunks + 1)]

    for module in (regions_epilogue, axis_sums, region_runners):
        monkeypatch.setattr(module, "chunk_bounds", two_chunks)
    monkeypatch.setattr(regions_epilogue, "BLOCK", 1)  # (a block of one row: several blocks per chunk)
    monkeypatch.setattr(axis_sums, "BLOCK", 1)


def layer(xp, X, W, b, v):
    """A layer and a reduction whose cotangent differs per element: ``sum(tanh(X @ W + b) @ v)``."""
    return xp.sum(xp.tanh(X @ W + b) @ v)


def _program(prog):
    (programs,) = prog.variants.values()
    return programs[0]


def _force(choice, name):
    """Every size of a `kernels.BackendChoice` on ``name`` from now on (never re-timed)."""
    for size in list(choice.buckets):
        choice.buckets[size] = forced = Bucket(name, [n for n in choice.kernel.runners if n != name])
        forced.wait = 1 << 40


def _epilogue_runners(program):
    return [r for key, r in program.runners.items() if key[1:2] in (("epilogue",), ("epilogue adjoint",))]


def _on_each_candidate(prog, args):
    """The gradient with the fused plan forced and every epilogue runner on each candidate in turn."""
    program = _program(prog)
    for choice in (program.plans or {}).values():
        _force(choice, "fused")
    runners = _epilogue_runners(program)
    assert len(runners) == 2, "the layer is not run as an epilogue forward and backward"
    gradients = {}
    for name in CANDIDATES:
        for runner in runners:
            _force(runner.choice, name)
        gradients[name] = prog(*args)
    return gradients


BIASES = {"row": lambda m, n: (n,), "kept row": lambda m, n: (1, n), "full": lambda m, n: (m, n),
          "column": lambda m, n: (m, 1), "number": lambda m, n: ()}
LAYOUTS = {
    "C": lambda a: a,
    "Fortran": np.asfortranarray,
    "every other row": lambda a: np.repeat(a, 2, axis=0)[::2],
    "transposed": lambda a: np.ascontiguousarray(a.T).T,
}


@pytest.mark.usefixtures("small_epilogues")
@settings(max_examples=10, deadline=None)
@given(st.integers(2, 30), st.integers(1, 6), st.integers(1, 9), st.sampled_from(sorted(BIASES)),
       st.sampled_from(sorted(LAYOUTS)), st.sampled_from([np.float64, np.float32]), st.booleans())
def test_epilogue_gradient_on_each_candidate_is_jaxs_and_plains(m, k, n, bias, layout, dtype, x_active):
    rng = np.random.default_rng(m * 1000 + k * 100 + n)
    X = LAYOUTS[layout](rng.standard_normal((m, k)).astype(dtype))
    W = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(dtype)
    b = rng.standard_normal(BIASES[bias](m, n)).astype(dtype)
    v = rng.standard_normal(n).astype(dtype)
    if x_active:
        def loss(X, W, b):
            return layer(np, X, W, b, v)
        args, positions = (X, W, b), (0, 1, 2)
    else:
        def loss(W, b):
            return layer(np, X, W, b, v)
        args, positions = (W, b), (0, 1)
    prog = db.prepare_gradient(loss, *args)
    region = _program(prog).regions[0]
    expected = jax.grad(lambda *a: layer(jnp, *(a if x_active else (jnp.asarray(X),) + a), v), positions)(
        *map(jnp.asarray, args))
    plain = db.gradient(loss, *args)
    tol = 1e-11 if dtype is np.float64 else 2e-4
    if region.axes is None:  # inputs of one shape, or numbers: a plain broadcast region (`region_runner`)
        assert np.shape(b) in ((), (m, n)) and region.product is None
        gradients = {"plain region": prog(*args)}
    else:
        assert region.product is not None
        gradients = _on_each_candidate(prog, args)
    for name, gradient in gradients.items():
        for got, want, same in zip(gradient, expected, plain):
            assert got.dtype == np.dtype(dtype) and got.shape == same.shape
            np.testing.assert_allclose(got, np.asarray(want), rtol=tol, atol=tol, err_msg=name)
            np.testing.assert_allclose(got, same, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.usefixtures("small_epilogues")
def test_two_layers_value_and_gradient_on_each_candidate():
    """An MLP's two epilogues (the first's X a constant: no adjoint of X; the second's X the first's value)."""
    rng = np.random.default_rng(7)
    X, y = rng.standard_normal((40, 5)), rng.standard_normal((40, 1))
    params = (rng.standard_normal((5, 8)), rng.standard_normal(8), rng.standard_normal((8, 6)),
              rng.standard_normal(6), rng.standard_normal((6, 1)))

    def mlp(xp, p):
        W1, b1, W2, b2, W3 = p
        h = xp.tanh(X @ W1 + b1)
        h = xp.tanh(h @ W2 + b2)
        return xp.mean((h @ W3 - y) ** 2)

    prog = db.prepare_gradient(lambda p: mlp(np, p), params)
    program = _program(prog)
    assert [r.product is not None for r in program.regions] == [True, True, False]  # (the mean: summed, no epilogue)
    for choice in program.plans.values():
        _force(choice, "fused")
    runners = _epilogue_runners(program)
    assert len(runners) == 4
    value, plain = db.value_and_gradient(lambda p: mlp(np, p), params)
    expected = jax.grad(lambda p: mlp(jnp, p))(tuple(map(jnp.asarray, params)))
    for name in CANDIDATES:
        for runner in runners:
            _force(runner.choice, name)
        got_value, gradient = prog.value_and_gradient(params)
        assert got_value == pytest.approx(value, rel=1e-13)
        for got, want, same in zip(gradient, expected, plain):
            np.testing.assert_allclose(got, np.asarray(want), rtol=1e-11, atol=1e-12, err_msg=name)
            np.testing.assert_allclose(got, same, rtol=1e-11, atol=1e-12, err_msg=name)


@pytest.mark.usefixtures("small_epilogues")
def test_explain_shows_the_product_in_its_epilogue():
    """`db.explain`: the epilogue's row fuses the product (its active inputs W and b), which has no row of its own."""
    rng = np.random.default_rng(5)
    X, W, b, v = rng.standard_normal((30, 4)), rng.standard_normal((4, 6)), rng.standard_normal(6), np.ones(6)
    prog = db.prepare_gradient(lambda W, b: layer(np, X, W, b, v), W, b)
    explanation = db.explain(prog, W, b)
    region, = explanation.regions
    assert region.fused == ("np.matmul", "np.add", "np.tanh") and region.active == 2
    assert [s.name for s in explanation.steps] == ["region(np.matmul, np.add, np.tanh)", "np.matmul", "np.sum"]


@pytest.mark.usefixtures("small_epilogues")
def test_a_product_read_elsewhere_is_not_an_epilogue():
    """``z = X @ W`` also read by ``np.sum(z)``: the region ``tanh(z + b)`` reads z as an input, the product stays a
    step of its own (fusing it would lose the value the sum reads)."""
    rng = np.random.default_rng(1)
    X, W, b = rng.standard_normal((20, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)

    def loss(W, b):
        z = X @ W
        return np.sum(np.tanh(z + b) ** 2) * 0.5 + np.sum(np.sin(np.tanh(z + b))) + np.sum(z)

    prog = db.prepare_gradient(loss, W, b)
    assert all(r.product is None for r in _program(prog).regions)
    for got, want in zip(prog(W, b), db.gradient(loss, W, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.usefixtures("small_epilogues")
def test_a_product_of_mixed_precisions_is_not_an_epilogue():
    """A float32 ``X @ W`` whose W is float64 makes a float64 product: its operands are not of the region's dtype
    both, so the product stays a step (the blocks would compute it in another precision)."""
    rng = np.random.default_rng(2)
    X, W, b = rng.standard_normal((20, 3)).astype(np.float32), rng.standard_normal((3, 4)), rng.standard_normal(4)

    def loss(W, b):
        return np.sum(np.tanh(X @ W + b) ** 2)

    prog = db.prepare_gradient(loss, W, b)
    assert all(r.product is None for r in _program(prog).regions)
    for got, want in zip(prog(W, b), db.gradient(loss, W, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_forced_backend_runs_the_steps():
    """A backend forced when the program is compiled (`kernels.set_backend`) is never timed: no epilogue runner."""
    rng = np.random.default_rng(3)
    X, W, b = rng.standard_normal((256, 16)), rng.standard_normal((16, 128)), rng.standard_normal(128)
    kernels.set_backend("numpy")
    try:
        prog = db.prepare_gradient(lambda W, b: layer(np, X, W, b, np.ones(128)), W, b)
        gradient = prog(W, b)
    finally:
        kernels.set_backend(None)
    programs = [p for variants in prog.variants.values() for p in variants]
    assert programs and not any(r is not None for p in programs for r in _epilogue_runners(p))
    for got, want in zip(gradient, db.gradient(lambda W, b: layer(np, X, W, b, np.ones(128)), W, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
