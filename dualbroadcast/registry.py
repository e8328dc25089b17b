"""The table of reverse rules, and the public way to add to it.

A rule maps a function to *vjp makers*: ``maker(ans, *args, **kwargs)`` returns
the pullback ``g -> cotangent of that argument``.  A maker runs only for
active arguments, so a constant argument costs nothing, and its closure keeps
only what that cotangent needs.

Example, a rule for a SciPy ufunc the library does not cover and for a user function::

    db.defvjp(scipy.special.ber, lambda ans, x: lambda g: g * scipy.special.berp(x))

    @db.primitive
    def softplus(x):
        return np.logaddexp(0.0, x)
    db.defvjp(softplus, lambda ans, x: lambda g: g / (1 + np.exp(-x)))
"""

import inspect
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ShapeMismatchError, UnsupportedFunctionError
from .numpy_facts import qualified_name

PER_ARGUMENT = 0  # makers[i](ans, *args, **kw) for argument i
BY_ARGNUM = 1  # maker(i, ans, *args, **kw): variadic functions (einsum, ...)
SEQUENCE = 2  # maker(k, ans, seq, *rest, **kw): element k of the sequence args[0]
OUTPUTS = 3  # makers[i](j, ans, *args, **kw): output j of a tuple result, argument i
COMPOSITION = 4  # makers(*args, **kw) computes the function with NumPy calls, each recorded by its own rule


class Rule:
    """How to record one function: its implementation, kind and vjp makers.

    ``plain`` computes the same as ``impl`` for calls without keywords, faster
    (``operator.mul`` for ``np.multiply``: no ufunc dispatch on scalars).
    ``binary``: one maker for each of two arguments, as operators (``x - y``) need.
    ``scalar_backs``: for constant partials (``x - y``), the pullbacks of a scalar
    result, the same for every call, so recording one calls no maker (None: the identity).
    ``scalar_partials``: for a scalar result, ``∂f/∂argᵢ(ans, *args)`` per argument, called directly
    (no maker: for a scalar the partial is the pullback's factor); ``scalar_back`` turns one into the record's
    pullback (`pullbacks.scalar_pullback`, or its strong form for a selection or a singular function).
    ``bilinear``: ``x * y`` or a dot: for a scalar result ∂f/∂x = y and ∂f/∂y = x, so
    the record keeps the other argument itself (no partial to evaluate).
    ``keeps_arguments``: its pullbacks may read its constant array arguments, which are then
    read-only until the gradient is taken (`Tape.keep`); False for a rule that copies them.
    ``tracked_keywords``: None, or the function written with NumPy calls (as `defcomposition`) for a call
    with a tracked keyword argument (np.pad's ``constant_values``), which the rule's makers cannot take.
    """

    __slots__ = ("bilinear", "binary", "impl", "keeps_arguments", "kind", "makers", "plain", "scalar_backs",
                 "scalar_back", "scalar_partials", "tracked_keywords")

    def __init__(self, impl, kind, makers):
        self.impl = impl
        self.kind = kind
        self.makers = makers
        self.plain = impl
        self.binary = kind == PER_ARGUMENT and len(makers) == 2 and None not in makers
        self.scalar_backs = None
        self.scalar_partials = None
        self.scalar_back = None
        self.bilinear = False
        self.keeps_arguments = True
        self.tracked_keywords = None

    def pullbacks(self, func, ans, values, positions, kwargs):
        """The pullback of each argument at ``positions`` (of a sequence's elements, for a sequence rule)
        for the result ``ans`` of ``func(*values, **kwargs)``."""
        try:
            if self.kind == OUTPUTS:  # one array, not a tuple (svd without u, v): output 0
                return [output_pullback(self.makers, i, 0, ans, values, kwargs) for i in positions]
            if self.kind != PER_ARGUMENT:
                return [self.makers(i, ans, *values, **kwargs) for i in positions]
            makers = self.makers
            backs = []
            for i in positions:
                maker = makers[i] if i < len(makers) else None
                if maker is None:
                    why = ARGUMENT_REASONS.get((func, i), "an index, axis, shape or integer argument")
                    raise UnsupportedFunctionError(
                        f"argument {i} of {qualified_name(func)} is not differentiable ({why}) but received a "
                        "tracked value; pass a constant or db.cut(x)"
                    )
                backs.append(maker(ans, *values, **kwargs))
            return backs
        except TypeError as error:
            if kwargs and type(error) is TypeError and "keyword argument" in str(error):  # Python's, not ours
                raise UnsupportedFunctionError(
                    f"the derivative rule of {qualified_name(func)} does not support the keyword arguments "
                    f"{sorted(kwargs)} ({error}); drop them, or register a rule that does (db.defvjp)"
                ) from error
            raise


