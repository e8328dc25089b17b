"""The backward sweeps over a tape's records: `backward` (cotangents of the outputs to the inputs, in place where
a buffer is the sweep's own, or recorded on an outer tape for a gradient inside a gradient), `backward_rows`
(many seeds at once, a Hessian's rows) and the scalar products of views (`add_view_products`)."""

import functools
import math
import operator

import numpy as np

from .guards import NotReplayableError, untracked
from .numpy_facts import REAL_FLOATS, getitem
from .pullbacks import (
    FACTORS,
    Contracted,
    Gather,
    IndexPullback,
    Unbroadcast,
    add_at,
    apply,
    own_buffer,
    scatter,
)
from .tape import GarbageCollectionPaused
from .tracked import BASIC_INDEX, LONG_TAPE, Tracked, not_twice_differentiable


def backward(tape, seeds):
    """Sweep the tape backwards from ``seeds`` ({index: cotangent}); return all cotangents."""
    if tape.level:
        return _sweep_nested(tape, seeds)
    if len(tape.records) < LONG_TAPE:
        return _sweep(tape, seeds)
    with GarbageCollectionPaused():
        return _sweep(tape, seeds)


def _sweep(tape, seeds):
    """The backward sweep, iterative, so any tape length works.  Cotangents of inputs (leaves) are kept;
    those of intermediate values are released as soon as they have been pulled back.
    """
    records = tape.records
    grads = [None] * len(records)
    owned = [False] * len(records)  # True: grads[i] is our own buffer, safe to add into
    for index, seed in seeds.items():
        grads[index] = seed
    factors = FACTORS
    view_bases, registered = tape.view_bases, tape.view_products
    gathered = {}  # base index -> [view index, g, partial, ...]: more such cotangents, found on the way
    for i in range(max(seeds), tape.inputs - 1, -1):
        if i in view_bases:  # its views' products are all known now
            add_view_products(grads, owned, i, view_bases[i], registered[i], gathered.pop(i, ()))
        g = grads[i]
        if g is None:
            continue
        record = records[i]
        if type(record) is not tuple:  # an input, or a product of views: its cotangent stays for their bases
            continue
        grads[i] = None
        for p, back in record[0]:
            if back is None:  # the identity: a scalar x + y
                ct = g
            elif (kind := type(back)) in factors:  # a scalar result's partial
                ct = g * back
            elif kind is tuple:  # into a view's base: (its index, the consumer's pullback)
                view, consumer = back
                if type(consumer) is np.ndarray and type(g) in REAL_FLOATS:  # g * partial, deferred
                    pending = gathered.get(p)
                    if pending is None:
                        pending = gathered[p] = []
                    pending.append(view)  # flat, as `view_products` (see `Tape`)
                    pending.append(g)
                    pending.append(consumer)
                    continue
                ct = g if consumer is None else g * consumer if type(consumer) in factors else consumer(g)
                add_at(own_buffer(grads, owned, p, *view_bases[p]), view, ct)
                continue
            elif kind is IndexPullback:
                if back.transform is None and not back.repeats and owned[p]:  # x[i] in a loop: `add_at` inline
                    buffer = grads[p]
                    part = buffer[back.index]
                    if type(part) is np.ndarray and part.base is buffer:
                        part += g
                    else:
                        buffer[back.index] += g
                else:
                    back.add_into(grads, owned, p, g)
                continue
            else:
                ct = back(g)
            current = grads[p]
            if current is None:
                grads[p] = ct
            elif owned[p]:  # our own buffer: add in place
                np.add(current, ct, out=current)
            else:
                grads[p] = current = current + ct
                owned[p] = type(current) is np.ndarray
    for p, base in view_bases.items():  # views of inputs
        if p < tape.inputs:
            add_view_products(grads, owned, p, base, registered[p], gathered.get(p, ()))
    return grads




