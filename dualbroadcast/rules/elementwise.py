"""Reverse rules of the elementwise functions, built from the `DERIVATIVES` table.

The pullback of argument i is ``unbroadcast(g * ∂f/∂argᵢ, shape of argᵢ)``.  The
partial is evaluated when the operation is recorded, so the closure keeps only
that one array (for ``x * c`` that is ``c`` itself), not the arguments.
"""

import operator

import numpy as np

from ..derivatives import DERIVATIVES
from ..registry import RULES, defvjp
from ..tape import multiply_by, unbroadcast


def _weak(args, dtype):
    """Python scalars as NumPy scalars of the result's dtype, so formulas keep the dtype."""
    for a in args:
        if type(a) is float or type(a) is int:
            return [dtype.type(a) if type(a) in (float, int) else a for a in args]
    return args


def vjp_maker(partial, argnum):
    """The vjp maker of argument ``argnum`` for a table entry ``partial``."""
    if partial is None:
        return None
    if callable(partial):

        def maker(ans, *args, **kwargs):
            d = partial(ans, *_weak(args, ans.dtype))
            if type(ans) is not np.ndarray:  # a scalar result: all arguments are 0-d
                return multiply_by(d)
            shape = getattr(args[argnum], "shape", ())
            if shape == ans.shape:
                return lambda g: g * d
            return lambda g: unbroadcast(g * d, shape)

    elif partial == 1:

        def maker(ans, *args, **kwargs):
            if type(ans) is not np.ndarray:
                return _identity
            shape = getattr(args[argnum], "shape", ())
            return _identity if shape == ans.shape else (lambda g: unbroadcast(g, shape))

    elif partial == -1:

        def maker(ans, *args, **kwargs):
            if type(ans) is not np.ndarray:
                return operator.neg
            shape = getattr(args[argnum], "shape", ())
            return operator.neg if shape == ans.shape else (lambda g: unbroadcast(-g, shape))

    else:

        def maker(ans, *args, **kwargs):
            shape = getattr(args[argnum], "shape", ())
            if type(ans) is not np.ndarray or shape == ans.shape:
                return lambda g: g * partial
            return lambda g: unbroadcast(g * partial, shape)

    return maker


def _identity(g):
    return g


def _clip_with_bounds(partial):
    """``np.clip`` accepts None for a missing bound: use ±inf in the formulas."""

    def with_bounds(ans, x, lo=None, hi=None):
        return partial(ans, x, -np.inf if lo is None else lo, np.inf if hi is None else hi)

    return with_bounds


# Same results as the ufuncs without keywords, without ufunc dispatch on NumPy scalars.
OPERATORS = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
    np.divide: operator.truediv, np.power: operator.pow, np.negative: operator.neg,
    np.positive: operator.pos, np.absolute: operator.abs,
}


def _register():
    for func, partials in DERIVATIVES.items():
        if func is np.clip:
            partials = tuple(_clip_with_bounds(p) for p in partials)
        defvjp(func, *(vjp_maker(p, i) for i, p in enumerate(partials)))
    for func, plain in OPERATORS.items():
        RULES[func].plain = plain
    RULES[np.add].scalar_backs = (None, None)  # None: the identity, which the sweep applies without a call
    RULES[np.subtract].scalar_backs = (None, operator.neg)
    for func in (np.multiply, np.divide, np.power):
        RULES[func].scalar_partials = DERIVATIVES[func]
    RULES[np.multiply].bilinear = True


_register()
