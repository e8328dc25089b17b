"""Forward mode through the whole program: dual values and `jvp`.

A `Dual` carries a value and its tangent (a directional derivative ``J·t``, of
the value's shape and dtype).  NumPy hands every operation on it to
``__array_ufunc__``/``__array_function__``, which computes the value on plain
arrays and the tangent at once, eagerly: there is no tape, nothing is kept.
The tangent of ``f(a₁, …, aₙ)`` is found by the first of these that applies
(`tangent_of`), each fact written once:

1. a jvp rule of its own (`registry.defjvp`), written like its formula, where the transposed pullback
   would cost more or not do (``inv``, ``solve``, ``np.pad``, ``var``/``std``, the order statistics,
   ``roots``, ``polyfit``, ``polyval``, ``gradient``, ``unwrap``);
2. a linear function (`registry.deflinear`: reshapes, sums, indexing, FFTs, ...): ``f`` of the
   tangents, a constant array argument given as zeros, with the same keywords;
3. a multilinear one (`registry.defmultilinear`: ``matmul``, ``einsum``, ...): the product
   rule, ``Σᵢ f(a₁, …, tᵢ, …, aₙ)``;
4. an elementwise function of the derivative table (`derivatives.DERIVATIVES`, also a
   `db.defderivative`): ``Σᵢ ∂f/∂aᵢ · tᵢ``, the partials reverse mode and kernels read;
5. any other function with a vjp rule, by transposition: its pullback ``back`` is linear in the
   cotangent, so ``J·t`` is the gradient in ``g`` of ``⟨back(g), t⟩`` (real part of ``Σ back(g)·t``,
   the pairing in which JAX's complex convention transposes), taken by reverse mode at ``g = 0``.

A function with a vjp rule but none of these (a pullback that writes into a buffer) is a clear
error naming it.  Complex values follow JAX: the tangent of a holomorphic ``f`` is ``f'(z) t``.
Inside `db.sum`/`db.broadcast` a dual argument is an active input of the kernel, which computes the
value and the tangent ``Σ ∂f/∂aᵢ · tᵢ`` in one fused pass (the tangents its extra inputs; `kernel_cache.build_kernel`).

Each `jvp` call is one level: nested calls (a jvp of a function taking a jvp) give their duals
increasing levels, and an operation propagates only the tangents of its highest level, treating
duals of outer levels as values (whose own operations carry their tangents), so a closure over an
outer variable is no perturbation confusion.  A rule's plain implementation (``rule.impl``, which does not
dispatch) sees plain values only: where a dual of an outer level or a tracked value is among the arguments, the
function itself is called, and NumPy hands it to that level or tape (`apply_function`, `_call`: the one place where
a mode's values meet a rule's implementation), so every rule's tangent composes with every other mode.
"""

import inspect
import itertools
import warnings

import numpy as np

from . import context, pytree
from .derivatives import DERIVATIVES, UNBOUNDED, tangent_product
from .errors import InPlaceMutationError, ShapeMismatchError, UnsupportedFunctionError, ValueConversionError
from .guards import UFUNC_AT, Guarded, NotReplayableError, holds_view, note_views, untracked
from .numpy_facts import ARRAY_METHODS, FLOAT_SCALARS, as_dtype, astype, getitem, qualified_name
from .operands import (
    OUT_MESSAGE,
    PLAIN_NUMBERS,
    check_ufunc_keywords,
    complex_message,
    complex_valued,
    constant_result,
    sequence_by_position,
    unsupported_message,
)
from .pullbacks import IndexPullback, apply
from .registry import (
    COMPLEX_RULES,
    COMPOSITION,
    JVP_RULES,
    LAZY_FAMILIES,
    MULTILINEAR,
    NONDIFFERENTIABLE,
    OUTPUTS,
    PER_ARGUMENT,
    RULES,
    SAME_RULE,
    SEQUENCE,
    Linear,
    call_with_tracked_keywords,
    complex_rule,
    output_pullbacks,
    register_lazy_rules,
)
from .tracked import Tracked, record_binary

_levels = itertools.count(1)


_enclosing = {}  # level -> the innermost gradient's tape running when that `jvp` call began (None: none)


def new_level():
    """A level for the duals of one `jvp` call, above every earlier one (the outermost: with no singular tangent
    seen yet, `derivatives.UNBOUNDED`)."""
    if not _enclosing:
        UNBOUNDED.seen = False
    level = next(_levels)
    _enclosing[level] = context.ACTIVE_TAPE.get()
    return level


