"""A traced expression graph run as one fused kernel, on the fastest backend (its sums along axes: `axis_sums`).

A `Kernel` computes one broadcast's value and its partials (one per active
input) in one pass.  Its jobs are kept apart:

- code generation (`kernel_source`): the graph written as Python source per backend;
- the backends, each knowing when it is eligible and how to run:
  ``numpy`` (`_WholeArrays`): whole arrays, generated straight-line NumPy code
  (best for small arrays);
  ``blocked`` (`_Blocked`): the same operations over cache-sized blocks, every one
  ``out=`` into scratch buffers that stay in cache (no page faults, no memory traffic
  for temporaries), chunks of blocks on threads (and `ONE_THREAD`, the same on the
  calling thread alone: where a busy machine makes two threads slower than one);
  ``numexpr`` (`_Numexpr`): one fused numexpr expression per output (best on
  arithmetic-heavy kernels; its exp/sin are slower than NumPy's here, as it lacks VML;
  no candidate for a kernel with an operation it lacks, such as a user's function);
- the choice of backend (`BackendChoice`): forced with `set_backend` or ``backend=`` (never
  second-guessed), else per size (powers of two) the eligible backends are timed on the first call
  of that size, every call of the chosen one is timed, and a runner-up is re-timed now and then
  (after 2, 4, 8, ... calls, at most 256): it takes over when faster by a margin, so a first timing
  spoiled by a busy machine is undone within a few calls;
- buffer ownership (`_owned_or_recycled`): a blocked kernel's output and scratch buffers
  are allocated once and owned by a prepared program whose every replay overwrites them,
  or else recycled from an earlier call once nothing holds its results (no page faults).

Every backend gives the dtypes NumPy's own evaluation would.  Generated code only
contains names the library made.
"""

import contextvars
import functools
import math
import operator
import os
import re
import sys
import threading
import time

import numexpr
import numpy as np

from .expr import Sym, holds_singular
from .kernel_source import (
    blocked_kernel,
    infer_dtypes,
    kernel_names,
    needed_nodes,
    numexpr_sources,
    output_dtypes,
    scratch_buffer,
    single_block_kernel,
    summed_whole_array_kernel,
    whole_array_kernel,
    whole_in_place_kernel,
)
from .pullbacks import unbroadcast

BACKENDS = ("numpy", "blocked", "numexpr")
BLOCK = 65536  # elements per block: each block costs a few Python-level ufunc calls (~1 us each), which at 16384
# cost more than the caches lost at 65536 (EAM's gradient at 1e6 on two threads: 1.27 ms, 0.94 ms at 65536)
NUMEXPR_BLOCK = 262144  # numexpr's own threads want larger blocks
NUMEXPR_MIN = 1024  # elements from which numexpr is a candidate: below, its start-up cost dominates
THREADS = os.cpu_count() or 1
ONE_THREAD = "blocked, one thread"  # the blocked backend on the calling thread alone: chosen, never forced
KERNEL_THREADS = contextvars.ContextVar("dualbroadcast_kernel_threads", default=None)  # at most so many (a Dask task)
FORCED_BACKEND = contextvars.ContextVar("dualbroadcast_backend", default=None)


def set_backend(name: str | None) -> None:
    """Force every kernel onto backend ``name`` ("numpy", "blocked", "numexpr"), or None for automatic.

    The choice holds in the calling thread (a context variable); ``backend=`` on a call overrides it."""
    if name is not None:
        _check_backend(name)
    FORCED_BACKEND.set(name)


def _check_backend(name):
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS} or None")


