"""Tracked arrays that record NumPy operations on a tape.

A `Tracked` wraps the value of something derived from a differentiated input.
NumPy hands every operation on it to ``__array_ufunc__``/``__array_function__``;
the operation runs on plain values and, if its rule exists, appends one record
``(parent indices, pullbacks)`` to the tape (a Wengert list, `tape.Tape`) by `record_operation`,
or, for the arithmetic operators, by its fast path `record_binary`.  Plain arrays are constants: they are
never recorded and cost nothing in the backward pass.  A total whose value may go unread is a `Pending`,
computed when first read; `primitive` makes a user function one operation with its own rule.
"""

import functools
import operator
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import pytree
from .context import ACTIVE_TAPE, FORWARD, JVP_DEPTH
from .derivatives import SMOOTH
from .errors import (
    InPlaceMutationError,
    StaleValueError,
    UnsupportedFunctionError,
    ValueConversionError,
)
from .expr import Sym
from .guards import RECORDER, UFUNC_AT, Guarded, NotReplayableError, holds_view, note_views
from .lazy import is_chunked, not_chunkwise
from .numpy_facts import ARRAY_METHODS, FLOAT_SCALARS, astype, getitem, qualified_name
from .operands import (
    CONSTANT_OPERANDS,
    OUT_MESSAGE,
    check_ufunc_keywords,
    complex_message,
    complex_valued,
    constant_result,
    float_valued,
    sequence_by_position,
    unsupported_message,
)
from .pullbacks import (
    IndexPullback,
    RealPart,
    scalar_pullback,
)
from .registry import (
    COMPOSITION,
    LAZY_FAMILIES,
    NONDIFFERENTIABLE,
    OUTPUTS,
    PER_ARGUMENT,
    RULES,
    SEQUENCE,
    call_with_tracked_keywords,
    complex_rule,
    output_pullbacks,
    register_lazy_rules,
)

LONG_TAPE = 1_000  # records; a shorter tape is recorded and swept in about a millisecond, before a collection matters


def not_twice_differentiable(func, error):
    """The error for a rule whose pullback cannot run on values tracked by an outer gradient (``error``)."""
    name = qualified_name(func) if callable(func) else str(func)
    return UnsupportedFunctionError(
        f"the derivative rule of {name} cannot be differentiated again (a gradient of a gradient through it): "
        f"its pullback does not run on tracked values ({type(error).__name__}: {error}). Differentiate through "
        f"{name} once only (db.cut its argument in the outer function), or write it with functions whose "
        "rules can be."
    )


def unwrap_tracked(x):
    """The value under one tracked wrapper of ``x`` (``x`` itself if it is not tracked): a nested gradient's value
    stays tracked by the outer tapes (docs/design.md, "The value under a wrapper")."""
    return x.value if type(x) is Tracked else x