def _sweep_nested(tape, seeds):
    """The backward sweep of a gradient inside a gradient (``tape.level > 0``), whose cotangents may be tracked
    on an outer tape: every step is a NumPy call that tape records, and nothing is added in place (a view's
    or an index's cotangent is scattered into a new array of its base's shape: `scatter`)."""
    records, view_bases = tape.records, tape.view_bases
    grads = [None] * len(records)
    for index, seed in seeds.items():
        grads[index] = seed
    products = {}  # record -> [(base index, view, partial), ...]: the scalar products of views (see `Tape`)
    for p, flat in tape.view_products.items():
        for view, record, partial in zip(flat[::3], flat[1::3], flat[2::3]):
            products.setdefault(record, []).append((p, view, partial))
    indexed = {}  # parent index -> [(IndexPullback, cotangent), ...]: scattered together when the sweep reaches it
    for i in range(max(seeds), tape.inputs - 1, -1):
        if i in indexed:
            _add_cotangent(grads, i, _scattered(indexed.pop(i)))
        g = grads[i]
        if g is None or records[i] is None:  # nothing to pull back, or an input's cotangent, kept
            continue
        grads[i] = None
        if type(records[i]) is not tuple:  # a scalar product of views
            for p, view, partial in products[i]:
                _add_cotangent(grads, p, scatter(g * partial, view, *view_bases[p]))
            continue
        try:
            for p, back in records[i][0]:
                if type(back) is tuple:  # into a view's base: (its index, the consumer's pullback)
                    view, consumer = back
                    ct = scatter(apply(consumer, g), view, *view_bases[p])
                elif type(back) is IndexPullback:
                    indexed.setdefault(p, []).append((back, g))
                    continue
                else:
                    ct = _multiplier(back, g)
                    if ct is None:
                        ct = apply(back, g)
                _add_cotangent(grads, p, ct)
        except NotReplayableError:  # a prepared program's recording, left to the plain path (`pullbacks.plain`)
            raise
        except (TypeError, AttributeError) as error:
            raise not_twice_differentiable(records[i][1], error) from error
    for p, pulled in indexed.items():  # into inputs
        _add_cotangent(grads, p, _scattered(pulled))
    return grads


def _scattered(pulled):
    """The sum of the cotangents ``back.scatter(g)`` of ``pulled``, pairs ``(IndexPullback, g)`` of one value's
    indices (x[i] in a loop): where every index is integers alone, one scatter of the stacked ``g``s, so
    the outer tape records two operations for them, not two per index; else one scatter per index."""
    first, g0 = pulled[0]
    points = [back.index if type(back.index) is tuple else (back.index,) for back, _ in pulled]
    shape = np.shape(untracked(g0)) if len(pulled) > 1 else None
    # (an empty index, x[()] of a 0-d x, is no element: stacked, its g's would have an axis too many)
    if len(pulled) > 1 and points[0] and all(
            back.transform is None and not back.repeats and back.shape == first.shape
            and len(point) == len(points[0]) and all(type(i) is int for i in point)
            and np.shape(untracked(g)) == shape for (back, g), point in zip(pulled, points)):
        index = tuple(np.array(axis, np.intp) for axis in zip(*points))
        return scatter(np.stack([g for _, g in pulled]), index, first.shape, first.dtype, repeats=True)
    total = None
    for back, g in pulled:
        ct = back.scatter(g)
        total = ct if total is None else total + ct
    return total


def vector_elements(values):
    """``(p, ks, n, dtype)`` where each of ``values`` is an element ``v[k]`` (an int k) of one vector ``v`` (tape
    index p, n elements of ``dtype``) as `Tracked.__getitem__` records it, ``ks`` their k's; else None."""
    tape = values[0].tape if values and type(values[0]) is Tracked else None
    if tape is None:
        return None
    records, parent, ks = tape.records, None, []
    for t in values:
        if type(t) is not Tracked or t.tape is not tape or t.slice_index is not None:
            return None
        record = records[t.index]
        if type(record) is not tuple or len(record[0]) != 1 or record[1] is not getitem:
            return None
        (p, element), = record[0]
        if type(element) is not IndexPullback or type(element.index) is not int or element.transform is not None \
                or len(element.shape) != 1 or not 0 <= element.index < element.shape[0] \
                or (parent is not None and p != parent):
            return None
        parent = p
        ks.append(element.index)
    return parent, ks, element.shape[0], element.dtype


