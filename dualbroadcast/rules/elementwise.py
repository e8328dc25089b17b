"""Reverse rules of the elementwise functions, built from the `DERIVATIVES` table.

The pullback of argument i is ``unbroadcast(g * ∂f/∂argᵢ, shape of argᵢ)``.  The
partial is evaluated when the operation is recorded, so the closure keeps only
that one array (for ``x * c`` that is ``c`` itself), not the arguments.
"""

import operator

import numpy as np

from ..derivatives import DERIVATIVES
from ..numpy_facts import OPERATOR_FUNCTIONS, as_dtype
from ..registry import RULES, defvjp
from ..tape import multiply_by, unbroadcast


def vjp_maker(partial, argnum):
    """The vjp maker of input ``argnum`` of a ufunc (or np.where) for a table entry ``partial``.

    The inputs come positionally.  A ufunc's keywords are vetted by the tape, which lets through only
    those that change no derivative (``casting=``, ``order=``, ...); np.where takes none.
    """
    if partial is None:
        return None
    if callable(partial):

        def maker(ans, *args, **ufunc_keywords):
            d = partial(ans, *as_dtype(args, ans.dtype))
            if type(ans) is not np.ndarray:  # a scalar result: all arguments are 0-d
                return multiply_by(d)
            shape = getattr(args[argnum], "shape", ())
            if shape == ans.shape:
                return lambda g: g * d
            return lambda g: unbroadcast(g * d, shape)

    elif partial == 1:

        def maker(ans, *args, **ufunc_keywords):
            if type(ans) is not np.ndarray:
                return _identity
            shape = getattr(args[argnum], "shape", ())
            return _identity if shape == ans.shape else (lambda g: unbroadcast(g, shape))

    elif partial == -1:

        def maker(ans, *args, **ufunc_keywords):
            if type(ans) is not np.ndarray:
                return operator.neg
            shape = getattr(args[argnum], "shape", ())
            return operator.neg if shape == ans.shape else (lambda g: unbroadcast(-g, shape))

    else:

        def maker(ans, *args, **ufunc_keywords):
            shape = getattr(args[argnum], "shape", ())
            if type(ans) is not np.ndarray or shape == ans.shape:
                return lambda g: g * partial
            return lambda g: unbroadcast(g * partial, shape)

    return maker


def _identity(g):
    return g


def clip_vjp(argnum):
    """The vjp maker of argument ``argnum`` (``a``, ``a_min`` or ``a_max``) of ``np.clip``.

    The bounds come positionally, as ``a_min=``/``a_max=`` or as NumPy 2's ``min=``/``max=``;
    a bound that is None or absent is ±inf in the formulas.
    """
    with_bounds = vjp_maker(DERIVATIVES[np.clip][argnum], argnum)

    def maker(ans, a, a_min=None, a_max=None, out=None, *, min=None, max=None):
        lower = a_min if a_min is not None else min
        upper = a_max if a_max is not None else max
        return with_bounds(ans, a, -np.inf if lower is None else lower, np.inf if upper is None else upper)

    return maker


def _register():
    for func, partials in DERIVATIVES.items():
        if func is np.clip:
            defvjp(func, *(clip_vjp(i) for i in range(len(partials))))
        else:
            defvjp(func, *(vjp_maker(p, i) for i, p in enumerate(partials)))
    for func, plain in OPERATOR_FUNCTIONS.items():
        RULES[func].plain = plain
    RULES[np.add].scalar_backs = (None, None)  # None: the identity, which the sweep applies without a call
    RULES[np.subtract].scalar_backs = (None, operator.neg)
    for func in (np.multiply, np.divide, np.power):
        RULES[func].scalar_partials = DERIVATIVES[func]
    RULES[np.multiply].bilinear = True


_register()