def record_operation(func, args, kwargs):
    """Run ``func`` on plain values and, if an argument is tracked, record it: the one recording path.

    Every NumPy call, method and operator on a tracked value comes here, but for `record_binary`, the
    arithmetic operators' declared specialisation, which hands on every case it does not specialise.
    While a prepared gradient is recorded, its recorder (`prepared.Recorder`) is asked at three
    points: how each argument is referred to, which constants to hold, and the step each result makes.
    """
    rule = RULES.get(func)
    if rule is None and LAZY_FAMILIES and func not in NONDIFFERENTIABLE and register_lazy_rules(func):
        rule = RULES.get(func)  # a SciPy function met before SciPy's rules were registered
    kind = rule.kind if rule is not None else None
    x = args[0] if args else None
    if kind == PER_ARGUMENT and not kwargs and type(x) is Tracked and (tape := x.tape).recorder is None \
            and not tape.complex and not tape.level and rule.makers and rule.makers[0] is not None \
            and (len(args) == 1 or TRACKED.isdisjoint(map(type, args[1:]))):
        # Specialised: only the first argument tracked, no keywords (np.exp(x), x[i], np.sum(x, 0)).
        # np.sin of a scalar records in 3.5 us here, 5.2 us on the general path below.
        if tape.closed:
            tape_checked(None, tape)
        rest = args[1:]
        if not rest and TOTALS.get(func) is rule and type(v := x.value) is np.ndarray and v.dtype.kind == "f" \
                and lazy_totals(tape, v.size):  # its pullback reads no value: computed when read (`Pending`)
            back = edge_of(x, rule.makers[0](None, v))
            return tape.record(Total(functools.partial(rule.plain, v), v.dtype, tape), ((x.index, back),), func,
                               Pending)
        ans = rule.plain(x.value, *rest)
        if type(ans) not in FLOAT_SCALARS and not float_valued(ans):
            return _not_float(tape, func, args, ans)
        if rest and rule.keeps_arguments:
            keep_constants(tape, rest)
        back = edge_of(x, rule.makers[0](ans, x.value, *rest))  # first: settling a view moves its index
        t = tape.record(ans, ((x.index, back),), func)
        if type(ans) is np.ndarray and (ans.base is not None or ans is x.value):  # a view (np.reshape, x.T)
            note_views(args, (t,), func is getitem)
        return t
    if kind == PER_ARGUMENT and not kwargs and (recorder := RECORDER.get()) is not None:
        t = recorder.record_per_argument(func, rule, args)  # the common step of a recording, its path specialised
        if t is not NotImplemented:
            return t
    if kind == COMPOSITION:  # its NumPy calls are recorded one by one
        return rule.makers(*args, **kwargs)
    if kind == SEQUENCE and not args:
        args, kwargs = sequence_by_position(func, kwargs)
    sequence, rest = (args[0], args[1:]) if kind == SEQUENCE else (args, ())
    recorder = nested = RECORDER.get()
    if recorder is not None and _nested_in_recording(recorder.tape, sequence):
        recorder = None  # an operation of a gradient taken inside the recorded function: its own tape records it
    if (kwargs or rest) and (rule is not None or recorder is not None) \
            and not TRACKED.isdisjoint(map(type, [*kwargs.values(), *rest])):
        if nested is not None and all(v.tape is not nested.tape or v.index in nested.inactive
                                      for v in [*kwargs.values(), *rest] if type(v) is Tracked):
            raise NotReplayableError(f"{qualified_name(func)} got a value a prepared program traces (no gradient) "
                                     "as a keyword argument")  # its recording left to the plain path
        if rule is not None and not TRACKED.isdisjoint(map(type, kwargs.values())):
            return call_with_tracked_keywords(rule, func, args, kwargs,
                                              [k for k, v in kwargs.items() if type(v) in TRACKED], record_operation)
        raise UnsupportedFunctionError(
            f"{qualified_name(func)} got a tracked value after its sequence of arrays (or as a keyword argument "
            "of a function without a rule), where it has no derivative rule; pass a constant (db.cut)"
        )
    if recorder is None:
        values, active, tape = _unwrap(sequence)
    else:
        values, refs, traced, active = recorder.references(func, sequence)
        tape = recorder.tape if traced else None
    if rule is None and func not in NONDIFFERENTIABLE and (active or tape is None):  # else a plain step
        raise UnsupportedFunctionError(unsupported_message(func))  # on traced values that carry no gradient
    call_values = [values, *rest] if kind == SEQUENCE else values
    if rule is None:
        ans = func(*call_values, **kwargs) if nested is not None \
            else func(*_strip(call_values), **_strip_dict(kwargs))
    elif tape is not None and tape.level:  # values may be tracked by an outer gradient: NumPy hands them on
        ans = func(*call_values, **kwargs)
    else:
        ans = rule.impl(*call_values, **kwargs) if kwargs else rule.plain(*call_values)
    if type(ans) is FORWARD[0]:  # a dual among the arguments (reverse over forward): see `_not_float`
        return FORWARD[1](func, args, kwargs)
    if type(ans) is not np.ndarray and is_chunked(ans):  # a Dask array met a tracked value: Dask took over
        raise not_chunkwise(func)
    if tape is None:
        return ans
    if rule is None:
        if func is np.sign and complex_valued(ans):
            raise UnsupportedFunctionError(
                "np.sign of a complex value is z / |z|, which is not piecewise constant: write z / np.abs(z) "
                "(0 at z = 0: np.where(z == 0, 0, z / np.abs(z))) to differentiate it")
        active = []  # a function whose results carry no gradient
    kept = bool(active) and rule.keeps_arguments
    if recorder is not None:
        recorder.hold(refs, kept)
    elif kept:
        keep_constants(tape, sequence)
    if kept and (rest or kwargs):
        keep_constants(tape, [*rest, *kwargs.values()])
    parents = [sequence[i] for i in active]
    if kind == OUTPUTS and isinstance(ans, (tuple, list)):  # else one array (svd without u, v): output 0
        results = [_record_result(tape, func, rule, j, a, ans, call_values, kwargs, parents, recorder, active)
                   for j, a in enumerate(ans)]
        outcome = type(ans)(results) if type(ans) in (list, tuple) else type(ans)(*results)  # a named tuple: fields
    else:
        results = [_record_result(tape, func, rule, None, ans, ans, call_values, kwargs, parents, recorder, active)]
        outcome = results[0]
    if (ans.base is not None) if type(ans) is np.ndarray else holds_view(ans):  # a view: x.T, np.split(x, 2)
        note_views(sequence, results, func is getitem)
    if recorder is not None:
        recorder.step(func, rule, refs, rest, kwargs, active, results, ans)
    return outcome


def _nested_in_recording(recorded, values):
    """Whether an operation is one of a gradient taken inside the function a prepared gradient records (a value
    of a deeper tape than the ``recorded`` one among ``values``): that gradient's tape records it, and what it
    computes on its values, which the recorded tape traces, becomes the recording's steps."""
    for a in values:
        kind = type(a)
        if kind is Tracked:
            if a.tape.level > recorded.level:
                return True
        elif (kind is list or kind is tuple) and _nested_in_recording(recorded, a):
            return True
    return False


