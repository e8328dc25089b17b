"""A prepared program's matrix products (`region_runners.matmul_runner`, `BackwardWriter.product_term`): a large
``a @ b`` forward and in the adjoints runs as one BLAS call or split across the cores (rows, or columns where the
product has fewer), chosen per call; an adjoint's product over one element is an outer product.  Each split is
checked against ``np.matmul``, and the gradients of MLPs on every candidate against ``jax.grad`` and central
differences."""

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast import kernels, region_runners
from dualbroadcast.region_runners import SPLIT_MATMUL, matmul_runner

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


@pytest.fixture
def small_products_split(monkeypatch):
    """Every product a split candidate, on two cores whatever this machine has."""
    monkeypatch.setattr(region_runners, "SPLIT_MATMUL_MIN", 1)
    monkeypatch.setattr(region_runners, "THREADS", 2)


def mlp(xp, params, X, y):
    W1, b1, W2, b2, W3, b3 = params
    h = xp.tanh(X @ W1 + b1)
    h = xp.tanh(h @ W2 + b2)
    return xp.mean((h @ W3 + b3 - y) ** 2)


def _mlp_case(rows, sizes, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for a, b in itertools.pairwise(sizes):
        params += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype),
                   (0.1 * rng.standard_normal(b)).astype(dtype)]
    X = rng.standard_normal((rows, sizes[0])).astype(dtype)
    return tuple(params), X, np.sin(X[:, :1])


def _matmul_runners(prog):
    program = next(p for variants in prog.variants.values() for p in variants)
    return [r for key, r in program.runners.items() if key[1:2] == ("matmul",) and r is not None]


def _on_every_candidate(prog, args):
    """The gradient on each of the matrix products' candidates, all of them on one at a time."""
    runners = _matmul_runners(prog)
    assert runners, "no matrix product of the program may be split"
    gradients = {}
    for name in ("numpy", SPLIT_MATMUL):
        for runner in runners:
            for bucket in runner.choice.buckets.values():
                if bucket.backend != name:
                    bucket.others[bucket.others.index(name)] = bucket.backend
                    bucket.backend = name
                bucket.wait = 1 << 30  # no re-timing during the test
        gradients[name] = prog(*args)
    return gradients


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9), st.integers(1, 40), st.sampled_from([0, 1]))
def test_split_product_is_numpys(m, k, n, transposed):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    if transposed:  # an adjoint's operand: a transposed view
        a = np.ascontiguousarray(a.T).T
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(region_runners, "SPLIT_MATMUL_MIN", 1)
        patch.setattr(region_runners, "THREADS", 2)
        product = matmul_runner(a.shape, b.shape, np.dtype(np.float64))
    if max(m, n) < 2:
        assert product is None  # nothing to split
        return
    for name, run in product.choice.kernel.runners.items():
        np.testing.assert_allclose(run(a, b)[0], a @ b, rtol=1e-13, atol=1e-13, err_msg=name)
    np.testing.assert_allclose(product(a, b), a @ b, rtol=1e-13, atol=1e-13)


def test_small_or_forced_products_are_not_split():
    f64 = np.dtype(np.float64)
    assert matmul_runner((64, 32), (32, 64), f64) is None  # 131,072 multiply-adds: below SPLIT_MATMUL_MIN
    kernels.set_backend("numpy")
    try:
        assert matmul_runner((1024, 128), (128, 128), f64) is None  # a forced backend is never timed
    finally:
        kernels.set_backend(None)


@pytest.mark.usefixtures("small_products_split")
@settings(max_examples=6, deadline=None)
@given(st.integers(2, 60), st.lists(st.integers(1, 12), min_size=3, max_size=3),
       st.sampled_from([np.float64, np.float32]))
def test_mlp_gradient_on_every_candidate_is_jaxs(rows, hidden, dtype):
    sizes = (hidden[0], hidden[1], hidden[2], 1)
    params, X, y = _mlp_case(rows, sizes, dtype)
    y = y.astype(dtype)
    prog = db.prepare_gradient(lambda p: mlp(np, p, X, y), params)
    expected = jax.grad(lambda p: mlp(jnp, p, X, y))(tuple(map(jnp.asarray, params)))
    tol = 1e-10 if dtype is np.float64 else 2e-4
    for name, gradient in _on_every_candidate(prog, (params,)).items():
        for got, want in zip(gradient, expected):
            assert got.dtype == np.dtype(dtype)
            np.testing.assert_allclose(got, np.asarray(want), rtol=tol, atol=tol, err_msg=name)


def test_mlp_at_split_sizes_against_central_differences():
    params, X, y = _mlp_case(512, (16, 64, 64, 1), seed=3)  # 2,097,152 multiply-adds in h @ W2: split candidates

    def loss(p):
        return mlp(np, p, X, y)

    prog = db.prepare_gradient(loss, params)
    assert len(_matmul_runners(prog)) >= 3  # h @ W2 forward, and both its adjoints' products
    for name, gradient in _on_every_candidate(prog, (params,)).items():
        value, plain = db.value_and_gradient(loss, params)
        assert prog.value_and_gradient(params)[0] == pytest.approx(value, rel=1e-13)
        for got, want in zip(gradient, plain):
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13, err_msg=name)
        W2 = params[2]
        rng = np.random.default_rng(4)
        direction = rng.standard_normal(W2.shape)
        eps = 1e-6
        moved = [list(params), list(params)]
        moved[0][2], moved[1][2] = W2 + eps * direction, W2 - eps * direction
        central = (loss(tuple(moved[0])) - loss(tuple(moved[1]))) / (2 * eps)
        assert np.sum(gradient[2] * direction) == pytest.approx(central, rel=1e-6)


def test_outer_product_term_is_the_tapes():
    """The last layer's ``g @ w.T`` of a (rows, 1) cotangent is written ``g * w.T``: the same numbers as the
    tape's BLAS call, bit for bit (one product per element)."""
    params, X, y = _mlp_case(300, (5, 7, 9, 1), seed=5)

    def loss(p):
        return mlp(np, p, X, y)

    program = db.prepare_gradient(loss, params)
    source = next(p for variants in program.variants.values() for p in variants).source
    assert re.search(r"= \(g\d+ \* v\d+\.T\)$", source, re.M)
    for got, want in zip(program(params), db.gradient(loss, params)):
        np.testing.assert_array_equal(got, want)
