"""The reverse-mode driver: wraps a call's differentiated leaves as tape inputs, runs it on the tape, seeds
its result and sweeps back, and rebuilds each gradient with its argument's structure, shape and dtype
(`gradient`, `value_and_gradient`, `pullback`).  The entry points of `api`, the prepared recorder, `explain`,
the Dask layer and forward mode's transposition (`forward._transpose`) run reverse mode through it."""

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import pytree
from .context import ACTIVE_TAPE, JVP_DEPTH
from .errors import (
    ArgumentTypeError,
    InPlaceMutationError,
    NonScalarOutputError,
    ShapeMismatchError,
    StaleValueError,
    ValueConversionError,
)
from .forward import REVERSE_MODE, Dual, primal
from .lazy import DASK_LAYER, Lazy, is_chunked
from .numpy_facts import FLOAT_LEAVES, FLOAT_SCALARS
from .sweeps import backward
from .tape import Tape, thaw
from .tracked import Pending, Tracked, drop_total, settle, settle_total, unwrap_tracked

FLOAT_TYPES = tuple(FLOAT_LEAVES)  # for isinstance
_PYTHON_FLOAT = {float}


# --- tracing ----------------------------------------------------------------
class TrackedArgument:
    """One argument of a differentiated call: its tree and the tape input of each leaf."""

    __slots__ = ("treedef", "originals", "inputs", "every_input", "floats")

    def __init__(self, treedef, originals, inputs, every_input=None, floats=False):
        self.treedef = treedef
        self.originals = originals
        self.inputs = inputs  # per leaf: the Tracked input, or None for a constant
        self.every_input = every_input or inputs  # also constants, when they are traced
        self.floats = floats  # every leaf a differentiated Python float (a tuple of floats, ...)


def track_arguments(tape, args, constants_traced=False):
    """Wrap every differentiated leaf of ``args`` as a tape input.

    ``constants_traced``: array and float constants become tape inputs too (with no
    gradient), so a prepared program sees new constant data on replay.
    """
    call_args, arguments = [], []
    for position, arg in enumerate(args):
        if type(arg) is np.ndarray and arg.dtype.kind == "f":  # the common case first
            t = tape.leaf(arg)
            call_args.append(t)
            arguments.append(TrackedArgument(None, [arg], [t]))
            continue
        if isinstance(arg, FLOAT_TYPES) or (type(arg) is Tracked and arg.tape.level < tape.level):
            t = tape.leaf(float_value(arg, position, tape=tape))  # (a gradient's argument in a gradient of it)
            call_args.append(t)
            arguments.append(TrackedArgument(None, [arg], [t]))
            continue
        leaves, treedef = pytree.flatten(arg)
        flags = pytree.leaf_activity(treedef)
        if leaves and False not in flags and _PYTHON_FLOAT.issuperset(map(type, leaves)):  # a tuple of floats
            inputs = tape.leaves(list(map(np.float64, leaves)))
            call_args.append(pytree.unflatten(treedef, inputs))
            arguments.append(TrackedArgument(treedef, leaves, inputs, floats=True))
            continue
        duals = Dual in map(type, leaves)
        if duals:  # forward over reverse: the tape tracks a dual's primal, its tangents ride on (`_with_primal`)
            originals, leaves = leaves, [primal(leaf) for leaf in leaves]
        inputs = tape.leaves([
            (np.float64(leaf) if type(leaf) is float else float_value(leaf, position, k, tape))
            if on and leaf is not None else None
            for k, (leaf, on) in enumerate(zip(leaves, flags))
        ])
        every = inputs
        if constants_traced:
            every = [
                tape.leaf(np.float64(leaf) if type(leaf) is float else leaf)
                if t is None and isinstance(leaf, (np.ndarray, np.generic, float)) else t
                for t, leaf in zip(inputs, leaves)
            ]
        new_leaves = [(leaf if _outer_value(leaf, tape) else unwrap_tracked(leaf)) if t is None else t
                      for t, leaf in zip(every, leaves)]
        if duals:
            new_leaves = [new if t is None else _with_primal(o, t) for new, t, o in zip(new_leaves, inputs, originals)]
        call_args.append(pytree.unflatten(treedef, new_leaves))
        arguments.append(TrackedArgument(treedef, leaves, inputs, every))
    return call_args, arguments


