"""Chunked arrays: the layer between `broadcast` and Dask (issue 17).

A `db.sum` over a Dask array runs, per chunk, the very call it makes in memory: ``db.sum(f, *chunks)``
inside ``db.value_and_gradient`` in the chunk's *small* arguments (the NumPy arrays and scalars
broadcast whole to every chunk), so each chunk runs the same fused kernel (value and partials in one
pass) and hands back one number and the partials already reduced to the small arguments' shapes.
Dask tree-sums those tuples, and the value and the partials come from one ``dask.compute``: one pass
over the data.  The gradient with respect to a Dask array itself is a lazy Dask array with the
argument's chunks, computed on demand (each chunk's kernel runs again; no partial is held).

`sum_blocks` is the same plan for any program ``db.gradient`` handles: the blocks are rows of one or
more Dask arrays, and each block's gradient is taken on a worker.

The rest of the API: ``db.pullback`` of a ``db.broadcast`` result (`pullback`: lazy cotangents for Dask
arguments, the others from one ``dask.compute``); ``db.jvp``, ``db.hvp``, ``db.hessian`` in the small arguments
(`_taylor`: each chunk's value, gradient and Hessian, tree-summed, then their Taylor polynomial on the
arguments); ``db.prepare_gradient`` runs ``db.value_and_gradient`` per call (`_sorted` stops its recording).

Every task runs in a fresh context (no outer gradient is seen there, whatever the scheduler) with the
kernels' own threads and BLAS's (threadpoolctl, while tasks run) limited to `TASK_THREADS`, so Dask's
workers and a kernel's blocks or a matrix product's threads do not oversubscribe the cores.  The tasks are
module functions of picklable data (the function's tree and its leaves), so `dask.distributed` ships them
to worker processes, where kernels are rebuilt.

Dask is imported here only when a Dask array is met or `sum_blocks` is called: the package itself
needs NumPy and numexpr only.  A differentiated Dask array is carried on the tape as a `Lazy` value,
whose NumPy protocols raise: a function that cannot run chunkwise is an error naming what to do,
never a silent computation of the whole array.
"""

import contextvars
import functools
import math
import operator
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import pytree, reverse
from .broadcast import broadcast as broadcast_in_memory
from .broadcast import sum as sum_in_memory
from .errors import UnsupportedFunctionError
from .forward import Dual
from .guards import RECORDER, NotReplayableError, untracked
from .kernel_cache import CALL_LOG, KernelCall, is_array_input
from .kernels import KERNEL_THREADS
from .lazy import DASK_LAYER, Lazy, is_chunked
from .pullbacks import kernel_product
from .reverse import argument_gradients, cotangent_array, one_or_tuple, pullback_seeds
from .sweeps import backward
from .tracked import Tracked, edges_of, tape_of

TASK_THREADS = 1  # a kernel's own threads inside a Dask task: Dask already runs a task per core
TASK_BACKEND = "blocked"  # in a task: memory for a few cache-sized blocks, not the chunk's temporaries (numpy
# if a chunk is too small for it); timing the candidates would run each, temporaries included
FAN_IN = 8  # the partial results added by one task of the tree sum

def leaf_value(x):
    """The value a differentiated Dask array argument is tracked with (`reverse.float_value`)."""
    return Lazy(x)


def leaf_gradient(g, original):
    """The gradient of a Dask array argument: lazy, with its chunks (zeros if nothing reached it)."""
    import dask.array as da
    if g is None:
        return da.zeros_like(original)
    return g.astype(original.dtype) if g.dtype != original.dtype else g