def end_level(level):
    """The `jvp` call of ``level`` has returned."""
    _enclosing.pop(level, None)


def check_enclosing(values, level):
    """A prepared gradient recorded inside the `jvp` call of ``level`` meets its duals (a closure over them): its
    program would replay without their tangents, a silently wrong result: an error.  (`db.gradient` and the other
    entry points carry them: forward over reverse, `reverse._dual_value_and_gradients`.)"""
    enclosing = _enclosing.get(level, False)
    if enclosing is False:  # that jvp call has returned: a stale dual, refused where it is used
        return
    for v in values:
        if type(v) is Tracked and v.tape.recorder is not None and v.tape is not enclosing \
                and (enclosing is None or v.tape.level > enclosing.level):
            raise UnsupportedFunctionError(
                "a prepared gradient (db.prepare_gradient) recorded inside a db.jvp reads that jvp's dual value (a "
                "closure over it), whose tangent a replay cannot see; call db.gradient there instead")


class Dual(Guarded):
    """A value and its tangent: NumPy operations on it compute both (`apply`).

    ``value``: the primal value (plain, or a dual of an outer level); ``tangent``: of its shape and
    dtype; ``level``: the `jvp` call it belongs to.  Conversions that would drop the tangent
    (``float(x)``, ``np.asarray(x)``) are errors, as for tracked values (`guards.Guarded`)."""

    __slots__ = ("value", "tangent", "level", "__weakref__")  # weak: `guards.note_views`
    index = None  # not on a tape (read by `Guarded` only while a prepared gradient is recorded)

    def __init__(self, value, tangent, level):
        self.value = value
        self.tangent = tangent
        self.level = level

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            return _ufunc_method(ufunc, method, inputs, kwargs)
        if kwargs:
            check_ufunc_keywords(ufunc, kwargs)
        return apply_function(ufunc, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if kwargs.get("out") is not None:
            name = qualified_name(func)
            raise InPlaceMutationError(OUT_MESSAGE.format(name=name, example=f"{name}(...)"))
        return apply_function(func, args, kwargs)

    T = property(lambda self: apply_function(np.transpose, (self,), {}))
    real = property(lambda self: apply_function(np.real, (self,), {}) if complex_valued(self.value) else self)
    imag = property(lambda self: apply_function(np.imag, (self,), {}))

    def __getitem__(self, index):
        return apply_function(getitem, (self, index), {})

    def __repr__(self):
        return f"Dual({self.value!r}, tangent={self.tangent!r})"

    __hash__ = None

    def reshape(self, *shape, order="C", copy=None):
        shape = shape[0] if len(shape) == 1 else shape
        keywords = {"order": order} if order != "C" else {}
        return apply_function(np.reshape, (self, shape), keywords)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 else (axes or None)
        return apply_function(np.transpose, (self, axes), {})

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        return apply_function(astype, (self, dtype), {})

    def flatten(self, order="C"):
        return apply_function(np.ravel, (self,), {"order": order} if order != "C" else {}).copy()

    def conj(self):
        return apply_function(np.conjugate, (self,), {}) if complex_valued(self.value) else self

    conjugate = conj


def _operator(func, reflected):
    if reflected:
        return lambda self, other: apply_function(func, (other, self), {})
    return lambda self, other: apply_function(func, (self, other), {})


for _name, _func in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.divide),
                     ("pow", np.power), ("floordiv", np.floor_divide), ("mod", np.remainder), ("matmul", np.matmul)]:
    setattr(Dual, f"__{_name}__", _operator(_func, False))
    setattr(Dual, f"__r{_name}__", _operator(_func, True))
for _name, _func in [("neg", np.negative), ("pos", np.positive), ("abs", np.absolute)]:
    setattr(Dual, f"__{_name}__", lambda self, func=_func: apply_function(func, (self,), {}))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):  # truth values: no tangent
    setattr(Dual, f"__{_name}__",
            lambda self, other, name=f"__{_name}__": getattr(self.value, name)(unwrap_dual(other)))


def _method(func):
    def method(self, *args, **kwargs):
        return apply_function(func, (self,) + args, kwargs)

    method.__name__ = func.__name__
    method.__doc__ = f"Same as ``{qualified_name(func)}(x, ...)``."
    return method