def _with_primal(dual, t):
    """The dual value ``dual`` (of any depth of `jvp` levels) with its primal replaced by the tape input ``t``."""
    if type(dual) is not Dual:
        return t
    return Dual(_with_primal(dual.value, t), dual.tangent, dual.level)


def _outer_value(leaf, tape):
    """Whether a constant leaf of a nested gradient is a value an outer gradient (or the recording of a prepared
    one: `prepare_hvp`) tracks: it stays tracked there, so that the outer one sees what is computed from it."""
    return type(leaf) is Tracked and leaf.tape.level < tape.level and not leaf.tape.closed


def float_value(x, position, leaf=None, tape=None):
    """The value a differentiated leaf is tracked with (a complex one marks ``tape`` as holding complex
    values, see `Tape`); a clear error if it is not a real or complex float."""
    if type(x) is float:
        return np.float64(x)
    if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "f":
        return x
    if isinstance(x, (np.ndarray, np.generic, complex)) and np.result_type(x).kind == "c":
        if tape is not None:
            tape.complex = True
        return np.complex128(x) if type(x) is complex else x
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if isinstance(x, bool) or kind == "b":
        what = "boolean"
    elif isinstance(x, int) or kind in ("i", "u"):
        what = "integer"
    elif type(x) is Tracked and tape is not None and x.tape.level < tape.level and x.dtype.kind in "fc":
        if x.dtype.kind == "c":  # a gradient inside a gradient: the inner input is tracked by the outer one
            tape.complex = True
        return x
    elif type(x) is Tracked and tape is None and not x.tape.closed and x.dtype.kind in "fc":
        return x  # a jvp inside a gradient (reverse over forward): the tape records what the duals compute
    elif type(x) is Tracked:
        raise StaleValueError("a tracked value from a finished gradient evaluation was passed to a gradient; "
                              "pass the array itself (or db.cut(x) for its value)")
    elif is_chunked(x) and x.dtype.kind == "f":  # a Dask array: tracked lazily (`chunked.Lazy`)
        return DASK_LAYER.leaf_value(x)
    else:
        what = f"of type {type(x).__name__}" + (f" with dtype {x.dtype}" if hasattr(x, "dtype") else "")
    where = "" if leaf is None else f" (leaf {leaf})"
    raise ArgumentTypeError(
        f"argument {position}{where} to differentiate is {what}; only floating-point values (real or "
        "complex) have gradients. Convert it with np.asarray(x, dtype=float), or wrap it in db.cut(...) to "
        "treat it as a constant."
    )


def new_tape(single_sweep=False):
    """The tape of one evaluation.  Inside another's function (a gradient of a gradient) it is one level
    deeper (see `Tape`) and never reuses a buffer, since its cotangents may be tracked by the outer one."""
    outer = ACTIVE_TAPE.get()
    if outer is None:
        return Tape(single_sweep)
    return Tape(level=outer.level + 1)


def trace_call(f, args):
    """Run ``f`` on tracked arguments; return the tape, the output and the arguments.

    The constants the tape keeps stay read-only as long as the tape (its pullbacks) lives."""
    tape = new_tape()
    weakref.finalize(tape, thaw, tape.kept)
    call_args, arguments = track_arguments(tape, args)
    return tape, call_on_tape(tape, f, call_args), arguments


def call_on_tape(tape, f, call_args, keep_collector_paused=False):
    """``f(*call_args)`` recorded on ``tape``, which is closed afterwards (see `Tape.close`)."""
    token = ACTIVE_TAPE.set(tape)
    try:
        out = _settled(f(*call_args))
    except ValueError as error:
        tape.close()
        explained = _explained(error, tape)
        tape.thaw()
        if explained is None:
            raise
        raise explained from error
    except BaseException:
        tape.close()
        tape.thaw()
        raise
    finally:
        ACTIVE_TAPE.reset(token)
    tape.close(resume_collector=not keep_collector_paused)
    return out