class Kernel:
    """Value and partials of one traced function; ``reduce`` sums them (``db.sum``)."""

    def __init__(self, graph, inputs, outputs, reduce, name, complex=False, dot_products=False, singular=None):
        self.complex = complex  # complex numbers take part: holomorphic, numexpr only where it has complex forms
        self.dot_products = dot_products  # numpy backend, every output summed whole: products as dot products
        self.inputs = inputs
        self.outputs = outputs  # [value, ∂value/∂active_0, ...]: Syms or literals
        self.reduce = reduce
        self.name = name
        self.order = needed_nodes(graph, outputs)  # the operations, and below the names generated code gives them
        # its partials may be infinite or NaN: their pullbacks check them (`pullbacks.kernel_pullback`)
        self.singular = holds_singular(needed_nodes(graph, outputs[:1])) if singular is None else singular
        self.names, self.constants, self.functions = kernel_names(inputs, self.order, outputs)
        self.input_names = [self.names[x.index] for x in inputs]
        self.fresh = fresh_partials(outputs, reduce)
        self.dtypes = {}  # input kinds -> dtype of the value
        blocked = _Blocked(self)
        self.backends = {"numpy": _WholeArrays(self), "blocked": blocked, "numexpr": _Numexpr(self),
                         ONE_THREAD: _Blocked(self, threads=1, compiled=blocked.compiled)}
        self.choice = BackendChoice(self)
        self.unscaled = None  # a sum's: (kernel, its partials' literal factors), `broadcast_pullbacks.unscaled_kernel`
        self.split = None  # a sum's kernel without the value (`without_value`)
        self.read_wait = self.read_backoff = 0  # `value_unread`'s calls to wait, and how long it waits next

    def value_unread(self):
        """Whether a sum's call in a gradient should leave its value pending (`tracked.Pending`): computing the
        partials without it (`without_value`), and the value by this kernel if it is read after all (a pass
        more).  A read value makes the next 1, 2, 4, ... (at most ``READ_WAIT_CAP``) calls compute it with the
        partials, as when it is read every call (EAM's ``P² + P³``), where a call left pending costs the pass."""
        if self.read_wait:
            self.read_wait -= 1
            return False
        return True

    def value_read(self):
        """A pending value of this sum was read: wait longer before the next is left pending."""
        self.read_backoff = self.read_wait = min(2 * self.read_backoff or 1, READ_WAIT_CAP)

    def without_value(self, values):
        """This sum's kernel without its value, for inputs like ``values``: a zero of the value's dtype in the
        value's place (blocked kernels do not sum it), the partials as they are."""
        if self.split is None:
            zero = np.dtype(self.value_dtype(values)).type(0)
            self.split = Kernel(self.inputs[0].graph, self.inputs, [zero] + self.outputs[1:], self.reduce, self.name,
                                self.complex, singular=self.singular)
        return self.split

    def __call__(self, values, active_shapes, backend=None):
        """Return ``(value, partials, backend, size)``; partials reduced to ``active_shapes`` if reducing."""
        shapes = [getattr(v, "shape", ()) for v in values]
        shape = shapes[0] if shapes and shapes.count(shapes[0]) == len(shapes) else np.broadcast_shapes(*shapes)
        size = math.prod(shape)
        requested = backend or FORCED_BACKEND.get()
        if requested is None:
            return self.choice.run(values, shape, size, active_shapes)
        _check_backend(requested)  # forced: never second-guessed, never timed
        if requested != "numpy" and not self.backends[requested].eligible(values, size):
            requested = "numpy"  # not eligible for these shapes (or numexpr lacks an operation)
        return self.run(requested, values, shape, size, active_shapes) + (requested, size)

    def into(self, out, values, backend=None):
        """The value of a kernel without partials (not reducing), written into ``out`` (the call's shape and
        the value's dtype) by the blocked backend wherever it is eligible and no other backend is asked for:
        it allocates nothing then (a fresh 8 MB result costs page faults a timing on fresh buffers would not
        weigh).  Each block reads its inputs before its last operation writes ``out``, so ``out`` may be one
        of the inputs.  Elsewhere the chosen backend's fresh array."""
        shape = np.broadcast_shapes(*[getattr(v, "shape", ()) for v in values])
        size = math.prod(shape)
        requested = backend or FORCED_BACKEND.get()
        if requested in (None, "blocked") and self.backends["blocked"].eligible(values, size):
            return self.backends["blocked"].runner(values, shape, size, [], owned=False, outs=[out])(*values)[0]
        return self(values, [], backend)[0]

    def partial_sums(self, values, backend=None, kinds=None):
        """`__call__` for a `sum` whose partials are all summed whole (every active argument a scalar), the
        partials as one vector: on the numpy backend, a second-order kernel's products of factors are summed
        as one matrix product (`summed_whole_array_kernel`).  ``kinds``: the values' (`value_kind`), if known.
        Where the backend is chosen automatically among several, the call goes through the choice (timed,
        `BackendChoice`), whose numpy run sums so too."""
        shapes = [getattr(v, "shape", ()) for v in values]
        shape = shapes[0] if shapes and shapes.count(shapes[0]) == len(shapes) else np.broadcast_shapes(*shapes)
        size = math.prod(shape)
        requested = backend or FORCED_BACKEND.get()
        chosen = requested if requested is not None else self.choice.buckets.get(size.bit_length())
        if chosen != "numpy" or not self.dot_products:  # else numpy forced, or the size's only candidate: untimed
            value, partials, used, size = self(values, [()] * (len(self.outputs) - 1), backend)
            return value, np.array(partials, np.result_type(value)), used, size
        value, sums = self.backends["numpy"].sums(values, shape)
        dtype = self.value_dtype(values) if kinds is None else self.dtype_for(kinds)
        return dtype.type(value), sums if sums.dtype == dtype else sums.astype(dtype), "numpy", size

    def _candidates(self, values, size):
        """The backends that can run a call on ``values``: numpy always, the others from their sizes
        (numexpr also from the operations it has)."""
        return [name for name, backend in self.backends.items() if backend.eligible(values, size)]

    def run(self, backend, values, shape, size, active_shapes):
        """``(value, partials)`` on a given backend, for inputs whose broadcast shape is known.

        Every backend gives the dtypes NumPy's own evaluation would (numexpr computes
        float32 scalars in float64; a literal partial is in the value's dtype).
        """
        value, partials = self.backends[backend].run(values, shape, size, active_shapes)
        dtype = self.value_dtype(values)
        if value.dtype != dtype:
            value = value.astype(dtype)
        return value, [p if getattr(p, "dtype", None) is dtype or getattr(p, "dtype", None) == dtype
                       else np.asarray(p, dtype) for p in partials]

    def typed_whole(self, kinds, same_shape=False):
        """The whole-array kernel for inputs of ``kinds`` (dtypes), its literals typed to match; ``same_shape``:
        for array inputs of one shape only, reusing dead intermediates' arrays (`whole_in_place_kernel`)."""
        return self.backends["numpy"].typed_whole(kinds, same_shape)

    def blocked_runner(self, values, shape, size, active_shapes, owned=True, backend="blocked"):
        """A function of the input values running the blocked kernel for these shapes and dtypes (``backend``
        `ONE_THREAD`: on the calling thread alone); ``owned``: its buffers are allocated once and reused by every
        call (`_owned_or_recycled`)."""
        return self.backends[backend].runner(values, shape, size, active_shapes, owned)

    def value_dtype(self, values):
        """The dtype NumPy gives the value for inputs like ``values`` (its partials share it)."""
        return self.dtype_for(tuple(value_kind(v) for v in values))

    def dtype_for(self, kinds):
        """The value's dtype for inputs of ``kinds`` (per input a dtype, or ``float`` for a Python float)."""
        dtype = self.dtypes.get(kinds)
        if dtype is None:
            dtype = self.dtypes[kinds] = output_dtypes(self, infer_dtypes(self, kinds))[0]
        return dtype