# --- db.sum and db.broadcast over Dask arrays ------------------------------------------------------------
def run_over_chunks(f: Callable[..., Any], args: tuple, reduce: bool, backend: str | None) -> Any:
    """``db.sum(f, *args)`` (``reduce``) or ``db.broadcast(f, *args)`` where a leaf is a Dask array."""
    import dask

    leaves, treedef = pytree.flatten((f, args))
    activity = pytree.leaf_activity(treedef)
    order = _order(leaves, activity)
    if order:  # inside db.jvp, db.hvp, db.hessian: the small arguments' Taylor polynomial (`_taylor`)
        if not reduce:
            raise UnsupportedFunctionError(
                "db.broadcast over Dask arrays inside db.jvp, db.hvp, db.hessian or a gradient inside a gradient is "
                "not supported: its result is "
                "as large as the data; reduce it in the same kernel, db.sum(f, ...), whose derivatives are taken "
                "per chunk")
        return _taylor(f, leaves, treedef, activity, order, backend)
    plan = _ChunkPlan(leaves, activity, "sum" if reduce else "broadcast", treedef, backend)
    plan.call = _logged(f, len(plan.active), math.prod(plan.shape), reduce)
    if not reduce:
        return plan.broadcast()
    # one pass: the value, the small arguments' partials and those of NumPy arguments Dask had to chunk
    total = plan.tree_sum(plan.small)
    chunked_partials = [plan.partial(p) for p in plan.chunked_numpy]
    total, chunked_partials = dask.compute(total, chunked_partials)
    value = total[0]
    partials = dict(zip(plan.small, total[1:]))
    partials.update((p, _unbroadcast(d, plan.values[p].shape)) for p, d in zip(plan.chunked_numpy, chunked_partials))
    if not plan.active:
        return value
    return plan.record(value, [_numpy_pullback(partials[p], plan.values[p]) if p in partials
                               else _lazy_pullback(plan.partial(p), plan.values[p]) for p in plan.active])


