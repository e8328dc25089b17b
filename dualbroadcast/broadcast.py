"""Layer 2: forward mode over broadcasts — ``broadcast``, ``sum`` and ``elementwise``.

The arguments *and the callable's own state* (closure cells, dataclass fields,
bound ``self``, ``functools.partial`` arguments) are flattened to leaves.  Each
tracked leaf that is not `cut` is active and gets one partial: the kernel
computes the value and ∂f/∂leaf for every active leaf in one fused pass (a dual
array: value of shape S, partials of shape (k,)+S), and one tape node is
recorded whose pullback is ``ȳ · ∂f/∂leaf`` summed over broadcast dimensions.
"""

import collections
import contextvars
import functools
import threading
from types import FunctionType
from typing import NamedTuple

import numpy as np

from . import pytree
from .errors import KernelError
from .expr import Sym, derivatives, trace, without_cuts
from .kernels import FORCED_BACKEND, Kernel
from .tape import RECORDER, Tracked, _edge, _edges, tape_of, unbroadcast

CACHE_SIZE = 512
_PLAIN = {np.ndarray, float, np.float64, np.float32, Tracked}
_cache = collections.OrderedDict()
_plans = {}  # (id of the code, reduce) -> the `_Plan` of its latest call (hashing a code object is slow)
_cache_lock = threading.Lock()
_log = contextvars.ContextVar("dualbroadcast_kernel_log", default=None)


class KernelCall(NamedTuple):
    """What one `broadcast`/`sum` call did: its dual width is the number of partials carried."""

    function: str
    width: int
    backend: str
    size: int
    reduce: bool


class kernel_log:
    """Context manager collecting a `KernelCall` for every broadcast/sum call inside it.

    >>> with db.kernel_log() as calls:
    ...     db.gradient(f, 1.0)
    >>> calls[0].width
    1
    """

    def __enter__(self):
        self.calls = []
        self._token = _log.set(self.calls)
        return self.calls

    def __exit__(self, *exc):
        _log.reset(self._token)


def broadcast(f, *args, backend=None):
    """``f`` applied elementwise to ``args`` with NumPy broadcasting, differentiated in forward mode.

    ``f`` is scalar-style code over NumPy functions and operators (``np.where`` for
    branches).  ``backend`` forces "numpy", "blocked" or "numexpr" for this call.

    >>> db.broadcast(lambda x, y: np.exp(x) * y, np.zeros(3), 2.0)
    array([2., 2., 2.])
    """
    return _run(f, args, reduce=False, backend=backend)


def sum(f, *args, backend=None):  # noqa: A001 - the contract's name
    """``np.sum(broadcast(f, *args))``, fused: the summed values are never materialised.

    Partials are reduced to each argument's own shape in the forward pass, so a
    scalar coefficient broadcast over a million points keeps one number.

    >>> db.sum(lambda r: np.exp(-3 * (r + 1)), np.zeros(4))
    np.float64(0.19914827347145578)
    """
    return _run(f, args, reduce=True, backend=backend)


def elementwise(f):
    """Decorator: ``f(*args)`` then means ``broadcast(f, *args)``."""

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
    inputs, values, active, kinds, input_kinds = [], [], [], [], []
    for leaf, on in zip(leaves, activity):
        if type(leaf) is Tracked or _is_array_input(leaf):
            value = leaf.value if type(leaf) is Tracked else leaf
            kind = value.dtype if type(value) is np.ndarray else float if type(value) is float else np.result_type(value)
            if type(leaf) is Tracked and on and leaf.index not in inactive:
                active.append(len(values))
            inputs.append(leaf)
            values.append(value)
            input_kinds.append(kind)
            kinds.append(kind)
        else:
            kinds.append(_baked_key(leaf))
    structure = _function_key(f) if treedef is None else _structure_key(treedef)
    key = (structure, tuple(kinds), tuple(active), reduce)
    kernel = _kernel(key, f, treedef, leaves, len(values), active, reduce, input_kinds)
    if active and len(kernel.outputs) == 1:
        active = []  # its value is not a real number: a constant (`_build`)
    active_shapes = [getattr(values[i], "shape", ()) for i in active]  # arrays, NumPy scalars or floats
    value, partials, used, size = kernel(values, active_shapes, backend)
    call = KernelCall(kernel.name, len(active), used, size, reduce)
    calls = _log.get()
    if calls is not None:
        calls.append(call)
    parents = [inputs[i] for i in active]
    if treedef is None and recorder is None and used == "numpy" and backend is None and FORCED_BACKEND.get() is None:
        _plan(f, kernel, values, active, reduce, call)
    if recorder is not None and any(type(leaf) is Tracked for leaf in inputs):
        record = lambda: _record(parents, value, partials, active_shapes, call, recorder.tape)  # noqa: E731
        return recorder.kernel(kernel, inputs, values, active, used, reduce, record)
    if not active:
        return value
    return _record(parents, value, partials, active_shapes, call)