for _name, _func in ARRAY_METHODS:
    setattr(Dual, _name, _method(_func))


def primal(x):
    """The plain value of ``x``, a dual of any level (what ``db.cut`` keeps)."""
    while type(x) is Dual:
        x = x.value
    return x


def unwrap_dual(x):
    """The value under one dual wrapper of ``x`` (``x`` itself if it is not a dual): an outer level's dual stays
    (every level: `primal`)."""
    return x.value if type(x) is Dual else x


def _ufunc_method(ufunc, method, inputs, kwargs):
    """``ufunc.method(...)`` on duals: ``outer`` as the ufunc of reshaped arguments, the others by the rule
    registered on the bound method (``np.add.reduce``: np.sum's), as on the tape."""
    name = f"np.{ufunc.__name__}.{method}"
    if method == "at":  # np.add.at: the message says what to write; y = np.add.at(...) would be wrong
        raise InPlaceMutationError(UFUNC_AT.format(name=name))
    if kwargs.get("out") is not None:
        raise InPlaceMutationError(OUT_MESSAGE.format(name=name, example=f"{name}(...)"))
    if method == "outer" and ufunc.signature is None:
        a, b = inputs
        return ufunc(np.reshape(a, np.shape(a) + (1,) * np.ndim(b)), b, **kwargs)
    if method == "reduceat" and len(inputs) == 2:
        kwargs.pop("indices", None)
    func = getattr(ufunc, method)
    if func not in RULES:
        raise UnsupportedFunctionError(
            f"{name} has no derivative rule; use the NumPy function (np.sum, np.cumsum, np.max, ...) "
            f"or register a rule with db.defvjp({name}, ...)")
    return apply_function(func, inputs, kwargs)


# --- one operation ---------------------------------------------------------------------------------------
def apply_function(func, args, kwargs):
    """``func(*args, **kwargs)`` where duals take part: the value, and its tangent if it is a float."""
    rule = RULES.get(func)
    if rule is None and LAZY_FAMILIES and func not in NONDIFFERENTIABLE and register_lazy_rules(func):
        rule = RULES.get(func)  # SciPy's, registered on first need as on the tape
    kind = rule.kind if rule is not None else None
    if kind == COMPOSITION:  # its NumPy calls each find their own tangent
        return rule.makers(*args, **kwargs)
    if kind == SEQUENCE and not args:
        args, kwargs = sequence_by_position(func, kwargs)
    sequence, rest = (args[0], args[1:]) if kind == SEQUENCE else (args, ())
    level = _top_level(sequence)
    if (rest or kwargs) and _top_level([*rest, *kwargs.values()]) >= max(level, 1):
        if rule is not None and _top_level(kwargs.values()):
            return call_with_tracked_keywords(rule, func, args, kwargs,
                                              [k for k, v in kwargs.items() if _top_level([v])], apply_function)
        raise UnsupportedFunctionError(
            f"{qualified_name(func)} got a dual value after its sequence of arrays (or as a keyword argument of a "
            "function without a rule), where it has no derivative rule; pass a constant (db.cut)")
    positions = [i for i, a in enumerate(sequence) if type(a) is Dual and a.level == level]
    values = [a.value if i in positions else a for i, a in enumerate(sequence)] if positions else list(sequence)
    call_values = [values, *rest] if kind == SEQUENCE else values
    if rule is None:
        if func not in NONDIFFERENTIABLE:
            raise UnsupportedFunctionError(unsupported_message(func))
        ans = func(*[type(a)(map(unwrap_dual, a)) if type(a) in (list, tuple) else a for a in call_values], **kwargs)
        if func is np.sign and complex_valued(ans):
            raise UnsupportedFunctionError("np.sign of a complex value is z / |z|, which is not piecewise constant: "
                                           "write z / np.abs(z) to differentiate it")
        return ans
    on_tape = Tracked in map(type, values)  # a jvp inside a gradient: NumPy hands tracked values to the tape
    if on_tape and positions:
        check_enclosing(values, level)
    if not on_tape and not _top_level(call_values):
        ans = rule.impl(*call_values, **kwargs)
    elif type(func) is np.ufunc and not kwargs and len(values) == 2 and type(values[0]) in _TAPE_OPERANDS \
            and type(values[1]) in _TAPE_OPERANDS:
        ans = record_binary(values[0], values[1], func)  # what NumPy would hand the tape (`Tracked.__array_ufunc__`)
    else:
        ans = func(*call_values, **kwargs)
    if not positions:  # only duals of outer levels: they carried their tangents through the call
        return ans
    if not on_tape:
        return _noting_views(func, sequence, _with_tangent(func, rule, kind, ans, values, call_values, positions,
                                                     sequence, kwargs, level))
    try:
        return _noting_views(func, sequence, _with_tangent(func, rule, kind, ans, values, call_values, positions,
                                                     sequence, kwargs, level))
    except (TypeError, AttributeError) as error:
        if isinstance(error, (UnsupportedFunctionError, NotReplayableError)):  # the latter: a prepared program
            raise  # records this gradient, and leaves it to `db.gradient`
        raise UnsupportedFunctionError(
            f"the tangent of {qualified_name(func)} cannot be computed on values a gradient tracks (a db.jvp inside "
            f"a gradient, reverse over forward): its rule does not run on them ({type(error).__name__}: {error}). "
            "For a Hessian-vector product use db.hvp(f, x, v), which then takes reverse over reverse") from error


