"""Forward mode over broadcasts — ``broadcast``, ``sum`` and ``elementwise`` — and the repeated-call `_Plan`.

The arguments *and the callable's own state* (closure cells, dataclass fields,
bound ``self``, ``functools.partial`` arguments) are flattened to leaves.  Each
tracked leaf that is not `cut` is active and gets one partial: the kernel
computes the value and ∂f/∂leaf for every active leaf in one fused pass (a dual
array: value of shape S, partials of shape (k,)+S), and one tape node is
recorded whose pullback is ``ȳ · ∂f/∂leaf`` summed over broadcast dimensions.

Whatever else the trace reads (globals, the items and attributes of what they
hold, module attributes, default values) is baked into the kernel, and its
cache key holds it by value (`kernel_keys`): a change is a new trace, never a stale
kernel.  ``db.cut(v)`` inside ``f`` makes ``v`` a constant of the kernel.  The kernels
are built and cached by `kernel_cache`; the tape node of a call in reverse mode is
`broadcast_pullbacks`'.
"""

import functools
import math
from collections.abc import Callable
from types import FunctionType
from typing import Any

import numpy as np

from . import kernels, pytree
from .broadcast_pullbacks import DEFERRED_KERNELS, fitted_tangent, run_second_order, tangent_on_tape, unscaled_kernel
from .derivatives import UNBOUNDED, is_finite
from .errors import KernelError
from .expr import Sym
from .forward import Dual, check_enclosing
from .guards import RECORDER, Guarded, untracked
from .kernel_cache import CACHE_LOCK, CACHE_SIZE, CALL_LOG, KERNEL_CACHE, KernelCall, cached_kernel, is_array_input
from .kernel_keys import MISSING, Reads, structure_key, walk_of
from .kernels import FORCED_BACKEND, value_kind
from .lazy import DASK_LAYER, Lazy, is_chunked
from .numpy_facts import FLOAT_LEAVES
from .pullbacks import (
    RealPart,
    fitting_kernel_pullback,
    kernel_pullback,
)
from .tracked import LAZY_TOTAL, Pending, Total, Tracked, edge_of, edges_of, lazy_totals, tape_of

_PLAIN = FLOAT_LEAVES | {Tracked, Dual}  # leaves of their own: the arguments need no tree walk
_plans = {}  # (id of the code, reduce) -> the `_Plan` of its latest call (hashing a code object is slow)
def broadcast(f: Callable[..., Any], *args: Any, backend: str | None = None) -> Any:
    """``f`` applied elementwise to ``args`` with NumPy broadcasting, differentiated in forward mode.

    ``f`` is scalar-style code over NumPy functions and operators (``np.where`` for
    branches).  ``backend`` forces "numpy", "blocked" or "numexpr" for this call.

    >>> db.broadcast(lambda x, y: np.exp(x) * y, np.zeros(3), 2.0)
    array([2., 2., 2.])
    """
    return _broadcast_kernel(f, args, reduce=False, backend=backend)


def sum(f: Callable[..., Any], *args: Any, backend: str | None = None) -> Any:  # the contract's name, not the builtin
    """``np.sum(broadcast(f, *args))``, fused: the summed values are never materialised.

    Partials are reduced to each argument's own shape in the forward pass, so a
    scalar coefficient broadcast over a million points keeps one number.

    >>> db.sum(lambda r: np.exp(-3 * (r + 1)), np.zeros(4))
    np.float64(0.19914827347145578)
    """
    return _broadcast_kernel(f, args, reduce=True, backend=backend)


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