def _record_result(tape, func, rule, j, a, ans, values, kwargs, parents, recorder, active):
    """One result ``a`` of ``func`` (output ``j`` of a tuple result, else None) as the tape carries it:
    tracked with one pullback per parent if it is a real float and depends on an active argument;
    where complex values take part, by `_record_complex`; else plain (an integer or a boolean: no
    gradient to lose; an error for object or text), except that a recorder keeps every array result
    traced (a replay recomputes it)."""
    floating = getattr(a, "dtype", None) is not None and a.dtype.kind == "f"
    if parents and (tape.complex or not floating) \
            and (complex_valued(a) or (tape.complex and _any_complex(values, kwargs))):
        return _record_complex(tape, func, rule, j, a, ans, values, kwargs, parents, recorder, active)
    if parents and not floating:
        a = constant_result(func, a)
    if recorder is not None and not isinstance(a, (np.ndarray, np.generic)):
        return a  # a plain result (a shape, a count): the recorder guards it by equality
    if not (parents and floating):
        return a if recorder is None else recorder.traced(a, func)
    backs = _pullbacks(tape, func, rule, j, ans, values, active, kwargs)
    if backs is None:  # the rule declares this output a constant
        return a if recorder is None else recorder.traced(a, func)
    return tape.record(a, edges_of(parents, backs), func)


def _pullbacks(tape, func, rule, j, ans, values, active, kwargs):
    """The pullbacks ``rule``'s makers give the ``active`` arguments for result ``ans`` (output ``j`` of a tuple,
    else None); None for an output its rule declares constant.  On a nested tape a maker that cannot run on
    tracked values is the error naming the rule (`not_twice_differentiable`)."""
    try:
        if j is None:
            return rule.pullbacks(func, ans, values, active, kwargs)
        return output_pullbacks(func, rule.makers, j, ans, values, active, kwargs)
    except (TypeError, AttributeError) as error:
        if not tape.level or isinstance(error, (UnsupportedFunctionError, NotReplayableError)):
            raise
        raise not_twice_differentiable(func, error) from error


def _record_complex(tape, func, rule, j, a, ans, values, kwargs, parents, recorder, active):
    """One result ``a`` of ``func`` on tracked values where complex values take part (an argument or ``a``),
    recorded with ``func``'s complex rule (`registry.complex_rule`: JAX's convention, in which the
    pullback of a holomorphic function is ``g`` times its derivative).  A real parent's cotangent is
    the real part of what the rule gives (`RealPart`), so a real value's cotangent stays real."""
    rule = complex_rule(func)
    if rule is None:
        raise UnsupportedFunctionError(complex_message(func))
    tape.complex = True
    if type(a) is complex:  # the tape holds NumPy values
        a = np.complex128(a)
        ans = a if j is None else ans
    backs = _pullbacks(tape, func, rule, j, ans, values, active, kwargs)
    if backs is None:  # the rule declares this output a constant
        return a if recorder is None else recorder.traced(a, func)
    backs = [back if complex_valued(p.value) or type(back) is IndexPullback else RealPart(back)
             for p, back in zip(parents, backs)]
    return tape.record(a, edges_of(parents, backs), func)


def _any_complex(values, kwargs):
    """Whether a complex value is among ``values`` (or in a list or tuple among them) or ``kwargs``'s (a value
    tracked by an outer gradient too)."""
    for v in [*values, *kwargs.values()]:
        kind = type(v)
        if kind is list or kind is tuple:
            if _any_complex(v, {}):
                return True
        elif kind is complex or (isinstance(v, (np.ndarray, np.generic, Tracked)) and v.dtype.kind == "c"):
            return True
    return False


def _unwrap(sequence):
    """The plain values of ``sequence``, the positions of its tracked values and their one tape
    (a clear error for a stale value or values of two evaluations)."""
    values = list(sequence)
    positions = []
    tape = None
    for i, a in enumerate(sequence):
        if type(a) is Pending:  # an argument NumPy did not dispatch on (np.full_like's fill value)
            settle_total(a)
        if type(a) is Tracked:
            if a.tape is not tape or tape.closed:
                if tape is not None and a.tape.level != tape.level:
                    return _unwrap_nested(sequence)
                tape = tape_checked(tape, a.tape)
            positions.append(i)
            values[i] = a.value
    return values, positions, tape


def _unwrap_nested(sequence):
    """`_unwrap` of values of nested gradients: those of the innermost tape are its arguments; the others,
    tracked on outer tapes, are constants of this operation, passed on as they are so that the outer
    tapes record what is computed from them."""
    tape = innermost([a.tape for a in sequence if type(a) is Tracked])
    positions = [i for i, a in enumerate(sequence) if type(a) is Tracked and a.tape is tape]
    values = [a.value if i in positions else a for i, a in enumerate(sequence)]
    return values, positions, tape


def innermost(tapes):
    """The tape of the innermost gradient evaluation among ``tapes``, open tapes of nested evaluations (each of
    its own level); a clear error for a stale value or for values of two evaluations at one level."""
    by_level = {}
    for tape in tapes:
        if tape.closed:
            tape_checked(None, tape)
        if by_level.setdefault(tape.level, tape) is not tape:
            tape_checked(tape, by_level[tape.level])
    return by_level[max(by_level)]


def keep_constants(tape, args):
    """`Tape.keep` every constant array among ``args`` (and in lists or tuples among them)."""
    for a in args:
        kind = type(a)
        if kind is np.ndarray:
            tape.keep(a)
        elif kind is list or kind is tuple:
            keep_constants(tape, a)