class BackendChoice:
    """Which backend a kernel runs an automatic call on, per size bucket (the bit length of the size).

    The policy (issue 18: a first timing on a busy machine must not decide for the life of the process):

    - the first call of a bucket with more than one eligible backend times each (`measure`, best of three:
      their first runs generate code) and takes the fastest;
    - every later call of the chosen backend is timed (two clock reads, about 0.1 us), and the bucket keeps
      the least seconds per element since its last re-timing (`Bucket.recent`; noise only ever slows a call,
      so a minimum is the robust statistic);
    - now and then one call runs a runner-up instead, the others in turns: after ``RETIME_FIRST`` calls, and
      after each full round of the others the wait doubles, and grows to ``RETIME_EXCESS`` times the
      excess of the round's slowest runner-up (4x slower: a wait of 48 calls), so that from the second
      round on re-timing costs at most 1/16 of the time; waits are at most ``RETIME_CAP`` calls;
    - it switches when the runner-up's seconds per element are below the chosen one's by ``margin`` (``MARGIN``), and
      the waits start again from ``RETIME_FIRST`` (a wrong switch is so undone as quickly).

    Bound: a first measurement that picked the wrong backend is corrected by the ``1 + k (RETIME_FIRST + 1)``-th
    call of the bucket, the truly fastest being the k-th of the others in turn (k <= 2: by the 7th call).
    The cost, once the waits reached their cap: one call in ``RETIME_CAP + 1`` runs a slower backend (a
    runner-up 4x slower adds about 1%).  A forced backend (`set_backend`, ``backend=``) is never timed.
    Every backend gives the same results up to rounding (a blocked sum adds in another order).
    """

    def __init__(self, kernel, margin=None):
        self.kernel = kernel
        self.buckets = {}  # size bucket -> its `Bucket`, or the name of its only candidate
        self.margin = margin or MARGIN  # a prepared program's plans take a smaller one (`replay.compile_plans`)

    @property
    def fastest(self):
        """Size bucket -> the backend chosen for it now."""
        return {k: b if type(b) is str else b.backend for k, b in self.buckets.items()}

    def chosen(self, size):
        """The backend chosen for ``size`` (None before its first call)."""
        bucket = self.buckets.get(size.bit_length())
        return bucket if bucket is None or type(bucket) is str else bucket.backend

    def run(self, values, shape, size, active_shapes):
        """``(value, partials, backend, size)`` of a call on the chosen backend (timed), a runner-up (when one is
        due), or each candidate (the bucket's first call)."""
        kernel = self.kernel
        bucket = self.buckets.get(size.bit_length())
        if type(bucket) is Bucket:
            backend = bucket.backend
            if backend != "numpy" and not kernel.backends[backend].eligible(values, size):
                return kernel.run("numpy", values, shape, size, active_shapes) + ("numpy", size)
            if bucket.wait:
                bucket.wait -= 1
                start = clock()
                result = kernel.run(backend, values, shape, size, active_shapes)
                bucket.observe((clock() - start) / size)
                return result + (backend, size)
            return self.retime(bucket, values, shape, size, active_shapes)
        if bucket is None:
            candidates = kernel._candidates(values, size)
            if len(candidates) > 1:
                return self.measure(candidates, values, shape, size, active_shapes) + (size,)
            bucket = self.buckets[size.bit_length()] = "numpy"
        return kernel.run("numpy", values, shape, size, active_shapes) + ("numpy", size)

    def measure(self, candidates, values, shape, size, active_shapes):
        """Time each candidate on this call's data (best of three: one slow run must not decide), choose the
        fastest for this size, and return its ``(value, partials, backend)``."""
        timings = {}
        for backend in candidates:
            best = math.inf
            for _ in range(3):
                start = clock()
                result = self.kernel.run(backend, values, shape, size, active_shapes)
                best = min(best, clock() - start)
            timings[backend] = (best, result)
        winner = min(timings, key=lambda b: timings[b][0])
        self.buckets[size.bit_length()] = Bucket(winner, [b for b in candidates if b != winner])
        return timings[winner][1] + (winner,)

    def retime(self, bucket, values, shape, size, active_shapes):
        """Run this call on the next runner-up in turn, timed, and switch to it if it is faster by the margin."""
        others = bucket.others
        backend = others[bucket.turn]
        bucket.turn = (bucket.turn + 1) % len(others)
        if not self.kernel.backends[backend].eligible(values, size):
            bucket.wait = 1  # another shape of this bucket: try on the next call
            return self.kernel.run(bucket.backend, values, shape, size, active_shapes) + (bucket.backend, size)
        start = clock()
        result = self.kernel.run(backend, values, shape, size, active_shapes)
        seconds = (clock() - start) / size
        if seconds * self.margin < bucket.recent < math.inf:  # (inf: no call of the chosen one timed since)
            others[others.index(backend)] = bucket.backend
            bucket.backend, bucket.interval, bucket.slowest = backend, RETIME_FIRST, 1.0
        else:
            if bucket.recent < math.inf:
                bucket.slowest = max(bucket.slowest, seconds / bucket.recent)
            if bucket.turn == 0:  # a round of the others done: wait twice as long, and long enough
                excess = math.ceil(RETIME_EXCESS * (bucket.slowest - 1))
                bucket.interval = min(max(2 * bucket.interval, excess), RETIME_CAP)
                bucket.slowest = 1.0
        bucket.wait, bucket.recent = bucket.interval, math.inf
        return result + (backend, size)


