"""Issue 30's two open cases where a 0 meets an infinite partial, in every first-order mode and against JAX.

docs/design.md (Conventions at kinks, "Not covered") names both: a zero that is data, not a selection
(`sqrt(x) * c` with c = 0 at x = 0), and a kernel behind a guard written after it
(`where(x > 0, db.broadcast(np.sqrt, x), 0)`).  The modes disagree on each today, so each test is a strict
xfail: it pins which modes disagree, and fails (XPASS) the day one rule makes them agree, when its marker goes.
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


@pytest.mark.xfail(strict=True, reason="open (issue 30): reverse mode's strong product gives 0 for a data zero "
                   "times sqrt's infinite partial; prepared replay, kernels and jvp give IEEE's NaN, as JAX does")
def test_a_data_zero_times_an_infinite_partial_is_one_number_in_every_mode():
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = partials_in_every_mode(_product, (X, C))
    with jax.enable_x64(True):
        jx, jc = jnp.asarray(X), jnp.asarray(C)
        by_grad = np.asarray(jax.grad(lambda x: jnp.sum(jnp.sqrt(x) * jc))(jx))
        by_jvp = np.asarray(jax.jvp(lambda x: jnp.sqrt(x) * jc, (jx,), (jnp.ones(4),))[1])
    np.testing.assert_array_equal(by_grad, by_jvp)  # JAX's two modes agree here: NaN at the data zero
    assert not disagreements(found, by_grad), disagreements(found, by_grad)


@pytest.mark.xfail(strict=True, reason="open (issue 30): a kernel's pullback multiplies the later guard's 0 by "
                   "its infinite partial (NaN in reverse mode and replay; kernels and jvp give the guard's 0)")
def test_a_kernel_behind_a_later_guard_gives_the_guards_zero_in_every_mode():
    x = np.array([-1.0, 0.0, 1.0, 4.0])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = partials_in_every_mode(_guarded_kernel, (x,))
        plain = db.gradient(lambda a: np.sum(np.where(a > 0, np.sqrt(a), 0.0)), x)  # the same without a kernel
    want = np.where(x > 0, 0.5 / np.sqrt(np.abs(x) + (x == 0)), 0.0)  # by hand: the guard's 0 where x <= 0
    np.testing.assert_array_equal(plain, want)  # the convention (jax.jvp's number; jax.grad gives NaN)
    assert not disagreements(found, want), disagreements(found, want)
