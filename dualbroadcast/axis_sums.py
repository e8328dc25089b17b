"""Sums of a kernel's result along axes (`AxisSum`): a forward region of a prepared program whose value or
partials are summed along some axes, computed over whole arrays (`axis_sum_whole`) or row blocks on threads
(`axis_sum_rows`); and in the backward pass, a partial several inputs share times its cotangent, summed back to
each input (`product_sums`)."""

import math
from typing import NamedTuple

import numpy as np

from .expr import Sym
from .kernels import BLOCK, chunk_bounds, run_in_threads


# --- sums along axes: a broadcast kernel's value summed along some axes of its call ----------------------
class AxisSum(NamedTuple):
    """A sum along ``axes`` of a broadcast kernel's value: a forward region ending in ``np.sum(v, axis=k)`` or
    ``np.mean(v, axis=k)`` (``divisor``: the mean's count, 1 for a sum), ``shape`` the kernel's call shape and
    ``out_shape`` the recorded result's (with or without ``keepdims``).  ``axes`` empty: a region of broadcast
    inputs not summed at all (the matmul epilogue ``tanh(X @ W + b)``).  A partial is summed in the forward pass
    along the summed axes its input is broadcast along (the cotangent is one number there), and kept along the
    others, where the backward pass sums ``g · ∂`` back to the input's shape (`pullbacks.kernel_pullback`)."""

    shape: tuple
    axes: tuple
    divisor: int
    out_shape: tuple

    @property
    def kept(self):
        """The value's shape with the summed axes kept as ones: the shape the cotangent is broadcast from."""
        return tuple(1 if d in self.axes else n for d, n in enumerate(self.shape))

    def partial_axes(self, input_shape):
        """The summed axes of the call along which an input of ``input_shape`` is broadcast."""
        padded = (1,) * (len(self.shape) - len(input_shape)) + tuple(input_shape)
        return tuple(d for d in self.axes if padded[d] == 1 and self.shape[d] != 1)

    def sharing(self, partials, active_shapes):
        """Per partial ``(first, sign)``: the first partial with the same `partial_shape` whose node it is (sign 1:
        ``∂ tanh(z + b)`` in ``z`` and in ``b`` is one array) or whose node's negation it is (sign -1, `negates`:
        ``∂ (a - b)²`` in ``b`` is minus that in ``a``); the backward pass computes the product with the cotangent
        once, and the runners compute only the first."""
        firsts = {}  # (node index, padded shape) -> the first partial of that node
        shares = []
        for k, (p, s) in enumerate(zip(partials, active_shapes)):
            if type(p) is not Sym or len(self.partial_shape(s)) != len(self.shape):
                shares.append((k, 1))
                continue
            key = (p.index, _padded(self, s))
            twin = next((j for (_, padded), j in firsts.items() if padded == key[1] and negates(p, partials[j])), None)
            if key in firsts or twin is None:
                shares.append((firsts.setdefault(key, k), 1))
            else:
                shares.append((twin, -1))
        return shares

    def numbers(self, partials, active_shapes):
        """Per partial, the Python number it sums to where it is a literal (``∂(x - mu)/∂mu``: -1) and its input
        is broadcast along every summed axis, so that the backward pass multiplies the cotangent by a number and
        no array of the call's shape holds it; else None."""
        return [float(p) * math.prod(self.shape[d] for d in self.partial_axes(s))
                if type(p) is not Sym and np.ndim(p) == 0 and np.isrealobj(p)
                and np.broadcast_shapes(self.kept, self.partial_shape(s)) == self.kept else None
                for p, s in zip(partials, active_shapes)]

    def partial_shape(self, input_shape):
        """The shape of an input's partial: the call's, one along its `partial_axes`, without the leading axes
        the input lacks where those are ones."""
        axes = self.partial_axes(input_shape)
        shape = tuple(1 if d in axes else n for d, n in enumerate(self.shape))
        lead = len(self.shape) - len(input_shape)
        return shape[lead:] if all(n == 1 for n in shape[:lead]) else shape