class _ChunkPlan:
    """One call's leaves sorted for Dask: the *big* ones (Dask arrays, and NumPy arrays spanning a chunked
    axis, made Dask arrays with the grid's chunks) broadcast to one grid of blocks, the *small* ones (sent
    whole to every block) and the rest (baked into the kernel, as in memory)."""

    def __init__(self, leaves, activity, kind, treedef, backend=None):
        import dask.array as da


        self.kind, self.treedef, self.backend, self.leaves = kind, treedef, backend, leaves
        values, big, active, self.tape = _sorted(leaves, activity)
        arrays = [p for p, v in enumerate(values) if p not in big and is_array_input(v) and np.ndim(v)]
        self.active = active
        self.shape = np.broadcast_shapes(*[np.shape(values[p]) for p in big + arrays])
        grid = list(da.broadcast_arrays(*[values[p] for p in big]))
        chunks = _grid_chunks(grid[0], self.shape)
        self.chunked_numpy = []  # NumPy arrays along a chunked axis: chunked too, their partials computed
        for p in arrays:
            shape = np.shape(values[p])
            along = [len(c) > 1 and s > 1 for c, s in zip(chunks[len(chunks) - len(shape):], shape)]
            if any(along):
                big.append(p)
                grid.append(da.from_array(values[p], chunks=tuple(
                    c if s > 1 else (1,) for c, s in zip(chunks[len(chunks) - len(shape):], shape))))
                if p in active:
                    self.chunked_numpy.append(p)
        self.big = big
        self.blocks = [da.broadcast_to(a, self.shape, chunks=chunks) for a in grid]
        self.values = values
        self.small = [p for p in active if p not in big]
        self.context = (treedef, [None if p in big else v for p, v in enumerate(values)], tuple(big), kind, backend)

    def tree_sum(self, wrt, order=None):
        """A delayed ``(value, partial per position of wrt)`` summed over every block; with ``order``, the block's
        Taylor coefficients in the flat vector of ``wrt`` instead (`_on_block_taylor`)."""
        return _summed(self.context, self.blocks, wrt, order)

    def mapped(self, wrt):
        """`_block_map` over the grid: the lazy broadcast value, or ∂f/∂(big leaf wrt[0])."""
        return self.blocks[0].map_blocks(_block_map, *self.blocks[1:], context=self.context, wrt=wrt,
                                         dtype=self.dtype, meta=np.empty((0,) * len(self.shape), self.dtype))

    def partial(self, p):
        """The lazy ∂f/∂(leaf p) on the grid (a Dask array of the broadcast shape)."""
        return self.mapped((p,))

    def broadcast(self):
        """``db.broadcast`` of the program: a Dask array; tracked as a `Lazy` value if a leaf is differentiated."""
        value = self.mapped(())
        if not self.active:
            return value
        backs = []
        for p in self.active:
            if p in self.chunked_numpy:
                backs.append(functools.partial(self._chunked_numpy_cotangent, p))
            elif p in self.big:
                backs.append(functools.partial(self._big_cotangent, p))
            else:
                backs.append(functools.partial(self._small_cotangent, p))
        return self.record(Lazy(value), backs)

    def _big_cotangent(self, p, g):
        """ḡ of a Dask argument of `broadcast`: ``g · ∂f/∂x`` per block, lazily, summed to its shape."""
        return _unbroadcast(self._as_grid(g) * self.partial(p), np.shape(self.values[p]))

    def _chunked_numpy_cotangent(self, p, g):
        """ḡ of a NumPy argument of `broadcast` that Dask chunked: the lazy one, computed (a pass over the data)."""
        return self._computed(p, self._big_cotangent(p, g))

    def _small_cotangent(self, p, g):
        """ḡ of a small argument of `broadcast`: Σ over blocks of the block's vjp (a pass over the data)."""
        import dask
        import dask.array as da

        g = self._as_grid(g)
        context = dask.delayed(self.context, traverse=False)
        delayed = [b.to_delayed().ravel() for b in [*self.blocks, g]]
        parts = [dask.delayed(_in_task)(_on_block, context, list(blocks[:-1]), (p,), blocks[-1])
                 for blocks in zip(*delayed)]
        value = self.values[p]  # a Dask array, not a Delayed: dask.compute mixing both reorders the results
        return self._computed(p, da.from_delayed(_tree(parts)[0], np.shape(value), np.result_type(value)))

    def _computed(self, p, lazy):
        """The NumPy cotangent of leaf p, ``lazy`` computed: at once, or in `pullback`'s one ``dask.compute``
        (`_DEFERRED`: its first sweep collects ``lazy`` and gets zeros, its second gets the computed values)."""
        import dask

        value = self.values[p]
        dtype = np.result_type(value)
        deferred = _DEFERRED.get()
        if deferred is None:
            ct = dask.compute(lazy)[0]
        elif deferred[0] == "collect":
            deferred[1][self, p] = lazy
            ct = np.zeros(np.shape(value), dtype)
        else:
            ct = deferred[1][self, p]
        return np.asarray(ct, dtype) if isinstance(value, np.ndarray) else dtype.type(ct)

    def _as_grid(self, g):
        import dask.array as da
        g = da.asarray(g.array if type(g) is Lazy else g)
        chunks = self.blocks[0].chunks
        if g.shape == self.shape:  # a cotangent of the result, chunked as the caller chose
            return g if g.chunks == chunks else g.rechunk(chunks)
        return da.broadcast_to(g, self.shape, chunks=chunks)

    @functools.cached_property
    def dtype(self):
        """The result's dtype: the program on one element of each big leaf, outside any gradient."""

        values = list(self.values)
        for p in self.big:
            values[p] = np.ones((1,) * np.ndim(values[p]), values[p].dtype)
        f, args = pytree.unflatten(self.treedef, values)
        return np.result_type(contextvars.Context().run(broadcast_in_memory, f, *args))

    def record(self, value, backs):
        """``value`` recorded on the tape with a pullback per active leaf."""
        return _record(self.tape, [self.leaves[p] for p in self.active], value, backs, self.call)


# --- inside db.jvp, db.hvp and db.hessian --------------------------------------------------------------
def _layers(x, into):
    """Add to ``into`` what differentiates ``x``: each tape tracking it and each `db.jvp` level of its duals."""

    while type(x) is Tracked or type(x) is Dual:
        if type(x) is Dual:
            into.add(("jvp", x.level))
            _layers(x.tangent, into)
        else:
            into.add(("tape", id(x.tape)))
        x = x.value
    return x


