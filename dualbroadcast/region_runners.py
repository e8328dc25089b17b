"""How a prepared program runs a forward region (a run of elementwise steps fused into one kernel,
`regions.py`): the runners of its kernel on each backend (`region_runner`, `blocked_runner`,
`axis_region_runner`), timed on the first calls and the fastest kept (`_chosen`, `Runners`); and a large matrix
product's, on one core or split across them (`matmul_runner`), and a shared partial's product sums
(`product_sums_runner`)."""

import math
import time

import numpy as np

from .axis_sums import (
    axis_sum_moved,
    axis_sum_rows,
    axis_sum_whole,
    moved,
    moved_value,
    product_sums,
    short_axes_first,
)
from .kernels import (
    FORCED_BACKEND,
    KERNEL_THREADS,
    ONE_THREAD,
    THREADS,
    BackendChoice,
    Bucket,
    Kernel,
    chunk_bounds,
    fresh_partials,
    run_in_threads,
    value_kind,
)


def region_runner(kernel, valueless, examples, shape, size, active_shapes, blockable):
    """A forward region's kernel (``valueless``: its variant without the value) as a function of its inputs
    returning ``(value, partials)``, the backend's name, and whether its partials are new arrays on every call.
    On the backend `kernels.set_backend` forced when the program was compiled; else blocked where it runs on
    several threads, or on one (`kernels.ONE_THREAD`) if that is faster (a loaded machine); where it would run on
    one, whole arrays if they time faster here (NumPy's passes over
    arrays that stay in cache can beat the blocked loop's calls per block: ``sum(x**2)`` of 1e5 float32 took
    0.29x the primal so, 2.4x blocked; EAM's four operations on 1e5 float64 took 6x blocked's time): from
    ``CHOSEN_MIN`` elements under a `kernels.BackendChoice` that corrects a bad first timing (`_chosen`), on
    fewer timed once here (`_fastest`: a choice's ~1 us a call would cost more than a wrong pick); else as
    ``db.sum`` chooses."""
    if valueless:  # what the gradient alone needs when nothing else reads the sum (`Kernel.without_value`)
        kernel = kernel.without_value(examples)
    forced = FORCED_BACKEND.get()
    candidates = []
    one_chunk = len(chunk_bounds(size, np.dtype(kernel.value_dtype(examples)).itemsize)) == 2
    if blockable and forced in (None, "blocked"):
        candidates.append((kernel.blocked_runner(examples, shape, size, active_shapes), "blocked"))
        if forced is None and not one_chunk:  # (several chunks: more than ``CHOSEN_MIN`` elements)
            candidates.append((None, ONE_THREAD))
    if forced is None and one_chunk:
        whole = _whole_runner(kernel, valueless, examples, shape, active_shapes)
        if whole is not None:
            candidates.append((whole, "numpy"))
    if len(candidates) == 2 and size >= CHOSEN_MIN:
        candidates = [(kernel.blocked_runner(examples, shape, size, active_shapes, False, name), name)
                      if name != "numpy" else (runner, name) for runner, name in candidates]
        return _chosen(candidates, examples, shape, size, active_shapes), "chosen per call", True  # partials:
        # arrays of their own on each backend (a recycled blocked kernel's once nothing holds them)
    if candidates:
        runner, name = _fastest(candidates, examples)
        return runner, name, name == "numpy"
    if forced is None:
        def run(*values):
            return kernel(values, active_shapes)[:2]
        name = "chosen per call"
    else:
        backend = name = forced if forced in kernel._candidates(examples, size) else "numpy"

        def run(*values):
            return kernel.run(backend, values, shape, size, active_shapes)
    if kernel.reduce:
        return run, name, False

    def run_full(*values):  # a broadcast's adjoints take each partial at the value's shape (see kernel_adjoints)
        value, partials = run(*values)
        return value, [p if p.shape == shape else np.array(np.broadcast_to(p, shape)) for p in partials]

    return run_full, name, False


def blocked_runner(kernel, examples, shape, size, active_shapes):
    """A recorded kernel's blocked runner, with buffers of its own; where it runs on several threads (and no backend
    is forced), on them or on one, whichever a `kernels.BackendChoice` finds faster, recycling buffers (`_chosen`)."""
    if FORCED_BACKEND.get() is None and len(chunk_bounds(size, np.dtype(kernel.value_dtype(examples)).itemsize)) > 2:
        candidates = [(kernel.blocked_runner(examples, shape, size, active_shapes, False, name), name)
                      for name in ("blocked", ONE_THREAD)]
        return _chosen(candidates, examples, shape, size, active_shapes)
    return kernel.blocked_runner(examples, shape, size, active_shapes)


