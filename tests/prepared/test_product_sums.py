"""A forward region's partial that several inputs share, times its cotangent and summed back to each input's shape
in one pass over blocks of rows on the cores (`axis_sums.product_sums`, `BackwardWriter.product_sums`): checked
against ``p * g`` summed by NumPy on random shapes, chunks and blocks, and the programs that take it (the all-pairs
energy, an MLP's ``tanh(z + b)``) against ``jax.grad`` and `db.gradient`."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast import axis_sums, kernels
from dualbroadcast.axis_sums import product_sums
from dualbroadcast.pullbacks import unbroadcast

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


@st.composite
def products(draw):
    """A partial's shape, the cotangent's (ones along some axes), and targets: the shape with ones along some axes
    and leading ones dropped, or the shape itself."""
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))
    kept = tuple(n if draw(st.booleans()) else 1 for n in shape)
    targets = []
    for _ in range(draw(st.integers(1, 3))):
        target = tuple(n if draw(st.booleans()) else 1 for n in shape)
        lead = draw(st.integers(0, len(shape)))
        if all(n == 1 for n in target[:lead]):
            target = target[lead:]
        targets.append(target)
    return shape, kept, targets


@settings(max_examples=60, deadline=None)
@given(products(), st.integers(1, 3), st.integers(1, 3), st.sampled_from([np.float64, np.float32]))
def test_terms_are_the_product_summed_to_each_target(case, chunks, block, dtype):
    shape, kept, targets = case
    rng = np.random.default_rng(len(shape) * 100 + chunks * 10 + block)
    p, g = rng.standard_normal(shape).astype(dtype), rng.standard_normal(kept).astype(dtype)
    expected = [unbroadcast(p * g, t) for t in targets]
    with pytest.MonkeyPatch.context() as patch:  # several chunks of several blocks, whatever the sizes
        patch.setattr(axis_sums, "chunk_bounds", lambda size, itemsize, threads=None: list(range(min(
            chunks, threads or chunks, size) + 1)))
        patch.setattr(axis_sums, "BLOCK", block * max(1, int(np.prod(shape[1:]))))
        terms = product_sums(shape, targets, np.dtype(dtype))(p, g)
    tol = 1e-12 if dtype is np.float64 else 1e-5
    for term, want, target in zip(terms, expected, targets):
        assert term.shape == target and term.dtype == np.dtype(dtype)
        np.testing.assert_allclose(term, want, rtol=tol, atol=tol)


def pair_energy(xp, pos):
    d = pos[:, None] - pos[None]
    return 0.5 * xp.sum(1.0 / xp.sqrt(xp.sum(d**2, axis=-1) + 0.01))


def tanh_layer(xp, z, b, w):
    return xp.sum(xp.tanh(z + b) @ w)


def _source(prog):
    return next(p for variants in prog.variants.values() for p in variants).source


def _takes_product_sums(prog):
    """Whether the program's backward pass calls a product-sums runner: ``q<i>_<j> = k<n>(p<i>[<j>], ...)``."""
    return any(line.lstrip().startswith("q") and "= k" in line and "(p" in line for line in _source(prog).splitlines())


@pytest.mark.parametrize("threads", [None, 1])
def test_pair_energy_is_jaxs(threads):
    pos = np.random.default_rng(0).uniform(0, 10, (200, 3))  # 120,000 elements: two chunks on two cores
    token = kernels.KERNEL_THREADS.set(threads)
    try:
        prog = db.prepare_gradient(lambda p: pair_energy(np, p), pos)
        gradients = [prog(pos) for _ in range(4)]  # the first choice, then the chosen runner
    finally:
        kernels.KERNEL_THREADS.reset(token)
    assert _takes_product_sums(prog) == (kernels.THREADS > 1 and threads is None)
    expected = np.asarray(jax.grad(lambda p: pair_energy(jnp, p))(jnp.asarray(pos)))
    for g in gradients:
        np.testing.assert_allclose(g, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gradients[-1], db.gradient(lambda p: pair_energy(np, p), pos), rtol=1e-12, atol=1e-13)


def test_bias_and_activation_share_the_product():
    rng = np.random.default_rng(1)
    z, b, w = rng.standard_normal((1024, 128)), rng.standard_normal(128), rng.standard_normal((128, 3))
    prog = db.prepare_gradient(lambda z, b, w: tanh_layer(np, z, b, w), z, b, w)
    if kernels.THREADS > 1:
        assert _takes_product_sums(prog)
    expected = jax.grad(lambda *a: tanh_layer(jnp, *a), argnums=(0, 1, 2))(z, b, w)
    for _ in range(4):
        for got, want in zip(prog(z, b, w), expected):
            np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)