def call_with_tracked_keywords(rule, func, args, kwargs, tracked, call):
    """``call(func, args, kwargs)`` with the keyword arguments named in ``tracked`` passed positionally (the
    parameters before them too: those given by name, else their defaults), so that the rule's makers, one per
    position, differentiate them (``np.average(x, weights=w)``).  One with no position (keyword-only, or in
    ``**kwargs``) goes to the rule's ``tracked_keywords`` composition, else is an error.  A tracked ``out=``
    never comes here: the tape refuses it (`errors.InPlaceMutationError`)."""
    positional = positional_parameters(func)
    placed = [k for k in tracked if k in positional]
    if placed:
        args, kwargs = in_position(func, args, kwargs, placed, positional)
    if len(placed) == len(tracked):
        return call(func, args, kwargs)
    if rule.tracked_keywords is not None:
        return rule.tracked_keywords(*args, **kwargs)  # its NumPy calls each find their own derivative
    raise UnsupportedFunctionError(
        f"{qualified_name(func)} got a tracked value as its argument {next(k for k in tracked if k not in placed)!r}, "
        "which has no position and no derivative rule; pass a constant (db.cut) or write the computation with "
        "NumPy calls")


def in_position(func, args, kwargs, names, positional):
    """``(args, kwargs)`` of the same call with the arguments ``names`` and the positional ones before them
    passed positionally (``positional``: name to default)."""
    order = list(positional)
    before = order[len(args):max(order.index(k) for k in names) + 1]
    if not set(names) <= set(before):
        raise TypeError(f"{qualified_name(func)}() got multiple values for argument "
                        f"{next(k for k in names if k not in before)!r}")
    required = [k for k in before if k not in kwargs and positional[k] is inspect.Parameter.empty]
    if required:
        raise TypeError(f"{qualified_name(func)}() missing required argument {required[0]!r}")
    kwargs = dict(kwargs)
    return [*args, *(kwargs.pop(k) if k in kwargs else positional[k] for k in before)], kwargs


_POSITIONAL = {}


def positional_parameters(func):
    """``func``'s parameters that may be passed by position, name to default (``inspect.Parameter.empty`` for a
    required one, NumPy's ``np._NoValue`` where NumPy tells an argument left out that way); {} without a
    signature."""
    parameters = _POSITIONAL.get(func)
    if parameters is None:
        try:
            signature = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):
            signature = ()
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = _POSITIONAL[func] = {p.name: p.default for p in signature if p.kind in kinds}
    return parameters


RULES = {}
NONDIFFERENTIABLE = {}  # function -> why its results carry no gradient
ARGUMENT_REASONS = {}  # (function, argument index) -> why that argument has no derivative rule, where not evident
# The rules that hold for complex values (JAX's convention, see `rules/complex.py`): function -> its own Rule
# for complex arguments, or SAME_RULE where its rule in RULES holds as it is (a holomorphic or linear function
# written with plain transposes).  A function missing here is an error on complex values, never a wrong gradient.
COMPLEX_RULES = {}
SAME_RULE = "same rule"
_users_rules = False  # True once the library's own rules are registered: later ones are checked (`_checked`)
# The library's families registered on first need, not at import (SciPy's: importing scipy.special costs
# 0.2 s): (wanted, register) pairs, ``wanted(func)`` saying whether a function without a rule may be theirs.
LAZY_FAMILIES = []
_lazy_lock = threading.RLock()