def _order(leaves, activity):
    """The order of the derivatives a `db.sum` over Dask arrays must give its small arguments beyond the usual
    first-order path's: 0 (one gradient: `_ChunkPlan`), 1 (a `db.jvp`, or one gradient inside another that does not
    track these arguments), 2 (two nested levels: `db.hvp`, `db.hessian`)."""

    layers, beyond = set(), False  # beyond the first-order path: a dual, or a gradient inside another's
    for leaf, on in zip(leaves, activity):
        if on and (type(leaf) is Tracked or type(leaf) is Dual):
            beyond = beyond or type(leaf) is Dual or leaf.tape.level > 0
            _layers(leaf, layers)
    if len(layers) > 2:
        raise UnsupportedFunctionError(
            "derivatives of order 3 or more of a db.sum over Dask arrays are not supported (db.jvp, db.hvp and "
            "db.hessian are); take them on a part of the data that fits in memory (.compute() it)")
    return len(layers) if beyond or len(layers) == 2 else 0


def _taylor(f, leaves, treedef, activity, order, backend):
    """``db.sum(f, *args)`` over Dask arrays whose small arguments p are duals or tracked by two nested gradients:
    each chunk's value s, gradient ∇s (and, to order 2, Hessian ∇²s) in the flat vector of p, tree-summed in one
    ``dask.compute``, then S + ∇S·d + ½ d·∇²S·d with d = p - p₀ computed on the arguments themselves.  At p = p₀
    it has the value, the gradient and the Hessian of the sum, so the duals and tapes it runs on take the same
    derivatives as in memory, to the order asked for (never beyond it: `_order` refuses a third level)."""
    import dask


    active = [p for p, (leaf, on) in enumerate(zip(leaves, activity)) if on and _is_differentiated(leaf)]
    bases = [untracked(leaf) for leaf in leaves]
    bases = [b.array if type(b) is Lazy else b for b in bases]
    if any(is_chunked(bases[p]) for p in active):
        raise UnsupportedFunctionError(
            "db.jvp, db.hvp and db.hessian of a db.sum over Dask arrays take derivatives with respect to its small "
            "arguments (NumPy arrays and scalars), not the Dask arrays: db.cut the Dask array, or .compute() it")
    plan = _ChunkPlan(bases, [False] * len(bases), "sum", treedef, backend)
    if any(p in plan.big for p in active):
        raise UnsupportedFunctionError(
            "db.jvp, db.hvp and db.hessian of a db.sum over Dask arrays: a differentiated NumPy argument spans the "
            "chunked axis; make it a Dask array and db.cut it, or differentiate only arguments broadcast whole")
    plan.call = _logged(f, len(active), math.prod(plan.shape), True)
    value, gradient, hessian = dask.compute(plan.tree_sum(active, order))[0]
    return _polynomial(value, gradient, hessian, [leaves[p] for p in active], [bases[p] for p in active])


def _is_differentiated(leaf):
    return type(leaf) is Tracked or type(leaf) is Dual


def _polynomial(value, gradient, hessian, arguments, bases):
    """``value + gradient·d (+ ½ d·hessian·d)``, ``d`` the arguments less their values, flat, on the arguments."""
    dtype = np.result_type(value)
    d = [np.reshape(np.subtract(a, np.asarray(b, np.result_type(b))), (-1,)) for a, b in zip(arguments, bases)]
    d = d[0] if len(d) == 1 else np.concatenate(d)
    total = value + np.dot(np.asarray(gradient, dtype), d)
    if hessian is not None:
        total = total + dtype.type(0.5) * np.dot(d, np.dot(np.asarray(hessian, dtype), d))
    return total


# --- db.pullback of a Dask-array result -----------------------------------------------------------------
_DEFERRED = contextvars.ContextVar("chunked_deferred", default=None)