def axis_region_runner(kernel, examples, reduction, active, size):
    """A forward region summed along axes, or of inputs broadcast against each other (`axis_sums.AxisSum`), as a
    function of its inputs returning ``(value, partials)`` (each partial of `AxisSum.partial_shape`), and the
    backend's name: on blocks of rows on the cores (`axis_sums.axis_sum_rows`, "blocked"), or on the calling thread
    alone (`ONE_THREAD`, where blocked splits the call), or on whole arrays (`axis_sums.axis_sum_whole`, "numpy"), or
    on whole arrays with the call's short trailing axes moved first (`axis_sums.axis_sum_moved`,
    ``SHORT_AXES_FIRST``), the fastest under a `kernels.BackendChoice` (every call timed, a runner-up re-timed now
    and then) as `region_runner` chooses; or the one `kernels.set_backend` forced when the program was compiled
    (numexpr: its whole arrays, where it has every operation).  Every plan of a program runs the same runner
    (`ForwardWriter.kernel_runner`)."""
    shape, forced = reduction.shape, FORCED_BACKEND.get()
    dtype = np.dtype(kernel.value_dtype(examples))
    active_shapes = [np.shape(examples[i]) for i in active]
    fresh = fresh_partials(kernel.outputs, True) if reduction.axes else kernel.fresh
    computing, sharing = region_kernel(kernel, examples, reduction, active)
    whole = computing.typed_whole(tuple(map(value_kind, examples)))
    candidates = []
    if forced in (None, "blocked") and shape:
        candidates.append((axis_sum_rows(whole, reduction, examples, active, sharing, dtype), "blocked"))
        if forced is None and len(chunk_bounds(size, dtype.itemsize)) > 2:
            candidates.append((axis_sum_rows(whole, reduction, examples, active, sharing, dtype, 1), ONE_THREAD))
    if forced == "numexpr" and kernel.backends["numexpr"].eligible(examples, size):

        def numexpr(*values):
            value, partials = kernel.run("numexpr", values, shape, size, [shape] * len(active))
            return (value, *partials)  # arrays of their own

        candidates.append((axis_sum_whole(numexpr, reduction, active_shapes, [True] * len(active), sharing, dtype),
                           "numexpr"))
    elif forced in (None, "numpy") or not candidates:
        candidates.append((axis_sum_whole(whole, reduction, active_shapes, fresh, sharing, dtype), "numpy"))
    order = short_axes_first(shape) if forced is None else None
    if order is not None:
        candidates += _moved_candidates(whole, reduction, examples, active, fresh, sharing, dtype, order)
    if len(candidates) == 1 or size < CHOSEN_MIN:  # (fewer than `regions.BROADCAST_MIN`: where a test lowers it)
        return _fastest(candidates, examples)
    return _chosen(candidates, examples, shape, size, active_shapes), "chosen per call"


def region_kernel(kernel, examples, reduction, active):
    """``(kernel, sharing)``: a region's kernel summed along axes or of broadcast inputs (`AxisSum`) computing only the
    partials its runners compute (`_computed_only`), and per partial the one it shares (`AxisSum.sharing`), -1 for a
    number's or a negated twin's (not computed)."""
    dtype = np.dtype(kernel.value_dtype(examples))
    active_shapes = [np.shape(examples[i]) for i in active]
    numbers = reduction.numbers(kernel.outputs[1:], active_shapes)
    sharing = [-1 if n is not None or sign < 0 else first  # (a negated twin's partial: not computed)
               for (first, sign), n in zip(reduction.sharing(kernel.outputs[1:], active_shapes), numbers)]
    return _computed_only(kernel, sharing, dtype), sharing