_READ_ONLY = ("assignment destination is read-only", "output array is read-only")


def _explained(error, tape):
    """The library's error for NumPy's bare ValueError where a tracked or kept value caused it, else None."""
    message = str(error)
    if "setting an array element with a sequence" in message:
        return ValueConversionError(
            f"{message} This is what NumPy says when a tracked value is assigned into a NumPy array "
            "(y[i] = x[j]), which would drop its gradient: build the array with np.stack, "
            "np.concatenate or np.where instead, or assign db.cut(x[j]) if you want its value only."
        )
    if any(text in message for text in _READ_ONLY) and tape.kept:
        return InPlaceMutationError(
            f"{message}: f wrote into an array that the gradient still reads (a constant used by a "
            "differentiated operation, or a value read with db.cut). dualbroadcast makes such arrays "
            "read-only until the gradient is computed, since changing them would change the gradient "
            "without a word. Write into a copy instead (c = np.copy(c)), or finish with it before its use."
        )
    return None


def _settled(out):
    """``out`` with its unrecorded slices (views) recorded: the sweep seeds outputs by tape index."""
    if type(out) is Tracked:
        return settle(out)
    if type(out) is Pending:  # a total: never a view, and its value is left to `_wanted`
        return out
    if not isinstance(out, FLOAT_TYPES):
        for leaf in pytree.flatten(out)[0]:
            if type(leaf) is Tracked:
                settle(leaf)
    return out


def scalar_seed(out, tape):
    """The seed cotangent 1 for a scalar result; a clear error for anything else."""
    if type(out) is Tracked and out.tape is tape and type(out.value) in FLOAT_SCALARS:  # the usual case
        return out.value, type(out.value)(1)
    if type(out) is Pending:  # a total not computed yet (`_wanted` computes it if the value is wanted)
        if out.tape is tape:
            return out, out.dtype.type(1)
        if out.tape.closed:
            raise StaleValueError("the function returned a tracked value from another gradient evaluation")
        settle_total(out)
    if isinstance(out, (tuple, list, dict)):
        raise NonScalarOutputError(
            f"gradient needs a function with a real scalar result, but it returned a {type(out).__name__}; "
            "use db.pullback(f, x) for a vector-Jacobian product or db.jacobian(f, x) for all derivatives"
        )
    value = unwrap_tracked(out)
    if type(out) is Tracked and out.tape is not tape:
        if out.tape.closed or out.tape.level >= tape.level:
            raise StaleValueError("the function returned a tracked value from another gradient evaluation")
        out, value = None, out  # tracked by an outer gradient only: a constant of this one
    if type(value) is Tracked:  # a gradient inside a gradient: its value is tracked by the outer one
        scalar_seed(value, value.tape)
        return value, (None if out is None else out.dtype.type(1))
    if not isinstance(value, (int, float, np.generic, np.ndarray)):
        raise NonScalarOutputError(
            f"gradient needs a function with a real scalar result, but it returned {type(value).__name__} "
            f"({value!r:.60}); return the scalar to differentiate (for several outputs, use db.pullback)"
        )
    if np.ndim(value) != 0:
        raise NonScalarOutputError(
            f"gradient needs a function with a real scalar result, but it returned shape {np.shape(value)}; "
            "use db.pullback(f, x) for a vector-Jacobian product or db.jacobian(f, x) for all derivatives"
        )
    dtype = np.result_type(value)
    if dtype.kind not in "fiub":
        raise NonScalarOutputError(
            f"gradient needs a real-valued result, but the function returned dtype {dtype} (JAX's grad too "
            "requires real-valued outputs): for the vector-Jacobian product of a complex result use "
            "db.pullback(f, z), or differentiate a real function of it (np.abs(y) ** 2, np.real(y))"
        )
    return value, (out.dtype.type(1) if type(out) is Tracked else None)