class Bucket:
    """One size bucket's automatic choice (`BackendChoice`): the chosen backend, the others in turn to be
    re-timed, the calls to wait before the next re-timing, the least seconds per element the chosen
    backend took since the last one, and how much slower the round's slowest runner-up was."""

    __slots__ = ("backend", "others", "turn", "wait", "interval", "recent", "slowest")

    def __init__(self, backend, others):
        self.backend, self.others, self.turn = backend, others, 0
        self.wait = self.interval = RETIME_FIRST
        self.recent = math.inf
        self.slowest = 1.0  # the slowest runner-up of this round, as a multiple of the chosen backend

    def observe(self, seconds):
        """A call of the chosen backend took ``seconds`` per element."""
        if seconds < self.recent:
            self.recent = seconds


clock = time.perf_counter  # the choice's clock (a test injects its own)
RETIME_FIRST = 2  # calls of the chosen backend before a runner-up is first re-timed
RETIME_CAP = 256  # the longest wait between re-timings
RETIME_EXCESS = 16  # a round's re-timings cost at most 1/16 of the calls waited for (until the cap)
MARGIN = 1.25  # a runner-up takes over when the chosen backend is slower than it by this factor


class _WholeArrays:
    """The ``numpy`` backend: the whole-array kernel, NumPy allocating every result."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.whole = whole_array_kernel(kernel)
        self.typed = {}  # (input dtypes, for inputs of one shape) -> whole-array kernel with typed literals
        self.summing = {}  # inputs of the call's shape -> the kernel returning sums (`summed_whole_array_kernel`)

    def eligible(self, values, size):
        return True

    def run(self, values, shape, size, active_shapes):
        if self.kernel.dot_products and self.kernel.reduce and not any(active_shapes):
            value, sums = self.sums(values, shape)
            return value, [np.array(s) for s in sums]  # each its own array: a pullback may overwrite it
        return _finish(self.kernel, self.whole(*values), shape, active_shapes)

    def sums(self, values, shape):
        """The value and the partials of a `sum` whose partials are all summed whole, as one vector."""
        full = tuple(type(v) is np.ndarray and v.shape == shape for v in values)
        summing = self.summing.get(full)
        if summing is None:
            summing = self.summing[full] = summed_whole_array_kernel(self.kernel, full)
        return summing(shape, *values)

    def typed_whole(self, kinds, same_shape=False):
        whole = self.typed.get((kinds, same_shape))
        if whole is None:
            make = whole_in_place_kernel if same_shape else whole_array_kernel
            whole = self.typed[kinds, same_shape] = make(self.kernel, kinds)
        return whole


class _Blocked:
    """The ``blocked`` backend: the operations in place over cache-sized blocks, chunks of blocks on threads;
    with ``threads`` 1, `ONE_THREAD`: a candidate only where ``blocked`` splits the call across threads (on a
    loaded machine one thread can beat two: a chunk waits for a busy core)."""

    def __init__(self, kernel, threads=None, compiled=None):
        self.kernel = kernel
        self.threads = threads  # at most so many (None: `chunk_bounds`' own limit)
        self.compiled = {} if compiled is None else compiled  # (generator, input kinds, full-size inputs, stored
        # outputs) -> generated kernel: shared by the blocked backends of a kernel
        self.idle = {}  # (signature, shape, active shapes) -> bound kernels not running (`_owned_or_recycled`)

    def eligible(self, values, size):
        if size < BLOCK // 2 or not all(np.size(v) in (1, size) for v in values):
            return False
        return self.threads is None or len(chunk_bounds(size, np.dtype(self.kernel.value_dtype(values)).itemsize)) > 2

    def run(self, values, shape, size, active_shapes):
        return self.runner(values, shape, size, active_shapes, owned=False)(*values)

    def runner(self, values, shape, size, active_shapes, owned, outs=None):
        """A function of the input values running the blocked kernel for these shapes and dtypes (into
        ``outs``, the stored outputs, if given: see `Kernel.into`).
        A call that fits one block runs a kernel without a loop (`single_block_kernel`)."""
        reduce = self.kernel.reduce
        full = tuple(np.ndim(v) > 0 and np.size(v) == size for v in values)
        stored = (not reduce,) + tuple(not reduce or (size > 1 and math.prod(s) == size) for s in active_shapes)
        signature = (tuple(value_kind(v) for v in values), full, stored)
        if size <= BLOCK and outs is None:  # (into ``outs``: the loop, over one block)
            return self._single_block_runner(signature, shape, active_shapes, owned)
        run, out_dtypes, scratch_dtypes = self._generated(blocked_kernel, signature)
        shapes = [()] + list(active_shapes) if reduce else [shape] * len(stored)
        chunks = chunk_bounds(size, max(np.dtype(d).itemsize for d in out_dtypes), self.threads)
        block = min(BLOCK, -(-size // (len(chunks) - 1)))  # a chunk's elements at most

        def bind():
            buffers = outs if outs is not None else [np.empty(s, d) for s, d, keep in
                                                     zip(shapes, out_dtypes, stored) if keep]
            flat_outs = [o.reshape(-1) for o in buffers]
            scratch = [[scratch_buffer(block, *kind) for _, *kind in scratch_dtypes] for _ in range(len(chunks) - 1)]

            def execute(*values):
                args = [np.ravel(v) if f else v if type(v) is float else np.reshape(v, ())
                        for v, f in zip(values, full)]
                sums = iter(run_in_threads(run, chunks, block, args + flat_outs, scratch))
                stores = iter(buffers)
                results = [next(stores) if keep else np.reshape(next(sums), s) for s, keep in zip(shapes, stored)]
                return results[0][()] if reduce else results[0], results[1:]

            return execute, buffers

        if outs is not None:  # the caller's buffers, for this call: never recycled for another
            return bind()[0]
        return _owned_or_recycled(bind, owned, self._idle(signature, shape, active_shapes, len(chunks)))

    def _single_block_runner(self, signature, shape, active_shapes, owned):
        """The one-block kernel bound to its buffers: ``kernel(*values) -> (value, partials)``.

        Buffers have the call's shape, so inputs enter as they are (no ravel, no reshape).
        """
        make, out_dtypes, scratch = self._generated(single_block_kernel, signature)
        stored = signature[2]

        def bind():
            env = {"SHAPE": shape}
            partials, outs = [], []
            for k, keep in enumerate(stored):
                target = active_shapes[k - 1] if self.kernel.reduce and k else shape
                if keep:
                    env[f"r{k}"] = result = np.empty(target, out_dtypes[k])
                    env[f"o{k}"] = result.reshape(shape)
                    outs.append(result)
                else:
                    env[f"s{k}"] = result = target
                if k:
                    partials.append(result)
            env["P"] = partials  # returned as is when every partial is stored
            env.update((name, scratch_buffer(shape, dtype, fill)) for name, dtype, fill in scratch)
            return make(**env), outs

        return _owned_or_recycled(bind, owned, self._idle(signature, shape, active_shapes, 1))

    def _idle(self, signature, shape, active_shapes, chunks):
        """The bound kernels idle for calls of these dtypes and shapes, split in ``chunks`` for as many threads
        (`_owned_or_recycled`; a kernel bound inside a Dask task runs on one thread, `KERNEL_THREADS`, and must not
        serve a call outside with one chunk, nor the reverse); those of the last shapes called only."""
        key = (signature, shape, tuple(active_shapes), chunks)
        idle = self.idle.get(key)
        if idle is None:
            self.idle = {key: (idle := [])}
        return idle

    def _generated(self, generator, signature):
        """The kernel ``generator`` writes for ``signature`` (input kinds, full-size inputs, stored outputs),
        generated on first use."""
        key = (generator,) + signature
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.compiled[key] = generator(self.kernel, *signature)
        return compiled


def _owned_or_recycled(bind, owned, idle):
    """The kernel ``bind()`` makes, bound to buffers of its own (``bind() -> (kernel, its result buffers)``).

    ``owned``: bound once, its buffers (and so its results) reused by every call, as a prepared program
    replays it.  Else each call takes an ``idle`` bound kernel whose results nobody holds any more (their
    reference counts are back to what the kernel alone holds: no view, no gradient made of them in place,
    nothing of the caller's), or binds a new one; after the call it is idle again, and the last
    ``KEEP_IDLE`` are kept.  Fresh buffers of a megabyte or more cost page faults on every first touch, a
    third of a 2 ms kernel in a user's loop where other work runs between calls (issue 18's cold calls);
    two kept let a loop that holds its last gradient while computing the next reuse the one before.
    Results of more than ``RECYCLED_BYTES`` are fresh every call (not kept alive after their last use).
    """
    if owned:
        return bind()[0]

    def call(*values):
        entry = None
        with _idle_lock:
            for k, (_, buffers, counts) in enumerate(idle):
                if _references(buffers) == counts:
                    entry = idle.pop(k)
                    break
        if entry is None:
            kernel, buffers = bind()
            entry = (kernel, buffers, _references(buffers))
        result = entry[0](*values)
        if sum(b.nbytes for b in entry[1]) <= RECYCLED_BYTES:
            with _idle_lock:
                idle.append(entry)
                if len(idle) > KEEP_IDLE:
                    del idle[0]
        return result

    return call


def _references(buffers):
    """The reference counts of ``buffers``, counted alike whenever asked (`_owned_or_recycled`)."""
    return [sys.getrefcount(b) for b in buffers]


KEEP_IDLE = 2  # bound kernels kept per kernel and shapes for calls without an owner (`_owned_or_recycled`)
RECYCLED_BYTES = 1 << 26  # results larger than 64 MiB are not kept for the next call
_idle_lock = threading.Lock()


class _Numexpr:
    """The ``numexpr`` backend: one fused numexpr expression per output."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.sources = numexpr_sources(kernel)  # None if an operation has no numexpr form

    def eligible(self, values, size):
        return self.sources is not None and size >= NUMEXPR_MIN

    def run(self, values, shape, size, active_shapes):
        local = dict(zip(self.kernel.input_names, values))
        dtype = np.result_type(*values) if values else np.float64
        for name, constant in self.kernel.constants.items():
            local[name] = dtype.type(constant) if isinstance(constant, float) else constant
        if not self.kernel.reduce:
            outs = [_evaluate(src, local, shape) for src in self.sources]
            return outs[0], outs[1:]
        if not all(np.size(v) in (1, size) for v in values):
            results = [_evaluate(src, local, shape) for src in self.sources]
            return _finish(self.kernel, results, shape, active_shapes)
        # numexpr computes complex numbers in complex128 (`Kernel.run` casts back to complex64)
        dtype = np.dtype(np.complex128) if self.kernel.complex else np.result_type(*values)
        return _reduce_numexpr_blocked(self.sources, local, dtype, size, active_shapes)