def pullback(tape, out_leaves, out_def, arguments):
    """`db.pullback`'s ``(y, back)`` for a result holding Dask arrays (a `broadcast` over Dask arrays): ``y``'s
    Dask arrays as they are; ``back(ȳ)`` (ȳ of NumPy or Dask arrays) the lazy cotangents of Dask arguments and
    the NumPy cotangents of the others, these computed in one ``dask.compute``.  The sweep is linear in what
    `_computed` gives, and what it gives depends on ȳ and the Dask cotangents only: a first sweep collects the
    lazy values (zeros stand in), one ``dask.compute`` evaluates them together, a second sweep uses them."""
    import dask
    import dask.array as da


    def cast(yb, o):
        """ȳ of a Dask-array output as a Dask array of its dtype; of another output, as `db.pullback` takes it."""
        if type(o.value) is not Lazy:
            return cotangent_array(yb, o.dtype)
        yb = da.asarray(yb)
        return yb.astype(o.dtype) if yb.dtype != o.dtype else yb

    def back(ybar):
        seeds = pullback_seeds(out_leaves, [ybar] if out_def is pytree.LEAF else pytree.flatten(ybar)[0], cast)
        if not seeds:
            return one_or_tuple(argument_gradients(arguments, None))
        collected = {}
        token = _DEFERRED.set(("collect", collected))
        try:
            grads = backward(tape, seeds)
        finally:
            _DEFERRED.reset(token)
        if collected:
            token = _DEFERRED.set(("use", dict(zip(collected, dask.compute(*collected.values())))))
            try:
                grads = backward(tape, seeds)
            finally:
                _DEFERRED.reset(token)
        return one_or_tuple(argument_gradients(arguments, grads))

    values = [o.value.array if type(o) is Tracked and type(o.value) is Lazy else o.value if type(o) is Tracked
              else o for o in out_leaves]
    return (values[0] if out_def is pytree.LEAF else pytree.unflatten(out_def, values)), back


def _sorted(leaves, activity):
    """``(values, big, active, tape)``: the leaves' plain values (a Dask array for a differentiated one), the
    positions of Dask arrays, those of the differentiated leaves, and their tape."""

    if RECORDER.get() is not None:  # prepare_gradient: this call signature runs `value_and_gradient` per call
        raise NotReplayableError("a prepared program over Dask arrays is evaluated as db.value_and_gradient")
    values, big, active, tracked = list(leaves), [], [], []
    for p, (leaf, on) in enumerate(zip(leaves, activity)):
        value = leaf
        if type(leaf) is Tracked:
            value = leaf.value
            if type(value) is Tracked or leaf.tape.level:  # `_order` sent the small arguments' to `_taylor`
                raise UnsupportedFunctionError(
                    "a derivative of a db.broadcast over Dask arrays, or one with respect to a Dask array, inside "
                    "another derivative is not supported; reduce it with db.sum, or .compute() the data first")
            tracked.append(leaf)
            if on:
                active.append(p)
            if type(value) is Lazy:
                value = value.array
        if is_chunked(value):
            big.append(p)
        values[p] = value
    return values, big, active, tape_of(tracked) if tracked else None


def _record(tape, parents, value, backs, call):
    """``value`` recorded on ``tape`` with a pullback per parent (a tracked leaf), as ``call`` (a `KernelCall`)."""

    return tape.record(value, edges_of(parents, backs), call)


def _logged(f, width, size, reduce):
    """The `KernelCall` of a call over Dask arrays (backend "dask"), in `db.kernel_log` if one collects."""

    call = KernelCall(getattr(f, "__name__", type(f).__name__), width, "dask", size, reduce)
    calls = CALL_LOG.get()
    if calls is not None:
        calls.append(call)
    return call


