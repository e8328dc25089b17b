"""Directional derivatives of any order by nested `db.jvp` and `db.gradient`, and the same by JAX's nested `jax.jvp`:
shared by the composition sweep (tests/modes/test_compositions.py) and the random programs (tests/programs.py).

A composition is named by its modes, outermost first: ``fwd_rev`` is ``jvp(grad F)``, JAX's Hessian-vector product.
Along directions (v, u, w), innermost first, it computes the derivative of ``F`` along v, then u, then w.  A complex
argument's derivatives pair with directions as JAX's do: ``dF = Re Σ g·v`` for ``g = ∂F/∂x - i ∂F/∂y``.
"""

import numpy as np

import dualbroadcast as db

SECOND_ORDER = ("fwd_fwd", "fwd_rev", "rev_fwd", "rev_rev")
THIRD_ORDER = ("fwd_rev_rev",)


def pair(grads, directions):
    """``Re Σ g·v`` over the arguments: the directional derivative a gradient gives along ``directions``."""
    total = 0.0
    for g, v in zip(grads, directions):
        term = np.sum(g * v)
        total = total + (np.real(term) if np.iscomplexobj(v) else term)
    return total


def grad(f, args):
    """`db.gradient` of ``f`` as a tuple, one gradient per argument."""
    g = db.gradient(f, *args)
    return g if len(args) > 1 else (g,)


def tangent(f, args, directions):
    """The tangent `db.jvp` gives ``f`` along ``directions``."""
    return db.jvp(f, tuple(args), tuple(directions))[1]


def first(mode, F, args, v):
    """dF[v], by forward (``fwd``) or reverse (``rev``) mode."""
    if mode == "fwd":
        return tangent(F, args, v)
    return pair(grad(F, args), v)


def derivative(composition, F, args, directions):
    """The directional derivative of order ``len(composition.split('_'))`` of ``F`` that ``composition`` computes,
    outermost mode first, along ``directions`` (v, u, w: innermost first, each one array per argument)."""
    modes = composition.split("_")
    if len(modes) == 1:
        return first(modes[0], F, args, directions[0])
    inner = "_".join(modes[1:])
    outer_direction = directions[len(modes) - 1]
    if modes[0] == "rev":
        return pair(grad(lambda *xs: derivative(inner, F, xs, directions), args), outer_direction)
    if modes[1:] == ["rev"]:  # jvp(grad F): the tangent of the gradient itself, paired outside (JAX's hvp)
        return pair(db.jvp(lambda *xs: grad(F, xs), tuple(args), tuple(outer_direction))[1], directions[0])
    return tangent(lambda *xs: derivative(inner, F, xs, directions), args, outer_direction)


def jax_derivative(F, args, directions, order):
    """The directional derivative of ``order`` of JAX's ``F`` along ``directions`` (innermost first), by nested
    ``jax.jvp``, in float64."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        g = F
        for k in range(order):
            g = (lambda g, d: lambda *xs: jax.jvp(g, xs, tuple(map(jnp.asarray, d)))[1])(g, directions[k])
        return float(g(*map(jnp.asarray, args)))