def complex_rule(func):
    """The rule recording ``func`` where complex values take part; None if it has none."""
    rule = COMPLEX_RULES.get(func)
    return RULES.get(func) if rule is SAME_RULE else rule


def holds_for_complex(*funcs: Callable[..., Any]) -> None:
    """Declare that the rules of ``funcs`` hold for complex values as they are: the vjp of a holomorphic
    (or linear) function is ``g`` times its derivative, with plain transposes, no conjugation."""
    COMPLEX_RULES.update(dict.fromkeys(funcs, SAME_RULE))


def defvjp_complex(func: Callable[..., Any], *makers: Callable[..., Callable[[Any], Any]] | None) -> None:
    """Register the rule of ``func`` where complex values take part (a function that is not holomorphic:
    ``np.abs``, ``np.conj``...), one maker per positional argument as in `defvjp`; its real rule stays."""
    COMPLEX_RULES[func] = Rule(_implementation(func), PER_ARGUMENT, tuple(makers))


def _users_rule(func, makers):
    """A rule a user registers after import holds for complex values as written (as in JAX).  Not the
    library's own rules registered later (``dualbroadcast.scipy``'s mirrors, whose makers are written in the
    package): they name theirs."""
    makers = makers if isinstance(makers, (tuple, list)) else (makers,)
    written_here = any((getattr(m, "__module__", None) or "").startswith("dualbroadcast") for m in makers if m)
    if _users_rules and not written_here:
        COMPLEX_RULES[func] = SAME_RULE


def defvjp(func: Callable[..., Any], *makers: Callable[..., Callable[[Any], Any]] | None) -> None:
    """Register reverse rules for ``func``: one vjp maker per positional argument.

    ``maker(ans, *args, **kwargs)`` returns the pullback ``g -> cotangent of that argument``
    (of its shape).  Use ``None`` for an argument that is never differentiable (an axis, a shape).

    >>> @db.primitive
    ... def softplus(x):
    ...     return np.logaddexp(0.0, x)
    >>> db.defvjp(softplus, lambda ans, x: lambda g: g / (1 + np.exp(-x)))
    >>> db.gradient(lambda x: np.sum(softplus(x)), np.zeros(2))
    array([0.5, 0.5])
    """
    _users_rule(func, makers)
    if _users_rules:
        makers = [_checked(func, m, lambda ans, *args, i=i, **kw: (i, args[i])) if m else m
                  for i, m in enumerate(makers)]
    RULES[func] = Rule(_implementation(func), PER_ARGUMENT, tuple(makers))


def defvjp_argnum(func: Callable[..., Any], maker: Callable[..., Callable[[Any], Any]]) -> None:
    """Register one vjp maker ``maker(argnum, ans, *args, **kw)`` for a variadic ``func``."""
    _users_rule(func, maker)
    if _users_rules:
        maker = _checked(func, maker, lambda i, ans, *args, **kw: (i, args[i]))
    RULES[func] = Rule(_implementation(func), BY_ARGNUM, maker)


def defvjp_sequence(func: Callable[..., Any], maker: Callable[..., Callable[[Any], Any]]) -> None:
    """Register ``maker(k, ans, seq, *rest, **kw)`` for a ``func`` taking a sequence of arrays."""
    _users_rule(func, maker)
    if _users_rules:
        maker = _checked(func, maker, lambda k, ans, seq, *rest, **kw: (k, seq[k]))
    RULES[func] = Rule(_implementation(func), SEQUENCE, maker)