def _dispatch(func, args, kwargs):
    """A NumPy call on tracked values: `record_binary` for two tracked arguments, else `record_operation`."""
    if not kwargs and len(args) == 2 and type(args[0]) is Tracked and type(args[1]) is Tracked:
        return record_binary(args[0], args[1], func)
    return record_operation(func, args, kwargs)


def record_binary(x, y, func, recording=None):
    """``func(x, y)``, and ``x op y`` for Tracked's arithmetic operators: `record_operation` specialised
    for a rule with one maker per argument (``rule.binary``), no keywords and no recorder (or ``recording``, the
    tape's recorder, which has checked that both arguments are real and records the step itself:
    `prepared.Recorder.record_per_argument`), since a scalar model's gradient pays this once per operator.  A
    scalar result takes the pullbacks its rule declares (``scalar_backs``; ``bilinear``: the other argument); a
    scalar product of views holds its partials for their bases (`Tape.view_products`).  Everything else goes to
    `record_operation`.  (``func`` comes third: the operators are this very function with ``func`` bound, see
    `_arithmetic`.)"""
    rule = RULES.get(func)
    tape = x.tape if type(x) is Tracked else y.tape
    if rule is None or not rule.binary or tape.recorder is not recording or tape.complex or tape.level:
        if rule is not None and rule.binary and tape.recorder is not None:  # a prepared gradient's recording
            t = tape.recorder.record_per_argument(func, rule, (x, y))
            if t is not NotImplemented:
                return t
        return record_operation(func, (x, y), {})
    if tape.closed:
        tape_checked(None, tape)
    if type(x) is Tracked and type(y) is Tracked:
        if y.tape is not tape:
            if y.tape.level != tape.level:  # nested gradients: the outer value is a constant of the inner
                return record_operation(func, (x, y), {})
            tape_checked(tape, y.tape)
        xv, yv = x.value, y.value
        ans = rule.plain(xv, yv)
        scalar = type(ans) in FLOAT_SCALARS
        if scalar and rule.bilinear and x.slice_index is not None and y.slice_index is not None:
            index = len(tape.records)  # a dot of two slices in a loop: no edges to sweep
            products = tape.view_products[x.index]
            products.append(x.slice_index)  # three appends: half the time of += (x.slice_index, index, yv) here
            products.append(index)
            products.append(yv)
            products = tape.view_products[y.index]
            products.append(y.slice_index)
            products.append(index)
            products.append(xv)
            record = func
        else:
            if scalar and rule.bilinear:
                backs = (scalar_pullback(yv), scalar_pullback(xv))
            elif scalar and rule.scalar_backs is not None:
                backs = rule.scalar_backs
            elif scalar and rule.scalar_partials is not None:  # 1.4 us a record, against 3.0 us through the makers
                dx, dy = rule.scalar_partials
                back = rule.scalar_back
                backs = (back(dx(ans, xv, yv)), back(dy(ans, xv, yv)))
            elif scalar or float_valued(ans):
                backs = _unbroadcast_backs(rule, func, ans, xv, yv)
                if backs is None:
                    backs = (rule.makers[0](ans, xv, yv), rule.makers[1](ans, xv, yv))
            else:
                return _not_float(tape, func, (x, y), ans)
            bx, by = backs
            if x.slice_index is not None or y.slice_index is not None:
                bx, by = edge_of(x, bx), edge_of(y, by)  # first: settling a view moves its index
            record = ((x.index, bx), (y.index, by)), func
    else:  # one tracked argument, at position k
        t, k, values, constant = (x, 0, (x.value, y), y) if type(x) is Tracked else (y, 1, (x, y.value), x)
        if type(constant) is np.ndarray:  # a pullback may keep it
            tape.keep(constant)
        ans = rule.plain(*values)
        scalar = type(ans) in FLOAT_SCALARS
        if scalar and rule.bilinear:
            back = scalar_pullback(values[1 - k])
        elif scalar and rule.scalar_backs is not None:
            back = rule.scalar_backs[k]
        elif scalar and rule.scalar_partials is not None:
            back = rule.scalar_back(rule.scalar_partials[k](ans, *values))
        elif scalar or float_valued(ans):
            back = _unbroadcast_back(rule, func, ans, t.value, k, constant)
            if back is NotImplemented:
                back = rule.makers[k](ans, *values)
        else:
            return _not_float(tape, func, (x, y), ans)
        if t.slice_index is not None and scalar and rule.bilinear and type(back) is np.ndarray:
            products = tape.view_products[t.index]  # as for two views
            products.append(t.slice_index)
            products.append(len(tape.records))
            products.append(back)
            record = func
        else:
            if t.slice_index is not None:
                back = edge_of(t, back)  # first: settling a view moves its index
            record = ((t.index, back),), func
    records = tape.records  # tape.record(ans, edges, func) inline: a frame less per operator
    index = len(records)
    records.append(record)
    if index == LONG_TAPE - 1:
        tape.grew_long()
    out = new_tracked(Tracked)
    out.value = ans
    out.tape = tape
    out.index = index
    out.slice_index = None
    return out