def _broadcast_kernel(f, args, reduce, backend):
    """`broadcast`/`sum`: the cached plan of a repeated call, else the arguments sorted and the kernel run in the
    mode they ask for: inlined in another kernel, over Dask chunks, reverse over forward (`tangent_on_tape`), second
    order (`run_second_order`), or first order (`_first_order`)."""
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
        reads = walk_of(f)
        structure = reads.result
    else:
        reads = Reads()
        structure = structure_key(treedef, reads)
    names = None  # every name the code reads: how a baked object's class is read
    inputs, values, active, kinds, input_kinds = [], [], [], [], []
    nested = on_tape = False
    for leaf, on in zip(leaves, activity):
        if type(leaf) is Dual:
            if on and Dual in (type(leaf.value), type(leaf.tangent)):  # a jvp of a jvp: each NumPy call of f
                return _evaluated(f, args, reduce)  # carries both levels (a kernel computes on plain values)
            leaf = _kernel_dual(leaf, on)
            on_tape = on_tape or (type(leaf) is Dual and Tracked in (type(leaf.value), type(leaf.tangent)))
        if type(leaf) is Tracked or type(leaf) is Dual or is_array_input(leaf):
            value = leaf.value if type(leaf) is Tracked or type(leaf) is Dual else leaf
            if type(value) is Tracked:  # tracked by two nested gradients: the kernel computes on the plain value
                nested, value = True, untracked(value)
            if type(value) is Lazy:  # a differentiated Dask array
                return DASK_LAYER.run_over_chunks(f, args, reduce, backend)
            kind = value.dtype if type(value) is np.ndarray else value_kind(value)
            if (type(leaf) is Tracked and on and leaf.index not in inactive) or type(leaf) is Dual:
                active.append(len(values))
            inputs.append(leaf)
            values.append(value)
            input_kinds.append(kind)
            kinds.append(kind)
        else:  # baked into the kernel: ints, bools, None, strings, objects
            if is_chunked(leaf):  # a Dask array: each chunk runs this kernel (`chunked`)
                return DASK_LAYER.run_over_chunks(f, args, reduce, backend)
            names = tuple(sorted(reads.names)) if names is None else names
            kinds.append(("baked", reads.key(leaf, names)))
    on_tape = on_tape or (Dual in map(type, inputs) and any(type(inputs[i]) is Tracked for i in active))
    if on_tape:  # a jvp inside a gradient (reverse over forward)
        tracked = [a for a in inputs if type(a) is Tracked]
        for d in inputs:
            if type(d) is Dual:
                check_enclosing([*tracked, d.value], d.level)  # not a gradient inside the jvp
        result = None if recorder is not None else \
            tangent_on_tape(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, active, reduce, backend)
        return _evaluated(f, args, reduce) if result is None else result
    if nested or _nested(inputs):
        levels = _two_levels(inputs, values, activity if treedef is not None else None, leaves)
        if levels is not None and recorder is not None:  # a prepared program records it (`prepare_hvp`)
            levels = recorder.levels(levels)
        result = None if levels is None or not reduce else run_second_order(
            f, treedef, leaves, structure, kinds, input_kinds, inputs, values, levels, backend, recorder)
        return _evaluated(f, args, reduce) if result is None else result
    duals = [inputs[i] for i in active if type(inputs[i]) is Dual]
    if len({d.level for d in duals}) > 1:  # duals of nested jvp calls: f's NumPy calls carry each level
        return _evaluated(f, args, reduce)
    return _first_order(f, treedef, leaves, structure, reads, kinds, input_kinds, inputs, values, active, duals,
                        reduce, backend, recorder)


def _first_order(f, treedef, leaves, structure, reads, kinds, input_kinds, inputs, values, active, duals, reduce,
                 backend, recorder):
    """One level of derivatives: forward mode (a `db.jvp`'s ``duals``: the value and its tangent in one pass) or
    reverse mode (the value and each active argument's partials, recorded on the tape, or left pending for a sum)."""
    if duals:  # forward mode (db.jvp): the value and its tangent Σ ∂f/∂aᵢ · tᵢ in one pass
        _check_duals([inputs[i] for i in active])
        tangents = [d.tangent for d in duals]
        kinds += [np.result_type(t) for t in tangents]
        unbounded = UNBOUNDED.seen  # a tangent may be infinite: strong products after it (`expr.derivatives`)
        key = (structure, tuple(kinds), tuple(active), reduce, "tangent", unbounded)
        kernel = cached_kernel(key, f, treedef, leaves, len(values), active, reduce, input_kinds + kinds[-len(duals):],
                               tangents=len(duals), unbounded=unbounded)
        values = values + tangents
    else:
        key = (structure, tuple(kinds), tuple(active), reduce)
        kernel = cached_kernel(key, f, treedef, leaves, len(values), active, reduce, input_kinds)
    scales = None
    if reduce and recorder is None and len(kernel.outputs) > 1:  # (a jvp's tangent: Σ r · (-3t) as -3 · Σ r · t)
        kernel, scales = unscaled_kernel(kernel)
    if active and len(kernel.outputs) == 1:
        active = []  # its value is not a real number: a constant (`build_kernel`)
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
    calls = CALL_LOG.get()
    if calls is not None:
        calls.append(call)
    if duals:
        tangent = partials[0] if scales is None else partials[0] * scales[0]
        if active and kernel.singular and not UNBOUNDED.seen and not is_finite(tangent):
            UNBOUNDED.seen = True  # as a singular function's tangent outside a kernel (`derivatives.tangent_product`)
        return value if not active else Dual(value, fitted_tangent(tangent, value), duals[0].level)
    parents = [inputs[i] for i in active]
    if treedef is None and recorder is None and used == "numpy" and backend is None and FORCED_BACKEND.get() is None \
            and kernel.choice.chosen(size) == "numpy":  # not a runner-up re-timed (`kernels.BackendChoice`)
        _plan(f, kernel, values, active, reduce, call, reads, scales)
    if recorder is not None and any(type(leaf) is Tracked for leaf in inputs):
        record = lambda: _record(parents, value, partials, active_shapes, call, kernel.singular,  # noqa: E731
                                 recorder.tape)
        return recorder.kernel(kernel, inputs, values, active, used, reduce, record)
    if not active:
        return value
    return _record(parents, value, partials, active_shapes, call, kernel.singular, scales=scales)


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
    calls = CALL_LOG.get()
    if calls is not None:
        calls.append(call)

    def compute():
        kernel.value_read()
        return kernel(values, active_shapes, backend)[0]

    backs = [kernel_pullback(p, s, (), tape.single_sweep, c, kernel.singular)
             for p, s, c in zip(partials, active_shapes, scales or [1] * len(partials))]
    return tape.record(Total(compute, kernel.value_dtype(values), tape), edges_of(parents, backs), call, Pending)


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
        self.scales = scales or [1] * len(active)  # the partials' literal factors (`unscaled_kernel`)
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
        for namespace, name, value in self.bindings:  # `Reads.unchanged` inline, f itself checked above
            if namespace.get(name, MISSING) is not value:
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
        calls = CALL_LOG.get()
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
            back = fitting_kernel_pullback(results[1], tape.single_sweep, self.scales[0], self.kernel.singular)
            if x.slice_index is not None:
                back = edge_of(x, back)  # first: settling a view moves its index
            return tape.record(value, ((x.index, back),), self.call, kind)
        backs = [fitting_kernel_pullback(p, tape.single_sweep, c, self.kernel.singular)
                 for p, c in zip(results[1:], self.scales)]
        return tape.record(value, edges_of(parents, backs), self.call, kind)

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
        with CACHE_LOCK:
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