def backward_rows(tape, seeds):
    """Sweep the tape once for several cotangents at once (the rows of a Jacobian, as `hessian` takes them):
    every seed, and so every cotangent, has a leading axis of rows; return all cotangents so.  Pullbacks of
    the kinds listed in `pullbacks` take every row in one NumPy call (`_rows_pullback`); any other is called
    on each row, as the one-cotangent sweep would.  Not for a nested tape (``tape.level > 0``)."""
    if len(tape.records) < LONG_TAPE:
        return _sweep_rows(tape, seeds)
    with GarbageCollectionPaused():
        return _sweep_rows(tape, seeds)


# Elements a cotangent of several rows may have (512 KiB of float64), see `RowsTooLarge`: sharing a sweep's Python
# overhead among rows pays while it dominates; on larger arrays rows of their own keep memory as it was.
ROW_ELEMENTS = 1 << 16


class RowsTooLarge(Exception):
    """A cotangent of every row of a `backward_rows` would exceed `ROW_ELEMENTS` elements (a Hessian of many
    elements through large arrays): the caller sweeps at most ``rows`` rows at a time."""

    def __init__(self, row_elements):
        self.rows = rows_at_a_time(row_elements)
        super().__init__(self.rows)


def rows_at_a_time(row_elements):
    """How many rows of ``row_elements`` elements a cotangent of `backward_rows` may hold (at least one)."""
    return max(1, ROW_ELEMENTS // max(row_elements, 1))


def _check_rows(rows, row_elements):
    """`RowsTooLarge` if ``rows`` rows of ``row_elements`` elements each exceed `ROW_ELEMENTS` (one row never)."""
    if rows > 1 and rows * row_elements > ROW_ELEMENTS:
        raise RowsTooLarge(row_elements)


def _rows_buffer(grads, owned, p, rows, shape, dtype):
    """`own_buffer` of ``rows`` rows of ``shape``."""
    _check_rows(rows, math.prod(shape))
    return own_buffer(grads, owned, p, (rows, *shape), dtype)


def _sweep_rows(tape, seeds):
    """`backward_rows`: `_sweep`'s steps on cotangents with a leading axis of rows."""
    records, view_bases = tape.records, tape.view_bases
    grads = [None] * len(records)
    owned = [False] * len(records)  # True: grads[i] is our own buffer, safe to add into
    for index, seed in seeds.items():
        grads[index] = seed
    rows = len(next(iter(seeds.values())))
    products = {}  # record -> [(base index, view, partial), ...]: the scalar products of views (see `Tape`)
    for p, flat in tape.view_products.items():
        for view, record, partial in zip(flat[::3], flat[1::3], flat[2::3]):
            products.setdefault(record, []).append((p, view, partial))
    for i in range(max(seeds), tape.inputs - 1, -1):
        g = grads[i]
        record = records[i]
        if g is None or record is None:  # nothing to pull back, or an input's cotangent, kept
            continue
        grads[i] = None
        if type(record) is not tuple:  # a scalar product of views
            for p, view, partial in products[i]:
                add_at(_rows_buffer(grads, owned, p, rows, *view_bases[p]), _rows_index(view), _times(g, partial))
            continue
        for p, back in record[0]:
            if type(back) is tuple:  # into a view's base: (its index, the consumer's pullback)
                view, consumer = back
                add_at(_rows_buffer(grads, owned, p, rows, *view_bases[p]), _rows_index(view),
                       _rows_pullback(consumer, g))
                continue
            if type(back) is IndexPullback:
                _add_rows_at(back, _rows_buffer(grads, owned, p, rows, back.shape, back.dtype), g)
                continue
            ct = _rows_pullback(back, g)
            current = grads[p]
            if current is None:
                grads[p] = ct
            elif owned[p]:  # our own buffer: add in place
                np.add(current, ct, out=current)
            else:
                grads[p] = current + ct
                owned[p] = True
    return grads


_ROWS = slice(None)  # the leading axis of rows, in an index
_MULTIPLY = (np.multiply, operator.mul)


def _rows_pullback(back, g):
    """The cotangents the pullback ``back`` gives for each row of ``g``, as rows of one array: in one NumPy
    call for the kinds the sweep knows (`pullbacks`), else ``back`` called on each row."""
    if back is None:
        return g
    kind = type(back)
    if kind in FACTORS:
        return _times(g, back)
    d = _multiplied_by(back)
    if d is not None:
        return _times(g, d)
    if kind is Unbroadcast:
        return _unbroadcast_rows(g if back.factor is None else _times(g, back.factor), back.shape)
    if kind is Contracted:
        return back(g)
    if kind is Gather and _one_advanced(back.index):
        return g[_rows_index(back.index)]
    if back is operator.neg:
        return -g
    first = back(g[0])
    _check_rows(len(g), np.size(first))
    return np.stack([first, *(back(row) for row in g[1:])])


def _times(g, d):
    """Each row of ``g`` times the partial ``d``, broadcast as one row would be (``d`` may have more axes)."""
    extra = getattr(d, "ndim", 0) - g.ndim + 1
    _check_rows(len(g), getattr(d, "size", 1))
    if extra > 0:
        g = g.reshape(g.shape[:1] + (1,) * extra + g.shape[1:])
    return g * d


def _unbroadcast_rows(g, shape):
    """`unbroadcast` of each row of ``g`` to ``shape``."""
    row_shape = g.shape[1:]
    if row_shape == shape:
        return g
    lead = len(row_shape) - len(shape)
    axes = tuple(range(1, lead + 1)) + tuple(
        1 + lead + i for i, n in enumerate(shape) if n == 1 and row_shape[lead + i] != 1)
    return np.sum(g, axis=axes).reshape(g.shape[:1] + shape)


def _rows_index(index):
    """``index`` applied to each row: the axis of rows put first."""
    return (_ROWS, *index) if type(index) is tuple else (_ROWS, index)


def _one_advanced(index):
    """Whether the advanced parts of ``index`` (arrays, lists) are side by side, so that `_rows_index` selects
    in each row what ``index`` selects (advanced parts apart put the axes they make before the rows)."""
    if type(index) is not tuple:
        return True
    advanced = [k for k, part in enumerate(index) if type(part) not in BASIC_INDEX]
    return not advanced or advanced[-1] - advanced[0] == len(advanced) - 1


def _add_rows_at(back, buffer, g):
    """An `IndexPullback`'s step on rows: each row of ``g`` added at its index of a row of ``buffer``."""
    if back.transform is None and not back.repeats and _one_advanced(back.index):
        add_at(buffer, _rows_index(back.index), g)
    else:
        for buffer_row, g_row in zip(buffer, g):
            back.add(buffer_row, g_row)


def _multiplied_by(back):
    """The partial ``d`` of a pullback ``g -> d · g`` (`multiply_by`, a kernel's partial); else None."""
    if type(back) is functools.partial and back.func in _MULTIPLY and len(back.args) == 1 and not back.keywords:
        return back.args[0]
    return None


def _multiplier(back, g):
    """`_multiplied_by`'s partial ``d`` where ``g`` is exactly one of ``d``'s dtype (the seed), so that ``d · g``
    is ``d``: the nested sweep's first steps then record no product on the outer tape (ten of a Hessian's 60
    records through ten coefficients); else None."""
    if type(g) not in REAL_FLOATS or g != 1:
        return None
    d = _multiplied_by(back)
    if type(d) is Tracked and (type(g) is float or d.dtype == g.dtype):
        return d
    return None


def _add_cotangent(grads, p, ct):
    """``grads[p] += ct`` as a new value (never in place: either may be tracked on an outer tape)."""
    grads[p] = ct if grads[p] is None else grads[p] + ct


def add_view_products(grads, owned, p, base, registered, gathered):
    """Add the cotangents ``g * partial`` of views ``base_of_p[index]`` into p's buffer, ``base`` its
    ``(shape, dtype)``: ``registered`` is ``[index, record, partial, ...]`` with ``g = grads[record]``
    (see `Tape`), ``gathered`` is ``[index, g, partial, ...]``.

    A dot of two column slices in a loop gives two per column: added one by one,
    each would cost a multiply and an add of a few elements at Python's price per
    NumPy call.  Together, they are scaled in one call and added in one scatter when
    every index picks one position along the same axis (``X[j]`` or ``X[:, j]``), in
    batches of at most `BATCH_ELEMENTS`, so the stacked copies stay a bounded temporary.
    """
    indices, scales, partials = registered[0::3], list(map(grads.__getitem__, registered[1::3])), registered[2::3]
    if gathered:
        indices, scales, partials = indices + gathered[0::3], scales + gathered[1::3], partials + gathered[2::3]
    scale_types = set(map(type, scales))  # not `None in scales`: NumPy scalars compare to None slowly
    if type(None) in scale_types:  # products that no cotangent reached
        scale_types.discard(type(None))
        kept = [k for k, scale in enumerate(scales) if scale is not None]
        indices, scales, partials = [indices[k] for k in kept], [scales[k] for k in kept], [partials[k] for k in kept]
    if not scales:
        return
    buffer = own_buffer(grads, owned, p, *base)
    axis, positions = _positions_along_one_axis(indices, buffer.ndim)
    row = buffer[indices[0]]
    step = len(scales) if axis is None else max(1, BATCH_ELEMENTS // max(1, row.size))
    for start in range(0, len(scales), step):
        batch = slice(start, start + step)
        stacked = _stacked(partials[batch]) if axis is not None else None
        if stacked is None or stacked.shape[1:] != row.shape:
            for index, scale, partial in zip(indices[batch], scales[batch], partials[batch]):
                add_at(buffer, index, scale * partial)
            continue
        same_type = scale_types == {stacked.dtype.type}  # then converting them is a quick copy
        stacked *= np.array(scales[batch], stacked.dtype if same_type else None).reshape(
            (-1,) + (1,) * (stacked.ndim - 1))
        scatter_add(buffer.swapaxes(0, axis), positions[batch], stacked)


BATCH_ELEMENTS = 1 << 16  # view products stacked at a time (512 KiB of float64): bounded, yet few batches


def _positions_along_one_axis(indices, ndim):
    """``(axis, positions)`` if every index is ``position`` (axis 0) or ``(:, position)`` (axis 1), else
    ``(None, None)``: the two ways a loop takes rows or columns.  Checked with C-level maps: there
    is one index per view of the loop."""
    kinds = set(map(type, indices))
    if kinds == {int}:
        return 0, indices
    if kinds == {tuple} and ndim >= 2 and set(map(len, indices)) == {2}:
        firsts, positions = list(map(_FIRST, indices)), list(map(_SECOND, indices))
        if firsts.count(_EVERYTHING) == len(firsts) and set(map(type, positions)) == {int}:
            return 1, positions
    return None, None


_EVERYTHING = slice(None)
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)


def _stacked(partials):
    """The partials as one new array, one per row; None if their shapes differ."""
    try:
        return np.array(partials)
    except ValueError:  # ragged
        return None


def scatter_add(target, positions, rows):
    """``target[positions[k]] += rows[k]`` for every k, positions (Python ints) possibly repeated.

    ``np.add.at`` does this but costs ~0.7 us a row here; unrepeated positions take one
    indexed add, repeated ones are sorted and each one's rows summed first.
    """
    n = len(positions)
    if positions == list(range(n)):  # every row once, in order: a loop over all of them
        target[:n] += rows
        return
    positions = np.fromiter(positions, np.intp, n) % target.shape[0]  # -1 and n-1 are the same row
    if len(set(positions.tolist())) == len(positions):
        target[positions] += rows
        return
    order = np.argsort(positions, kind="stable")
    positions = positions[order]
    starts = np.empty(len(positions), bool)
    starts[0] = True
    np.not_equal(positions[1:], positions[:-1], out=starts[1:])
    starts = np.flatnonzero(starts)
    target[positions[starts]] += np.add.reduceat(rows[order], starts, axis=0)