def _noting_views(func, arguments, result):
    """``result``, its views of the ``arguments``' arrays noted (`guards.note_views`): np.reshape(x, s), x.T."""
    if holds_view(result):
        note_views(arguments, result if type(result) in (list, tuple) else (result,), func is getitem)
    return result


_TAPE_OPERANDS = PLAIN_NUMBERS | {Tracked}  # a binary ufunc's arguments the tape's `record_binary` takes


def _with_tangent(func, rule, kind, ans, values, call_values, positions, sequence, kwargs, level):
    """The result ``ans`` of `apply_function` with its tangent, from the duals of ``level`` at ``positions``."""
    tangents = [sequence[i].tangent for i in positions]
    if kind == PER_ARGUMENT:
        for i in positions:
            if i >= len(rule.makers) or rule.makers[i] is None:
                raise UnsupportedFunctionError(
                    f"argument {i} of {qualified_name(func)} is not differentiable (an index, axis, shape or "
                    "integer argument) but received a dual value; pass a constant or db.cut(x)")
    if kind == OUTPUTS:
        if not isinstance(ans, (tuple, list)):
            return _dual(ans, _output_tangent(func, rule, ans, 0, values, positions, tangents, kwargs), level)
        duals = [_dual(a, _output_tangent(func, rule, ans, j, values, positions, tangents, kwargs), level)
                 for j, a in enumerate(ans)]
        return type(ans)(duals) if type(ans) in (list, tuple) else type(ans)(*duals)
    if not _is_inexact(ans):
        return constant_result(func, ans)
    tangent = tangent_of(func, rule, ans, call_values, positions, tangents, kwargs)
    return ans if tangent is None else Dual(ans, _like(tangent, ans), level)  # `_dual`, ans known inexact


def _top_level(values):
    """The highest level of the duals among ``values`` (and in lists or tuples among them); 0 if none."""
    level = 0
    for a in values:
        if type(a) is Dual:
            level = max(level, a.level)
        elif type(a) in (list, tuple):
            level = max(level, _top_level(a))
    return level


def _is_inexact(ans):
    return isinstance(ans, (float, complex)) or getattr(getattr(ans, "dtype", None), "kind", None) in ("f", "c")


def _dual(ans, tangent, level):
    """The result ``ans`` with its tangent (None: a constant, returned as it is)."""
    if tangent is None or not _is_inexact(ans):
        return ans
    return Dual(ans, _like(tangent, ans), level)