def _unbroadcast_backs(rule, func, ans, xv, yv):
    """The pullbacks of two tracked arrays of the float array ``ans``'s shape (no broadcasting) as the makers give
    them, without a maker's call (about 1 us each): a constant partial's fixed one, or for ``x * y`` (smooth,
    so never a strong product) the other argument; else None (the makers decide)."""
    if type(ans) is not np.ndarray or type(xv) is not np.ndarray or type(yv) is not np.ndarray \
            or xv.shape != ans.shape or yv.shape != ans.shape:
        return None
    if rule.scalar_backs is not None:
        return rule.scalar_backs
    if rule.bilinear and func in SMOOTH:
        return yv, xv
    return None


def _unbroadcast_back(rule, func, ans, value, k, constant):
    """`_unbroadcast_backs` for one tracked argument ``value`` at position ``k`` beside a number or array
    ``constant`` (``2.0 * x``, ``x - c``); `NotImplemented` where the maker decides (None is a pullback)."""
    if type(ans) is not np.ndarray or getattr(value, "shape", None) != ans.shape:
        return NotImplemented
    if rule.scalar_backs is not None:
        return rule.scalar_backs[k]
    if rule.bilinear and func in SMOOTH and type(constant) in CONSTANT_OPERANDS:
        partial = ans.dtype.type(constant) if type(constant) is float or type(constant) is int else constant
        return scalar_pullback(partial)  # (a float16 partial is no factor the sweep takes)
    return NotImplemented


def edges_of(tracked, backs):
    """The edges ``(parent index, pullback)`` (see `edge_of`) of the ``tracked`` arguments of one record."""
    edges = []
    for t, back in zip(tracked, backs):
        back = edge_of(t, back)  # first: settling a view moves its index
        edges.append((t.index, back))
    return tuple(edges)


def edge_of(t, back):
    """The pullback a record keeps for its argument ``t``: ``back`` itself, or for a view (an
    unrecorded slice), whose cotangent goes into its base, the pair ``(index, back)``, which
    the sweep applies in turn.  A consumer's own `IndexPullback` (a slice of a slice) is not
    paired so: that view is recorded after all (`settle`).
    Read the parent's ``t.index`` after this call.
    """
    if t.slice_index is None:
        return back
    if type(back) is IndexPullback:
        settle(t)
        return back
    return (t.slice_index, back)


def settle(t):
    """Record the view ``t`` as an ordinary tape value (a getitem of its base), in place."""
    if t.slice_index is not None:
        back = IndexPullback(t.slice_index, *t.tape.view_bases[t.index])
        t.index, t.slice_index = t.tape.record(t.value, ((t.index, back),), getitem).index, None
    return t


BASIC_INDEX = {int, slice, type(None), type(Ellipsis)}  # basic indexing: a view of an array


def tape_checked(current, tape):
    """``tape`` if it may join ``current`` (None: no tape yet); a clear error for stale or mixed values."""
    if tape.closed:
        raise StaleValueError(
            "a tracked value from a finished gradient evaluation was used again; do not keep "
            "values from inside a differentiated function (store db.cut(x) instead)"
        )
    if current is not None:
        raise StaleValueError(
            "tracked values of two gradient evaluations that are not nested one in the other met in one "
            "operation (two threads, or a value kept from another evaluation); pass the value as an argument "
            "of the gradient that uses it, or db.cut(x) if it is a constant there"
        )
    return tape


def tape_of(parents):
    """The one open tape all ``parents`` belong to; a clear error for stale or mixed values."""
    tape = None
    for p in parents:
        if p.tape is not tape:
            tape = tape_checked(tape, p.tape)
    return tape


def _not_float(tape, func, args, ans):
    """A result of ``func`` on tracked values that is not a real float, from a fast path: a complex one is
    recorded by `record_operation`'s general path, which the tape takes from now on; a dual value (a tracked
    value met a `db.jvp`'s dual: reverse over forward) by forward mode, whose operations the tape records; else
    a constant (a Dask array, which Dask made of a tracked value's, is an error: `chunked`)."""
    if type(ans) is FORWARD[0]:
        return FORWARD[1](func, args, {})
    if is_chunked(ans):
        raise not_chunkwise(func)
    if complex_valued(ans):
        tape.complex = True
        return record_operation(func, args, {})
    return constant_result(func, ans)


def _strip(args):
    """The plain values of ``args`` and of the lists and tuples among them (each keeps its type: an ``axis``
    tuple must stay a tuple)."""
    return [type(x)(map(unwrap_tracked, x)) if type(x) in (list, tuple) else unwrap_tracked(x) for x in args]


def _strip_dict(kwargs):
    return {k: unwrap_tracked(v) for k, v in kwargs.items()}


def _ufunc_method(ufunc, method, inputs, kwargs):
    """``ufunc.method(*inputs, **kwargs)`` on tracked values: ``outer`` as the ufunc of ``A`` reshaped
    against ``B`` (so its derivative-table rule applies), the other methods by the rule registered on
    the bound method (``np.add.reduce``: np.sum's, see rules/reductions.py), else a clear error."""
    name = f"np.{ufunc.__name__}.{method}"
    if kwargs.get("out") is not None:
        raise InPlaceMutationError(OUT_MESSAGE.format(name=name, example=f"{name}(...)"))
    if method == "at":
        raise InPlaceMutationError(UFUNC_AT.format(name=name))
    if method == "outer" and ufunc.signature is None:
        a, b = inputs
        return ufunc(np.reshape(a, np.shape(a) + (1,) * np.ndim(b)), b, **kwargs)
    if method == "reduceat" and len(inputs) == 2:
        kwargs.pop("indices", None)  # NumPy passes ``indices=`` both by name and in ``inputs``
    func = getattr(ufunc, method)
    if func not in RULES:
        raise UnsupportedFunctionError(
            f"{name} has no derivative rule; use the NumPy function (np.sum, np.cumsum, np.max, ...) "
            f"or register a rule with db.defvjp({name}, ...)"
        )
    return record_operation(func, inputs, kwargs)


