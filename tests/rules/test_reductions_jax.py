"""The reductions and order statistics against `jax.grad` of their `jax.numpy` equivalents, in float64.

Data without ties or NaN kinks (uniform random values), so both libraries' conventions agree; the
differentiated quantile level ``q`` is compared too.  Skipped without JAX.
"""

import numpy as np
import pytest

import dualbroadcast as db

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(7)
A = RNG.uniform(-2, 2, (3, 4, 5))
POSITIVE = RNG.uniform(0.5, 1.5, (3, 4, 5))
WITH_NAN = A.copy()
WITH_NAN[0, 1, 2] = WITH_NAN[2, 3, 0] = np.nan
M = RNG.uniform(-2, 2, (3, 6))
Y = RNG.uniform(-2, 2, (2, 6))
W = RNG.uniform(0.5, 1.5, 4)
Q = np.array([0.15, 0.45, 0.8])  # q (n - 1) is never an integer (a kink in q) for n = 3, 4, 5
FWEIGHTS = np.array([1, 2, 1, 3, 1, 2])
AWEIGHTS = RNG.uniform(0.5, 1.5, 6)

# name: (function of (numpy module, *arrays), arrays); the same code runs on np and jnp
CASES = {
    "sort": (lambda n, x: n.sort(x, axis=1), [A]),
    "sort axis None": (lambda n, x: n.sort(x, axis=None), [A]),
    "median": (lambda n, x: n.median(x, axis=(0, 2), keepdims=True), [A]),
    "median even": (lambda n, x: n.median(x, axis=1), [A]),
    "quantile": (lambda n, x: n.quantile(x, Q, axis=-1), [A]),
    "quantile q": (lambda n, x, q: n.quantile(x, q, axis=0), [A, Q]),
    "quantile lower": (lambda n, x: n.quantile(x, Q, axis=2, method="lower"), [A]),
    "quantile midpoint": (lambda n, x: n.quantile(x, Q, method="midpoint"), [A]),
    "quantile nearest": (lambda n, x: n.quantile(x, 0.3, axis=1, method="nearest"), [A]),
    "percentile q": (lambda n, x, q: n.percentile(x, q, axis=1, keepdims=True), [A, 100 * Q]),
    "nanmedian": (lambda n, x: n.nanmedian(x, axis=1), [WITH_NAN]),
    "nanquantile q": (lambda n, x, q: n.nanquantile(x, q, axis=2), [WITH_NAN, Q]),
    "nanpercentile": (lambda n, x: n.nanpercentile(x, 35.0, axis=0), [WITH_NAN]),
    "nansum": (lambda n, x: n.nansum(x, axis=(0, 1)), [WITH_NAN]),
    "nanmean": (lambda n, x: n.nanmean(x, axis=2), [WITH_NAN]),
    "nanvar": (lambda n, x: n.nanvar(x, axis=1, ddof=1), [WITH_NAN]),
    "nanstd": (lambda n, x: n.nanstd(x), [WITH_NAN]),
    "nanmax": (lambda n, x: n.nanmax(x, axis=0), [WITH_NAN]),
    "nanmin": (lambda n, x: n.nanmin(x, axis=-1, keepdims=True), [WITH_NAN]),
    "nanprod": (lambda n, x: n.nanprod(x, axis=1), [WITH_NAN]),
    "nancumsum": (lambda n, x: n.nancumsum(x, axis=1), [WITH_NAN]),
    "nancumprod": (lambda n, x: n.nancumprod(x, axis=2), [WITH_NAN]),
    "ptp": (lambda n, x: n.ptp(x, axis=(0, 2)), [A]),
    "average weights": (lambda n, x, w: n.average(x, 1, w), [A, W]),
    "average same-shape weights": (lambda n, x, w: n.average(x, None, w), [A, POSITIVE]),
    "cov": (lambda n, m: n.cov(m), [M]),
    "cov y rowvar": (lambda n, m, y: n.cov(m.T, y.T, rowvar=False, ddof=2), [M, Y]),
    "cov weights": (lambda n, m: n.cov(m, fweights=FWEIGHTS, aweights=AWEIGHTS), [M]),
    "corrcoef": (lambda n, m, y: n.corrcoef(m, y), [M, Y]),
    "cumulative_sum": (lambda n, x: n.cumulative_sum(x, axis=1, include_initial=True), [A]),
    "cumulative_prod": (lambda n, x: n.cumulative_prod(x, axis=0, include_initial=True), [POSITIVE]),
    "add.reduce": (lambda n, x: n.add.reduce(x), [A]),
    "multiply.reduce": (lambda n, x: n.multiply.reduce(x, axis=2), [POSITIVE]),
    "maximum.reduce": (lambda n, x: n.maximum.reduce(x, axis=1, keepdims=True), [A]),
    "minimum.reduce": (lambda n, x: n.minimum.reduce(x, axis=None), [A]),
    "logaddexp.reduce": (lambda n, x: n.logaddexp.reduce(x, axis=-1), [A]),
    "add.accumulate": (lambda n, x: n.add.accumulate(x, axis=1), [A]),
    "multiply.accumulate": (lambda n, x: n.multiply.accumulate(x), [POSITIVE]),
    "maximum.accumulate": (lambda n, x: n.maximum.accumulate(x, axis=2), [A]),
    "minimum.accumulate": (lambda n, x: n.minimum.accumulate(x), [A]),
    "add.outer": (lambda n, x, y: n.add.outer(x, y), [M, Y]),
    "multiply.outer": (lambda n, x, y: n.multiply.outer(x, y), [M[0], Y]),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_jax(name):
    f, arrays = CASES[name]
    projection = RNG.standard_normal(np.shape(f(np, *arrays)))
    ours = db.gradient(lambda *a: np.sum(f(np, *a) * projection), *arrays)
    with jax.enable_x64(True):
        every = tuple(range(len(arrays)))
        theirs = jax.jit(jax.grad(lambda *a: jnp.sum(f(jnp, *a) * projection), argnums=every))(*arrays)
    for mine, their in zip(ours if len(arrays) > 1 else (ours,), theirs):
        np.testing.assert_allclose(mine, np.asarray(their), rtol=1e-10, atol=1e-12)


def test_add_reduceat_matches_jax_segment_sums():
    """np.add.reduceat with increasing indices sums segments: jax.ops.segment_sum is the same sum."""
    indices = [0, 2, 3]
    segments = np.repeat(np.arange(3), np.diff(indices, append=A.shape[1]))
    projection = RNG.standard_normal((3, 3, 5))
    ours = db.gradient(lambda x: np.sum(np.add.reduceat(x, indices, axis=1) * projection), A)
    with jax.enable_x64(True):
        def theirs(x):
            summed = jax.ops.segment_sum(jnp.moveaxis(x, 1, 0), segments, num_segments=3)
            return jnp.sum(jnp.moveaxis(summed, 0, 1) * projection)

        np.testing.assert_allclose(ours, np.asarray(jax.jit(jax.grad(theirs))(A)), rtol=1e-12, atol=1e-14)


def test_partition_matches_jax_on_what_partition_defines():
    """np.partition and jnp.partition order the elements before and after the kth ones differently, so
    the projection weighs each of those groups alike: the gradient then depends only on the groups."""
    k = 2
    projection = np.array([1.5, 1.5, -2.0, 0.25, 0.25])  # elements before kth, the kth, elements after
    ours = db.gradient(lambda x: np.sum(np.partition(x, k, axis=-1) * projection), A)
    with jax.enable_x64(True):
        theirs = jax.jit(jax.grad(lambda x: jnp.sum(jnp.partition(x, k, axis=-1) * projection)))(A)
    np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-15)