class _Plan:
    """A `broadcast`/`sum` call repeated with the same function, array shapes, dtypes and
    tracked arguments: its kernel on the NumPy backend, called without building a key.

    A model evaluated many times on small arrays calls the same kernel again and again;
    checking that this call is like the last one costs a fraction of finding its kernel.
    """

    __slots__ = ("code", "defaults", "namespace", "globals_read", "signature", "whole", "reduce", "call", "shape")

    def __init__(self, f, kernel, values, active, reduce, call):
        self.code = f.__code__  # kept alive, so its id is not reused while this plan exists
        self.defaults = f.__defaults__
        self.namespace = f.__globals__
        self.globals_read = _globals_identity(f)
        self.signature = tuple((i in active, v.dtype) for i, v in enumerate(values))
        self.shape = values[0].shape
        self.whole = kernel.typed_whole(tuple(v.dtype for v in values))
        self.reduce = reduce
        self.call = call

    def run(self, f, args):
        """``f(*args)`` through the plan, or None if it is not the call the plan was made for:
        same code, defaults and globals read, and per argument the same kind (tracked or not),
        dtype and shape."""
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
        for namespace, name, value in self.globals_read:
            if namespace.get(name) is not value:
                return None
        results = self.whole(*values)
        value = np.add.reduce(results[0], None) if self.reduce else results[0]
        calls = _log.get()
        if calls is not None:
            calls.append(self.call)
        if not parents:
            return value
        tape = parents[0].tape
        if tape.closed or len(parents) > 1:
            tape = tape_of(parents)  # a clear error for a stale or mixed value
        if len(parents) == 1:  # the usual case, one differentiated array
            x, partial = parents[0], results[1]
            back = partial.__imul__ if tape.single_sweep else partial.__mul__  # a C call: no frame
            if x.view is not None:
                back = _edge(x, back)  # first: settling a view moves its index
            return tape.record(value, ((x.index, back),), self.call)
        backs = [p.__imul__ if tape.single_sweep else p.__mul__ for p in results[1:]]
        return tape.record(value, _edges(parents, backs), self.call)


def _plan(f, kernel, values, active, reduce, call):
    """Remember a `_Plan` for this call if its kernel's whole-array results need no reshaping,
    copying or casting (all inputs arrays of one shape, every partial an array of its own)."""
    if type(f) is not FunctionType or f.__closure__ or not values:
        return
    shape, dtype = np.shape(values[0]), getattr(values[0], "dtype", None)
    if not all(type(v) is np.ndarray and v.shape == shape and v.dtype == dtype for v in values) or not all(kernel.fresh):
        return
    plan = _Plan(f, kernel, values, active, reduce, call)
    results = plan.whole(*values)
    if all(type(r) is np.ndarray and r.shape == shape and r.dtype == dtype for r in results):
        with _cache_lock:
            _plans[(id(f.__code__), reduce)] = plan
            if len(_plans) > CACHE_SIZE:
                del _plans[next(iter(_plans))]


def _globals_identity(function, seen=None):
    """``(namespace, name, value)`` for every global name ``function`` and the global functions
    it calls read: a plan is stale once one of them is rebound."""
    seen = seen or {function.__code__}
    found = []
    namespace = function.__globals__
    for name in function.__code__.co_names:
        value = namespace.get(name)
        found.append((namespace, name, value))
        if isinstance(value, FunctionType) and value.__code__ not in seen:
            seen.add(value.__code__)
            found.extend(_globals_identity(value, seen))
    return tuple(found)


def _record(parents, value, partials, shapes, call, tape=None):
    tape = tape_of(parents) if parents else tape
    out_shape = () if call.reduce else np.shape(value)
    backs = [_pullback(tape, p, s, out_shape) for p, s in zip(partials, shapes)]
    return tape.record(value, _edges(parents, backs), call)


def _pullback(tape, partial, shape, out_shape):
    """``g · ∂f/∂a`` summed back to ``a``'s shape (a summed partial already has that shape).

    The kernel's partial buffer is ours: when the tape is swept once, it becomes
    the cotangent in place instead of allocating another array of its size.
    """
    if getattr(partial, "shape", ()) == shape and (out_shape == () or out_shape == shape):
        if tape.single_sweep and isinstance(partial, np.ndarray) and partial.base is None and partial.ndim:
            return partial.__imul__  # g -> partial *= g, in the kernel's own buffer
        return functools.partial(np.multiply, partial)
    return lambda g: unbroadcast(np.broadcast_to(g * partial, out_shape), shape)