def defvjp_outputs(func: Callable[..., Any], *makers: Callable[..., Callable[[Any], Any] | None] | None) -> None:
    """Register ``makers[i](j, ans, *args, **kw)`` for output ``j`` of a tuple-valued ``func`` in its
    positional argument ``i`` (None for an argument that is never differentiable, as in `defvjp`).

    A maker returning None says output ``j`` does not depend on argument ``i``: an output none of whose
    active arguments it depends on is a constant (it is not recorded).  A call returning one array instead
    of a tuple (``np.linalg.svd(a, compute_uv=False)``) is output 0.
    """
    _users_rule(func, makers)
    if _users_rules:
        makers = [_checked(func, m, lambda j, ans, *args, i=i, **kw: (i, args[i])) if m else m
                  for i, m in enumerate(makers)]
    RULES[func] = Rule(_implementation(func), OUTPUTS, tuple(makers))


def output_maker(makers, i, func=None):
    """The maker of argument ``i`` of an outputs rule (an error naming the arguments it differentiates if none)."""
    maker = makers[i] if i < len(makers) else None
    if maker is None:
        name = qualified_name(func) if func is not None else "this function"
        ruled = [k for k, m in enumerate(makers) if m is not None]
        which = "its first argument" if ruled == [0] else f"its arguments {', '.join(map(str, ruled))}"
        raise UnsupportedFunctionError(
            f"{name} is differentiable only in {which} (argument {i} received a tracked value); "
            "pass the others as constants (db.cut)")
    return maker


def output_pullbacks(func, makers, j, ans, values, active, kwargs):
    """The pullbacks of output ``j`` of an outputs rule to the arguments at ``active``; None if the output
    depends on none of them (a constant).  An argument it does not depend on beside one it does gets zeros."""
    backs = [output_maker(makers, i, func)(j, ans, *values, **kwargs) for i in active]
    if all(back is None for back in backs):
        return None
    return [zeros_of(values[i]) if back is None else back for i, back in zip(active, backs)]


def output_pullback(makers, i, j, ans, values, kwargs):
    """The pullback of output ``j`` to argument ``i``, zeros where it does not depend on it (prepared
    replay calls this only for an output that depends on one of its active arguments)."""
    back = output_maker(makers, i)(j, ans, *values, **kwargs)
    return zeros_of(values[i]) if back is None else back


def first_output(makers, i, ans, *args, **kwargs):
    """An outputs rule's pullback to argument ``i`` of a call returning one array (output 0), as a
    `defvjp_argnum` maker is called."""
    return output_pullback(makers, i, 0, ans, args, kwargs)


def zeros_of(x):
    """The pullback giving a zero cotangent of ``x``'s shape and dtype."""
    shape, dtype = np.shape(x), np.result_type(x)
    return lambda g: np.zeros(shape, dtype)


def defcomposition(func: Callable[..., Any], written: Callable[..., Any]) -> None:
    """Differentiate ``func`` as ``written``, which computes it with NumPy calls on its arguments, each
    recorded with its own rule: for functions whose tracked arguments sit in lists the tape does not open
    (``np.select``'s choices, ``np.block``'s blocks) or that return one result per argument
    (``np.atleast_1d(x, y)``).  ``written`` takes NumPy's signature."""
    RULES[func] = Rule(_implementation(func), COMPOSITION, written)


def register_lazily(wanted: Callable[[Any], bool], register: Callable[[], Any]) -> None:
    """Have ``register()`` declare a family of the library's rules when a function ``wanted`` accepts is
    first met without a rule (`register_lazy_rules`), instead of at import."""
    LAZY_FAMILIES.append((wanted, register))


def register_lazy_rules(func: Any = None) -> bool:
    """Register the lazy families ``func`` (a function met without a rule) may belong to, every one if
    ``func`` is None; whether any was.  Each registers once, as the library's own rules (not a user's)."""
    global _users_rules
    with _lazy_lock:
        due = [family for family in LAZY_FAMILIES if func is None or family[0](func)]
        for family in due:
            LAZY_FAMILIES.remove(family)
            users, _users_rules = _users_rules, False
            try:
                family[1]()
            finally:
                _users_rules = users
    return bool(due)


def users_rules_from_now():
    """The library's own rules are registered: check the cotangents of every rule registered later."""
    global _users_rules
    _users_rules = True