def _finish(kernel, results, shape, active_shapes):
    """Whole-array results to the call's shapes: full value, partials as the pullback needs.

    Partials are returned as fresh arrays that nothing else holds (not an input,
    not the value), so a pullback may overwrite them.
    """
    value, partials = results[0], results[1:]
    if kernel.reduce:
        if np.shape(value) != shape and type(value) is not np.ndarray and value == 0:  # no value (`without_value`)
            value = np.zeros((), np.result_type(value))
        else:
            value = np.add.reduce(value if np.shape(value) == shape else np.broadcast_to(value, shape), axis=None)
        return value, _summed(partials, shape, active_shapes, kernel.fresh)
    if np.shape(value) != shape or not isinstance(value, np.ndarray):
        value = np.array(np.broadcast_to(value, shape))
    return value, [p if fresh else np.array(p) for p, fresh in zip(partials, kernel.fresh)]


READ_WAIT_CAP = 256  # calls: a sum whose value is always read pays a pass more in one call of 257


def value_kind(v):
    """A value's dtype, or ``float`` for a Python float (weakly typed, like a literal)."""
    if type(v) is float:
        return float
    dtype = getattr(v, "dtype", None)  # an array's or a NumPy scalar's, without np.result_type's call
    return np.result_type(v) if dtype is None else dtype