class Tracked(Guarded):
    """A value derived from a differentiated input: NumPy operations on it are recorded.

    ``slice_index``: for a basic slice ``base[index]`` (a NumPy view), its ``index`` (the base's
    shape and dtype are the tape's ``view_bases[base index]``); it carries the base's tape
    ``index``.  Such a slice is not recorded: each operation on it adds its cotangent at
    ``index`` of the base's gradient buffer, so a slice in a loop costs one record less
    (see `edges_of`; a scalar product of slices holds its partials for the base, see `record_binary`).
    """

    __slots__ = ("value", "tape", "index", "slice_index", "__weakref__")  # weak: `guards.note_views`

    def __init__(self, value, tape, index, view=None):
        self.value = value
        self.tape = tape
        self.index = index
        self.slice_index = view

    # --- NumPy protocols -------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            return _ufunc_method(ufunc, method, inputs, kwargs)
        if kwargs:
            check_ufunc_keywords(ufunc, kwargs)
        elif len(inputs) == 2:
            x, y = inputs
            if type(x) in CONSTANT_OPERANDS or type(y) in CONSTANT_OPERANDS:
                # np.multiply(c, x), np.float64(2) * x, array * x: as `c * x` is
                return record_binary(x, y, ufunc)
        else:  # np.exp(x): `record_operation`'s own fast path, a frame less
            return record_operation(ufunc, inputs, kwargs)
        return _dispatch(ufunc, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if kwargs:
            if kwargs.get("out") is not None:
                name = qualified_name(func)
                raise InPlaceMutationError(OUT_MESSAGE.format(name=name, example=f"{name}(...)"))
        elif len(args) == 2:
            x, y = args
            if type(x) is Tracked and type(y) is Tracked:
                return record_binary(x, y, func)  # np.dot of two slices in a loop: one frame less
        return _dispatch(func, args, kwargs)

    # --- array attributes and views -------------------------------------
    T = property(lambda self: record_operation(np.transpose, (self,), {}))
    real = property(lambda self: record_operation(np.real, (self,), {}) if complex_valued(self.value) else self)
    imag = property(lambda self: record_operation(np.imag, (self,), {}))

    def __getitem__(self, index):
        tape = self.tape
        kind = type(index)
        if kind is tuple:  # X[:, j] (a loop's column) checked first, in 0.4 us less
            basic = (len(index) == 2 and type(index[0]) is slice and type(index[1]) is int) \
                or BASIC_INDEX.issuperset(map(type, index))
        else:
            basic = kind in BASIC_INDEX
            if index is None:
                index = (None,)  # the same, and never mistaken for "not a view"
        if basic and self.slice_index is None and tape.recorder is None and not tape.closed:
            base = self.value
            value = base[index]  # of a value an outer gradient tracks too (a gradient of a gradient): recorded there
            if type(value) is np.ndarray:  # a view into self: not recorded, see `view`
                bases = tape.view_bases
                if self.index not in bases:
                    bases[self.index] = (base.shape, base.dtype)
                    tape.view_products[self.index] = []
                view = new_tracked(Tracked)  # as in Tape.record: no __init__ frame for a slice in a loop
                view.value = value
                view.tape = tape
                view.index = self.index
                view.slice_index = index
                return view
            if not tape.complex and (type(value) in FLOAT_SCALARS or type(value) is Tracked):
                # an element, or a value an outer gradient tracks: recorded as `record_operation` would, in a
                # call less (x[i] of a vector: 0.7 us, not 2.1 us here), `Tape.record` inline
                return _element(tape, self.index, index, base, value)
        if tape.recorder is not None and (rule := RULES.get(getitem)) is not None:  # a prepared gradient's recording
            t = tape.recorder.record_per_argument(getitem, rule, (self, index))
            if t is not NotImplemented:
                return t
        return record_operation(getitem, (self, index), {})  # recorded (and a closed tape's clear error)

    def __repr__(self):
        return f"Tracked({self.value!r})"

    # --- operators: set after the class (`_arithmetic`, `_comparison`) -----
    __hash__ = None

    # --- methods: the NumPy function of the same name ------------------------
    def reshape(self, *shape, order="C", copy=None):
        shape = shape[0] if len(shape) == 1 else shape
        return record_operation(np.reshape, (self, shape), _given(order=(order, "C"), copy=(copy, None)))

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 else (axes or None)
        return record_operation(np.transpose, (self, axes), {})

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        keywords = _given(order=(order, "K"), casting=(casting, "unsafe"), subok=(subok, True), copy=(copy, True))
        return record_operation(astype, (self, dtype), keywords)

    def view(self, dtype=None, type=None):
        """``x.view()``, or ``x.view(dtype)`` of x's own dtype: the same values, so ``x`` itself (a tracked value
        is never written in place).  Another dtype reinterprets the bits, which has no derivative."""
        if type is None and (dtype is None or np.dtype(dtype) == self.value.dtype):
            return self
        raise ValueConversionError(
            f"x.view({dtype!r}) reinterprets the bits of a value being differentiated, which has no derivative; "
            "use x.astype(dtype) to convert the values, or db.cut(x).view(...) for a constant")

    def flatten(self, order="C"):
        return record_operation(np.ravel, (self,), _given(order=(order, "C"))).copy()


def _element(tape, parent, index, base, value):
    """The tracked element ``value = base[index]`` of the value ``parent`` on ``tape``, recorded: `Tape.record`
    inline, and one `IndexPullback` per parent and integer index (p[0] read at every step of a loop: the
    record 1.3 us -> 0.8 us; the pullback is never changed once made)."""
    if type(index) is int:
        key = (parent, index)
        back = tape.element_pullbacks.get(key)
        if back is None:
            back = tape.element_pullbacks[key] = IndexPullback(index, base.shape, base.dtype)
    else:
        back = IndexPullback(index, base.shape, base.dtype)
    records = tape.records
    records.append((((parent, back),), getitem))
    if len(records) == LONG_TAPE:
        tape.grew_long()
    t = new_tracked(Tracked)
    t.value = value
    t.tape = tape
    t.index = len(records) - 1
    t.slice_index = None
    return t


def _given(**keywords):
    """The keywords ``name=(value, default)`` whose value is not the default: a method passes on only
    those, so that its common call takes the path without keywords."""
    return {name: value for name, (value, default) in keywords.items() if value != default}


new_tracked = object.__new__


def _arithmetic(func, reflected):
    """The operator method ``x op y`` (``y op x`` if ``reflected``) for ``func``.

    ``x op y`` is `record_binary` itself with ``func`` as its default third argument: a copy
    of the function object sharing its code, so an operator costs no frame of its own
    (benchmarks.ab: foldminus 2% faster than a lambda calling `record_binary`).
    """
    if reflected:
        return lambda self, other: record_binary(other, self, func)
    return types.FunctionType(record_binary.__code__, record_binary.__globals__, f"_binary_{func.__name__}",
                              (func, None))


for _name, _func in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.divide),
                     ("pow", np.power), ("floordiv", np.floor_divide), ("mod", np.remainder), ("matmul", np.matmul)]:
    setattr(Tracked, f"__{_name}__", _arithmetic(_func, False))
    setattr(Tracked, f"__r{_name}__", _arithmetic(_func, True))
