"""Reverse rules of the elementwise functions, built from the `DERIVATIVES` table, and `defderivative`.

The pullback of argument i is ``unbroadcast(g * ∂f/∂argᵢ, shape of argᵢ)``
(`pullbacks.table_pullback`).  The partial is evaluated when the operation is
recorded, so the record keeps only that one array (for ``x * c`` that is ``c``
itself), not the arguments.  What the operators' fast path (`tracked.record_binary`)
needs is derived from the same table: constant partials give fixed pullbacks
(``scalar_backs``), partials that are the other argument make a rule bilinear.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..broadcast import clear_cache
from ..derivatives import DERIVATIVES, HOLOMORPHIC, SELECTIONS, SMOOTH, is_finite
from ..errors import UnsupportedFunctionError
from ..numpy_facts import OPERATOR_FUNCTIONS, as_dtype, qualified_name
from ..pullbacks import Strong, one_number, scalar_pullback, strong_scalar_pullback, table_pullback
from ..registry import (
    PER_ARGUMENT,
    RULES,
    Rule,
    _implementation,
    _users_rule,
    deflinear,
    defvjp_outputs,
    holds_for_complex,
)


def vjp_maker(func, partial, argnum, bind=None):
    """The vjp maker of argument ``argnum`` of a ufunc (or np.where) ``func`` for a table entry ``partial``.

    The arguments come positionally, or are put in position by ``bind`` (`argument_binder`: a function that is
    not a ufunc).  A ufunc's keywords are vetted by the tape, which lets through only those that change no
    derivative (``casting=``, ``order=``, ...).  The pullback's product is `derivatives.chain_product`'s: strong
    at a selection and where a singular partial is not finite.
    """
    if partial is None:
        return None
    strong = func in SELECTIONS
    checked = func not in SMOOTH

    def maker(ans, *args, **kwargs):
        if bind is None:
            d = partial(ans, *as_dtype(args, ans.dtype)) if callable(partial) else partial
        else:
            args, keywords = bind(args, kwargs)
            d = partial(ans, *as_dtype(args, ans.dtype), **keywords) if callable(partial) else partial
        shape = getattr(args[argnum], "shape", ())
        if strong or (checked and not is_finite(d)):
            return Strong(func, d, shape, ans.shape)
        return table_pullback(d, shape, ans.shape)

    if bind is not None:  # it binds the arguments as ``func`` does: say so to inspect
        parameters = [inspect.Parameter("ans", inspect.Parameter.POSITIONAL_ONLY), *bind.parameters]
        maker.__signature__ = inspect.Signature(parameters)
    return maker


def argument_binder(func):
    """How the arguments of a table function that is not a ufunc (``np.sinc``, ``np.nan_to_num``, ``np.i0``, a
    `db.primitive`) reach its partials: ``bind(args, kwargs)`` gives the arguments of a call without keywords as
    they are, and of one with keywords every positional parameter by position (its default where left out) and
    the keyword-only ones given, by name, so an argument passed by name is never dropped.  None for a ufunc (its
    keywords change no derivative) or a function without a signature."""
    if isinstance(func, np.ufunc):
        return None
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None

    def bind(args, kwargs):
        if not kwargs:
            return args, {}
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args, {k: v for k, v in bound.kwargs.items() if k in kwargs}

    bind.parameters = signature.parameters.values()
    return bind


def power_vjp(func, argnum):
    """The vjp makers of ``x ** y``: the table's, but for the base of a square (``x ** 2``, the commonest
    power), whose pullback keeps ``x`` and computes ``x̄ = g · 2x`` when called (`square_pullback`)."""
    general = vjp_maker(func, DERIVATIVES[func][argnum], argnum)
    if argnum != 0 or DERIVATIVES[func][0] is not POWER_BASE:  # (a partial of db.defderivative's: as it is written)
        return general

    def maker(ans, *args, **ufunc_keywords):
        x, y = args[0], args[1]
        if type(x) is np.ndarray and type(y) in (int, float) and y == 2 and x.dtype == ans.dtype \
                and x.shape == ans.shape and x.dtype.kind == "f":
            return square_pullback(x)
        return general(ans, *args, **ufunc_keywords)

    return maker


def square_pullback(x):
    """``g -> g · 2x``; a cotangent that is one number (a sum's, broadcast) gives ``(2g) · x``: one pass
    over x, no partial array made at record time (the same numbers: doubling is exact)."""

    def pullback(g):
        number = one_number(g)
        if number is not None and number.dtype == x.dtype:
            return (number * 2) * x
        return g * (2 * x)

    return pullback


def clip_vjp(func, argnum):
    """The vjp maker of argument ``argnum`` (``a``, ``a_min`` or ``a_max``) of ``np.clip``.

    The bounds come positionally, as ``a_min=``/``a_max=`` or as NumPy 2's ``min=``/``max=``;
    a bound that is None or absent is ±inf in the formulas.
    """
    with_bounds = vjp_maker(func, DERIVATIVES[func][argnum], argnum)

    def maker(ans, a, a_min=None, a_max=None, out=None, *, min=None, max=None):
        lower = a_min if a_min is not None else min
        upper = a_max if a_max is not None else max
        return with_bounds(ans, a, -np.inf if lower is None else lower, np.inf if upper is None else upper)

    return maker


def defderivative(func: Callable[..., Any], *partials: Callable[..., Any] | float | None) -> None:
    """Register the partial derivatives of an elementwise ``func``, one formula per argument, for every mode:
    reverse rules, `db.sum`/`db.broadcast` kernels and prepared replay all read them.

    Each partial is ``d(ans, *args)`` (``ans`` the result), a number for a constant partial, or None for
    an argument that is not differentiable; a `db.primitive`'s arguments passed by name reach it by position
    (keyword-only ones by name).  Write formulas with NumPy functions and operators only, so
    that kernels can trace them.  ``func`` is a ufunc (``scipy.special.erf``) or a `db.primitive`.
    Kernels traced before are dropped; a `db.prepare_gradient` made before keeps the formulas it was
    recorded with: prepare it again.

    >>> @db.primitive
    ... def softplus(x):
    ...     return np.logaddexp(0.0, x)
    >>> db.defderivative(softplus, lambda ans, x: 1 / (1 + np.exp(-x)))
    >>> db.gradient(lambda x: np.sum(softplus(x)), np.zeros(2))
    array([0.5, 0.5])
    """
    if getattr(func, "nout", 1) != 1:
        raise UnsupportedFunctionError(
            f"{qualified_name(func)} has {func.nout} outputs, and db.defderivative takes the partials of a "
            "function with one; register its rule with db.defvjp_outputs"
        )
    arity = getattr(func, "nin", None)
    if arity is not None and arity != len(partials):
        raise UnsupportedFunctionError(
            f"{qualified_name(func)} takes {arity} argument(s) but {len(partials)} partial(s) were given; "
            "give one formula (or number, or None) per argument"
        )
    for i, d in enumerate(partials):
        if not (d is None or callable(d) or type(d) in (int, float)):
            raise UnsupportedFunctionError(
                f"partial {i} of {qualified_name(func)} is a {type(d).__name__}; give a formula "
                "d(ans, *args), a number, or None for an argument that is not differentiable"
            )
    DERIVATIVES[func] = tuple(partials)
    _register(func, DERIVATIVES[func])
    _users_rule(func, partials)  # a user's partials hold for complex values as written (a holomorphic function)
    clear_cache()  # kernels traced with an earlier entry must not be served again


def _register(func, partials):
    """The reverse rule of ``func`` from its table entry, with what `tracked.record_binary` reads derived from it."""
    own = OWN_MAKERS.get(func)
    bind = None if own else argument_binder(func)
    makers = [own(func, i) if own and d is not None else vjp_maker(func, d, i, bind) for i, d in enumerate(partials)]
    rule = RULES[func] = Rule(_implementation(func), PER_ARGUMENT, tuple(makers))
    rule.plain = OPERATOR_FUNCTIONS.get(func, rule.impl)
    if rule.binary and all(type(d) in (int, float) for d in partials):
        rule.scalar_backs = tuple(table_pullback(d, (), ()) for d in partials)  # None: the identity
    if rule.binary and all(callable(d) for d in partials):
        rule.scalar_partials = partials
        rule.scalar_back = scalar_pullback if func in SMOOTH else functools.partial(strong_scalar_pullback, func)
    rule.bilinear = rule.binary and _each_partial_is_the_other_argument(partials)


def _each_partial_is_the_other_argument(partials):
    """Whether ∂f/∂x is y and ∂f/∂y is x (``x * y``): then a scalar record keeps the arguments as partials.
    Only formulas that name nothing are tried on placeholders: one that calls a function may compute a
    higher derivative there (`scipy_special.derivative_of_order`, which would register order after order)."""
    if any(getattr(getattr(d, "__code__", None), "co_names", True) for d in partials):
        return False
    x, y = object(), object()
    try:
        return partials[0](None, x, y) is y and partials[1](None, x, y) is x
    except Exception:  # noqa: BLE001 - a formula that computes cannot run on placeholders: not bilinear
        return False


POWER_BASE = DERIVATIVES[np.power][0]  # the table's ∂(x ** y)/∂x, which `power_vjp` knows
OWN_MAKERS = {np.clip: clip_vjp, np.power: power_vjp}  # table functions whose reverse rule has makers of its own


def identity(g):
    """The pullback of a partial 1 where None would mean something else (an output without a gradient)."""
    return g


def one_output_vjp(partial, argnum=0):
    """The vjp maker of a ufunc with two outputs for its argument ``argnum``, from one table-like partial
    per output: ``partial(outputs, *args)``, a number, or None where that output does not depend on it."""
    def maker(j, ans, /, *args, **ufunc_keywords):
        if partial[j] is None:
            return None
        x = args[argnum]
        d = partial[j](ans, *args) if callable(partial[j]) else partial[j]
        back = table_pullback(d, np.shape(x), np.shape(ans[j]))
        return identity if back is None else back

    return maker


# frexp: x = mantissa · 2**exponent, so ∂mantissa/∂x = 2**-exponent; the exponent is an integer.
defvjp_outputs(np.frexp, one_output_vjp((lambda ans, x: np.ldexp(ans[0] ** 0, -ans[1]), None)))
# modf: the fractional part x - trunc(x) has partial 1, the integral part trunc(x) none.
defvjp_outputs(np.modf, one_output_vjp((1, None)))
# divmod: the quotient floor(x / y) is piecewise constant; the remainder x - y floor(x / y) has
# partial 1 in x and -floor(x / y) in y.
defvjp_outputs(np.divmod, one_output_vjp((None, 1)), one_output_vjp((None, lambda ans, x, y: -ans[0]), 1))

for _func, _partials in list(DERIVATIVES.items()):
    _register(_func, _partials)
holds_for_complex(*HOLOMORPHIC)  # the holomorphic rows' partials, as written, are their complex rules


def clip_by_position(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue,
                     **kwargs):
    """np.clip with a tracked bound passed by name (``a_max=``, or NumPy 2's keyword-only ``max=``): the same
    call with the bounds in their positions (None where absent, as NumPy reads it)."""
    return np.clip(a, clip_bound(a_min, min, "min"), clip_bound(a_max, max, "max"), out, **kwargs)


def clip_bound(old, new, name):
    """The bound given as ``a_{name}=`` or ``{name}=``, None if neither (NumPy refuses both)."""
    if old is not np._NoValue and new is not np._NoValue:
        raise ValueError(f"np.clip got both a_{name}= and {name}=; pass one of them")
    return old if old is not np._NoValue else None if new is np._NoValue else new


RULES[np.clip].tracked_keywords = clip_by_position

# Forward mode: np.where is linear in its two choices (the table's partials are the condition and its negation).
deflinear(np.where)
