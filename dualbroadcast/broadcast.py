"""Layer 2: forward mode over broadcasts — ``broadcast``, ``sum`` and ``elementwise``.

The arguments *and the callable's own state* (closure cells, dataclass fields,
bound ``self``, ``functools.partial`` arguments) are flattened to leaves.  Each
tracked leaf that is not `cut` is active and gets one partial: the kernel
computes the value and ∂f/∂leaf for every active leaf in one fused pass (a dual
array: value of shape S, partials of shape (k,)+S), and one tape node is
recorded whose pullback is ``ȳ · ∂f/∂leaf`` summed over broadcast dimensions.

Whatever else the trace reads (globals, the items and attributes of what they
hold, module attributes, default values) is baked into the kernel, and its
cache key holds it by value (`_Reads`): a change is a new trace, never a stale
kernel.  ``db.cut(v)`` inside ``f`` makes ``v`` a constant of the kernel.
"""

import collections
import collections.abc
import contextvars
import functools
import math
import threading
from collections.abc import Callable
from types import BuiltinFunctionType, CodeType, FunctionType, MethodType, ModuleType
from typing import Any, NamedTuple

import numpy as np

from . import kernels, pytree
from .errors import KernelError
from .expr import Graph, Sym, _is_boolean, complex_kernel_message, derivatives, trace, without_cuts
from .expr import _cut as _cut_op
from .forward import Dual, check_enclosing
from .guards import RECORDER, Guarded, untracked
from .kernel_source import _infer_dtypes, _scalar_nodes, needed_nodes
from .kernels import FORCED_BACKEND, Kernel, _kind
from .lazy import DASK_LAYER, Lazy, is_chunked
from .numpy_facts import FLOAT_LEAVES, FLOAT_SCALARS, REAL_FLOATS, getitem
from .pullbacks import (
    FACTORS,
    Contracted,
    IndexPullback,
    RealPart,
    Unbroadcast,
    fitting_kernel_pullback,
    kernel_pullback,
    unbroadcast,
)
from .registry import COMPLEX_RULES, SAME_RULE
from .sweeps import vector_elements
from .tracked import LAZY_TOTAL, Pending, Total, Tracked, _edge, _edges, lazy_totals, tape_of

CACHE_SIZE = 512
_PLAIN = FLOAT_LEAVES | {Tracked, Dual}  # leaves of their own: the arguments need no tree walk
_cache = collections.OrderedDict()
_plans = {}  # (id of the code, reduce) -> the `_Plan` of its latest call (hashing a code object is slow)
_names = {}  # id of a code object -> (the code, the names it reads: `_names_read`)
_walks = {}  # id of a code object -> the pinned `_Reads` of a function of that code (`_walk`)
_cache_lock = threading.Lock()
_log = contextvars.ContextVar("dualbroadcast_kernel_log", default=None)


class KernelCall(NamedTuple):
    """What one `broadcast`/`sum` call did: its dual width is the number of partials carried; ``second``, of a
    second-order kernel (a `sum` inside a gradient of a gradient), the number of second partials (of a
    reverse-over-forward one, `_tangent_on_tape`: one per argument the gradient tracks, contracted with the
    tangents)."""

    function: str
    width: int
    backend: str
    size: int
    reduce: bool
    second: int = 0


class kernel_log:
    """Context manager collecting a `KernelCall` for every broadcast/sum call inside it.

    >>> f = lambda c: db.sum(lambda x, c: c * x**2, db.cut(np.ones(3)), c)
    >>> with db.kernel_log() as calls:
    ...     g = db.gradient(f, 1.0)
    >>> calls[0].width, g                  # one partial: c's (x is cut)
    (1, 3.0)
    """

    def __enter__(self) -> list[KernelCall]:
        self.calls = []
        self._token = _log.set(self.calls)
        return self.calls

    def __exit__(self, *exc: object) -> None:
        _log.reset(self._token)


def broadcast(f: Callable[..., Any], *args: Any, backend: str | None = None) -> Any:
    """``f`` applied elementwise to ``args`` with NumPy broadcasting, differentiated in forward mode.

    ``f`` is scalar-style code over NumPy functions and operators (``np.where`` for
    branches).  ``backend`` forces "numpy", "blocked" or "numexpr" for this call.

    >>> db.broadcast(lambda x, y: np.exp(x) * y, np.zeros(3), 2.0)
    array([2., 2., 2.])
    """
    return _run(f, args, reduce=False, backend=backend)


def sum(f: Callable[..., Any], *args: Any, backend: str | None = None) -> Any:  # the contract's name, not the builtin
    """``np.sum(broadcast(f, *args))``, fused: the summed values are never materialised.

    Partials are reduced to each argument's own shape in the forward pass, so a
    scalar coefficient broadcast over a million points keeps one number.

    >>> db.sum(lambda r: np.exp(-3 * (r + 1)), np.zeros(4))
    np.float64(0.19914827347145578)
    """
    return _run(f, args, reduce=True, backend=backend)