for _name, _func in [("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)]:
    # truth values a recording traces (its comparisons, `_comparison`) combined: `(x > 0) & mask`
    setattr(Tracked, f"__{_name}__", lambda self, other, func=_func: record_operation(func, (self, other), {}))
    setattr(Tracked, f"__r{_name}__", lambda self, other, func=_func: record_operation(func, (other, self), {}))
Tracked.__invert__ = lambda self: record_operation(np.invert, (self,), {})
for _name, _func in [("neg", np.negative), ("pos", np.positive), ("abs", np.absolute)]:
    setattr(Tracked, f"__{_name}__", lambda self, func=_func: record_operation(func, (self,), {}))


def _comparison(func, plain):
    """``x < y`` and the other comparisons: ``plain`` on the values, a truth value that carries no gradient;
    recorded as ``func`` while a prepared gradient is recorded, so that a replay recomputes it."""
    def compare(self, other):
        if RECORDER.get() is not None:
            return record_operation(func, (self, other), {})
        return plain(self.value, unwrap_tracked(other))

    return compare


for _name, _func in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                     ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(Tracked, f"__{_name}__", _comparison(_func, getattr(operator, _name)))


def _method(func):
    def method(self, *args, **kwargs):
        return record_operation(func, (self,) + args, kwargs)

    method.__name__ = func.__name__
    method.__doc__ = f"Same as ``{qualified_name(func)}(x, ...)``."
    return method


for _name, _func in ARRAY_METHODS:
    setattr(Tracked, _name, _method(_func))
Tracked.conj = Tracked.conjugate = lambda self: record_operation(np.conjugate, (self,), {}) \
    if complex_valued(self.value) else self


# --- totals whose value may go unread: computed when first read ----------------------------------
class Pending(Tracked):
    """A tracked total (`np.sum` of a whole array, a `db.sum`) of a gradient whose value is computed when it is
    first read, so that a gradient that never reads it never computes it: ``db.gradient(lambda x:
    np.sum(x**2), x)`` needs ``2x``, not the sum (issue 18's dead values, in the eager tape).

    Its record is an ordinary one (the pullbacks of a total never read its value).  Any read of ``value`` computes
    it (`settle_total`) and makes the object a plain `Tracked` in place; so does every entry into the library
    (NumPy's protocols and the operators, which NumPy and Python hand to the subclass first, methods, attributes,
    `pytree.flatten`, hence `db.sum`, `db.cut`, nested gradients).  Only `gradient`'s tape makes them
    (`lazy_totals`; `value_and_gradient` returns the value, so computes it as it goes).  A read after the gradient
    returned (a value kept from inside ``f``) is a clear error, since what it was computed from may have changed.
    """

    __slots__ = ()
    value = property(lambda self: settle_total(self).value)


class Total:
    """What a `Pending` holds in place of its value: ``compute()`` gives it, of ``dtype``, while ``tape`` is open."""

    __slots__ = ("compute", "dtype", "tape")

    def __init__(self, compute, dtype, tape):
        self.compute, self.dtype, self.tape = compute, dtype, tape


VALUE_SLOT = Tracked.value  # the slot Pending's property hides: Tracked.value.__get__(t) reads it as stored


def settle_total(t, after_close=False):
    """``t`` with its value computed: a `Pending` becomes a plain `Tracked` in place (anything else is returned
    as it is).  ``after_close``: the gradient's own result, read by `value_and_gradient` once ``f`` returned."""
    if type(t) is Pending:
        total = VALUE_SLOT.__get__(t)
        if total.tape.closed and not after_close:
            raise StaleValueError(
                "the value of a sum computed inside a differentiated function was read after the gradient "
                "returned; db.gradient leaves a sum it does not need uncomputed. Return it with "
                "db.value_and_gradient, or store db.cut(s) inside the function"
            )
        VALUE_SLOT.__set__(t, total.compute())
        t.__class__ = Tracked
    return t


def drop_total(t):
    """Release what the `Pending` ``t`` would be computed from (`gradient`'s result, once ``f`` returned: no read
    may compute it any more): a sum of squares frees its squares before the sweep allocates the gradient, which
    then reuses their memory, still in cache (benchmarks: sum(x**2) of 1e5 float32, ~5 us less)."""
    VALUE_SLOT.__get__(t).compute = None


def lazy_totals(tape, size):
    """Whether a total over ``size`` elements recorded on ``tape`` may be left `Pending`: a tape of `gradient`
    (``unread``: swept once, its result's value dropped; not nested, not recorded for a prepared program), no
    complex value, and a total that costs more than leaving it pending (about a microsecond when read after all).
    Not while another gradient or a `db.jvp` runs inside it: their values would hold a pending one."""
    return size >= LAZY_TOTAL and tape.unread and not tape.level and tape.recorder is None and not tape.complex \
        and not tape.closed and ACTIVE_TAPE.get() is tape and not JVP_DEPTH.get()


LAZY_TOTAL = 1 << 14  # elements: np.sum of 16384 float64 takes ~4 us
TOTALS = {}  # function -> its rule, whose pullbacks read no result and whose total of a float array has its dtype
# (np.sum's, declared in rules/reductions.py; one a user registers again is not in it)


def _settle_all(x):
    """`settle_total` on every `Pending` in ``x`` and in the lists, tuples and dicts it holds."""
    kind = type(x)
    if kind is Pending:
        settle_total(x)
    elif kind is list or kind is tuple:
        for a in x:
            _settle_all(a)
    elif kind is dict:
        for a in x.values():
            _settle_all(a)


def _settling(name):
    """Pending's ``name``: its arguments' (and its own) totals computed, then `Tracked`'s ``name``."""
    attribute = getattr(Tracked, name)
    if isinstance(attribute, property):
        return property(lambda self: attribute.__get__(settle_total(self)))

    def method(self, *args, **kwargs):
        settle_total(self)
        _settle_all(args)
        _settle_all(kwargs)
        return attribute(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in {name for cls in (Tracked, Guarded) for name, a in vars(cls).items()
              if (callable(a) or isinstance(a, property)) and name not in ("__init__", "__init_subclass__",
                                                                          "__subclasshook__", "__new__")}:
    setattr(Pending, _name, _settling(_name))
# A total is one number: its dtype and sizes are known before its value.
Pending.dtype = property(lambda self: VALUE_SLOT.__get__(self).dtype)
Pending.shape, Pending.ndim, Pending.size = (), 0, 1
TRACKED = frozenset((Tracked, Pending))  # the types of tracked values: a `Pending` is one until it is computed
Pending.__repr__ = lambda self: "Tracked(<a sum the gradient did not compute>)" if self.tape.closed \
    else repr(settle_total(self))
pytree.SETTLE[Pending] = settle_total
pytree.leaf_type(Tracked)


def primitive(f: Callable[..., Any]) -> Callable[..., Any]:
    """Make a user function a primitive: tracked arguments are recorded with its rule.

    Register the rule with `defvjp` on the decorated function, or its partial derivatives with
    `db.defderivative` (an elementwise function): inside a db.sum/db.broadcast kernel it is then one
    operation, else its body is traced there like the rest of the kernel.
    """
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        for a in args:  # a loop, not any(...): no generator per call (a plain call 0.7 -> 0.3 us)
            kind = type(a)
            if kind is Tracked or kind is Pending:
                return record_operation(wrapper, args, kwargs)
            if kind is Sym:
                return a.graph.primitive(wrapper, f, args, kwargs)
            if kind is FORWARD[0]:  # a dual value of db.jvp: forward mode finds the tangent from the rule
                return FORWARD[1](wrapper, args, kwargs)
        return f(*args, **kwargs)

    wrapper.__wrapped_primitive__ = f
    return wrapper