def _checked(func, maker, argument):
    """A user's vjp ``maker`` whose pullbacks must return a cotangent of their argument's shape (a wrong
    one would otherwise broadcast into a silently wrong gradient, or fail far from the rule).

    ``argument(*maker_args)`` is ``(argument number, argument)`` of the cotangent the maker's pullback gives.
    """
    def checked_maker(*args, **kwargs):
        i, x = argument(*args, **kwargs)
        shape = np.shape(x)
        back = maker(*args, **kwargs)
        if back is None:
            return None

        def checked_back(g):
            cotangent = back(g)
            if np.shape(cotangent) != shape:
                raise ShapeMismatchError(
                    f"the rule registered for {qualified_name(func)} returned a cotangent of shape "
                    f"{np.shape(cotangent)} for its argument {i} of shape {shape}; a pullback must return "
                    "its argument's shape (sum over broadcast axes, e.g. np.sum(g, axis=0))"
                )
            return cotangent

        return checked_back

    return checked_maker


# Forward mode (`forward.py`): function -> its jvp rule, or LINEAR / MULTILINEAR.  A function with a vjp rule
# and none here gets its tangent from the derivative table (elementwise) or by transposing its pullback.
JVP_RULES = {}
MULTILINEAR = "multilinear"


class Linear:
    """The forward rule of a linear (or affine) function: ``constants`` names its parameters that hold data
    entering additively though the vjp rule does not differentiate them (``np.sum``'s ``initial``)."""

    __slots__ = ("constants",)

    def __init__(self, constants=()):
        self.constants = frozenset(constants)


def deflinear(*funcs: Callable[..., Any], constants: tuple[str, ...] = ()) -> None:
    """Declare ``funcs`` linear in their array arguments (``np.reshape``, ``np.sum``, ``np.fft.fft``): the
    tangent of ``f(a, ...)`` is ``f(t, ...)`` with the same keywords, a constant data argument (one the vjp
    rule differentiates, or named in ``constants``: an affine function's offset) given as zeros."""
    JVP_RULES.update(dict.fromkeys(funcs, Linear(constants)))


def defmultilinear(*funcs: Callable[..., Any]) -> None:
    """Declare ``funcs`` linear in each array argument separately (``np.matmul``, ``np.einsum``): the tangent
    is the product rule, ``Σᵢ f(a₁, …, tᵢ, …, aₙ)`` over the arguments that carry one."""
    JVP_RULES.update(dict.fromkeys(funcs, MULTILINEAR))


def defjvp(func: Callable[..., Any], jvp: Callable[..., Any]) -> None:
    """Register the forward rule of ``func`` beside its vjp rule: ``jvp(tangents, ans, *args, **kwargs)``
    returns the tangent ``J·t`` of ``ans = func(*args, **kwargs)``, ``tangents`` holding one tangent per
    positional argument (None for a constant one).  For a tuple-valued function (`defvjp_outputs`):
    ``jvp(j, t, ans, x, *rest, **kwargs)``, the tangent of output ``j`` (None: a constant).  Without one, the
    tangent comes from the derivative table or from transposing the vjp rule's pullback.

    >>> @db.primitive
    ... def cube(x):
    ...     return x ** 3
    >>> db.defvjp(cube, lambda ans, x: lambda g: 3 * x ** 2 * g)
    >>> db.defjvp(cube, lambda tangents, ans, x: 3 * x ** 2 * tangents[0])
    >>> db.jvp(cube, (2.0,), (1.0,))
    (np.float64(8.0), np.float64(12.0))
    """
    JVP_RULES[func] = jvp


def nondifferentiable(*funcs: Callable[..., Any], reason: str = "declared nondifferentiable") -> None:
    """Declare functions whose results carry no gradient (indices, booleans, shapes), and why."""
    NONDIFFERENTIABLE.update(dict.fromkeys(funcs, reason))


def _implementation(func):
    """What a rule calls on plain values: a primitive's own function, or a NumPy function without
    its ``__array_function__`` dispatch (``np.dot._implementation``: 0.7 us less a call here)."""
    return getattr(func, "__wrapped_primitive__", None) or getattr(func, "_implementation", func)