def argument_gradients(arguments, grads):
    """The gradient of each argument, with the argument's structure, shapes and dtypes."""
    seen = set()
    result = []
    for arg in arguments:
        if arg.floats and grads:  # Python floats in, Python floats out
            result.append(pytree.unflatten(arg.treedef, _python_floats([grads[t.index] for t in arg.inputs])))
            continue
        leaves = [
            None if t is None
            else _python_number(grads[t.index], original)
            if type(original) in _PYTHON_NUMBERS and grads and grads[t.index] is not None
            else _leaf_gradient(grads[t.index] if grads else None, original, seen)
            for t, original in zip(arg.inputs, arg.originals)
        ]
        if arg.treedef is None:
            result.append(leaves[0])
        elif all(t is None for t in arg.inputs):
            result.append(None)
        else:
            result.append(pytree.unflatten(arg.treedef, leaves))
    return result


_PYTHON_NUMBERS = (float, complex)


def _python_number(g, original):
    """The gradient of a Python float or complex leaf, of its type (tracked by an outer gradient: as it is)."""
    if type(g) is Tracked:
        return g
    return float(g) if type(original) is float else complex(g)


def _python_floats(cotangents):
    """The gradient of Python-float leaves: each cotangent as a float, 0.0 for None (an unused leaf).

    Not ``None in cotangents`` first: NumPy scalars compare to None at 100 ns each, more than
    converting them; ``float(None)`` fails instead, for the rare unused leaf."""
    try:
        return list(map(float, cotangents))
    except (TypeError, ValueConversionError):  # an unused leaf, or one tracked by an outer gradient
        return [0.0 if g is None else g if type(g) is Tracked else float(g) for g in cotangents]


def _leaf_gradient(g, original, seen):
    """The gradient of one leaf with its shape and dtype: a buffer of its own, never shared (a cotangent
    tracked by an outer gradient: recorded there as it is cast and reshaped)."""
    if type(g) is Tracked:
        return _tracked_gradient(g, original)
    if type(g) is np.ndarray and type(original) is np.ndarray and g.base is None and g.shape == original.shape \
            and g.dtype is original.dtype and g.flags.writeable and id(g) not in seen:
        seen.add(id(g))  # the usual case: the sweep's own buffer
        return g
    if type(original) in _PYTHON_NUMBERS:
        return type(original)(0) if g is None else _python_number(g, original)
    if is_chunked(original):
        return DASK_LAYER.leaf_gradient(g, original)
    dtype = original.dtype
    if g is None:
        g = np.zeros(np.shape(original), dtype)
    if isinstance(original, np.generic):
        return dtype.type(g)
    fresh = type(g) is np.ndarray and g.dtype == dtype and g.base is None and g.flags.writeable
    if not fresh or id(g) in seen:
        g = np.array(g, dtype=dtype)
    seen.add(id(g))
    return g.reshape(original.shape)


def _tracked_gradient(g, original):
    """`_leaf_gradient` of a cotangent ``g`` tracked by an outer gradient (a gradient inside a gradient)."""
    dtype = np.result_type(unwrap_tracked(original)) if type(original) is not Tracked else original.dtype
    if g.dtype != dtype and dtype.kind in "fc":
        g = g.astype(dtype)
    return g if g.shape == np.shape(original) else np.reshape(g, np.shape(original))


def one_or_tuple(items):
    return items[0] if len(items) == 1 else tuple(items)