def negates(p, q):
    """Whether the node ``p`` is ``-q`` by its form: ``negative(q)`` (or ``q`` that of ``p``), literals of opposite
    signs, or a sum or difference whose terms negate ``q``'s, a product or quotient one of whose factors does."""
    if type(p) is not Sym or type(q) is not Sym:
        return type(p) in (int, float) and type(q) in (int, float) and p == -q
    if (p.op is np.negative and _same(p.args[0], q)) or (q.op is np.negative and _same(q.args[0], p)):
        return True
    if p.op is not q.op:
        return False
    if p.op in (np.add, np.subtract):
        return all(map(negates, p.args, q.args))
    if p.op in (np.multiply, np.divide):
        (a, b), (c, d) = p.args, q.args
        return (negates(a, c) and _same(b, d)) or (_same(a, c) and negates(b, d))
    return False


def _same(a, b):
    """Whether two operands of a graph are the same node or equal literals."""
    if type(a) is Sym or type(b) is Sym:
        return a is b
    return type(a) is type(b) and a == b


def axis_sum_whole(compute, reduction, active_shapes, fresh, sharing, dtype):
    """``run(*values) -> (value, partials)`` of a kernel summed along axes (`AxisSum`), on whole arrays:
    ``compute(*values)`` gives the broadcast kernel's value and partials (``fresh``: per partial, whether it is an
    array nothing else holds), each then summed as `AxisSum` says, the partials arrays of their own but where
    ``sharing`` (`AxisSum.sharing`) gives one to several, or None (a slot ``sharing`` gives as -1: a number,
    `AxisSum.numbers`)."""
    shape, axes = reduction.shape, reduction.axes
    partial_axes = [reduction.partial_axes(s) for s in active_shapes]
    partial_shapes = [reduction.partial_shape(s) for s in active_shapes]
    slots = list(enumerate(zip(partial_axes, partial_shapes, fresh, sharing)))

    def run(*values):
        results = compute(*values)
        value = _axis_value(results[0], shape, axes, dtype, reduction)
        partials = []
        for k, (a, s, own, first) in slots:
            partials.append(_axis_partial(results[k + 1], shape, a, s, own, dtype) if first == k
                            else None if first < 0 else partials[first].reshape(s))
        return value, partials

    return run


def short_axes_first(shape):
    """The order of the call's axes in which `axis_sum_moved` computes: the trailing axes shorter than ``SHORT_AXIS``
    moved before the last longer one; None where there are none or no longer axis.  NumPy's inner loop runs along
    the last axis: ``pos[:, None] - pos[None]`` of 1500 atoms runs 2.25 million loops of 3 elements, and its sum
    along them as many; in the order (0, 2, 1) 4,500 loops of 1,500, and `axis_sum_rows` still has rows."""
    k = len(shape)
    while k and shape[k - 1] < SHORT_AXIS:
        k -= 1
    if k in (0, len(shape)) or math.prod(shape[k:]) == 1:
        return None
    return tuple(range(k - 1)) + tuple(range(k, len(shape))) + (k - 1,)


SHORT_AXIS = 16  # trailing axes shorter than this are moved (`short_axes_first`)


def moved(reduction, order):
    """``reduction`` (`AxisSum`) with the call's axes in ``order``, its result's shape the summed axes kept."""
    return AxisSum(tuple(reduction.shape[d] for d in order), tuple(sorted(order.index(d) for d in reduction.axes)),
                   reduction.divisor, tuple(reduction.kept[d] for d in order))


def moved_value(v, ndim, order):
    """An input with the call's ``ndim`` axes in ``order``, copied so (a broadcast input is small), so that the
    kernel's results are laid out in that order; a number as it is."""
    if type(v) is not np.ndarray:
        return v
    return np.ascontiguousarray(np.reshape(v, (1,) * (ndim - v.ndim) + v.shape).transpose(order))


def axis_sum_moved(run_moved, reduction, active_shapes, order):
    """``run(*values) -> (value, partials)`` of a region summed along axes (`AxisSum`) computed with the call's axes
    in ``order`` (`short_axes_first`) by ``run_moved`` (`axis_sum_whole` or `axis_sum_rows` of `moved`): the inputs
    moved there (`moved_value`), the value given back in the call's order, the partials as views of the moved
    arrays (`kernel_pullback_source`'s products and sums follow their layout)."""
    ndim = len(reduction.shape)
    back = tuple(int(d) for d in np.argsort(order))
    targets = [reduction.partial_shape(s) for s in active_shapes]

    def run(*values):
        value, partials = run_moved(*[moved_value(v, ndim, order) for v in values])
        value = np.ascontiguousarray(value.transpose(back)).reshape(reduction.out_shape)  # (moved: the axes kept)
        return value[()] if value.ndim == 0 else value, \
            [None if p is None else p.transpose(back).reshape(t) for p, t in zip(partials, targets)]

    return run


