"""Reverse rules of the elementwise functions, built from the `DERIVATIVES` table.

The pullback of argument i is ``unbroadcast(g * ∂f/∂argᵢ, shape of argᵢ)``.  The
partial is evaluated when the operation is recorded, so the closure keeps only
that one array (for ``x * c`` that is ``c`` itself), not the arguments.
"""

import numpy as np

from ..derivatives import DERIVATIVES, ZERO_DERIVATIVE
from ..registry import defvjp, nondifferentiable
from ..tape import unbroadcast


def _weak(args, dtype):
    """Python scalars as NumPy scalars of the result's dtype, so formulas keep the dtype."""
    return [dtype.type(a) if type(a) in (float, int) else a for a in args]


def vjp_maker(partial, argnum):
    """The vjp maker of argument ``argnum`` for a table entry ``partial``."""
    if partial is None:
        return None

    def maker(ans, *args, **kwargs):
        shape = np.shape(args[argnum])
        if callable(partial):
            d = partial(ans, *_weak(args, ans.dtype))
            if shape == np.shape(ans):
                return lambda g: g * d
            return lambda g: unbroadcast(g * d, shape)
        if partial == 1:
            return (lambda g: g) if shape == np.shape(ans) else (lambda g: unbroadcast(g, shape))
        return lambda g: unbroadcast(g * partial, shape)

    return maker


def _clip_with_bounds(partial):
    """``np.clip`` accepts None for a missing bound: use ±inf in the formulas."""

    def with_bounds(ans, x, lo=None, hi=None):
        return partial(ans, x, -np.inf if lo is None else lo, np.inf if hi is None else hi)

    return with_bounds


def _register():
    for func, partials in DERIVATIVES.items():
        if func is np.clip:
            partials = tuple(_clip_with_bounds(p) for p in partials)
        defvjp(func, *(vjp_maker(p, i) for i, p in enumerate(partials)))
    nondifferentiable(*ZERO_DERIVATIVE)
    nondifferentiable(
        np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
        np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
        np.isfinite, np.isinf, np.isnan, np.signbit, np.isclose, np.allclose, np.array_equal,
        np.zeros_like, np.ones_like, np.empty_like, np.full_like,
    )


_register()