def _like(t, ans):
    """The tangent ``t`` with ``ans``'s shape and dtype (a NumPy scalar for a scalar result)."""
    if type(t) is np.ndarray and type(ans) is np.ndarray and t.dtype == ans.dtype and t.shape == ans.shape:
        return t
    kind = type(t)
    if kind is type(ans) and (kind in FLOAT_SCALARS or (kind is Tracked and type(t.value) is type(ans.value)
                              and type(t.value) in FLOAT_SCALARS)):  # a float scalar of the result's own type
        return t
    if kind is Tracked and type(ans) is Tracked and type(t.value) is np.ndarray and type(ans.value) is np.ndarray \
            and t.value.dtype == ans.value.dtype and t.value.shape == ans.value.shape:
        return t  # a gradient's value of the result's shape and dtype (reverse over forward: `db.hvp`)
    if type(ans) is Tracked and kind is type(ans.value) and (kind in FLOAT_SCALARS or (
            kind is np.ndarray and t.dtype == ans.value.dtype and t.shape == ans.value.shape)):
        return t  # a constant tangent of a tracked result, as it is (`db.hvp`'s x[1:]: the slices of v)
    bare = untracked(ans)
    dtype, shape = np.result_type(bare), np.shape(bare)
    if isinstance(t, Guarded) or isinstance(ans, Guarded):
        # a nested jvp's, or a gradient's (reverse over forward): NumPy functions carry or record what they compute
        if type(t) is Tracked and np.result_type(untracked(t)) != dtype:
            t = _tracked_like(t, dtype)
        return t if np.shape(untracked(t)) == shape else np.broadcast_to(t, shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        t = np.asarray(t, dtype)
    if t.shape != shape:
        t = np.broadcast_to(t, shape).copy()
    return t if isinstance(ans, np.ndarray) else t[()]


def _tracked_like(t, dtype):
    """A tangent ``t`` tracked by a gradient cast to the result's ``dtype`` (the tape records the cast)."""
    if np.iscomplexobj(untracked(t)) and dtype.kind != "c":
        t = np.real(t)
    return t.astype(dtype) if np.result_type(untracked(t)) != dtype else t


# --- the tangent of one result -----------------------------------------------------------------------------
def tangent_of(func, rule, ans, values, positions, tangents, kwargs):
    """``J·t`` of ``ans = func(*values, **kwargs)`` for the tangents of the arguments at ``positions`` (of
    the sequence, for a sequence rule), by the first way of the module's list that applies."""
    jvp = JVP_RULES.get(func)
    if type(jvp) is Linear:
        return _linear(func, rule, jvp, values, positions, tangents, kwargs)
    if jvp is MULTILINEAR:
        return _multilinear(func, rule, values, positions, tangents, kwargs)
    if COMPLEX_RULES.get(func) is not SAME_RULE \
            and (complex_valued(ans) or any(map(complex_valued, tangents)) or _any_complex(values)):  # complex values
        rule = complex_rule(func)
        if rule is None:
            raise UnsupportedFunctionError(complex_message(func))
        # not holomorphic: its own jvp and its table partials are for real values
        return transposed(func, rule, ans, values, positions, tangents, kwargs)
    if jvp is not None:
        return jvp(_aligned(positions, tangents, len(values)), ans, *values, **kwargs)
    partials = DERIVATIVES.get(func)
    elementwise = isinstance(func, np.ufunc) or (hasattr(func, "__wrapped_primitive__") and not kwargs)
    if partials is not None and elementwise and rule.kind == PER_ARGUMENT:  # a ufunc, or a db.defderivative
        return _elementwise(func, partials, ans, values, positions, tangents)
    return transposed(func, rule, ans, values, positions, tangents, kwargs)


def _any_complex(values):
    """Whether a complex array or number is among ``values`` (or in a list or tuple among them): a dual of an
    outer level or a value a gradient tracks too (second order), whose rule must be the complex one as well."""
    for v in values:
        if type(v) in (list, tuple):
            if _any_complex(v):
                return True
        elif isinstance(v, complex) or (isinstance(v, (np.ndarray, np.generic, Guarded)) and v.dtype.kind == "c"):
            return True
    return False


def _aligned(positions, tangents, n):
    """One tangent per argument, None for a constant one."""
    aligned = [None] * n
    for i, t in zip(positions, tangents):
        aligned[i] = t
    return aligned


def _linear(func, rule, linear, values, positions, tangents, kwargs):
    """``f`` of the tangents: a dual argument by its tangent, a constant data argument (one the rule
    differentiates, or one `deflinear` names) by zeros, the rest (axes, shapes, indices) as it is."""
    if rule.kind == SEQUENCE:
        sequence, *rest = values
        arrays = [np.zeros_like(untracked(a)) for a in sequence]
        for i, t in zip(positions, tangents):
            arrays[i] = t
        return _call(func, rule, [type(sequence)(arrays), *rest], kwargs)
    names, data = _data_parameters(func, rule, linear)
    args = [np.zeros_like(untracked(a)) if i < len(names) and names[i] in data and a is not None
            and i not in positions else a for i, a in enumerate(values)]  # a dual's zeros: its tangent, below
    if kwargs:
        kwargs = {k: np.zeros_like(untracked(v)) if k in data and v is not None else v for k, v in kwargs.items()}
    for i, t in zip(positions, tangents):
        args[i] = t
    return _call(func, rule, args, kwargs)


def _data_parameters(func, rule, linear):
    """``(names, data)``: ``func``'s parameter names and those that hold data (``linear.constants``, and for a
    rule with a maker per argument those it differentiates; outputs rules too: np.linspace), found once per
    rule (x[i] in a loop: 2 us a step less)."""
    key = (func, rule, linear)  # a rule registered again is another key
    found = _DATA_PARAMETERS.get(key)
    if found is None:
        names = _parameters(func)
        data = set(linear.constants)
        if rule.kind in (PER_ARGUMENT, OUTPUTS):
            data.update(name for name, maker in zip(names, rule.makers) if maker is not None)
        found = _DATA_PARAMETERS[key] = (names, frozenset(data))
    return found


_DATA_PARAMETERS = {}


def _call(func, rule, args, kwargs):
    """``func(*args, **kwargs)``: by the rule's implementation on plain values, by ``func`` itself where a
    gradient tracks one or an outer jvp's dual is one (NumPy hands it to the tape, or to that level)."""
    for a in itertools.chain(args, kwargs.values()):
        if isinstance(a, Guarded) or (type(a) in (list, tuple) and any(isinstance(b, Guarded) for b in a)):
            return func(*args, **kwargs)
    return rule.impl(*args, **kwargs)


_PARAMETERS = {}


def _parameters(func):
    """The names of ``func``'s parameters, in order (none known for a builtin without a signature)."""
    names = _PARAMETERS.get(func)
    if names is None:
        try:
            names = tuple(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            names = ()
        _PARAMETERS[func] = names
    return names


def _multilinear(func, rule, values, positions, tangents, kwargs):
    """The product rule: ``Σᵢ f(a₁, …, tᵢ, …, aₙ)`` over the dual arguments (of the sequence, for
    ``multi_dot``)."""
    total = None
    for i, t in zip(positions, tangents):
        if rule.kind == SEQUENCE:
            sequence = list(values[0])
            sequence[i] = t
            args = [sequence, *values[1:]]
        else:
            args = list(values)
            args[i] = t
        term = _call(func, rule, args, kwargs)
        total = term if total is None else total + term
    return total


def _elementwise(func, partials, ans, values, positions, tangents):
    """``Σᵢ ∂f/∂aᵢ · tᵢ`` from the derivative table."""
    typed = None  # the arguments a partial's formula reads (`as_dtype`), once one does
    total = None
    for i, t in zip(positions, tangents):
        d = partials[i] if i < len(partials) else None
        if d is None:
            raise UnsupportedFunctionError(
                f"argument {i} of {qualified_name(func)} is not differentiable (an index or integer argument) "
                "but received a dual value; pass a constant or db.cut(x)")
        if callable(d):
            typed = as_dtype(values, np.result_type(untracked(ans))) if typed is None else typed
            term = tangent_product(func, t, d(ans, *typed))
        else:
            term = t if d == 1 else -t if d == -1 else t * d
        total = term if total is None else total + term
    return total


def _output_tangent(func, rule, ans, j, values, positions, tangents, kwargs):
    """The tangent of output ``j`` of a tuple-valued ``func`` whose arguments at ``positions`` carry ``tangents``
    (None: a constant): its declared forward rule, or the sum of its pullbacks' transposes."""
    out = ans[j] if isinstance(ans, (tuple, list)) else ans
    if not _is_inexact(out):
        return None
    jvp = JVP_RULES.get(func)
    complex_ = complex_valued(out) or _any_complex([values[i] for i in positions])
    if type(jvp) is Linear:
        out_tangents = _linear(func, rule, jvp, values, positions, tangents, kwargs)
        return out_tangents[j] if isinstance(ans, (tuple, list)) else out_tangents
    if complex_ and COMPLEX_RULES.get(func) is not SAME_RULE:
        rule = complex_rule(func)
        if rule is None:
            raise UnsupportedFunctionError(complex_message(func))
    elif jvp is not None and positions == [0]:
        return jvp(j, tangents[0], ans, *values, **kwargs)
    backs = output_pullbacks(func, rule.makers, j, ans, values, positions, kwargs)
    if backs is None:
        return None
    total = None
    for back, t in zip(backs, tangents):
        term = _transpose(func, back, out, t)
        total = term if total is None else total + term
    return total


def transposed(func, rule, ans, values, positions, tangents, kwargs):
    """``Σᵢ Jᵢ·tᵢ`` by transposing the pullback of each dual argument (see the module's list, 5)."""
    backs = rule.pullbacks(func, ans, values, positions, kwargs)
    total = None
    for back, t in zip(backs, tangents):
        term = _transpose(func, back, ans, t)
        total = term if total is None else total + term
    return total


def _transpose(func, back, out, t):
    """``J·t`` from the pullback ``back`` (``g ↦ Jᵀg``, linear in ``g``): the gradient in ``g`` of the real
    part of ``Σ back(g)·t`` at ``g = 0``, taken on a tape of its own.  A pullback that is not NumPy code
    traceable in ``g`` (it scatters with np.bincount, calls SciPy) is transposed densely instead, one call per
    element of a small result (``J·t``'s element k is ``⟨back(e_k), t⟩``); a large one is a clear error."""
    gradient, = REVERSE_MODE  # the reverse mode this transposes (from above: `reverse` sets it)
    g0 = np.zeros(np.shape(untracked(out)), np.result_type(untracked(out)))

    def pairing(g):
        product = np.sum(apply(back, g) * t)
        return np.real(product) if complex_valued(product) else product

    try:
        if type(back) is IndexPullback:
            raise UnsupportedFunctionError("the pullback adds into a buffer")
        return gradient(pairing, g0)
    except (UnsupportedFunctionError, ValueConversionError, InPlaceMutationError) as error:
        if g0.size > DENSE_TRANSPOSE_LIMIT:
            raise UnsupportedFunctionError(
                f"the tangent of {qualified_name(func)} is computed by transposing its pullback, which is not "
                f"traceable ({type(error).__name__}: {error}), and its result has more than "
                f"{DENSE_TRANSPOSE_LIMIT} elements to transpose one by one; give it a jvp rule beside its vjp "
                "rule (db.defjvp), or declare it linear (db.deflinear)") from error
    tangent = np.zeros(g0.shape, np.result_type(g0, t))
    flat = tangent.reshape(-1)
    for k in range(g0.size):
        e = np.zeros_like(g0)
        e.reshape(-1)[k] = 1
        flat[k] = np.real(np.sum(apply(back, e) * t)) if not complex_valued(tangent) else _complex_entry(back, e, t)
    return tangent


def _complex_entry(back, e, t):
    """Element k of a complex ``J·t`` densely: Re(v) pairs with the real unit at k, -Im(v) with the imaginary
    one (Re(i v) = -Im v)."""
    return np.real(np.sum(apply(back, e) * t)) - 1j * np.real(np.sum(apply(back, 1j * e) * t))


DENSE_TRANSPOSE_LIMIT = 256  # result elements: one pullback call each
REVERSE_MODE = []  # [gradient]: `reverse.gradient`, which imports this module and plugs itself in here


# --- the public entry point ----------------------------------------------------------------------------------
def check_tangent(leaf, tangent, position, k):
    """The tangent given for a primal leaf (a dual of an outer `jvp` in a nested call), as an array of its
    shape and dtype (a clear error otherwise)."""
    bare = untracked(leaf)  # a value a gradient tracks (reverse over forward) included
    if tangent is None:
        return np.zeros_like(bare)
    shape = np.shape(bare)
    if np.shape(tangent) != shape:
        where = "" if k is None else f" (leaf {k})"
        raise ShapeMismatchError(
            f"the tangent of argument {position}{where} has shape {np.shape(tangent)}, its primal {shape}; "
            "give each primal a tangent of its own shape")
    if not complex_valued(bare) and np.iscomplexobj(untracked(tangent)):
        raise ShapeMismatchError(
            f"the tangent of argument {position} is complex, its primal real; give a real tangent")
    if isinstance(tangent, Guarded):  # of an outer jvp, or tracked by a gradient: cast where it is recorded
        return _like(tangent, leaf)
    t = np.asarray(tangent, np.result_type(bare))
    return t if isinstance(bare, np.ndarray) else t[()]


pytree.leaf_type(Dual)
context.FORWARD[:] = [Dual, apply_function]  # a `db.primitive` called on a dual value computes its tangent here