# --- public API ----------------------------------------------------------------
def value_and_gradient(f: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    """``(f(*args), gradient(f, *args))`` from one evaluation of ``f``.

    >>> db.value_and_gradient(lambda x: np.sum(x**2), np.array([1.0, 2.0]))
    (np.float64(5.0), array([2., 4.]))
    """
    return _value_and_gradient(f, args, True)


def _value_and_gradient(f, args, wanted):
    """`value_and_gradient` (``wanted``: the value is returned, else None in its place: `gradient`)."""
    tape = new_tape(single_sweep=not JVP_DEPTH.get())  # inside a jvp, a dual result takes a sweep per part
    tape.unread = not wanted
    try:
        if len(args) == 1:  # the common calls first, without argument trees
            x = args[0]
            if type(x) is np.ndarray and x.dtype.kind == "f":
                return _leaf_value_and_gradient(tape, f, x, x, wanted)
            if type(x) is float:  # a scalar model: tracked as a NumPy float, its gradient a Python float
                return _leaf_value_and_gradient(tape, f, np.float64(x), x, wanted)
            if (type(x) is tuple or type(x) is list) and x and _PYTHON_FLOAT.issuperset(map(type, x)):
                return _floats_value_and_gradient(tape, f, x, wanted)
        return _tree_value_and_gradient(tape, f, args, wanted)
    finally:
        tape.thaw()
        tape.release()  # after the evaluation's frame is gone: nothing else holds the records


def _tree_value_and_gradient(tape, f, args, wanted):
    call_args, arguments = track_arguments(tape, args)
    out = call_on_tape(tape, f, call_args, keep_collector_paused=True)
    if type(out) is Dual:
        value, grads = _dual_value_and_gradients(tape, out, arguments)
        return value, one_or_tuple(grads)
    value, seed = scalar_seed(out, tape)
    value = _wanted(value, wanted)
    grads = backward(tape, {out.index: seed}) if seed is not None else None
    return value, one_or_tuple(argument_gradients(arguments, grads))


def _leaf_value_and_gradient(tape, f, value, x, wanted):
    """`value_and_gradient` of the most common calls, one float array or Python float ``x`` (tracked as
    ``value``): no argument trees (qux, a Python float: 0.7 us a call less)."""
    t = tape.leaf(value)
    out = call_on_tape(tape, f, (t,), keep_collector_paused=True)
    if type(out) is Dual:  # a closure over a `jvp`'s dual (forward over reverse)
        value, grads = _dual_value_and_gradients(tape, out, [TrackedArgument(None, [x], [t])])
        return value, grads[0]
    value, seed = scalar_seed(out, tape)
    value = _wanted(value, wanted)
    g = None if seed is None else backward(tape, {out.index: seed})[0]
    return value, _leaf_gradient(g, x, set())


def _floats_value_and_gradient(tape, f, xs, wanted):
    """`value_and_gradient` of one tuple or list of Python floats (a small scalar model): its
    leaves are the tape's first inputs, its gradient the same kind of sequence of floats."""
    inputs = tape.leaves(list(map(np.float64, xs)))
    out = call_on_tape(tape, f, (tuple(inputs) if type(xs) is tuple else inputs,), keep_collector_paused=True)
    if type(out) is Dual:  # a closure over a `jvp`'s dual (forward over reverse)
        argument = TrackedArgument(pytree.flatten(xs)[1], xs, inputs, floats=True)
        value, grads = _dual_value_and_gradients(tape, out, [argument])
        return value, grads[0]
    value, seed = scalar_seed(out, tape)
    value = _wanted(value, wanted)
    if seed is None:  # a constant result
        return value, type(xs)([0.0] * len(xs))
    return value, type(xs)(_python_floats(backward(tape, {out.index: seed})[: len(xs)]))


def _dual_value_and_gradients(tape, out, arguments):
    """``(value, gradients)`` of a dual result (forward over reverse: ``f`` ran on a `jvp`'s dual values, as an
    argument or in a closure, and its result carries their tangent): the gradient of the result's value, with,
    as its tangent, the gradient of the result's tangent, each one sweep of the tape (its records compute
    both, `forward.py`).  Levels of duals nest: each part is a dual again, or a tracked or constant value."""
    if type(out) is not Dual:
        out = _settled(out)
        value, seed = scalar_seed(out, tape)
        return value, argument_gradients(arguments, backward(tape, {out.index: seed}) if seed is not None else None)
    value, grads = _dual_value_and_gradients(tape, out.value, arguments)
    tangent, tangent_grads = _dual_value_and_gradients(tape, out.tangent, arguments)
    return Dual(value, tangent, out.level), [_dual_tree(g, t, out.level) for g, t in zip(grads, tangent_grads)]


def _dual_tree(values, tangents, level):
    """The pytree ``values`` with each leaf a dual of ``level`` whose tangent is the leaf of ``tangents`` (None: a
    cut leaf, left None)."""
    leaves, treedef = pytree.flatten(values)
    duals = [v if v is None else Dual(v, t, level) for v, t in zip(leaves, pytree.flatten(tangents)[0])]
    return duals[0] if treedef is pytree.LEAF else pytree.unflatten(treedef, duals)


def _wanted(value, wanted):
    """The result's value as `value_and_gradient` returns it: a `Pending` total computed if ``wanted`` (before
    the sweep, which may overwrite buffers in place), else left uncomputed (`gradient` drops it)."""
    if type(value) is not Pending:
        return value
    if wanted:
        return settle_total(value, after_close=True).value
    drop_total(value)
    return None


def gradient(f: Callable[..., Any], *args: Any) -> Any:
    """Gradient of the real scalar ``f(*args)`` with respect to every argument not `cut`.

    One argument gives one gradient, several a tuple (``None`` for cut arguments).
    Each gradient has its argument's structure, shape and dtype.

    >>> db.gradient(lambda x: np.sum(np.sin(x)), np.zeros(3))
    array([1., 1., 1.])
    """
    return _value_and_gradient(f, args, False)[1]


def pullback(f: Callable[..., Any], *args: Any) -> tuple[Any, Callable[[Any], Any]]:
    """``(y, back)``: ``y = f(*args)`` (any shape or pytree), ``back(ybar)`` the cotangents.

    >>> y, back = db.pullback(lambda x: 2 * x, np.ones(2))
    >>> back(np.array([1.0, 3.0]))
    array([2., 6.])
    """
    tape, out, arguments = trace_call(f, args)
    out_leaves, out_def = pytree.flatten(out)
    if any(type(o) is Tracked and type(o.value) is Lazy for o in out_leaves):
        return DASK_LAYER.pullback(tape, out_leaves, out_def, arguments)  # a Dask-array result (db.broadcast)

    if type(out) is Tracked:  # one array output: no trees to walk on every call
        shape, dtype = out.shape, out.dtype

        def back_one(ybar):
            yb = cotangent_array(ybar, dtype)
            if yb.shape != shape:
                raise ShapeMismatchError(
                    f"cotangent of shape {yb.shape} for an output of shape {shape}; pass one of the output's shape")
            seed = yb[()] if shape == () else yb  # a scalar result's seed as a scalar: cheaper to multiply
            return one_or_tuple(argument_gradients(arguments, backward(tape, {out.index: seed})))

        return out.value, back_one

    if Dual in map(type, out_leaves):  # forward over reverse: f ran on a `jvp`'s dual values
        return pytree.unflatten(out_def, [_dual_value(o) for o in out_leaves]), \
            lambda ybar: _dual_back(tape, out_leaves, out_def, arguments, ybar)

    def back(ybar):
        ybar_leaves, ybar_def = pytree.flatten(ybar)
        check_keys(ybar_def, out_def, "the cotangent", "the output's")
        seeds = pullback_seeds(out_leaves, ybar_leaves)
        grads = backward(tape, seeds) if seeds else None
        return one_or_tuple(argument_gradients(arguments, grads))

    return pytree.unflatten(out_def, [unwrap_tracked(o) for o in out_leaves]), back


def _dual_value(o):
    """The value of a result of `pullback`'s ``f``: a dual's parts' values (tracked or not) as a dual."""
    return Dual(_dual_value(o.value), _dual_value(o.tangent), o.level) if type(o) is Dual else unwrap_tracked(o)


def _dual_back(tape, out_leaves, out_def, arguments, ybar):
    """`pullback`'s ``back(ybar)`` where results are duals (forward over reverse): linear in ȳ, so for a dual
    result ``(y, ẏ)`` the dual ``(back_y(ȳ), back_ẏ(ȳ) + back_y(ȳ̇))``, ȳ̇ the tangent of a dual ȳ of its level;
    summed over the results."""
    ybar_leaves, ybar_def = pytree.flatten(ybar)
    check_keys(ybar_def, out_def, "the cotangent", "the output's")
    if len(ybar_leaves) != len(out_leaves):
        raise ShapeMismatchError(f"back expects a cotangent with the output's structure ({len(out_leaves)} arrays)")
    total = None
    for o, yb in zip(out_leaves, ybar_leaves):
        grads = _pulled(tape, o, yb, arguments)
        total = grads if total is None else [_added(a, b) for a, b in zip(total, grads)]
    return one_or_tuple(total)


def _pulled(tape, o, yb, arguments):
    """The cotangents of the arguments from one result ``o`` (a dual of any depth) and its cotangent ``yb``."""
    if type(o) is not Dual:
        seeds = pullback_seeds([o], [yb])
        return argument_gradients(arguments, backward(tape, seeds) if seeds else None)
    yb, yb_tangent = (yb.value, yb.tangent) if type(yb) is Dual and yb.level == o.level else (yb, None)
    value, tangent = _pulled(tape, o.value, yb, arguments), _pulled(tape, o.tangent, yb, arguments)
    if yb_tangent is not None:
        tangent = [_added(a, b) for a, b in zip(tangent, _pulled(tape, o.value, yb_tangent, arguments))]
    return [_dual_tree(v, t, o.level) for v, t in zip(value, tangent)]


def _added(a, b):
    """Two gradients of one argument added leaf by leaf (None: a cut leaf)."""
    leaves, treedef = pytree.flatten(a)
    summed = [x if x is None else x + y for x, y in zip(leaves, pytree.flatten(b)[0])]
    return summed[0] if treedef is pytree.LEAF else pytree.unflatten(treedef, summed)


def check_keys(given, expected, what, whose):
    """A tree paired leaf by leaf with another (tangents, cotangents) whose dicts have other keys: its leaves
    would go to other entries, silently."""
    keys = pytree.dict_keys(given)
    if keys and keys != pytree.dict_keys(expected):
        raise ShapeMismatchError(f"{what} has dicts with keys {keys}, {whose} {pytree.dict_keys(expected)}; give "
                                 "it the same structure")


def pullback_seeds(out_leaves, ybar_leaves, cast=None):
    """A pullback's seeds of the backward sweep, output index -> cotangent: each leaf of ȳ cast to its output's
    dtype (`cotangent_array`, or ``cast(ybar, output)``) and checked against its shape, summed where outputs repeat."""
    if len(ybar_leaves) != len(out_leaves):
        raise ShapeMismatchError(f"back expects a cotangent with the output's structure ({len(out_leaves)} arrays)")
    seeds = {}
    for o, yb in zip(out_leaves, ybar_leaves):
        if type(o) is not Tracked:
            continue
        yb = cotangent_array(yb, o.dtype) if cast is None else cast(yb, o)
        if yb.shape != o.shape:
            raise ShapeMismatchError(
                f"cotangent of shape {yb.shape} for an output of shape {o.shape}; pass one of the output's shape")
        seeds[o.index] = seeds[o.index] + yb if o.index in seeds else yb
    return seeds


def cotangent_array(ybar, dtype):
    """A cotangent given to a pullback, as an array of the output's dtype: a copy (the gradient may be this very
    array), or, tracked by an outer gradient (a pullback inside a gradient), recorded there as it is cast."""
    if type(ybar) is Tracked:
        return ybar if ybar.dtype == dtype else ybar.astype(dtype)
    return np.array(ybar, dtype=dtype)


REVERSE_MODE[:] = [gradient]  # forward mode transposes a pullback with it (`forward._transpose`)