def _axis_value(v, shape, axes, dtype, reduction):
    """The value summed along ``axes`` (divided by the mean's count), in the recorded result's shape."""
    if axes:
        v = np.add.reduce(np.broadcast_to(v, shape), axis=axes, dtype=dtype, keepdims=True)
    elif type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype:
        v = np.array(np.broadcast_to(v, shape), dtype)
    if reduction.divisor != 1:
        v = np.true_divide(v, reduction.divisor, out=v)  # as np.mean divides its sum
    v = v.reshape(reduction.out_shape)
    return v[()] if v.ndim == 0 else v


def _axis_partial(p, shape, axes, target, own, dtype):
    """A partial summed along ``axes`` to ``target``, an array of its own (a pullback multiplies it in place)."""
    if axes:
        return np.add.reduce(np.broadcast_to(p, shape), axis=axes, dtype=dtype, keepdims=True).reshape(target)
    if own and type(p) is np.ndarray and p.shape == shape and p.dtype == dtype:
        return p.reshape(target)
    return np.array(np.broadcast_to(p, shape), dtype).reshape(target)


def axis_sum_rows(compute, reduction, examples, active, sharing, dtype, threads=None):
    """`axis_sum_whole` (``sharing`` as there) over blocks of rows (the call's first axis), in chunks of rows on
    the cores: a block's temporaries stay in cache, the value and partials are summed block by block into buffers
    this runner owns (every call overwrites them: a prepared program's).  Inputs with the call's rows are sliced,
    others (a bias ``b`` of shape (k,), a row ``w`` of shape (1, k)) read whole by every block.  ``threads``: at most
    so many chunks (1: `ONE_THREAD`, on the calling thread alone)."""
    shape, axes = reduction.shape, reduction.axes
    rows, row = shape[0], math.prod(shape[1:])
    sliced = [type(v) is np.ndarray and v.ndim == len(shape) and v.shape[0] == rows for v in examples]
    targets = [reduction.kept] + [_padded(reduction, np.shape(examples[i])) for i in active]
    summed = [axes] + [reduction.partial_axes(np.shape(examples[i])) for i in active]
    buffers = [np.empty(t, dtype) for t in targets]
    for k, first in enumerate(sharing, start=1):
        buffers[k] = buffers[first + 1] if first >= 0 else None
    computed = [True] + [first == k for k, first in enumerate(sharing)]
    across = [t[0] != rows and c for t, c in zip(targets, computed)]  # summed along the rows: each chunk adds
    # its blocks' sums
    shapes = [reduction.out_shape] + [reduction.partial_shape(np.shape(examples[i])) for i in active]
    views = [None if b is None else b.reshape(s) for b, s in zip(buffers, shapes)]
    bounds = chunk_bounds(rows * row, dtype.itemsize, threads)
    bounds = [rows * c // (len(bounds) - 1) for c in range(len(bounds))]
    per_block = max(1, BLOCK // max(row, 1))

    def chunk(start, stop, step, *values):
        totals = [np.zeros(t, dtype) if a else None for t, a in zip(targets, across)]
        for lo in range(start, stop, step):
            hi = min(lo + step, stop)
            block = (hi - lo,) + shape[1:]
            results = compute(*[v[lo:hi] if s else v for v, s in zip(values, sliced)])
            for k, (r, a) in enumerate(zip(results, summed)):
                if not computed[k]:
                    continue
                r = np.broadcast_to(r, block)
                if across[k]:
                    totals[k] += np.add.reduce(r, axis=a, dtype=dtype, keepdims=True)
                elif a:
                    np.add.reduce(r, axis=a, dtype=dtype, keepdims=True, out=buffers[k][lo:hi])
                else:
                    np.copyto(buffers[k][lo:hi], r)
        return tuple(t for t in totals if t is not None)

    def run(*values):
        totals = iter(run_in_threads(chunk, bounds, per_block, values, [()] * (len(bounds) - 1)))
        for buffer, a in zip(buffers, across):
            if a:
                np.copyto(buffer, next(totals))
        if reduction.divisor != 1:
            np.true_divide(buffers[0], reduction.divisor, out=buffers[0])
        value = views[0]
        return value[()] if value.ndim == 0 else value, views[1:]

    return run


def product_sums(shape, targets, dtype, threads=None, product=None):
    """``run(p, g) -> terms``: ``p *= g`` (``p`` of ``shape``, a partial several inputs of a region share, owned by the
    replay; ``g`` the cotangent, of as many axes, broadcast to it) and per shape of ``targets`` the product summed to
    it (the product itself where nothing is summed), in one pass over blocks of rows, in chunks on the cores (at most
    ``threads``): each block is summed while it is in cache, where the product and each sum made a pass over memory
    of their own (the all-pairs energy's (1500, 1500, 3) partial: three passes of 54 MB).  A sum along the rows
    adds the chunks' sums (the same up to rounding).  ``product``: ``(left, right, wanted)``, the shapes of the
    operands of a matrix product whose epilogue ``p`` is the partial of (`regions.EpilogueOf`):
    ``run(p, g, left, right)`` then also returns the product's adjoints ``(p·g) @ right.T`` and ``left.T @ (p·g)``
    (each where ``wanted``, else None), made from each block while it is in cache (the second added chunk by chunk)."""
    rows, row = shape[0], math.prod(shape[1:])
    padded = [(1,) * (len(shape) - len(t)) + tuple(t) for t in targets]
    axes = [tuple(d for d, (n, m) in enumerate(zip(shape, t)) if m == 1 and n != 1) for t in padded]
    across = [0 in a for a in axes]  # summed along the rows: each chunk adds its blocks' sums
    bounds = chunk_bounds(rows * row, dtype.itemsize, threads)
    bounds = [rows * c // (len(bounds) - 1) for c in range(len(bounds))]
    per_block = max(1, BLOCK // max(row, 1))
    left_wanted, right_wanted = product[2] if product is not None else (False, False)

    def chunk(start, stop, step, p, g, outs, left=None, right=None, into=None):
        totals = [np.zeros(t, dtype) if a else None for t, a in zip(padded, across)]
        if right_wanted:
            totals.append(np.zeros(product[1], dtype))
            scratch = np.empty(product[1], dtype)
        sliced = np.ndim(g) == len(shape) and np.shape(g)[0] == rows
        for lo in range(start, stop, step):
            hi = min(lo + step, stop)
            block = np.multiply(p[lo:hi], g[lo:hi] if sliced else g, out=p[lo:hi])
            for k, a in enumerate(axes):
                if across[k]:
                    totals[k] += np.add.reduce(block, axis=a, dtype=dtype, keepdims=True)
                elif a:
                    np.add.reduce(block, axis=a, dtype=dtype, keepdims=True, out=outs[k][lo:hi])
            if left_wanted:
                np.matmul(block, right.T, out=into[lo:hi])
            if right_wanted:
                totals[-1] += np.matmul(left[lo:hi].T, block, out=scratch)
        return tuple(t for t in totals if t is not None)

    def run(p, g, left=None, right=None):
        outs = [np.empty(t, dtype) if a and not c else None for t, a, c in zip(padded, axes, across)]
        into = np.empty(product[0], dtype) if left_wanted else None
        totals = iter(run_in_threads(chunk, bounds, per_block, (p, g, outs, left, right, into),
                                     [()] * (len(bounds) - 1)))
        terms = [next(totals) if c else out if a else p for a, c, out in zip(axes, across, outs)]
        terms = tuple(term.reshape(t) for term, t in zip(terms, targets))
        if product is None:
            return terms
        return terms + (into, next(totals) if right_wanted else None)

    return run


def _padded(reduction, input_shape):
    """`AxisSum.partial_shape` with every axis of the call (a buffer the blocks of rows write into)."""
    axes = reduction.partial_axes(input_shape)
    return tuple(1 if d in axes else n for d, n in enumerate(reduction.shape))
