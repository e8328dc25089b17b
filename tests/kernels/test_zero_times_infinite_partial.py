"""Issue 30's cases where a 0 meets an infinite partial, in every first-order mode and against JAX.

docs/design.md (Conventions at kinks) gives them one number, reverse mode's strong product (0 · ∞ = 0), in every
mode: a zero that is data, not a selection (`sqrt(x) * c` with c = 0 at x = 0: a kernel's forward chain and
`db.jvp` multiply the infinite tangent by c's 0), and a kernel behind a guard written after it
(`where(x > 0, db.broadcast(np.sqrt, x), 0)`: the kernel's pullback multiplies the guard's 0 by its infinite
partial).  tests/modes/test_kink_sweep.py sweeps both per singular function of the table, to second order.
"""

import warnings

import numpy as np
import pytest

import dualbroadcast as db

jax = pytest.importorskip("jax")
jnp = jax.numpy

X = np.array([0.0, 0.0, 1.0, 4.0])
C = np.array([0.0, 2.0, 0.0, 3.0])  # c = 0 at x = 0: the data zero; c = 2 at x = 0: an infinite derivative


def _product(x, c):
    return np.sqrt(x) * c


def _kernel_after_sqrt(x, c):  # the infinite tangent enters the kernel, the data zero is inside it
    return db.broadcast(lambda s, k: s * k, np.sqrt(x), c)


def _kernel_before_the_zero(x, c):  # the kernel's infinite tangent leaves it, the data zero is outside
    return db.broadcast(np.sqrt, x) * c


def _guarded_kernel(x):
    return np.where(x > 0, db.broadcast(np.sqrt, x), 0.0)


def partials_in_every_mode(f, args):
    """{mode: ∂ Σ f / ∂ args[0]} in reverse mode, prepared replay, `db.sum`, `db.broadcast` and `db.jvp`."""
    def loss(*a):
        return np.sum(f(*a))

    prepared = db.prepare_gradient(loss, *args)
    prepared(*args)
    tangents = (np.ones_like(args[0]), *(np.zeros_like(a) for a in args[1:]))
    found = {
        "reverse": db.gradient(loss, *args),
        "prepared": prepared(*args),
        "sum": db.gradient(lambda *a: db.sum(f, *a), *args),
        "broadcast": db.gradient(lambda *a: np.sum(db.broadcast(f, *a)), *args),
        "jvp": db.jvp(f, args, tangents)[1],
    }
    return {mode: np.asarray(g[0] if isinstance(g, tuple) else g, float) for mode, g in found.items()}


def disagreements(found, want):
    return {mode: g for mode, g in found.items() if not np.array_equal(g, want, equal_nan=True)}


@pytest.mark.parametrize("f", [_product, _kernel_after_sqrt, _kernel_before_the_zero])
def test_a_data_zero_times_an_infinite_partial_is_0_in_every_mode(f):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = partials_in_every_mode(f, (X, C))
        want = np.where(C == 0, 0.0, C * 0.5 / np.sqrt(X))  # by hand: c/(2√x), the strong 0 where c = 0
    assert np.isinf(want[1])  # c = 2 at x = 0: the infinite derivative stays infinite
    assert not disagreements(found, want), disagreements(found, want)


def test_jax_gives_nan_for_a_data_zero_times_an_infinite_partial():
    """The difference docs/design.md's table states: IEEE's NaN in both of JAX's modes, our strong 0."""
    with np.errstate(all="ignore"):
        ours = np.where(C == 0, 0.0, C * 0.5 / np.sqrt(X))
    with jax.enable_x64(True):
        jx, jc = jnp.asarray(X), jnp.asarray(C)
        by_grad = np.asarray(jax.grad(lambda x: jnp.sum(jnp.sqrt(x) * jc))(jx))
        by_jvp = np.asarray(jax.jvp(lambda x: jnp.sqrt(x) * jc, (jx,), (jnp.ones(4),))[1])
    for by_jax in (by_grad, by_jvp):  # NaN at the data zero, elsewhere our number
        np.testing.assert_array_equal(by_jax, np.where((X == 0) & (C == 0), np.nan, ours))


def test_a_kernel_behind_a_later_guard_gives_the_guards_zero_in_every_mode():
    x = np.array([-1.0, 0.0, 1.0, 4.0])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = partials_in_every_mode(_guarded_kernel, (x,))
        plain = db.gradient(lambda a: np.sum(np.where(a > 0, np.sqrt(a), 0.0)), x)  # the same without a kernel
    want = np.where(x > 0, 0.5 / np.sqrt(np.abs(x) + (x == 0)), 0.0)  # by hand: the guard's 0 where x <= 0
    np.testing.assert_array_equal(plain, want)  # the convention (jax.jvp's number; jax.grad gives NaN)
    assert not disagreements(found, want), disagreements(found, want)


@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
def test_every_backend_gives_the_strong_zero(backend):
    """Both cases at 65536 elements (every backend eligible), forced onto each backend, against reverse mode."""
    n = 16384
    cases = [(_product, (np.tile(X, n), np.tile(C, n))), (_guarded_kernel, (np.tile([-1.0, 0.0, 1.0, 4.0], n),))]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for f, args in cases:
            want = db.gradient(lambda *a: np.sum(f(*a)), *args)
            want = np.asarray(want[0] if isinstance(want, tuple) else want)
            db.set_backend(backend)
            try:
                with db.kernel_log() as calls:
                    found = partials_in_every_mode(f, args)
            finally:
                db.set_backend(None)
            assert {call.backend for call in calls} == {backend}
            assert np.isfinite(want).sum() >= 3 * n  # the numbers compared: zeros where a 0 meets an infinity
            assert not disagreements(found, want), disagreements(found, want)