def _is_array_input(leaf):
    """Floats and arrays are kernel inputs; everything else is baked into the kernel."""
    return type(leaf) is float or isinstance(leaf, np.ndarray) or (
        isinstance(leaf, np.generic) and leaf.dtype.kind in "fiub"
    )


def _baked_key(leaf):
    """Leaves that are not arrays are part of the kernel: ints, bools, None, strings."""
    try:
        hash(leaf)
    except TypeError:
        raise KernelError(
            f"a {type(leaf).__name__} reached db.broadcast/db.sum as an argument or captured state; "
            "pass arrays, floats or ints, or keep other objects out of the function's state"
        ) from None
    return ("baked", type(leaf), leaf)


def _structure_key(d):
    """A hashable description of a treedef: kinds, types, code objects, read globals."""
    if d is None:
        return None
    kind, aux, children = d
    if kind in ("dataclass", "object"):
        aux = (type(aux[0]), aux[1])
    elif kind in ("closure", "function"):
        aux = _function_key(aux)
    elif kind == "static":
        aux = aux if pytree.hashable(aux) else id(aux)
    return (kind, aux, tuple(_structure_key(c) for c in children))


def _function_key(function, seen=None):
    """What a traced function bakes in: its code, default values and the globals it reads."""
    defaults = function.__defaults__
    return (function.__code__, defaults if pytree.hashable(defaults) else id(defaults), _globals_read(function, seen))


def _globals_read(function, seen=None):
    """Numbers, arrays and functions a function reads from its globals: a change must not go stale.

    A global helper function counts by its own key, so redefining it (in a notebook) is seen.
    """
    seen = seen or {function.__code__}
    found = []
    namespace = function.__globals__
    for name in function.__code__.co_names:
        value = namespace.get(name)
        if isinstance(value, (int, float, complex, np.number)):
            found.append((name, value))
        elif isinstance(value, np.ndarray):
            found.append((name, id(value)))
        elif isinstance(value, FunctionType) and value.__code__ not in seen:
            seen.add(value.__code__)
            found.append((name, _function_key(value, seen)))
    return tuple(found)


def _kernel(key, f, treedef, leaves, n_inputs, active, reduce, kinds):
    with _cache_lock:
        kernel = _cache.get(key)
        if kernel is not None:
            _cache.move_to_end(key)
            return kernel
    kernel = _build(f, treedef, leaves, n_inputs, active, reduce, kinds)
    with _cache_lock:
        _cache[key] = kernel
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return kernel


def _build(f, treedef, leaves, n_inputs, active, reduce, kinds):
    """Trace ``f`` on symbols (array leaves) and literals (baked leaves) into a kernel."""

    def call(symbols):
        symbols = iter(symbols)
        mixed = [next(symbols) if type(x) is Tracked or _is_array_input(x) else x for x in leaves]
        if treedef is None:
            return f(*mixed)
        g, args = pytree.unflatten(treedef, mixed)
        return g(*args)

    name = getattr(f, "__name__", type(f).__name__)
    _check_kinds(name, kinds)
    graph, inputs, output = trace(call, n_inputs)
    seeds = [np.dtype(kinds[i]).type(1) for i in active]
    partials = derivatives(graph, output, [inputs[i] for i in active], seeds)
    outputs = without_cuts(graph, [output] + partials)
    kernel = Kernel(graph, inputs, outputs, reduce, name)
    if active and np.dtype(kernel.dtype_for(tuple(kinds))).kind != "f":
        return Kernel(graph, inputs, outputs[:1], reduce, name)  # a truth value or a count: no gradient, as x > 0
    return kernel


def _check_kinds(name, kinds):
    """Kernels compute in real numbers: an argument of another kind would lose its imaginary part
    or fail inside NumPy."""
    for kind in kinds:
        dtype = np.dtype(kind)
        if dtype.kind not in "biuf":
            what = "a complex" if dtype.kind == "c" else f"a {dtype} (not a real number)"
            raise KernelError(
                f"{what} argument reached db.sum/db.broadcast of {name}: kernels compute in real floating "
                "point (complex numbers are not supported yet). Pass real arrays or floats; compute other "
                "values outside f."
            )


def _inline(f, args, reduce):
    if reduce:
        raise KernelError("db.sum cannot run inside a broadcast kernel: f sees one element at a time")
    return f(*args)


def clear_cache():
    """Forget every compiled kernel (they are rebuilt on demand)."""
    with _cache_lock:
        _cache.clear()
        _plans.clear()