def _grid_chunks(reference, shape):
    """The chunks of the broadcast shape: the Dask arrays' along their axes, one chunk along the others."""
    lead = len(shape) - reference.ndim
    return tuple((s,) for s in shape[:lead]) + tuple(
        c if n == s else (s,) for c, n, s in zip(reference.chunks, reference.shape, shape[lead:]))


def _numpy_pullback(partial, value):
    """``g · ∂f/∂a`` for a partial already summed to the argument's shape: strong where ``g`` is 0 and the partial
    not finite (`pullbacks.kernel_product`: a guard written after the kernel gives its 0, as in memory)."""
    dtype = np.result_type(value)
    partial = np.asarray(partial, dtype) if np.ndim(value) else dtype.type(partial)
    return lambda g: kernel_product(g, partial)


def _lazy_pullback(partial, array):
    """``g · ∂f/∂x`` for a Dask argument: lazy, summed to its shape (where it was broadcast), its dtype; strong as
    `_numpy_pullback`'s."""
    def back(g):
        ct = _unbroadcast(kernel_product(g, partial), array.shape)
        return ct.astype(array.dtype) if ct.dtype != array.dtype else ct
    return back


def _unbroadcast(a, shape):
    """``a`` (of the broadcast shape) summed over the axes an argument of ``shape`` was broadcast along."""
    lead = np.ndim(a) - len(shape)
    if lead:
        a = a.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, (n, s) in enumerate(zip(shape, np.shape(a))) if n == 1 and s != 1)
    return a.sum(axis=axes, keepdims=True) if axes else a


def _summed(context, arrays, wrt, order=None):
    """The delayed sum over the blocks of ``arrays`` (a grid) of `_on_block` (or `_on_block_taylor` to ``order``)."""
    import dask

    context = dask.delayed(context, traverse=False)
    delayed = [a.to_delayed().ravel() for a in arrays]
    task, extra = (_on_block, ()) if order is None else (_on_block_taylor, (order,))
    return _tree([dask.delayed(_in_task)(task, context, list(blocks), tuple(wrt), *extra) for blocks in zip(*delayed)])


def _tree(parts):
    """The delayed elementwise sum of delayed tuples, ``FAN_IN`` at a time."""
    import dask

    while len(parts) > 1:
        parts = [dask.delayed(_added)(*parts[i:i + FAN_IN]) for i in range(0, len(parts), FAN_IN)]
    return parts[0]


def _added(*results):
    return tuple(None if terms[0] is None else functools.reduce(operator.add, terms) for terms in zip(*results))