def elementwise(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: ``f(*args)`` then means ``broadcast(f, *args)`` (and takes its ``backend=``).

    >>> @db.elementwise
    ... def cube(r):
    ...     return r ** 3
    >>> db.gradient(lambda x: np.sum(cube(x)), np.array([1.0, 2.0]))
    array([ 3., 12.])
    """

    @functools.wraps(f)
    def wrapper(*args, backend=None):
        if any(type(a) is Sym for a in args):
            return f(*args)  # called from inside another kernel: inline it
        return broadcast(f, *args, backend=backend)

    return wrapper


def _run(f, args, reduce, backend):
    if type(f) is FunctionType and backend is None:
        plan = _plans.get((id(f.__code__), reduce))
        result = None if plan is None else plan.run(f, args)
        if result is not None:
            return result
    if Sym in map(type, args):
        return _inline(f, args, reduce)
    if type(f) is FunctionType and not f.__closure__ and _PLAIN.issuperset(map(type, args)):
        leaves, treedef = args, None  # the common case, without walking a tree
        activity = (True,) * len(args)
    else:
        leaves, treedef = pytree.flatten((f, args))
        activity = pytree.leaf_activity(treedef)
    recorder = RECORDER.get()
    inactive = recorder.inactive if recorder is not None else ()
    if treedef is None:  # no baked leaves: the walk of f is all it reads
        reads = _walk(f)
        structure = reads.result
    else:
        reads = _Reads()
        structure = _structure_key(treedef, reads)
    names = None  # every name the code reads: how a baked object's class is read
    inputs, values, active, kinds, input_kinds = [], [], [], [], []
    nested = on_tape = False
    for leaf, on in zip(leaves, activity):
        if type(leaf) is Dual:
            leaf = _kernel_dual(leaf, on)
            on_tape = on_tape or (type(leaf) is Dual and Tracked in (type(leaf.value), type(leaf.tangent)))
        if type(leaf) is Tracked or type(leaf) is Dual or _is_array_input(leaf):
            value = leaf.value if type(leaf) is Tracked or type(leaf) is Dual else leaf
            if type(value) is Tracked:  # tracked by two nested gradients: the kernel computes on the plain value
                nested, value = True, untracked(value)
            if type(value) is Lazy:  # a differentiated Dask array
                return DASK_LAYER.run(f, args, reduce, backend)
            kind = value.dtype if type(value) is np.ndarray else _kind(value)
            if (type(leaf) is Tracked and on and leaf.index not in inactive) or type(leaf) is Dual:
                active.append(len(values))
            inputs.append(leaf)
            values.append(value)
            input_kinds.append(kind)
            kinds.append(kind)
        else:  # baked into the kernel: ints, bools, None, strings, objects
            if is_chunked(leaf):  # a Dask array: each chunk runs this kernel (`chunked`)
                return DASK_LAYER.run(f, args, reduce, backend)
            names = tuple(sorted(reads.names)) if names is None else names
            kinds.append(("baked", reads.key(leaf, names)))
    on_tape = on_tape or (Dual in map(type, inputs) and any(type(inputs[i]) is Tracked for i in active))
    if on_tape:  # a jvp inside a gradient (reverse over forward)
        tracked = [a for a in inputs if type(a) is Tracked]
        for d in inputs:
            if type(d) is Dual:
                check_enclosing([*tracked, d.value], d.level)  # not a gradient inside the jvp
        result = None if recorder is not None else \
            _tangent_on_tape(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, active, reduce, backend)
        return _evaluated(f, args, reduce) if result is None else result
    if nested or _nested(inputs):
        levels = _two_levels(inputs, values, activity if treedef is not None else None, leaves)
        if levels is not None and recorder is not None:  # a prepared program records it (`prepare_hvp`)
            levels = recorder.levels(levels)
        result = None if levels is None or not reduce else \
            _second_order(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, levels, backend, recorder)
        return _evaluated(f, args, reduce) if result is None else result
    duals = [inputs[i] for i in active if type(inputs[i]) is Dual]
    if duals:  # forward mode (db.jvp): the value and its tangent Σ ∂f/∂aᵢ · tᵢ in one pass
        _check_duals([inputs[i] for i in active])
        tangents = [d.tangent for d in duals]
        kinds += [np.result_type(t) for t in tangents]
        key = (structure, tuple(kinds), tuple(active), reduce, "tangent")
        kernel = _kernel(key, f, treedef, leaves, len(values), active, reduce, input_kinds + kinds[-len(duals):],
                         tangents=len(duals))
        values = values + tangents
    else:
        key = (structure, tuple(kinds), tuple(active), reduce)
        kernel = _kernel(key, f, treedef, leaves, len(values), active, reduce, input_kinds)
    scales = None
    if reduce and recorder is None and len(kernel.outputs) > 1:  # (a jvp's tangent: Σ r · (-3t) as -3 · Σ r · t)
        kernel, scales = _unscaled(kernel)
    if active and len(kernel.outputs) == 1:
        active = []  # its value is not a real number: a constant (`_build`)
    active_shapes = [getattr(values[i], "shape", ()) for i in active]  # arrays, NumPy scalars or floats
    if duals and active:  # one output beside the value: the tangent, summed whole by db.sum
        active_shapes = [() if reduce else np.broadcast_shapes(*(np.shape(v) for v in values))]
    elif reduce and active and recorder is None and not kernel.complex:
        pending = _pending_sum(kernel, values, [inputs[i] for i in active], active_shapes, scales, backend)
        if pending is not None:
            call = pending.tape.operation(pending.index)
            if treedef is None and call.backend == "numpy" and backend is None and FORCED_BACKEND.get() is None \
                    and kernel.split.choice.chosen(call.size) == "numpy":  # later calls left pending by the plan
                _plan(f, kernel, values, active, reduce, call, reads, scales)
            return pending
    value, partials, used, size = kernel(values, active_shapes, backend)
    call = KernelCall(kernel.name, 1 if duals else len(active), used, size, reduce)
    calls = _log.get()
    if calls is not None:
        calls.append(call)
    if duals:
        tangent = partials[0] if scales is None else partials[0] * scales[0]
        return value if not active else Dual(value, _fitted_tangent(tangent, value), duals[0].level)
    parents = [inputs[i] for i in active]
    if treedef is None and recorder is None and used == "numpy" and backend is None and FORCED_BACKEND.get() is None \
            and kernel.choice.chosen(size) == "numpy":  # not a runner-up re-timed (`kernels.BackendChoice`)
        _plan(f, kernel, values, active, reduce, call, reads, scales)
    if recorder is not None and any(type(leaf) is Tracked for leaf in inputs):
        record = lambda: _record(parents, value, partials, active_shapes, call, recorder.tape)  # noqa: E731
        return recorder.kernel(kernel, inputs, values, active, used, reduce, record)
    if not active:
        return value
    return _record(parents, value, partials, active_shapes, call, scales=scales)


def _pending_sum(kernel, values, parents, active_shapes, scales, backend):
    """A sum whose value a gradient may not read, recorded with its partials alone and its value left pending
    (`tracked.Pending`: computed by the sum's kernel when read), or None where the value is computed now
    (`tracked.lazy_totals`; `Kernel.value_unread`: not when the last ones were read)."""
    tape = parents[0].tape
    size = math.prod(np.broadcast_shapes(*[np.shape(v) for v in values]))
    if any(p.tape is not tape for p in parents) or not lazy_totals(tape, size) or not kernel.value_unread():
        return None
    _, partials, used, size = kernel.without_value(values)(values, active_shapes, backend)
    call = KernelCall(kernel.name, len(parents), used, size, True)
    calls = _log.get()
    if calls is not None:
        calls.append(call)

    def compute():
        kernel.value_read()
        return kernel(values, active_shapes, backend)[0]

    backs = [kernel_pullback(p, s, (), tape.single_sweep, c)
             for p, s, c in zip(partials, active_shapes, scales or [1] * len(partials))]
    return tape.record(Total(compute, kernel.value_dtype(values), tape), _edges(parents, backs), call, Pending)


def _unscaled(kernel):
    """``(kernel, scales)``: a sum's kernel whose partials are computed without their literal factors
    (`_literal_factor`), and per partial that factor (``scales`` None: no partial has one, the kernel as it
    is).  EAM's ``∂/∂x Σ exp(-3(x + 1))`` is ``-3 · r``: the kernel stores ``r``, the exp it sums, where it
    stored ``-3 · r`` in a pass of its own, and the pullback multiplies by ``ȳ · (-3)``, one number
    (`kernel_pullback`): the same passes as a hand-written gradient.  Only partials that remain an operation's
    result of their own are taken so (not an input, which a kernel copies; not shared)."""
    if kernel.unscaled is None:
        outputs = kernel.outputs
        factored = [_literal_factor(o.graph, o, ()) if type(o) is Sym else (o, 1) for o in outputs[1:]]
        factored = [(p, c) if c != 1 and type(p) is Sym and p.op is not None else (o, 1)
                    for o, (p, c) in zip(outputs[1:], factored)]
        unscaled = None
        if any(c != 1 for _, c in factored):
            graph = next(p.graph for p, c in factored if c != 1)
            unscaled = Kernel(graph, kernel.inputs, [outputs[0]] + [p for p, _ in factored], True, kernel.name,
                              kernel.complex)
            if unscaled.fresh != kernel.fresh:  # a partial now shared with another: copied, no pass saved
                unscaled = None
        kernel.unscaled = (kernel, None) if unscaled is None else (unscaled, [c for _, c in factored])
    return kernel.unscaled


class _Plan:
    """A `broadcast`/`sum` call repeated with the same function, array shapes, dtypes and
    tracked arguments: its kernel on the NumPy backend, called without building a key.

    A model evaluated many times on small arrays calls the same kernel again and again;
    checking that this call is like the last one costs a fraction of finding its kernel.
    """

    __slots__ = ("code", "defaults", "namespace", "bindings", "helpers", "signature", "whole", "reduce", "call",
                 "shape", "bucket", "size", "scales", "kernel", "valueless", "unchosen")

    def __init__(self, f, kernel, values, active, reduce, call, reads, scales=None):
        self.code = f.__code__  # kept alive, so its id is not reused while this plan exists
        self.defaults = f.__defaults__
        self.namespace = f.__globals__
        self.bindings = tuple(reads.bindings)
        self.helpers = tuple(reads.functions[1:])  # the first is f: checked by code, defaults and globals
        self.signature = tuple((i in active, v.dtype) for i, v in enumerate(values))
        self.shape = values[0].shape
        self.size = values[0].size
        bucket = kernel.choice.buckets.get(self.size.bit_length())
        self.bucket = bucket if type(bucket) is kernels.Bucket else None  # an automatic choice to keep timing
        self.unchosen = bucket is None  # made by a call left pending (`_pending_sum`) before the kernel chose
        # `run` checks the shapes; a ufunc of 0-d arrays gives NumPy scalars, no arrays a later one could write into
        self.whole = kernel.typed_whole(tuple(v.dtype for v in values), same_shape=values[0].ndim > 0)
        self.reduce = reduce
        self.call = call
        self.scales = scales or [1] * len(active)  # the partials' literal factors (`_unscaled`)
        self.kernel = kernel
        self.valueless = None  # `_without_value`'s whole-array kernel (False: none fits), made on first use

    def run(self, f, args):
        """``f(*args)`` through the plan, or None if it is not the call the plan was made for:
        same code, defaults, bindings read (globals, module attributes) and helper functions,
        and per argument the same kind (tracked or not), dtype and shape."""
        if f.__code__ is not self.code or f.__closure__ or f.__defaults__ is not self.defaults \
                or f.__globals__ is not self.namespace:
            return None
        if len(args) != len(self.signature) or RECORDER.get() is not None or FORCED_BACKEND.get() is not None:
            return None
        shape = self.shape
        values = []
        parents = []
        for a, (tracked, dtype) in zip(args, self.signature):
            if (type(a) is Tracked) is not tracked:
                return None
            if tracked:
                parents.append(a)
                a = a.value
            if type(a) is not np.ndarray or a.dtype is not dtype or a.shape != shape:
                return None
            values.append(a)
        for namespace, name, value in self.bindings:  # `_Reads.unchanged` inline, f itself checked above
            if namespace.get(name, _MISSING) is not value:
                return None
        for helper, code, defaults in self.helpers:
            if helper.__code__ is not code or helper.__defaults__ is not defaults:
                return None
        kind = None
        if self.reduce and parents and self.size >= LAZY_TOTAL and lazy_totals(parents[0].tape, self.size) \
                and self.kernel.value_unread():  # its value left pending (`_pending_sum`)
            results = self._without_value(values)
            if results is None:
                return None
            value = Total(functools.partial(self._value, values), results[0].dtype, parents[0].tape)
            kind = Pending
        else:
            bucket = self.bucket
            if self.unchosen:  # the value's first call since: the kernel chooses (a plan again if numpy)
                chosen = self.kernel.choice.buckets.get(self.size.bit_length())
                if chosen is None:
                    return None
                self.bucket = bucket = chosen if type(chosen) is kernels.Bucket else None
                self.unchosen = False
            if bucket is None:
                results = self.whole(*values)
            elif bucket.wait and bucket.backend == "numpy":  # the choice's timed warm path (`BackendChoice.run`)
                bucket.wait -= 1
                start = kernels.clock()
                results = self.whole(*values)
                bucket.observe((kernels.clock() - start) / self.size)
            else:
                return None  # a runner-up is due, or took over: the kernel's own call
            value = np.add.reduce(results[0], None) if self.reduce else results[0]
        calls = _log.get()
        if calls is not None:
            calls.append(self.call)
        if not parents:
            return value
        tape = parents[0].tape
        if tape.closed or len(parents) > 1:
            if _nested(parents):
                return None
            tape = tape_of(parents)  # a clear error for a stale or mixed value
        if len(parents) == 1:  # the usual case, one differentiated array
            x = parents[0]
            back = fitting_kernel_pullback(results[1], tape.single_sweep, self.scales[0])  # partials of x's shape
            if x.slice_index is not None:
                back = _edge(x, back)  # first: settling a view moves its index
            return tape.record(value, ((x.index, back),), self.call, kind)
        backs = [fitting_kernel_pullback(p, tape.single_sweep, c) for p, c in zip(results[1:], self.scales)]
        return tape.record(value, _edges(parents, backs), self.call, kind)

    def _without_value(self, values):
        """The whole-array results of the sum's kernel without its value (`Kernel.without_value`): a zero of the
        value's dtype, then the partials; None where they are not arrays of the call's shape of their own."""
        whole = self.valueless
        if whole is None:
            kernel = self.kernel.without_value(values)
            whole = kernel.typed_whole(tuple(v.dtype for v in values), same_shape=values[0].ndim > 0)
            results = whole(*values)
            dtype = values[0].dtype
            fits = all(kernel.fresh) and all(type(r) is np.ndarray and r.shape == self.shape and r.dtype == dtype
                                             for r in results[1:])
            self.valueless = whole if fits else False
            return (np.zeros((), dtype),) + tuple(results[1:]) if fits else None
        if whole is False:
            return None
        results = whole(*values)
        return (np.zeros((), values[0].dtype),) + tuple(results[1:])

    def _value(self, values):
        """The pending value of a sum this plan left so (`_without_value`), read after all: the whole kernel's."""
        self.kernel.value_read()
        return np.add.reduce(self.whole(*values)[0], None)


def _plan(f, kernel, values, active, reduce, call, reads, scales=None):
    """Remember a `_Plan` for this call if its kernel's whole-array results need no reshaping,
    copying or casting (all inputs arrays of one shape, every partial an array of its own), and
    if the bindings ``f`` reads pin what it reads (``reads``: the walk of ``f`` that keyed its kernel)."""
    if not reads.pinned or type(f) is not FunctionType or f.__closure__ or not values:
        return
    shape, dtype = np.shape(values[0]), getattr(values[0], "dtype", None)
    if not all(type(v) is np.ndarray and v.shape == shape and v.dtype == dtype for v in values) \
            or not all(kernel.fresh):
        return
    plan = _Plan(f, kernel, values, active, reduce, call, reads, scales)
    results = plan.whole(*values)
    if all(type(r) is np.ndarray and r.shape == shape and r.dtype == dtype for r in results):
        with _cache_lock:
            _plans[(id(f.__code__), reduce)] = plan
            if len(_plans) > CACHE_SIZE:
                del _plans[next(iter(_plans))]


def _nested(inputs):
    """Whether tracked ``inputs`` belong to the tapes of nested gradients (a value of the outer gradient in a
    kernel inside the inner one): a fused kernel, on plain values, would lose the outer gradient's."""
    tape = None
    for a in inputs:
        if type(a) is Tracked:
            if tape is not None and a.tape is not tape and not a.tape.closed and not tape.closed \
                    and a.tape.level != tape.level:
                return True
            tape = a.tape
    return False


def _two_levels(inputs, values, activity, leaves):
    """For a `sum` whose inputs (of plain ``values``) two nested gradients track: ``(inner, outer, inner
    positions, outer parents)``, the inner tape and its tracked inputs' positions, the outer tape and
    ``{position: its tracked value}`` (an inner input's value, or an input of the outer tape itself); None
    where a second-order kernel cannot serve (more levels, a cut leaf, values of another shape than the
    sum's or a scalar)."""
    tracked = [(p, a) for p, a in enumerate(inputs) if type(a) is Tracked]
    if activity is not None and not all(on for leaf, on in zip(leaves, activity) if type(leaf) is Tracked):
        return None
    tapes = {a.tape for _, a in tracked} | {a.value.tape for _, a in tracked if type(a.value) is Tracked}
    if len(tapes) != 2 or any(type(a.value) is Tracked and type(a.value.value) is Tracked for _, a in tracked):
        return None
    outer, inner = sorted(tapes, key=lambda t: t.level)
    if outer.closed or inner.closed or outer.level == inner.level:
        return None
    tracked_shapes = [getattr(values[p], "shape", ()) for p, _ in tracked]
    if any(tracked_shapes):  # scalars (coefficients) need no broadcast shape
        shape = np.broadcast_shapes(*[np.shape(v) for v in values])
        if any(s not in ((), shape) for s in tracked_shapes):
            return None
    inner_positions = [p for p, a in tracked if a.tape is inner]
    outer_parents = {p: a.value if a.tape is inner else a for p, a in tracked
                     if a.tape is outer or type(a.value) is Tracked}
    return inner, outer, inner_positions, outer_parents


def _second_order(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, levels, backend, recorder=None):
    """``sum(f, ...)`` whose inputs two nested gradients track (``levels``, see `_two_levels`), in one fused pass
    (None where complex values take part: the caller runs ``f`` operation by operation)
    of second-order dual numbers: the value, a partial per input either gradient tracks and their second
    partials.  The outer tape records the value (pullbacks: the partials) and each partial of an inner input
    (pullbacks: the second partials), the inner tape the value with pullbacks ``g · partial``, those
    partials the outer tape's values: so the inner gradient's pullback is differentiable in one pass.  While a
    prepared program records the outer tape, ``recorder`` gets the step (`prepared.Recorder.second_order`)."""
    inner, outer, inner_positions, outer_parents = levels
    active = sorted(set(inner_positions) | set(outer_parents))
    key = (structure, tuple(kinds), ("second order", tuple(active)), True)
    kernel = _kernel(key, f, treedef, leaves, len(values), active, True, input_kinds, order=2)
    if kernel.complex or (recorder is not None and not outer_parents):
        return None  # complex values take part (their rules, operation by operation: `_evaluated`), or a constant
    shapes = {p: np.shape(values[p]) for p in active}
    scalars = not any(shapes.values())  # then so are their second partials: no broadcast shape needed
    outer_at = list(outer_parents)
    if outer_at and scalars and recorder is None:
        return _second_order_of_scalars(kernel, levels, active, inputs, values, input_kinds, backend)
    pairs = [(a, b) for i, a in enumerate(active) for b in active[i:]]
    shape = () if scalars else np.broadcast_shapes(*[np.shape(v) for v in values])
    pair_shapes = [() if shapes[a] == shapes[b] == () else shape for a, b in pairs]
    value, results, used, size = kernel(values, [shapes[p] for p in active] + pair_shapes, backend)
    partial = dict(zip(active, results))
    call = KernelCall(kernel.name, len(active), used, size, True, len(pairs))
    calls = _log.get()
    if calls is not None:
        calls.append(call)
    if outer_at:
        value = outer.record(value, _edges([outer_parents[p] for p in outer_at],
                                           [kernel_pullback(partial[p], shapes[p], (), False) for p in outer_at]), call)
    second = {}  # each partial its own value (a prepared program's recording replays them one by one)
    for (a, b), h in zip(pairs, results[len(active):]):
        second[a, b] = second[b, a] = h
    ds = []
    for p in inner_positions:
        d = partial[p]
        if outer_at:  # the partial as the outer tape's value: its pullbacks are the second partials
            d = outer.record(d, _edges([outer_parents[q] for q in outer_at],
                                       [_second_partial_pullback(second[p, q], shapes[q], shapes[p])
                                        for q in outer_at]), call)
        ds.append(d)
    if recorder is not None:
        recorder.second_order(kernel, inputs, values, used, value, active, pairs, outer_at,
                              dict(zip(inner_positions, ds)), [shapes[p] for p in active] + pair_shapes)
    backs = [kernel_pullback(d, shapes[p], (), False) for p, d in zip(inner_positions, ds)]
    return inner.record(value, _edges([inputs[p] for p in inner_positions], backs), call)


def _second_order_of_scalars(kernel, levels, active, inputs, values, kinds, backend):
    """`_second_order` where every argument either gradient tracks is a scalar and the outer tape tracks one
    at least (not recorded by a prepared program): the kernel's results as one vector (`Kernel.partial_sums`),
    the inner partials one vector of the outer tape (`_scalar_partials`).  Arguments that are the elements
    ``c[0], c[1], ...`` of one vector (`sweeps.vector_elements`: coefficients) are reached along one edge into
    that vector, on either tape: a Hessian in k coefficients then sweeps two edges, not 2k."""
    inner, outer, inner_positions, outer_parents = levels
    value, results, used, size = kernel.partial_sums(values, backend, tuple(kinds))
    k = len(active)
    call = KernelCall(kernel.name, k, used, size, True, k * (k + 1) // 2)
    calls = _log.get()
    if calls is not None:
        calls.append(call)
    dtype = results.dtype
    parents = list(outer_parents.values())
    columns = [active.index(q) for q in outer_parents]
    vector = _elements_of(parents, dtype)
    if vector is None:
        edges = _edges(parents, [fitting_kernel_pullback(results[j], False) for j in columns])
    else:  # ∂f/∂v: the partials at the elements' places
        p, ks, n = vector
        dv = np.zeros(n, dtype)
        np.add.at(dv, ks, results[columns])
        edges = ((p, fitting_kernel_pullback(dv, False)),)
    value = outer.record(value, edges, call)
    arguments = [inputs[p] for p in inner_positions]
    stacked = _scalar_partials(outer, results, active, inner_positions, parents, columns, vector, call)
    inner_vector = _elements_of(arguments, dtype)
    if inner_vector is not None and inner_vector[1] == list(range(inner_vector[2])):  # c[0], ..., c[n-1] of c
        return inner.record(value, ((inner_vector[0], fitting_kernel_pullback(stacked, False)),), call)
    shape = stacked.value.shape  # its elements as `Tracked.__getitem__` records them, without a call each
    ds = [outer.record(d, ((stacked.index, IndexPullback(i, shape, dtype)),), getitem)
          for i, d in enumerate(stacked.value)]
    backs = [fitting_kernel_pullback(d, False) for d in ds]  # each d a scalar, as its argument
    return inner.record(value, _edges(arguments, backs), call)


def _elements_of(values, dtype):
    """``(p, ks, n)`` where ``values`` are elements ``v[k]`` of one vector ``v`` of ``dtype`` (`vector_elements`)
    that are most of v, else None (a few of a long vector: an edge each, not a pullback of v's size per row)."""
    vector = vector_elements(values)
    if vector is None or vector[3] != dtype or vector[2] > 2 * len(values) + 8:
        return None
    return vector[:3]


def _scalar_partials(outer, results, active, inner_positions, parents, columns, vector, call):
    """The partials of the inner inputs of a second-order kernel of scalars (``results``: its partials of the
    ``active`` inputs, then their second partials, the upper triangle row by row) as one vector of the outer
    tape, whose pullback into each outer input ``parents[j]`` contracts the cotangent with that input's
    second partials (`Contracted`, column ``columns[j]`` of the Hessian); where those inputs are the elements
    ``v[k]`` of one vector (``vector``: ``(p, ks, n)``), into v at once.  A Hessian of k coefficients so
    sweeps one edge or k, not k²."""
    k = len(active)
    dtype = results.dtype
    hessian = np.empty((k, k), dtype)
    upper = _upper_triangle(k)
    hessian[upper] = hessian.T[upper] = results[k:]
    rows = [active.index(p) for p in inner_positions]
    partials = results[:k][rows]
    block = hessian[columns][:, rows]  # row j: the second partials of the outer input j (the Hessian is symmetric)
    if vector is None:
        return outer.record(partials, _edges(parents, [Contracted(row) for row in block]), call)
    p, ks, n = vector
    into = np.zeros((len(rows), n), dtype)
    np.add.at(into.T, ks, block)  # (an element twice, c[0] and c[0]: both its columns)
    return outer.record(partials, ((p, Contracted(into)),), call)


@functools.cache
def _upper_triangle(k):
    """The indices of a k-by-k matrix's upper triangle, row by row (the order of a kernel's second partials)."""
    return np.triu_indices(k)


def _tangent_on_tape(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, active, reduce, backend):
    """``sum``/``broadcast`` of duals of a `jvp` whose values or tangents a gradient tracks (reverse over forward,
    as `db.hvp`), in one fused pass: the value ``y``, the tangent ``ẏ = Σ ∂f/∂dᵢ · tᵢ`` over the dual arguments,
    and per argument ``a`` the tape tracks ``∂y/∂a`` and ``∂ẏ/∂a`` (the second partials contracted with the
    tangents).  The tape records ``y`` and ``ẏ``: ``a``'s cotangent is ``ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` in one pass
    (`_tangent_pullback`), a tracked tangent ``tᵢ``'s is ``ẏ̄ · ∂f/∂dᵢ``.  A sum over full-size tracked
    arguments keeps no per-element partial: their cotangents come from a second kernel (`_Deferred`).  None
    where this kernel cannot serve (values of two tapes or levels, complex values): the caller runs ``f``
    operation by operation."""
    duals = [p for p in active if type(inputs[p]) is Dual]
    tracked = [p for p in active if type(inputs[p]) is Tracked or type(inputs[p].value) is Tracked]
    moving = [p for p in duals if type(inputs[p].tangent) is Tracked]  # tangents the tape tracks
    parents = [inputs[p].value if type(inputs[p]) is Dual else inputs[p] for p in tracked]
    tangent_parents = [inputs[p].tangent for p in moving]
    tape = (parents or tangent_parents)[0].tape
    if any(p.tape is not tape or type(p.value) is Tracked for p in parents + tangent_parents) or tape.closed \
            or len({inputs[p].level for p in duals}) > 1 \
            or any(isinstance(inputs[p].tangent, Guarded) for p in duals if p not in moving):
        return None
    tangents = [untracked(inputs[p].tangent) for p in duals]
    differentiated = tracked + [p for p in moving if p not in tracked]  # the partials ∂y/∂a the tape needs
    kinds = kinds + [_kind(t) if type(t) is not float else np.dtype(np.float64) for t in tangents]
    key = (structure, tuple(kinds), tuple(duals), reduce, "tangent on tape", tuple(differentiated), len(tracked))
    input_kinds = input_kinds + kinds[-len(duals):]
    kernel = _kernel(key, f, treedef, leaves, len(values), duals, reduce, input_kinds,
                     tangents=len(duals), tracked=(differentiated, tracked))
    if kernel.complex or len(kernel.outputs) == 1:  # complex values, or no real value: operation by operation
        return None
    shapes = {p: np.shape(values[p]) for p in differentiated}
    values = values + tangents
    partial_shapes = [() if reduce else np.shape(values[0])] + [shapes[p] for p in differentiated + tracked]
    deferred = _deferred(kernel, key, input_kinds, values, shapes, tracked) if reduce and not moving else None
    if deferred is not None:
        value, results, used, size = deferred.forward(values, deferred.shapes(shapes), backend)
        if deferred.scale != 1:
            results[0] = results[0] * deferred.scale
    else:
        value, results, used, size = kernel(values, partial_shapes, backend)
    call = KernelCall(kernel.name, len(differentiated), used, size, reduce, len(tracked))
    calls = _log.get()
    if calls is not None:
        calls.append(call)
    out_shape = () if reduce else np.shape(value)
    tangent = _fitted_tangent(results[0], value)
    if deferred is not None:
        held = _HeldCotangent(_zero_cotangent(value))
        kept = results[1 + 2 * len(deferred.small):]
        every_partial = lambda: kernel(values, partial_shapes, backend)[1]  # noqa: E731 - if a sweep needs them
        small = dict(zip(deferred.small, zip(results[1:], results[1 + len(deferred.small):])))
        backs = [_tangent_pullback(held, *small[p], shapes[p], out_shape, tape.single_sweep, p == tracked[-1])
                 if p in small else
                 _deferred_pullback(held, deferred, p, values, kept, every_partial, tape.single_sweep, p == tracked[-1],
                                    backend)
                 for p in tracked]
        value = tape.record(value, _edges(parents, backs), call)
        return Dual(value, tape.record(tangent, ((value.index, held.hold),), call), inputs[duals[0]].level)
    partial = dict(zip(differentiated, results[1:]))
    tangent_partial = dict(zip(tracked, results[1 + len(differentiated):]))
    edges = _edges(tangent_parents, [kernel_pullback(partial[p], shapes[p], out_shape, False) for p in moving])
    if tracked:
        held = _HeldCotangent(_zero_cotangent(value))
        value = tape.record(value, _edges(parents, [
            _tangent_pullback(held, partial[p], tangent_partial[p], shapes[p], out_shape, tape.single_sweep,
                              p == tracked[-1]) for p in tracked]), call)
        edges = ((value.index, held.hold),) + edges
    return Dual(value, tape.record(tangent, edges, call), inputs[duals[0]].level)


# Operations a cotangent kernel recomputes from what it reads (one cheap pass each); a full-size node of
# another operation (exp, log, a division, a user's primitive) that the forward pass computes anyway is kept.
_RECOMPUTED = frozenset((np.add, np.subtract, np.multiply, np.negative, np.positive, np.square, np.absolute,
                         np.maximum, np.minimum, np.where, np.sign, np.copysign))
MAX_KEPT = 2  # full-size nodes a forward pass keeps for its cotangent kernels: the two partials it used to keep
_deferred_kernels = {}  # (kernel key, which inputs have the call's full size) -> its `_Deferred`, or None


class _Deferred(NamedTuple):
    """A reverse-over-forward `db.sum` whose tracked arguments include full-size ones (``full``): its forward
    kernel computes ``y``, ``ẏ``, the summed partials of the ``small`` tracked arguments and the ``kept`` nodes
    (full-size values its cotangent kernels read instead of recomputing them), but no per-element partial; a
    full-size argument's cotangent ``ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` is one pass of its cotangent kernel
    (``combines``), once the scalars ``ȳ``, ``ẏ̄`` are known.  EAM's hvp at N=1e6: one exp pass with two sums,
    then ``x̄`` from the kept ``exp`` and ``v`` in one pass written over the kept array."""

    forward: Kernel
    small: list
    kept: int
    combines: dict  # tracked position -> its cotangent kernel (inputs: the call's, ȳ, ẏ̄, the kept nodes)
    index: dict  # tracked position -> its place among the tracked (for the whole kernel's partials)
    scale: Any  # the tangent's literal factor, taken out of its sum (`_literal_factor`)

    def shapes(self, shapes):
        """The forward kernel's output shapes after the value: ``ẏ``, the small partials, the kept nodes."""
        full = shapes[next(iter(self.combines))]
        return [()] + [shapes[p] for p in self.small] * 2 + [full] * self.kept


def _deferred(kernel, key, kinds, values, shapes, tracked):
    """The `_Deferred` form of a reverse-over-forward kernel of a sum, or None if no tracked argument has the
    call's full size (the kernel's summed partials serve) or a partial of one is a constant."""
    shapes_of = [np.shape(v) for v in values]
    shape = shapes_of[0] if shapes_of.count(shapes_of[0]) == len(shapes_of) else np.broadcast_shapes(*shapes_of)
    size = math.prod(shape)
    if size <= 1 or not any(shapes[p] == shape for p in tracked):
        return None
    full = tuple(np.ndim(v) > 0 and np.size(v) == size for v in values)
    cache_key = (key, full, tuple(shapes[p] == shape for p in tracked))
    try:
        return _deferred_kernels[cache_key]
    except KeyError:
        pass
    deferred = _build_deferred(kernel, tracked, [p for p in tracked if shapes[p] == shape], full, kinds)
    with _cache_lock:
        if len(_deferred_kernels) > CACHE_SIZE:
            _deferred_kernels.clear()
        _deferred_kernels[cache_key] = deferred
    return deferred


def _build_deferred(kernel, tracked, full_tracked, full, kinds):
    outputs, n = kernel.outputs, len(tracked)
    value, partials, tangent_partials = outputs[0], dict(zip(tracked, outputs[2:2 + n])), \
        dict(zip(tracked, outputs[2 + n:]))
    wanted = [partials[p] for p in full_tracked] + [tangent_partials[p] for p in full_tracked]
    if any(type(o) is not Sym for o in [value, outputs[1]] + wanted):
        return None
    small = [p for p in tracked if p not in full_tracked]
    dtypes = _infer_dtypes(kernel, kinds)
    scalar = _scalar_nodes(kernel, full)
    tangent, scale = _literal_factor(value.graph, outputs[1], scalar)
    first = [value, tangent] + [partials[p] for p in small] + [tangent_partials[p] for p in small]
    needed = {node.index for node in needed_nodes(value.graph, wanted)}
    kept = [node for node in needed_nodes(value.graph, first) if node.index in needed and node.index not in scalar
            and node.op not in _RECOMPUTED and dtypes[node.index] == dtypes[value.index]]
    kept = kept if len(kept) <= MAX_KEPT else []
    forward = Kernel(value.graph, kernel.inputs, first + kept, True, kernel.name)
    combines = {p: _cotangent_kernel(kernel.inputs, full, kept, partials[p], tangent_partials[p], kernel.name)
                for p in full_tracked}
    return _Deferred(forward, small, len(kept), combines, {p: k for k, p in enumerate(tracked)}, scale)


def _literal_factor(graph, node, scalar):
    """``(p, c)`` with ``node = c · p``: ``c`` the product of its Python-number factors, ``p`` that of the rest,
    so that a sum is ``c · Σ p`` (EAM's tangent ``Σ r · (-3v)`` is ``-3 · Σ r · v``, one dot product per
    block); ``(node, 1)`` where it has no such factor or a node of no full-size input is a factor."""
    scalars, full = _product_factors(node, scalar)
    if not full or any(type(a) not in (int, float) for a in scalars) or len(scalars) == 0:
        return node, 1
    product = full[0]
    for a in full[1:]:
        product = graph.apply(np.multiply, (product, a))
    return product, math.prod(scalars)


def _cotangent_kernel(inputs, full, kept, d, dt, name):
    """The kernel of ``ȳ · d + ẏ̄ · dt`` (``d``, ``dt`` nodes of a traced graph), in a graph of its own whose
    inputs are the traced function's, then ``ȳ`` and ``ẏ̄``, then the ``kept`` nodes (read, not recomputed)."""
    graph = Graph()
    new = {x.index: graph.input() for x in inputs}
    g, gt = graph.input(), graph.input()
    new.update((node.index, graph.input()) for node in kept)
    for node in needed_nodes(d.graph, [d, dt]):
        if node.index not in new:
            new[node.index] = graph.node(node.op, tuple(new[a.index] if type(a) is Sym else a for a in node.args))
    scalar = _scalar_nodes(_Nodes(graph.nodes[:len(inputs) + 2 + len(kept)], needed_nodes(graph, [new[d.index],
                                                                                         new[dt.index]])),
                           list(full) + [False, False] + [True] * len(kept))
    total = _factored(graph, [(g, new[d.index]), (gt, new[dt.index])], scalar)
    return Kernel(graph, graph.nodes[:len(inputs) + 2 + len(kept)], [total], False, f"{name} cotangent")


class _Nodes(NamedTuple):
    """What `_scalar_nodes` reads of a kernel: its inputs and operations."""

    inputs: list
    order: list


def _factored(graph, terms, scalar):
    """``Σ c · p`` over ``terms`` (scalar ``c``, a node ``p``) with each product's factors regrouped: the
    scalars (``scalar``: nodes of no full-size input, literals) multiplied first, once per call, and the
    full-size factors common to every term taken out, so that EAM's ``ȳ · (-3r) + ẏ̄ · (-3v)(-3r)`` is
    ``r · (-3ȳ + 9ẏ̄ · v)``: three passes over the elements instead of six."""
    factors = [_product_factors(p, scalar) for _, p in terms]
    common = []
    for node in factors[0][1]:
        if all(any(f is node for f in full) for _, full in factors[1:]):
            common.append(node)
            for _, full in factors[1:]:
                full.pop(next(k for k, f in enumerate(full) if f is node))
    for node in common:
        factors[0][1].remove(node)
    total = 0
    for (c, _), (scalars, full) in zip(terms, factors):
        python = [a for a in scalars if type(a) in (int, float)]  # folded weakly, as NumPy types a literal
        term = graph.apply(np.multiply, (c, math.prod(python))) if python else c
        for a in [a for a in scalars if type(a) not in (int, float)] + full:
            term = graph.apply(np.multiply, (term, a))
        total = term if type(total) is int else graph.apply(np.add, (total, term))
    for node in common:
        total = graph.apply(np.multiply, (total, node))
    return total


def _product_factors(node, scalar):
    """``(scalar factors, full-size factors)`` of ``node`` read as a product through ``*`` and unary ``-``."""
    if type(node) is not Sym or node.index in scalar:
        return [node], []
    if node.op is np.multiply and not any(map(_is_boolean, node.args)):  # bool·bool is `and`
        (s0, f0), (s1, f1) = (_product_factors(a, scalar) for a in node.args)
        return s0 + s1, f0 + f1
    if node.op is np.negative:
        s, f = _product_factors(node.args[0], scalar)
        return s + [-1], f
    return [], [node]


def _deferred_pullback(held, deferred, p, values, kept, partials, in_place, last, backend):
    """The pullback ``ȳ ↦ ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` into the full-size argument at ``p`` of a `_Deferred` kernel
    (``ẏ̄`` held by ``held``): scalar cotangents run its cotangent kernel on the call's ``values`` and the
    ``kept`` arrays, over the first kept array where ``in_place`` (the tape is swept once) and it is this
    kernel's alone; other cotangents (a sweep recorded on a tape) take the partials of the whole kernel
    (``partials()``, computed again)."""
    combine, typed = deferred.combines[p], type(held.zero)  # ȳ, ẏ̄ in the value's dtype, as `_tangent_pullback`
    dtype = np.dtype(combine.value_dtype(values + [held.zero] * 2 + kept)) if kept else None
    over = kept[0] if in_place and kept and len(deferred.combines) == 1 and type(kept[0]) is np.ndarray \
        and kept[0].base is None and kept[0].flags.c_contiguous and kept[0].dtype == dtype \
        and not any(np.may_share_memory(kept[0], v) for v in values) else None  # the kernel's own array
    shape, k, n = np.shape(values[p]), deferred.index[p], len(deferred.index)

    def back(g):
        gt = held.take(last)
        if type(g) in REAL_FLOATS and type(gt) in REAL_FLOATS:
            args = values + [typed(g), typed(gt)] + kept
            return combine(args, [], backend)[0] if over is None else combine.into(over, args, backend)
        results = partials()
        d, dt = results[1 + k], results[1 + n + k]
        ct = g * d if gt is None else g * d + gt * dt
        if np.shape(ct) == shape:
            return ct
        return unbroadcast(np.broadcast_to(ct, np.broadcast_shapes(np.shape(ct), ())), shape)

    return back


class _HeldCotangent:
    """The cotangent ``ẏ̄`` of a reverse-over-forward kernel's tangent ``ẏ``, held for the pullbacks of its
    value ``y`` (`_tangent_pullback`), so that each argument's cotangent ``ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` is one
    pass.  ``ẏ`` is recorded after ``y`` with one edge into ``y``, `hold`, which keeps ``ẏ̄`` and gives ``y``
    a zero cotangent: the sweep, which goes from the last record down, reaches ``y`` after ``ẏ`` and always
    when ``ẏ`` had a cotangent.  Per thread: two threads may sweep one tape."""

    __slots__ = ("local", "zero")

    def __init__(self, zero):
        self.local = threading.local()
        self.zero = zero

    def hold(self, g):
        self.local.g = g
        return self.zero

    def take(self, last):
        """``ẏ̄`` of this sweep (None if ``ẏ`` had none), forgotten by the last pullback of ``y``."""
        g = getattr(self.local, "g", None)
        if last:
            self.local.g = None
        return g


def _zero_cotangent(value):
    """A zero of ``value``'s shape and dtype, what `_HeldCotangent.hold` gives ``y`` (a pullback's cotangent has its
    argument's shape: a sweep adds into it at a view's index); an array's a read-only broadcast, no allocation."""
    if type(value) in FLOAT_SCALARS:
        return type(value)(0)
    zero = np.result_type(value).type(0)
    return zero if np.ndim(value) == 0 else np.broadcast_to(zero, np.shape(value))


def _tangent_pullback(held, d, dt, shape, out_shape, in_place, last):
    """The pullback ``ȳ ↦ ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` (``d``, ``dt``) of a reverse-over-forward kernel into its
    argument ``a`` of ``shape`` (``ẏ̄`` held by ``held``, forgotten by the ``last`` argument's); ``in_place``: the
    partials are the kernel's own buffers and the tape is swept once, so the cotangent is computed into ``d``
    without allocating (three NumPy passes: one numexpr pass or a loop over blocks measured no faster on two
    loaded cores).  A closure, so that `explain` counts the partials it keeps."""
    owned = in_place and type(d) is np.ndarray and type(dt) is np.ndarray and d.shape == dt.shape == shape \
        and d.base is None and dt.base is None and d is not dt and out_shape == ()  # the kernel's own buffers

    def back(g):
        gt = held.take(last)
        if owned and type(g) in REAL_FLOATS and type(gt) in REAL_FLOATS:
            np.multiply(d, g, out=d)
            np.multiply(dt, gt, out=dt)
            return np.add(d, dt, out=d)
        ct = g * d if gt is None else g * d + gt * dt
        if np.shape(ct) == shape:
            return ct
        return unbroadcast(np.broadcast_to(ct, np.broadcast_shapes(np.shape(ct), out_shape)), shape)

    return back


def _second_partial_pullback(h, shape, partial_shape):
    """The pullback, into an argument of ``shape``, of a partial of ``partial_shape`` whose derivative in it is
    ``h``: ``h`` itself, a factor the sweep multiplies by, where ``g · h`` has the argument's shape (a Hessian
    of k coefficients: k² of them per sweep), else ``g · h`` summed back to the argument's shape."""
    if type(h) in FACTORS and np.shape(h) == shape and partial_shape in ((), shape):
        return h
    return Unbroadcast(h, shape)


def _evaluated(f, args, reduce):
    """``broadcast(f, *args)`` (or its sum) with ``f`` run on the arguments as they are, each NumPy call
    recorded by its own rule: a kernel inside a gradient of a gradient, whose values are tracked by several
    gradients (each records what it sees; a fused kernel computes on plain values and would lose them)."""
    args = [pytree.without_markers(a) for a in args]
    shape = np.broadcast_shapes(*[np.shape(untracked(leaf)) for leaf in pytree.flatten(args)[0]
                                  if isinstance(leaf, Guarded) or _is_array_input(leaf)])
    out = f(*args)
    if np.shape(out) != shape:
        out = np.broadcast_to(out, shape)
    return np.sum(out) if reduce else out


def _record(parents, value, partials, shapes, call, tape=None, scales=None):
    """``value`` recorded with a pullback per parent from the kernel's ``partials`` (times ``scales``, `_unscaled`)."""
    tape = tape_of(parents) if parents else tape
    out_shape = () if call.reduce else np.shape(value)
    backs = [kernel_pullback(p, s, out_shape, tape.single_sweep, c)
             for p, s, c in zip(partials, shapes, scales or [1] * len(partials))]
    if np.iscomplexobj(value):  # a real parent's cotangent is the real part, as in `tracked._record_complex`
        tape.complex = True
        backs = [b if np.iscomplexobj(p.value) else RealPart(b) for p, b in zip(parents, backs)]
    return tape.record(value, _edges(parents, backs), call)


def _kernel_dual(leaf, on):
    """A dual argument of a kernel: its value is an active input (its tangent another input, see `_build`);
    a cut one is a constant."""
    if not on:
        return leaf.value
    if type(leaf.value) is Dual:
        raise KernelError("db.sum/db.broadcast of a nested db.jvp (a dual of a dual) is not supported; compute "
                          "it with NumPy functions outside a kernel")
    return leaf


def _check_duals(parents):
    """The active arguments of a kernel in forward mode: duals of one `db.jvp` level, no tracked value."""
    if Tracked in map(type, parents):
        raise KernelError("a db.sum/db.broadcast mixes a value of db.jvp (a dual) and one of db.gradient "
                          "(tracked); differentiate the kernel with one of them")
    if len({p.level for p in parents}) > 1:
        raise KernelError("db.sum/db.broadcast of duals of two nested db.jvp calls is not supported; compute "
                          "it with NumPy functions outside a kernel")


def _fitted_tangent(tangent, value):
    """The kernel's tangent output with the value's shape and dtype (a literal one broadcast)."""
    if type(tangent) is type(value) and (type(value) is not np.ndarray or tangent.shape == value.shape) \
            and tangent.dtype == value.dtype:
        return tangent  # of the value's shape and dtype: an array, or a NumPy scalar of a sum
    dtype = np.result_type(value)
    t = np.broadcast_to(np.asarray(tangent, dtype), np.shape(value))
    return t.copy() if isinstance(value, np.ndarray) else t[()]


def _is_array_input(leaf):
    """Floats, arrays and NumPy scalars are kernel inputs; everything else is baked into the kernel (a
    Python complex too: a literal, weakly typed as NumPy types it)."""
    return type(leaf) is float or isinstance(leaf, np.ndarray) or (
        isinstance(leaf, np.generic) and leaf.dtype.kind in "fiubc"
    )


def _structure_key(d, reads=None, names=()):
    """A hashable description of a treedef: kinds, types, code objects and what they read (`_Reads`).

    ``names``: those the code reading this node names (a method's, for its ``self``).
    """
    if d is None:
        return None
    reads = reads or _Reads()
    kind, aux, children = d
    if kind in ("dataclass", "object"):
        aux = (reads.key(type(aux[0]), names + ("__call__",)), aux[1])
    elif kind in ("closure", "function"):
        names = _names_read(aux.__code__)
        walk = _walk(aux)  # its cells are its children
        reads.include(walk)
        aux = walk.result
    elif kind == "method" and children[0] is not None and children[0][0] in ("closure", "function"):
        names = _names_of(children[0][1])
    elif kind == "static":
        aux = reads.key(aux, names)
    return (kind, aux, tuple(_structure_key(c, reads, names) for c in children))


def _walk(function):
    """The `_Reads` of ``function`` without its closure cells (a kernel's cells are its flattened
    state), its key in ``result``; not to be changed (it may be shared).

    The walk of a function whose code was walked before, with the same globals and defaults, is
    reused while every binding it read is unchanged and it was pinned (nothing it read can change
    in place): a kernel written as a lambda inside the loss is a new function every call.
    """
    known = _walks.get(id(function.__code__))
    if known is not None and known.functions[0][1] is function.__code__ and known.same_function(function) \
            and known.unchanged():
        return known
    walk = _Reads()
    walk.result = walk.function(function, cells=False)
    if walk.pinned:
        if len(_walks) > 4 * CACHE_SIZE:
            _walks.clear()
        _walks[id(function.__code__)] = walk
    return walk


_MISSING = object()  # a name not bound
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python, whose attributes may change
_BY_VALUE = {str, bytes, bool, int, complex, type(None), range, type(Ellipsis)}
_CODE = {np.ufunc, BuiltinFunctionType, type(np.sum)}  # written in C, they do not change: keyed by identity


class _Identity:
    """A key part that compares its object by identity, and keeps it alive (its id is not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Identity and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


class _Reads:
    """What a trace reads besides the kernel's arguments, as an exact, hashable key: any change is a new
    trace, so a kernel never runs on stale state.

    Numbers by type and value (a zero with its sign), arrays by their bytes, containers and objects
    written in Python by their contents, functions by code, defaults, attributes, closure and the
    globals they read, modules and classes by the attributes the code names; objects written in C
    (ufuncs, builtins, NumPy functions) by identity.

    For the cached plan it also collects every namespace binding read (a global, a module attribute)
    and every function; ``pinned`` stays True while those alone pin the key (nothing read can change
    in place: no container, array, object, class or closure cell).
    """

    def __init__(self):
        self.seen = {}  # id (and names) -> order of the first visit: a shared or cyclic object is keyed once
        self.names = set()  # every name the functions walked read
        self.bindings = []  # (namespace, name, value or _MISSING)
        self.functions = []  # (function, code, defaults)
        self.pinned = True
        self.result = None  # the key of the function walked by `_walk`

    def include(self, walk):
        """Take in what another walk read."""
        self.names.update(walk.names)
        self.bindings += walk.bindings
        self.functions += walk.functions
        self.pinned = self.pinned and walk.pinned

    def unchanged(self):
        """Whether every binding and function read is as it was: all that can change when ``pinned``."""
        for namespace, name, value in self.bindings:
            if namespace.get(name, _MISSING) is not value:
                return False
        for function, code, defaults in self.functions:
            if function.__code__ is not code or function.__defaults__ is not defaults:
                return False
        return True

    def same_function(self, function):
        """Whether ``function`` reads what the first function walked read: a function of the same code
        (checked by the caller), globals and defaults, without keyword defaults or attributes."""
        first = self.functions[0][0]
        return function.__globals__ is first.__globals__ and function.__defaults__ is first.__defaults__ \
            and function.__kwdefaults__ is None and not function.__dict__

    def key(self, value, names):
        """``value`` as read by code that names ``names``."""
        kind = type(value)  # the common kinds by exact type first: isinstance of NumPy types is slow
        if kind in _CODE:
            return value  # their equality is identity
        if kind in REAL_FLOATS:
            return (kind, value, math.copysign(1.0, value))  # 0.0 and -0.0 differ in a kernel (1 / x)
        if kind in _BY_VALUE:
            return (kind, value)
        if kind is slice:  # by its bounds (a slice is not hashable before Python 3.12)
            return (kind, self.key(value.start, names), self.key(value.stop, names), self.key(value.step, names))
        if kind is Tracked:
            return (kind, self.key(value.value, names))  # db.cut(v) bakes its value; its tape is not read
        visit = (id(value), names) if kind is ModuleType or isinstance(value, type) else id(value)  # read by name
        if visit in self.seen:
            return ("seen", self.seen[visit])
        self.seen[visit] = len(self.seen)
        if kind is FunctionType:
            return self.function(value, cells=True)
        if kind is ModuleType:
            attributes = vars(value)
            return (value, self.namespace(attributes, tuple([n for n in names if n in attributes])))
        return self.other(value, names)

    def other(self, value, names):
        """The kinds `key` does not test by exact type."""
        kind = type(value)
        if isinstance(value, (float, np.floating)):
            return (kind, value, math.copysign(1.0, value))
        if isinstance(value, (np.generic, np.dtype)) and kind is not np.void:
            return (kind, value)
        if isinstance(value, type):
            return self.klass(value, names)
        if isinstance(value, tuple):  # namedtuples too
            return (kind, tuple(self.key(v, names) for v in value))
        if kind is frozenset:
            return (kind, frozenset(self.key(v, names) for v in value))
        if isinstance(value, MethodType):
            return (kind, self.key(value.__func__, names), self.key(value.__self__, _names_of(value.__func__)))
        if isinstance(value, functools.partial):
            return (kind, self.key(value.func, names), self.key(value.args, names), self.key(value.keywords, names))
        if isinstance(value, (staticmethod, classmethod)):
            return (kind, self.key(value.__func__, names))
        if isinstance(value, property):
            return (kind, self.key(value.fget, names))
        return self.mutable(value, names)

    def mutable(self, value, names):
        """An object that can change in place, by its contents (a plan cannot pin it); C code by identity."""
        kind = type(value)
        if isinstance(value, (np.ndarray, np.void)):
            # the data as a plain array: a MaskedArray's tobytes fills it, which np.ma.masked refuses
            content = tuple(self.key(v, names) for v in value.flat) if value.dtype.hasobject \
                else np.asarray(value).tobytes()
            state = (value.dtype, value.shape, content)
        elif _is_data(value):
            state = (self.key(kind, names + ("__call__",)), self.attributes(value, names))
        elif callable(value):
            return _Identity(value)  # code written in C: a ufunc, a builtin, a NumPy function
        elif isinstance(value, (dict, collections.abc.Mapping)):
            state = tuple((k, self.key(v, names)) for k, v in value.items())
        elif isinstance(value, (set, collections.abc.Set)):
            state = frozenset(self.key(v, names) for v in value)
        elif isinstance(value, (list, collections.abc.Sequence)):  # list, deque, array.array, bytearray
            state = tuple(self.key(v, names) for v in value)
        else:
            return _Identity(value)  # another object written in C
        self.pinned = False
        return (kind, state)

    def function(self, function, cells):
        """A function: code, defaults, attributes, the globals it reads, and its closure cells if
        ``cells`` (a kernel's own cells are its flattened state instead)."""
        code = function.__code__
        names = _names_read(code)
        self.names.update(names)
        self.functions.append((function, code, function.__defaults__))
        closure = function.__closure__ if cells else None
        if closure:
            self.pinned = False  # a cell can be rebound (nonlocal)
        return (
            code,
            self.key(function.__defaults__, names),
            self.key(function.__kwdefaults__, names),
            self.key(function.__dict__, names) if function.__dict__ else None,
            tuple(self.key(pytree._cell_value(cell), names) for cell in closure or ()),
            () if _is_ours(function) else self.namespace(function.__globals__, names),
        )

    def namespace(self, namespace, names):
        """The values ``names`` have in ``namespace`` (a function's globals, a module's attributes)."""
        found = []
        for name in names:
            value = namespace.get(name, _MISSING)
            self.bindings.append((namespace, name, value))
            if value is not _MISSING:
                found.append((name, self.key(value, names)))
        return tuple(found)

    def klass(self, cls, names):
        """A class by identity and, if written in Python, by the attributes the code names and those
        its methods so found name in turn."""
        if not cls.__flags__ & _HEAP_TYPE:
            return _Identity(cls)
        self.pinned = False
        found, pending = {}, list(names)
        while pending:
            name = pending.pop()
            if name not in found:
                found[name] = value = _class_attribute(cls, name)
                function = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
                if isinstance(function, FunctionType):
                    pending.extend(_names_read(function.__code__))
        names = tuple(sorted(found))
        return (_Identity(cls), tuple((n, self.key(found[n], names)) for n in names if found[n] is not _MISSING))

    def attributes(self, obj, names):
        """An object's instance attributes: its ``__dict__`` and its slots."""
        state = [(n, self.key(v, names)) for n, v in vars(obj).items()] if hasattr(obj, "__dict__") else []
        for cls in type(obj).__mro__:
            slots = vars(cls).get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__"):
                    state.append((slot, self.key(getattr(obj, slot, _MISSING), names)))
        return tuple(state)


def _is_data(value):
    """An object written in Python (its attributes are data), not code written in C (a ufunc)."""
    kind = type(value)
    if callable(value) and not isinstance(_class_attribute(kind, "__call__"), FunctionType):
        return False
    return hasattr(value, "__dict__") \
        or (kind.__flags__ & _HEAP_TYPE and any("__slots__" in vars(c) for c in kind.__mro__))


def _is_ours(function):
    """`elementwise`'s wrapper: its globals are this module, which does not change."""
    return function.__globals__ is globals()


def _names_of(function):
    return _names_read(function.__code__) if isinstance(function, FunctionType) else ()


def _class_attribute(cls, name):
    for c in cls.__mro__:
        if name in vars(c):
            return vars(c)[name]
    return _MISSING


def _names_read(code):
    """The names ``code`` reads as globals or attributes, its nested functions and comprehensions included."""
    known = _names.get(id(code))  # by id: hashing a code object is slow
    if known is not None and known[0] is code:
        return known[1]
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names.update(_names_read(const))
    names = tuple(sorted(names))
    if len(_names) > 4 * CACHE_SIZE:
        _names.clear()
    _names[id(code)] = (code, names)  # the code kept alive, so its id is not reused
    return names


def _kernel(key, f, treedef, leaves, n_inputs, active, reduce, kinds, order=1, tangents=0, tracked=()):
    with _cache_lock:
        kernel = _cache.get(key)
        if kernel is not None:
            _cache.move_to_end(key)
            return kernel
    kernel = _build(f, treedef, leaves, n_inputs, active, reduce, kinds, order, tangents, tracked)
    with _cache_lock:
        _cache[key] = kernel
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return kernel


def _build(f, treedef, leaves, n_inputs, active, reduce, kinds, order=1, tangents=0, tracked=()):
    """Trace ``f`` on symbols (array leaves) and literals (baked leaves) into a kernel: its outputs are the
    value and one partial per active input; ``order=2`` adds the second partials ∂²f/∂aᵢ∂aⱼ (i ≤ j, row by
    row: forward mode over the first partials); with ``tangents`` (forward mode: that many more inputs, one
    tangent per active input) the value and the directional derivative Σ ∂f/∂aᵢ · tᵢ; ``tracked``, two lists
    of inputs (reverse over forward: what a gradient tracks), then adds the partials of the value with respect
    to the first's and those of that directional derivative with respect to the second's."""

    def call(symbols):
        symbols = iter(symbols)
        mixed = [next(symbols) if type(x) is Tracked or type(x) is Dual or _is_array_input(x) else x for x in leaves]
        if treedef is None:
            return f(*mixed)
        g, args = pytree.unflatten(treedef, mixed)
        return g(*args)

    name = getattr(f, "__name__", type(f).__name__)
    _check_kinds(name, kinds)
    graph, inputs, output = trace(call, n_inputs + tangents)
    has_complex = _has_complex(graph, output, kinds)
    seeds = inputs[n_inputs:] if tangents else [np.dtype(kinds[i]).type(1) for i in active]
    partials = derivatives(graph, output, [inputs[i] for i in active], seeds)
    if order == 2:
        partials += [h for i, p in enumerate(partials)
                     for h in derivatives(graph, p, [inputs[j] for j in active], seeds)[i:]]
    if tangents:  # the terms ∂f/∂aᵢ · tᵢ (each slot seeded with its tangent), added
        total = 0
        for term in partials:
            total = term if _is_zero(total) else total if _is_zero(term) else graph.apply(np.add, (total, term))
        partials = [total]
        if tracked:  # (the inputs whose value partials are wanted, those whose tangent partials are too)
            for differentiated, wanted in zip(tracked, (output, total)):
                ones = [np.dtype(kinds[i]).type(1) for i in differentiated]
                partials += derivatives(graph, wanted, [inputs[i] for i in differentiated], ones)
    outputs = without_cuts(graph, [output] + partials)
    kernel = Kernel(graph, inputs, outputs, reduce, name, has_complex, dot_products=order == 2)
    if active and np.dtype(kernel.dtype_for(tuple(kinds))).kind not in "fc":
        return Kernel(graph, inputs, outputs[:1], reduce, name, has_complex)  # a truth value or a count: no gradient
    return kernel


def _is_zero(a):
    """Whether ``a`` is the literal 0 `derivatives` gives where the output does not depend on an input."""
    return type(a) is not Sym and not isinstance(a, np.ndarray) and a == 0


def _check_kinds(name, kinds):
    """Kernels compute in numbers: an argument of another kind would fail inside NumPy."""
    for kind in kinds:
        dtype = np.dtype(kind)
        if dtype.kind not in "biufc":
            raise KernelError(
                f"a {dtype} argument (not a number) reached db.sum/db.broadcast of {name}: kernels compute in "
                "floating point. Pass arrays or floats; compute other values outside f."
            )


def _has_complex(graph, output, kinds):
    """Whether complex numbers take part in the traced function (an input or a literal); if so, a clear
    error unless every operation of its value is holomorphic, whose forward partial is then the complex
    derivative and its pullback ``g · ∂f/∂a`` JAX's convention.  (The partials' own operations, the
    table's formulas, may compare: ``x == 0`` in x ** y's.)"""
    order = needed_nodes(graph, [output])
    literals = [a for node in order for a in node.args if type(a) is not Sym]
    literals += [] if type(output) is Sym else [output]
    if not any(np.dtype(k).kind == "c" for k in kinds if k is not float) \
            and not any(isinstance(a, (complex, np.complexfloating)) for a in literals):
        return False
    for node in order:
        if node.op is not _cut_op and COMPLEX_RULES.get(node.op) is not SAME_RULE:
            raise KernelError(complex_kernel_message(node.op))
    return True


def _inline(f, args, reduce):
    if reduce:
        raise KernelError("db.sum cannot run inside a broadcast kernel: f sees one element at a time")
    return f(*args)


def clear_cache() -> None:
    """Forget every compiled kernel (they are rebuilt on demand)."""
    with _cache_lock:
        _cache.clear()
        _plans.clear()
        _deferred_kernels.clear()