def _evaluated(f, args, reduce):
    """``broadcast(f, *args)`` (or its sum) with ``f`` run on the arguments as they are, each NumPy call
    recorded by its own rule: a kernel inside a gradient of a gradient, whose values are tracked by several
    gradients (each records what it sees; a fused kernel computes on plain values and would lose them)."""
    args = [pytree.without_markers(a) for a in args]
    out = f(*args)
    shape = np.broadcast_shapes(np.shape(untracked(out)),  # wider than the arguments where f reads a wider closure
                                *[np.shape(untracked(leaf)) for leaf in pytree.flatten(args)[0]
                                  if isinstance(leaf, Guarded) or is_array_input(leaf)])
    if np.shape(out) != shape:
        out = np.broadcast_to(out, shape)
    return np.sum(out) if reduce else out


def _record(parents, value, partials, shapes, call, singular, tape=None, scales=None):
    """``value`` recorded with a pullback per parent from the kernel's ``partials`` (times ``scales``,
    `unscaled_kernel`; ``singular``: the kernel holds a singular function, `pullbacks.kernel_pullback`)."""
    tape = tape_of(parents) if parents else tape
    out_shape = () if call.reduce else np.shape(value)
    backs = [kernel_pullback(p, s, out_shape, tape.single_sweep, c, singular)
             for p, s, c in zip(partials, shapes, scales or [1] * len(partials))]
    if np.iscomplexobj(value):  # a real parent's cotangent is the real part, as in `tracked._record_complex`
        tape.complex = True
        backs = [b if np.iscomplexobj(p.value) else RealPart(b) for p, b in zip(parents, backs)]
    return tape.record(value, edges_of(parents, backs), call)


def _kernel_dual(leaf, on):
    """A dual argument of a kernel: its value is an active input (its tangent another input, see `build_kernel`);
    a cut one is a constant."""
    return leaf if on else leaf.value


def _check_duals(parents):
    """The active arguments of a kernel in forward mode (duals of one `db.jvp` level): no tracked value."""
    if Tracked in map(type, parents):
        raise KernelError("a db.sum/db.broadcast mixes a value of db.jvp (a dual) and one of db.gradient "
                          "(tracked); differentiate the kernel with one of them")


def _inline(f, args, reduce):
    if reduce:
        raise KernelError("db.sum cannot run inside a broadcast kernel: f sees one element at a time")
    return f(*args)


def clear_cache() -> None:
    """Forget every compiled kernel (they are rebuilt on demand)."""
    with CACHE_LOCK:
        KERNEL_CACHE.clear()
        _plans.clear()
        DEFERRED_KERNELS.clear()