# --- db.sum_blocks ---------------------------------------------------------------------------------------
def sum_blocks(f: Callable[..., Any], data: Any, *params: Any) -> Any:
    """The sum over the blocks of rows of ``data`` of ``f(block, *params)``: ``f`` any program `gradient` handles.

    ``data`` is a Dask array or a tuple of them with equal chunks along the first axis (their other axes
    are taken whole); each block ``f`` sees is a NumPy array (a tuple of them).  Inside a gradient, each
    block's value and gradient in the differentiated ``params`` are taken on a worker
    (``db.value_and_gradient`` per block) and tree-summed: value and gradient in one pass over the data.

    >>> import dask.array as da
    >>> x = da.arange(6.0, chunks=2)
    >>> db.gradient(lambda w: db.sum_blocks(lambda b, w: np.sum(b * w) ** 2, x, w), 1.0)
    214.0
    """
    import dask

    arrays = data if type(data) is tuple else (data,)
    for a in arrays:
        if type(getattr(a, "value", None)) is Lazy:
            raise UnsupportedFunctionError(
                "db.sum_blocks differentiates its params, not its data: the gradient of f in its data would be an "
                "array as large as the data (for an elementwise f, db.sum gives it lazily); pass db.cut(data)")
        if not is_chunked(a):
            raise TypeError(f"db.sum_blocks needs Dask arrays as data (one, or a tuple of them), not "
                            f"{type(a).__name__}; wrap NumPy data with dask.array.from_array(x, chunks=rows), or "
                            "pass it in params")
    rows = arrays[0].chunks[0] if arrays[0].ndim else ()
    if any(a.ndim == 0 or a.chunks[0] != rows for a in arrays):
        raise ValueError("db.sum_blocks needs data with equal chunks along the first axis (the blocks of rows); "
                         f"got {[a.chunks[0] if a.ndim else () for a in arrays]}: rechunk them alike, "
                         "e.g. a.rechunk({0: chunks})")
    arrays = tuple(a.rechunk(dict.fromkeys(range(1, a.ndim), -1)) if a.ndim > 1 else a for a in arrays)
    leaves, treedef = pytree.flatten((f, (arrays if type(data) is tuple else arrays[0], *params)))
    activity = pytree.leaf_activity(treedef)
    order = _order(leaves, activity)
    if order:  # inside db.jvp, db.hvp, db.hessian: the params' Taylor polynomial, as for db.sum (`_taylor`)
        values = [untracked(leaf) for leaf in leaves]
        active = [p for p, (leaf, on) in enumerate(zip(leaves, activity)) if on and _is_differentiated(leaf)]
        big = [p for p, v in enumerate(values) if is_chunked(v)]
    else:
        values, big, active, tape = _sorted(leaves, activity)
    if len(big) != len(arrays) or [values[p] for p in big] != list(arrays) or set(big) & set(active):
        raise UnsupportedFunctionError(
            "db.sum_blocks got a Dask array in its params or in f's own state, or differentiated its data; "
            "pass every Dask array in data (its rows are split into blocks) and differentiate the params")
    context = (treedef, [None if p in big else v for p, v in enumerate(values)], tuple(big), "call", None)
    call = _logged(f, len(active), sum(rows), True)
    if order:
        value, gradient, hessian = dask.compute(_summed(context, arrays, active, order))[0]
        return _polynomial(value, gradient, hessian, [leaves[p] for p in active], [values[p] for p in active])
    total = dask.compute(_summed(context, arrays, active))[0]
    if not active:
        return total[0]
    backs = [_numpy_pullback(partial, values[p]) for p, partial in zip(active, total[1:])]
    return _record(tape, [leaves[p] for p in active], total[0], backs, call)


# --- what a task runs -------------------------------------------------------------------------------------
def _in_task(function, *args):
    """``function(*args)`` in a fresh context (no outer gradient; the kernels' threads limited)."""
    return contextvars.Context().run(_limited, function, *args)


def _limited(function, *args):
    KERNEL_THREADS.set(TASK_THREADS)
    with _BLAS_LIMIT:
        return function(*args)


class _BlasLimit:
    """While any task runs in this process, BLAS (matrix products in `sum_blocks`) uses `TASK_THREADS` threads:
    OpenBLAS's thread count is the process's, so the first task to start limits it and the last to end restores
    it (threadpoolctl, of the ``dask`` extra; without it, BLAS keeps its threads).  The libraries loaded are
    looked up again (10 ms) only when a module was imported since (SciPy brings a BLAS of its own)."""

    def __init__(self):
        self.lock, self.running, self.limit, self.controller, self.modules = threading.Lock(), 0, None, None, 0

    def __enter__(self):
        with self.lock:
            if self.running == 0:
                if self.controller is None or (self.controller and self.modules != len(sys.modules)):
                    try:
                        from threadpoolctl import ThreadpoolController
                    except ImportError:
                        self.controller = False
                    else:
                        self.modules = len(sys.modules)
                        self.controller = ThreadpoolController()
                if self.controller:
                    self.limit = self.controller.limit(limits=TASK_THREADS, user_api="blas")
            self.running += 1

    def __exit__(self, *exc):
        with self.lock:
            self.running -= 1
            if self.running == 0 and self.limit is not None:
                self.limit.restore_original_limits()
                self.limit = None


_BLAS_LIMIT = _BlasLimit()