def _computed_only(kernel, sharing, dtype):
    """``kernel`` with a zero in the place of each partial its runners do not compute (``sharing``, `AxisSum.sharing`:
    a negated twin's, a number's, another's), so that their operations are not run: the all-pairs energy's
    ``-d + -d`` beside ``d + d``, two passes of six over its (1500, 1500, 3) call."""
    if all(first == k for k, first in enumerate(sharing)):
        return kernel
    zero = dtype.type(0)
    outputs = [p if first == k else zero for k, (p, first) in enumerate(zip(kernel.outputs[1:], sharing))]
    return Kernel(kernel.inputs[0].graph, kernel.inputs, kernel.outputs[:1] + outputs, kernel.reduce, kernel.name,
                  kernel.complex)


def _moved_candidates(whole, reduction, examples, active, fresh, sharing, dtype, order):
    """`axis_region_runner`'s candidates on whole arrays and on blocks of rows with the call's axes in ``order``
    (`axis_sums.axis_sum_moved`)."""
    inputs = [moved_value(v, len(reduction.shape), order) for v in examples]
    on_moved = moved(reduction, order)
    active_shapes = [np.shape(examples[i]) for i in active]
    runners = [(axis_sum_whole(whole, on_moved, [np.shape(inputs[i]) for i in active], fresh, sharing, dtype),
                SHORT_AXES_FIRST)]
    if on_moved.shape[0] > 1:
        runners.append((axis_sum_rows(whole, on_moved, inputs, active, sharing, dtype), SHORT_AXES_FIRST_BLOCKED))
    return [(axis_sum_moved(run, reduction, active_shapes, order), name) for run, name in runners]


SHORT_AXES_FIRST = "numpy, short axes first"  # `axis_sums.axis_sum_moved`: candidates where the call ends in short axes
SHORT_AXES_FIRST_BLOCKED = "blocked, short axes first"
CHOSEN_MIN = 16384  # elements from which a region's backend is chosen per call (below, once when compiled: `_fastest`)


def matmul_runner(a_shape, b_shape, dtype):
    """``product(a, b)``, ``a @ b`` of matrices of these shapes and of ``dtype`` (a prepared program's product, or one
    in an adjoint), on the calling thread or split across the cores (the product's rows, or its columns where it has
    fewer: each part one BLAS call, into its slice of the result), whichever a `kernels.BackendChoice` finds faster
    (``product.choice``); None where a split cannot pay: one core, a backend forced, or fewer than
    ``SPLIT_MATMUL_MIN`` multiply-adds.  NumPy's BLAS may run on one thread (set so, as the benchmarks run it) where
    ``jax.jit``'s dots run on every core; where BLAS threads itself, or the machine is busy, the choice keeps one."""
    (m, k), n = a_shape, b_shape[1]
    by_rows = m >= n
    chunks = min(THREADS, m if by_rows else n)
    if chunks < 2 or m * k * n < SPLIT_MATMUL_MIN or FORCED_BACKEND.get() is not None:
        return None
    bounds = [(m if by_rows else n) * c // chunks for c in range(chunks + 1)]

    def part(lo, hi, _, a, b, out):
        if by_rows:
            np.matmul(a[lo:hi], b, out=out[lo:hi])
        else:
            np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])
        return ()

    def split(a, b):
        if KERNEL_THREADS.get() == 1:  # (inside a Dask task: one thread)
            return np.matmul(a, b), ()
        out = np.empty((m, n), dtype)
        run_in_threads(part, bounds, None, (a, b, out), [()] * chunks)
        return out, ()

    def whole(a, b):
        return np.matmul(a, b), ()

    examples = (np.zeros(a_shape, dtype), np.zeros(b_shape, dtype))
    chosen = _chosen([(whole, "numpy"), (split, SPLIT_MATMUL)], examples, (m, n), m * k * n, ())

    def product(a, b):
        return chosen(a, b)[0]

    product.choice = chosen.choice
    return product


def product_sums_runner(shape, kept, targets, dtype):
    """``terms(p, g)``: `axis_sums.product_sums` (a region's shared partial times its cotangent, of shape ``kept``,
    summed to each input's shape in one pass), on the cores or on the calling thread alone, whichever a
    `kernels.BackendChoice` finds faster (``terms.choice``); None where it runs on one thread only, or a backend is
    forced."""
    size = math.prod(shape)
    if len(chunk_bounds(size, dtype.itemsize)) < 3 or FORCED_BACKEND.get() is not None:
        return None
    candidates = [(product_sums(shape, targets, dtype, threads), name) for threads, name in
                  ((None, "blocked"), (1, ONE_THREAD))]
    candidates = [(lambda p, g, run=run: (run(p, g), ()), name) for run, name in candidates]
    examples = (np.zeros(shape, dtype), np.zeros(kept, dtype))
    chosen = _chosen(candidates, examples, shape, size, ())

    def terms(p, g):
        return chosen(p, g)[0]

    terms.choice = chosen.choice
    return terms