def chunk_bounds(size, itemsize=8, threads=None):
    """Bounds of the contiguous chunks a blocked kernel runs in parallel, one per core (at most ``threads``),
    each of at least ``CHUNK_BLOCKS`` float64 blocks' bytes (``itemsize``: the widest output's; a float32
    element costs about half a float64 one)."""
    cores = min(KERNEL_THREADS.get() or THREADS, threads or THREADS)
    chunks = min(cores, int(size * itemsize / (CHUNK_BLOCKS * 8 * BLOCK))) or 1
    return [size * c // chunks for c in range(chunks + 1)]


# A chunk's hand-off to a worker costs ~15 us alone, ~50 us with the other core busy; measured at 100352
# elements, one chunk against two, in turns (5 runs, ~2 other processes on the 2 cores): EAM's float64
# gradient kernel took 200-230 us on two against 270-280 on one in 4 of 5 runs; the float32
# arctan2 gradient kernel 188-196 us on two against 184-185 on one in 4 of 5.
CHUNK_BLOCKS = 0.75


def run_in_threads(run, bounds, block, args, scratch):
    """Run a blocked kernel over its chunks, the first on the calling thread and each other on a `_Worker`
    (NumPy releases the GIL)."""
    if len(bounds) == 2:
        return run(0, bounds[1], block, *args, *scratch[0])
    workers = [_Worker.take() for _ in range(len(bounds) - 2)]
    for c, worker in enumerate(workers, start=1):
        worker.start(run, (bounds[c], bounds[c + 1], block, *args, *scratch[c]))
    try:
        first = run(0, bounds[1], block, *args, *scratch[0])
    finally:
        results = [worker.wait() for worker in workers]  # each waited for, even when the first chunk raised
    results = [first] + [worker.result(r) for worker, r in zip(workers, results)]
    return tuple(functools.reduce(operator.add, sums) for sums in zip(*results))


class _Worker:
    """A thread running one chunk at a time, handed over through two locks: a pool's ``submit`` and
    ``Future.result`` took ~50 us a call here, this ~15 us (a kernel of 1e5 elements takes ~150 us).
    Idle workers wait in `_idle_workers`; a call takes one (or starts one) and gives it back when done."""

    def __init__(self):
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job = self.outcome = None
        threading.Thread(target=self.loop, name="dualbroadcast", daemon=True).start()

    @staticmethod
    def take():
        with _idle_lock:
            if _idle_workers:
                return _idle_workers.pop()
        return _Worker()

    def loop(self):
        while True:
            self.go.acquire()
            run, args = self.job
            try:
                self.outcome = (True, run(*args))
            except Exception as error:  # noqa: BLE001 - raised again in the calling thread (`result`)
                self.outcome = (False, error)
            finally:
                self.job = None
                self.done.release()

    def start(self, run, args):
        self.job = (run, args)
        self.go.release()

    def wait(self):
        """Wait for the chunk, give this worker back, and return its outcome (`result` reads it)."""
        self.done.acquire()
        outcome, self.outcome = self.outcome, None
        with _idle_lock:
            _idle_workers.append(self)
        return outcome

    @staticmethod
    def result(outcome):
        ok, value = outcome
        if not ok:
            raise value
        return value


_idle_workers = []  # `_Worker`s waiting for a chunk
os.register_at_fork(after_in_child=_idle_workers.clear)  # a forked child has none of the parent's threads


def _evaluate(source, local, shape):
    result = numexpr.evaluate(source, local_dict=local)
    return np.array(np.broadcast_to(result, shape)) if result.shape != shape else result


def _reduce_numexpr_blocked(sources, local, dtype, size, active_shapes):
    """Sum each output over blocks, never materialising more than a block; ``dtype``: numexpr's for them."""
    full = [k for k, v in local.items() if np.size(v) == size and np.ndim(v) > 0]
    flat = {k: np.ravel(local[k]) for k in full}
    local = {k: np.reshape(v, ()) if np.size(v) == 1 and np.ndim(v) > 0 else v for k, v in local.items()}
    # ^ blocks are flat: a (1, 1) constant would broadcast them to (1, block)
    reads_full = [bool(set(re.findall(r"\bi\d+\b", source)) & set(full)) for source in sources]
    totals = [0.0] * len(sources)
    partials_full = {}
    for s, shape in enumerate(active_shapes, start=1):
        if math.prod(shape) == size and size > 1:
            partials_full[s] = np.empty(size, dtype)
    for lo in range(0, size, NUMEXPR_BLOCK):
        hi = min(lo + NUMEXPR_BLOCK, size)
        block = dict(local)
        for k in full:
            block[k] = flat[k][lo:hi]
        for s, source in enumerate(sources):
            if s in partials_full and reads_full[s]:
                numexpr.evaluate(source, local_dict=block, out=partials_full[s][lo:hi])
            elif s in partials_full:  # a constant partial (x + c): numexpr gives one number
                partials_full[s][lo:hi] = numexpr.evaluate(source, local_dict=block)
            else:
                part = numexpr.evaluate(source, local_dict=block)
                totals[s] += np.sum(part) * ((hi - lo) // max(part.size, 1))
    value = dtype.type(totals[0])
    partials = []
    for s, shape in enumerate(active_shapes, start=1):
        if s in partials_full:
            partials.append(partials_full[s].reshape(shape))
        else:
            partials.append(np.reshape(dtype.type(totals[s]), shape))
    return value, partials


def _summed(partials, shape, active_shapes, fresh):
    """The partials of a sum, each reduced to its argument's shape (`_reduce_to`).  Those of scalar arguments
    are summed whole, once per node (a second-order kernel returns a node as a partial and again as second
    partials), several small ones as the rows of one array: a second-order kernel of 10 coefficients at
    N=1e3 has 55, whose sums took 130 us one by one by `_reduce_to`, 45 us so."""
    rows = {}  # id(partial) -> its row among those summed whole
    keys = []
    for p, target in zip(partials, active_shapes):
        key = id(p) if target == () and type(p) is np.ndarray and p.shape == shape else None
        if key is not None and key not in rows:
            rows[key] = p
        keys.append(key)
    if len(rows) > 1 and len(rows) * math.prod(shape) <= STACKED_SUM_ELEMENTS:
        totals = np.add.reduce(np.stack(list(rows.values())).reshape(len(rows), -1), axis=1)
    else:
        totals = [np.add.reduce(p, axis=None) for p in rows.values()]
    sums = dict(zip(rows, totals))
    return [np.array(sums[key]) if key is not None else _reduce_to(p, shape, target, own)
            for p, target, own, key in zip(partials, active_shapes, fresh, keys)]


STACKED_SUM_ELEMENTS = 1 << 17  # partials summed as rows of one array: a bounded copy (1 MiB of float64)


def _reduce_to(p, shape, target, fresh):
    """A partial summed over the axes its argument (of shape ``target``) was broadcast along."""
    if np.shape(p) == shape == target:
        return p if fresh else np.array(p)
    return np.array(unbroadcast(np.broadcast_to(p, shape), target))


def fresh_partials(outputs, reduce):
    """Per partial: whether the whole-array kernel computes it as an array of its own.

    Inputs, literals and nodes returned twice are shared; but a summed value is
    dropped once summed, so ``exp``'s partial (its value) is its own under ``db.sum``.
    """
    seen = set()
    fresh = []
    for k, o in enumerate(outputs):
        own = type(o) is Sym and o.op is not None and o.index not in seen
        if type(o) is Sym and (k or not reduce):
            seen.add(o.index)
        if k:
            fresh.append(own)
    return fresh
