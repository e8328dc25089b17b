"""A matrix product's epilogue (`regions.EpilogueOf`: ``tanh(X @ W + b)``, a broadcast region reading ``X @ W``
alone) run with the product in the same blocks of rows: forward, each block's ``X[rows] @ W`` goes straight into the
region's kernel while it is in cache (`epilogue_rows`); backward, each block's ``(1 - t²) · g`` is summed to the
bias and multiplied into ``X[rows].T`` and ``W.T`` in the same pass (`axis_sums.product_sums` with a product).  The
blocks run in chunks on the cores, or on the calling thread alone, or as the steps they replace (the product, then
the region), whichever a `kernels.BackendChoice` finds faster per call (`epilogue_runner`,
`epilogue_adjoint_runner`): a plan must never be slower than the steps it replaces."""

import numpy as np

from .axis_sums import product_sums
from .kernel_source import whole_into_kernel
from .kernels import BLOCK, FORCED_BACKEND, chunk_bounds, run_in_threads, value_kind
from .region_runners import CHOSEN_MIN, _chosen, region_kernel

SEPARATE = "product, then region"  # the candidate running the steps the epilogue fuses, each as it runs alone
EPILOGUE = "epilogue in row blocks"
EPILOGUE_ONE_THREAD = "epilogue in row blocks, one thread"


def epilogue_runner(kernel, examples, reduction, active, slot, left, right, separate):
    """``run(left, right, *others) -> (value, partials)``: the region (`AxisSum` ``reduction`` of no axes, input
    ``slot`` the product ``left @ right``, ``others`` its other inputs in order) computed with its product in blocks of
    rows (`epilogue_rows`, on the cores or on one), or by ``separate`` (the same call: the product, then the region's
    own runner), whichever a `kernels.BackendChoice` finds faster: the blocks on the cores first, the others timed from
    its third call (timing each when the program is compiled made an MLP's first call 1.5x as long); None where a
    backend is forced or the call is smaller than ``CHOSEN_MIN`` (the separate steps run then).  ``left``, ``right``:
    example operands."""
    if FORCED_BACKEND.get() is not None or reduction.shape[0] * reduction.shape[1] < CHOSEN_MIN:
        return None
    computing, sharing = region_kernel(kernel, examples, reduction, active)
    dtype = np.dtype(kernel.value_dtype(examples))
    size = reduction.shape[0] * reduction.shape[1]
    runners = ((None, EPILOGUE), (1, EPILOGUE_ONE_THREAD)) if len(chunk_bounds(size, dtype.itemsize)) > 2 \
        else ((None, EPILOGUE),)
    candidates = [(epilogue_rows(computing, reduction, examples, active, sharing, slot, dtype, threads), name)
                  for threads, name in runners] + [(separate, SEPARATE)]
    others = [v for k, v in enumerate(examples) if k != slot]
    return _chosen(candidates, [left, right, *others], reduction.shape, size, [np.shape(examples[i]) for i in active],
                   measured=False)


def epilogue_rows(kernel, reduction, examples, active, sharing, slot, dtype, threads=None):
    """``run(left, right, *others) -> (value, partials)`` of a region whose input ``slot`` is ``left @ right``
    (``sharing`` as `region_runners.region_whole` gives it; ``kernel`` computing those partials only): per block of
    rows, its rows of the product computed into a scratch block and the region's kernel run on it, writing the value
    and the partials it computes into buffers this runner owns (every call overwrites them: a prepared program's), in
    chunks of rows on the cores (at most ``threads``).  Other inputs with the call's rows are sliced, the rest (a
    bias) read whole."""
    shape = reduction.shape
    rows, columns = shape
    sliced = [type(v) is np.ndarray and v.ndim == 2 and v.shape[0] == rows for k, v in enumerate(examples) if k != slot]
    buffers = [np.empty(shape, dtype)]
    for k, first in enumerate(sharing):
        buffers.append(np.empty(shape, dtype) if first == k else buffers[first + 1] if first >= 0 else None)
    written = [0] + [k + 1 for k, first in enumerate(sharing) if first == k]
    block_kernel = whole_into_kernel(kernel, tuple(map(value_kind, examples)), written)
    views = [buffers[0]] + [None if b is None else b.reshape(reduction.partial_shape(np.shape(examples[i])))
                            for b, i in zip(buffers[1:], active)]
    bounds = chunk_bounds(rows * columns, dtype.itemsize, threads)
    bounds = [rows * c // (len(bounds) - 1) for c in range(len(bounds))]
    per_block = max(1, BLOCK // columns)

    def chunk(start, stop, step, left, right, *others):
        scratch = np.empty((min(step, stop - start), columns), dtype)
        for lo in range(start, stop, step):
            hi = min(lo + step, stop)
            values = [v[lo:hi] if s else v for v, s in zip(others, sliced)]
            values.insert(slot, np.matmul(left[lo:hi], right, out=scratch[:hi - lo]))
            block_kernel(*values, *[buffers[k][lo:hi] for k in written])
        return ()

    def run(left, right, *others):
        run_in_threads(chunk, bounds, per_block, (left, right, *others), [()] * (len(bounds) - 1))
        return views[0], views[1:]

    return run


def epilogue_adjoint_runner(shape, kept, targets, dtype, left, right, wanted, separate):
    """``terms(p, g, left, right)``: `axis_sums.product_sums`'s terms of a shared partial ``p`` of an epilogue
    (``p · g`` summed to each of ``targets``), then ``(p · g) @ right.T`` and ``left.T @ (p · g)``, the product's
    adjoints (each where ``wanted``, else None), in one pass over blocks of rows (on the cores or on one), or by
    ``separate`` (the same call, each step as it runs alone), whichever a `kernels.BackendChoice` finds faster (first
    the blocks on the cores, as `epilogue_runner`); None where a backend is forced.  ``left``, ``right``: the
    product's operands' shapes."""
    if FORCED_BACKEND.get() is not None:
        return None
    size = shape[0] * shape[1]
    operands = (left, right, wanted)
    candidates = [(product_sums(shape, targets, dtype, None, operands), EPILOGUE)]
    if len(chunk_bounds(size, dtype.itemsize)) > 2:
        candidates.append((product_sums(shape, targets, dtype, 1, operands), EPILOGUE_ONE_THREAD))
    candidates = [(lambda *values, run=run: (run(*values), ()), name)
                  for run, name in candidates + [(separate, SEPARATE)]]
    chosen = _chosen(candidates, (), shape, size, (), measured=False)

    def terms(p, g, left, right):
        return chosen(p, g, left, right)[0]

    terms.choice = chosen.choice
    return terms