SPLIT_MATMUL = "numpy, split across the cores"  # `matmul_runner`'s candidate beside one BLAS call
SPLIT_MATMUL_MIN = 1 << 21  # multiply-adds from which a product may be split (~100 us: a hand-off costs 15-50 us)


class Runners:
    """A forward region's candidate runners as `kernels.BackendChoice` sees a kernel's backends: by name, each
    eligible for every call (they were made for the call's shapes)."""

    eligible = staticmethod(lambda values, size: True)

    def __init__(self, candidates):
        self.runners = {name: runner for runner, name in candidates}
        self.backends = dict.fromkeys(self.runners, self)

    def _candidates(self, values, size):
        return list(self.runners)

    def run(self, backend, values, shape, size, active_shapes):
        return self.runners[backend](*values)  # a tuple (value, partials), as the kernels return it


def _chosen(candidates, examples, shape, size, active_shapes, measured=True):
    """A runner of the candidates ``(runner, name)`` under a `kernels.BackendChoice` (each call of the chosen
    one timed, a runner-up re-timed now and then: a wrong first timing is corrected), its first choice made on
    ``examples`` (halves: no special values) when the program is compiled; ``runner.choice`` the choice.
    ``measured`` False: the first candidate is chosen first, the others timed from the choice's third call on (no
    candidate run when the program is compiled: its first call costs no more)."""
    choice = BackendChoice(Runners(candidates))
    if measured:
        values = [np.full(np.shape(v), 0.5, v.dtype) if np.result_type(v).kind == "f" and type(v) is np.ndarray
                  else v for v in examples]
        with np.errstate(all="ignore"):
            choice.run(values, shape, size, active_shapes)
    else:
        choice.buckets[size.bit_length()] = Bucket(candidates[0][1], [name for _, name in candidates[1:]])
    run = choice.run

    def chosen(*values):
        value, partials, _, _ = run(values, shape, size, active_shapes)
        return value, partials

    chosen.choice = choice
    return chosen


def _fastest(candidates, examples, rounds=5):
    """The candidate ``(runner, name)`` that runs fastest on ``examples`` (a half in each element: no special
    values), best of ``rounds`` timed in turns so that a moment of load hits each alike."""
    if len(candidates) == 1:
        return candidates[0]
    values = [np.full(np.shape(v), 0.5, v.dtype) if np.result_type(v).kind == "f" and type(v) is np.ndarray else v
              for v in examples]
    best = [math.inf] * len(candidates)
    with np.errstate(all="ignore"):
        for _ in range(rounds):
            for k, (runner, _) in enumerate(candidates):
                start = time.perf_counter()
                runner(*values)
                best[k] = min(best[k], time.perf_counter() - start)
    return candidates[best.index(min(best))]


def _whole_runner(kernel, valueless, examples, shape, active_shapes):
    """The whole-array kernel of a region whose inputs and partials all have the call's shape, each partial
    an array of its own of the value's dtype (a partial that is an input would be multiplied in place), with
    its value summed; None if these do not hold."""
    if not all(kernel.fresh) or any(s != shape for s in active_shapes) \
            or any(type(v) is not np.ndarray or v.shape != shape for v in examples):
        return None
    whole = kernel.typed_whole(tuple(map(value_kind, examples)))
    dtype = np.dtype(kernel.value_dtype(examples))
    with np.errstate(all="ignore"):  # zeros for the example values: only the results' shapes and dtypes are read
        results = whole(*examples)
    if any(type(r) is not np.ndarray or r.shape != shape or r.dtype != dtype for r in results[valueless:]):
        return None
    if not kernel.reduce:
        def split(*values):  # ``(value, partials)`` as every runner returns it, not the flat tuple of results
            results = whole(*values)
            return results[0], results[1:]

        return split
    if valueless:
        zero = dtype.type(0)
        return lambda *values: (zero, whole(*values)[1:])

    def run(*values):
        results = whole(*values)
        return np.add.reduce(results[0], None), results[1:]

    return run