def _read_only_view(a):
    """A view of ``a`` of this task's own, read-only.  Other tasks' threads view the same array (the blocks of
    ``da.from_array``, a view among the arguments), and a gradient makes the constants it reads read-only for a
    while (`Tape.keep`, then `thaw`): a thread thawing its view while another holds the base read-only would
    fail.  A view read-only from the start is never thawed; the base alone is, by one of them."""
    view = a.view()
    view.flags.writeable = False
    return view


def _on_block(context, blocks, wrt, cotangent=None):
    """One block's ``(value, partial per position of wrt)``, or with ``cotangent`` the block's vjp in them."""

    program, leaves = _block_program(context, blocks, wrt)
    if cotangent is not None:
        _, back = reverse.pullback(program, *[leaves[p] for p in wrt])
        cts = back(cotangent)
        return cts if len(wrt) > 1 else (cts,)
    if not wrt:
        return (program(),)
    value, grads = reverse.value_and_gradient(program, *[leaves[p] for p in wrt])
    return (value,) + (tuple(grads) if len(wrt) > 1 else (grads,))


def _on_block_taylor(context, blocks, wrt, order):
    """One block's ``(value, gradient, Hessian or None)`` in the flat vector of the leaves at ``wrt`` (`_taylor`):
    to order 1 `value_and_gradient` of the block's program; to order 2 the `pullback` of its gradient (the
    gradient is its value, the Hessian's rows its pullbacks of one-hot cotangents, the program's value is read
    on the way): one kernel of second order, as `hessian` runs, giving all three."""

    program, leaves = _block_program(context, blocks, wrt)
    params = tuple(np.asarray(leaves[p], np.result_type(leaves[p])) for p in wrt)
    if order == 1:
        value, grads = reverse.value_and_gradient(lambda xs: program(*xs), params)
        return value, flat(grads), None
    values = []

    def read(*xs):
        values.append(program(*xs))
        return values[-1]

    grads, back = reverse.pullback(lambda xs: reverse.gradient(read, *xs), params)
    grads = grads if len(params) > 1 else (grads,)
    rows = []
    for i, x in enumerate(params):
        for k in range(x.size):
            seed = tuple(np.zeros(np.shape(g), np.result_type(g)) for g in grads)
            seed[i].reshape(-1)[k] = 1
            rows.append(flat(back(seed if len(params) > 1 else seed[0])))
    return untracked(values[0]), flat(grads), np.stack(rows)


def flat(arrays):
    """The arrays' elements in one vector."""
    return np.concatenate([np.ravel(a) for a in arrays])


def _block_program(context, blocks, wrt):
    """``(program, leaves)``: the block's leaves, and the program of the values at ``wrt`` that runs the block's
    `sum`, `broadcast` or `sum_blocks` call with them."""

    treedef, values, big, kind, backend = context
    leaves = list(values)
    for p, block in zip(big, blocks):
        leaves[p] = block
    leaves = [_read_only_view(a) if type(a) is np.ndarray and a.base is not None else a for a in leaves]

    def program(*xs):
        these = list(leaves)
        for p, x in zip(wrt, xs):
            these[p] = x
        f, args = pytree.unflatten(treedef, these)
        if kind == "sum":
            return sum_in_memory(f, *args, backend=backend or TASK_BACKEND)
        if kind == "broadcast":
            return broadcast_in_memory(f, *args, backend=backend or TASK_BACKEND)
        return f(*args)

    return program, leaves


def _block_map(*blocks, context, wrt):
    """For ``map_blocks``: a block of the broadcast value (``wrt`` empty), or of ∂f/∂x for the big leaf ``wrt[0]``
    (the gradient of the block's sum in it: f is elementwise and the leaf has the block's shape)."""
    treedef, values, big, _, backend = context
    return _in_task(_on_block, (treedef, values, big, "sum" if wrt else "broadcast", backend), blocks, wrt)[-1]


DASK_LAYER.run_over_chunks = run_over_chunks
DASK_LAYER.leaf_value = leaf_value
DASK_LAYER.leaf_gradient = leaf_gradient
DASK_LAYER.pullback = pullback
