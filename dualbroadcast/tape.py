"""Layer 1: tracked arrays that record NumPy operations on a tape, and the backward sweep.

A `Tracked` wraps the value of something derived from a differentiated input.
NumPy hands every operation on it to ``__array_ufunc__``/``__array_function__``;
the operation runs on plain values and, if its rule exists, appends one record
``(parent indices, pullbacks)`` to the tape (a Wengert list).  Plain arrays are
constants: they are never recorded and cost nothing in the backward pass.
"""

import contextvars
import functools
import gc
import inspect
import math
import operator
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import pytree
from .errors import (
    InPlaceMutationError,
    KernelError,
    StaleValueError,
    UnsupportedFunctionError,
    ValueConversionError,
)
from .expr import Sym
from .guards import RECORDER, UFUNC_AT, Guarded, NotReplayableError, holds_view, note_views, untracked
from .lazy import is_chunked, not_chunkwise
from .numpy_facts import ARRAY_METHODS, FLOAT_SCALARS, INFIX, REAL_FLOATS, astype, getitem, qualified_name
from .pullbacks import (
    FACTORS,
    Contracted,
    Gather,
    IndexPullback,
    RealPart,
    Unbroadcast,
    add_at,
    apply,
    own_buffer,
    scalar_pullback,
    scatter,
)
from .registry import (
    COMPOSITION,
    LAZY_FAMILIES,
    NONDIFFERENTIABLE,
    OUTPUTS,
    PER_ARGUMENT,
    RULES,
    SEQUENCE,
    call_with_tracked_keywords,
    complex_rule,
    output_pullbacks,
    register_lazy_rules,
)

# The tape of the gradient being evaluated in this thread/context, if any.
ACTIVE_TAPE = contextvars.ContextVar("dualbroadcast_active_tape", default=None)
# How many db.jvp calls are running in this context (forward mode's levels; `cut` and pending totals read it).
JVP_DEPTH = contextvars.ContextVar("dualbroadcast_jvp_depth", default=0)


class Tape:
    """A Wengert list: ``records[i]`` is ``(edges, operation)``, one edge ``(parent index, pullback)`` per
    tracked argument; None for an input; the bare operation for a scalar product of views, whose
    cotangent its views' bases read (see ``view_products``).  Outside the sweep, read it through
    `operation`, `edges` and `view_product_partials`.

    ``single_sweep``: the tape will be swept once (``gradient``), so a pullback may
    reuse a buffer it owns for its cotangent instead of allocating a new one.
    ``recorder``: the prepared-gradient recorder this tape is recorded by, if any
    (`_binary` and `Tracked.__getitem__` then leave its operations to `record_operation`, which asks it).
    ``inputs``: how many records at the start are inputs (the sweep stops there).
    ``complex``: a complex value is on the tape (an input or a result): from then on every operation takes
    `record_operation`'s general path, which records complex steps with their complex rules (`_record_complex`).
    ``level``: how many gradient evaluations this one is nested in (0: none).  A tape of level > 0 is a
    gradient inside a gradient: its values may be tracked on the outer tapes, so the pullbacks it records
    compute on tracked values and the sweep records them there (`_sweep_nested`); a value of an outer
    level met in one of its operations is a constant of it (see `innermost`).
    ``view_bases``: ``{index: (shape, dtype)}`` of every value that unrecorded slices
    (views, see `Tracked`) were taken of: the shape of the gradient buffer they add into.
    ``unread``: the result's value will not be returned (`gradient`): totals may be left `Pending`.
    ``view_products``: ``{index: [view index, record, partial, ...]}`` for the same values, flat
    (a tuple per product made slices B 3.5% slower in benchmarks.ab):
    the cotangents ``grads[record] * partial`` of scalar products of views (`_binary`),
    added into the base's buffer when the sweep reaches it (`add_view_products`).
    """

    __slots__ = ("records", "closed", "single_sweep", "collector_pause", "recorder", "inputs", "view_bases",
                 "view_products", "kept", "complex", "level", "unread", "__weakref__")

    def __init__(self, single_sweep=False, recorder=None, level=0):
        self.records = []
        self.closed = False
        self.single_sweep = single_sweep
        self.collector_pause = None
        self.recorder = recorder
        self.inputs = 0
        self.view_bases = {}
        self.view_products = {}
        self.kept = []
        self.complex = False
        self.level = level
        self.unread = False

    # --- the record format, read by explain and replay through these (the sweep reads it inline) ---
    def operation(self, i):
        """What made value ``i``: None for an input, else the function (or `broadcast.KernelCall`) recorded."""
        record = self.records[i]
        return record[1] if type(record) is tuple else record

    def edges(self, i):
        """Value ``i``'s ``(parent index, pullback)`` pairs; none for an input, or for a scalar product of
        views, whose partials the views' bases hold (`view_product_partials`)."""
        record = self.records[i]
        return record[0] if type(record) is tuple else ()

    def view_product_partials(self):
        """``{record: [partial, ...]}`` of the scalar products of views: ``view_products``' flat
        ``[view index, record, partial, ...]`` lists decoded."""
        partials = {}
        for products in self.view_products.values():
            for record, partial in zip(products[1::3], products[2::3]):
                partials.setdefault(record, []).append(partial)
        return partials

    def keep(self, a):
        """Make the constant array ``a`` (and the array it views) read-only until `thaw`: a pullback may
        read it, so changed in place after use it would change the gradient without a word.  A flag,
        not a copy: constants still cost nothing.  (Writes through another view of it are not caught.)"""
        if a.flags.writeable:
            a.flags.writeable = False
            self.kept.append(a)
        base = a.base
        if type(base) is np.ndarray and base.flags.writeable:
            base.flags.writeable = False
            self.kept.append(base)

    def thaw(self):
        """The pullbacks will not run again: make the arrays `keep` froze writeable again."""
        if self.kept:
            thaw(self.kept)

    def grew_long(self):
        """The tape reached `LONG_TAPE` records: pause the garbage collector until it is closed."""
        self.collector_pause = GarbageCollectionPaused()
        self.collector_pause.__enter__()

    def close(self, resume_collector=True):
        """Recording is over: no more operations may join this tape.

        ``resume_collector=False``: a long tape's collector pause outlasts recording;
        the caller ends it with `release` once the backward pass is done.
        """
        self.closed = True
        if resume_collector:
            self.release(drop_records=False)

    def release(self, drop_records=True):
        """The gradient is taken: resume the collector if this tape paused it, dropping the records first.

        Objects made while the collector is paused are all scanned by its first
        collection after it resumes: resumed with a 65,000-record tape still alive,
        that scan cost a gradient 12% of its time.  Dropped first, they are never scanned.
        """
        if self.collector_pause is not None:
            if drop_records:
                self.records, self.view_bases, self.view_products = [], {}, {}
            self.collector_pause.__exit__()
            self.collector_pause = None

    def leaf(self, value):
        """A new differentiated input."""
        records = self.records
        if self.inputs == len(records):
            self.inputs += 1
        records.append(None)
        return Tracked(value, self, len(records) - 1)

    def leaves(self, values):
        """A new differentiated input per value; None stays None (a constant)."""
        records = self.records
        start = len(records)
        records.extend([None] * len(values))
        if self.inputs == start:
            self.inputs = len(records)
        tracked = []
        for index, value in enumerate(values, start):
            if value is None:
                tracked.append(None)
                continue
            t = _new_tracked(Tracked)  # as in `record`: no __init__ frame per float of a tuple
            t.value = value
            t.tape = self
            t.index = index
            t.slice_index = None
            tracked.append(t)
        return tracked

    def record(self, ans, edges, operation, kind=None):
        """Append the operation that made ``ans`` and return its tracked result.

        ``edges``: a tuple of ``(parent index, pullback)`` pairs, which the sweep iterates
        as they are (pairing parents with pullbacks there cost a zip per record).
        ``kind``: `Pending` for a total whose value ``ans`` is a `Total`, computed when read.
        """
        records = self.records
        records.append((edges, operation))
        if len(records) == LONG_TAPE:
            self.grew_long()
        # Tracked(ans, self, index) without its __init__ frame, once per operation (here, in `leaves`, `_binary`
        # and `Tracked.__getitem__`): benchmarks.ab measured foldminus 7% and slices B 3% faster so.
        if kind is None:
            t = _new_tracked(Tracked)
            t.value = ans
        else:  # (a `Pending`'s value slot is hidden by its property)
            t = _new_tracked(kind)
            _VALUE.__set__(t, ans)
        t.tape = self
        t.index = len(records) - 1
        t.slice_index = None
        return t


def thaw(kept):
    """Make the arrays in ``kept`` writeable again, and forget them.  Bases first: NumPy refuses to make
    a view writeable while the array it views is not.  A view whose base an outer gradient still holds
    read-only (a nested gradient kept a view made before the outer one froze the base) waits in `_DEFERRED`
    and is thawed when that base is."""
    for a in sorted(kept, key=_views_deep):
        try:
            a.flags.writeable = True
        except ValueError:
            with _DEFERRED_LOCK:
                _DEFERRED.append(a)
    kept.clear()
    if _DEFERRED:
        _thaw_deferred()


_DEFERRED = []  # views frozen by a nested gradient whose base an outer gradient held read-only when it ended
_DEFERRED_LOCK = threading.Lock()


def _thaw_deferred():
    """Thaw the deferred views whose bases are writeable again; the others wait for their outer gradients."""
    with _DEFERRED_LOCK:
        waiting = []
        for a in sorted(_DEFERRED, key=_views_deep):
            try:
                a.flags.writeable = True
            except ValueError:
                waiting.append(a)
        _DEFERRED[:] = waiting


def _views_deep(a):
    """How many arrays ``a`` is a view of, one through another."""
    depth = 0
    while type(a.base) is np.ndarray:
        a, depth = a.base, depth + 1
    return depth


class GarbageCollectionPaused:
    """Pause Python's cyclic garbage collector while a tape grows or is swept.

    Its collections rescan the growing tape again and again: a 130,000-record
    gradient took 40% longer with it on.  A pause costs about a microsecond, so only
    long tapes take one.  Process-wide, so counted: nested and concurrent uses
    restore it once, when the last one ends.
    """

    _lock = threading.Lock()
    _users = 0
    _was_enabled = False

    def __enter__(self):
        cls = GarbageCollectionPaused
        with cls._lock:
            if cls._users == 0:
                cls._was_enabled = gc.isenabled()
                gc.disable()
            cls._users += 1

    def __exit__(self, *exc):
        cls = GarbageCollectionPaused
        with cls._lock:
            cls._users -= 1
            if cls._users == 0 and cls._was_enabled:
                gc.enable()


LONG_TAPE = 1_000  # records; a shorter tape is recorded and swept in about a millisecond, before a collection matters


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
    advanced = [k for k, part in enumerate(index) if type(part) not in _BASIC_INDEX]
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


def not_twice_differentiable(func, error):
    """The error for a rule whose pullback cannot run on values tracked by an outer gradient (``error``)."""
    name = qualified_name(func) if callable(func) else str(func)
    return UnsupportedFunctionError(
        f"the derivative rule of {name} cannot be differentiated again (a gradient of a gradient through it): "
        f"its pullback does not run on tracked values ({type(error).__name__}: {error}). Differentiate through "
        f"{name} once only (db.cut its argument in the outer function), or write it with functions whose "
        "rules can be."
    )


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


def value_of(x):
    """The plain value of a possibly tracked ``x``."""
    return x.value if type(x) is Tracked else x


def record_operation(func, args, kwargs):
    """Run ``func`` on plain values and, if an argument is tracked, record it: the one recording path.

    Every NumPy call, method and operator on a tracked value comes here, but for `_binary`, the
    arithmetic operators' declared specialisation, which hands on every case it does not specialise.
    While a prepared gradient is recorded, its recorder (`prepared.Recorder`) is asked at three
    points: how each argument is referred to, which constants to hold, and the step each result makes.
    """
    rule = RULES.get(func)
    if rule is None and LAZY_FAMILIES and func not in NONDIFFERENTIABLE and register_lazy_rules(func):
        rule = RULES.get(func)  # a SciPy function met before SciPy's rules were registered
    kind = rule.kind if rule is not None else None
    x = args[0] if args else None
    if kind == PER_ARGUMENT and not kwargs and type(x) is Tracked and (tape := x.tape).recorder is None \
            and not tape.complex and not tape.level and rule.makers and rule.makers[0] is not None \
            and (len(args) == 1 or TRACKED.isdisjoint(map(type, args[1:]))):
        # Specialised: only the first argument tracked, no keywords (np.exp(x), x[i], np.sum(x, 0)).
        # np.sin of a scalar records in 3.5 us here, 5.2 us on the general path below.
        if tape.closed:
            _check_tape(None, tape)
        rest = args[1:]
        if not rest and TOTALS.get(func) is rule and type(v := x.value) is np.ndarray and v.dtype.kind == "f" \
                and lazy_totals(tape, v.size):  # its pullback reads no value: computed when read (`Pending`)
            back = _edge(x, rule.makers[0](None, v))
            return tape.record(Total(functools.partial(rule.plain, v), v.dtype, tape), ((x.index, back),), func,
                               Pending)
        ans = rule.plain(x.value, *rest)
        if type(ans) not in FLOAT_SCALARS and not _is_float(ans):
            return _not_float(tape, func, args, ans)
        if rest and rule.keeps_arguments:
            keep_constants(tape, rest)
        back = _edge(x, rule.makers[0](ans, x.value, *rest))  # first: settling a view moves its index
        t = tape.record(ans, ((x.index, back),), func)
        if type(ans) is np.ndarray and (ans.base is not None or ans is x.value):  # a view (np.reshape, x.T)
            note_views(args, (t,), func is getitem)
        return t
    if kind == COMPOSITION:  # its NumPy calls are recorded one by one
        return rule.makers(*args, **kwargs)
    if kind == SEQUENCE and not args:
        args, kwargs = _sequence_by_position(func, kwargs)
    sequence, rest = (args[0], args[1:]) if kind == SEQUENCE else (args, ())
    recorder = nested = RECORDER.get()
    if recorder is not None and _nested_in_recording(recorder.tape, sequence):
        recorder = None  # an operation of a gradient taken inside the recorded function: its own tape records it
    if (kwargs or rest) and (rule is not None or recorder is not None) \
            and not TRACKED.isdisjoint(map(type, [*kwargs.values(), *rest])):
        if rule is not None and not TRACKED.isdisjoint(map(type, kwargs.values())):
            return call_with_tracked_keywords(rule, func, args, kwargs,
                                              [k for k, v in kwargs.items() if type(v) in TRACKED], record_operation)
        if nested is not None and all(v.tape is not nested.tape or v.index in nested.inactive
                                      for v in [*kwargs.values(), *rest] if type(v) is Tracked):
            raise NotReplayableError(f"{qualified_name(func)} got a value a prepared program traces (no gradient) "
                                     "as a keyword argument")  # its recording left to the plain path
        raise UnsupportedFunctionError(
            f"{qualified_name(func)} got a tracked value after its sequence of arrays (or as a keyword argument "
            "of a function without a rule), where it has no derivative rule; pass a constant (db.cut)"
        )
    if recorder is None:
        values, active, tape = _unwrap(sequence)
    else:
        values, refs, traced, active = recorder.references(func, sequence)
        tape = recorder.tape if traced else None
    if rule is None and func not in NONDIFFERENTIABLE and (active or tape is None):  # else a plain step
        raise UnsupportedFunctionError(_unsupported_message(func))  # on traced values that carry no gradient
    call_values = [values, *rest] if kind == SEQUENCE else values
    if rule is None:
        ans = func(*call_values, **kwargs) if nested is not None \
            else func(*_strip(call_values), **_strip_dict(kwargs))
    elif tape is not None and tape.level:  # values may be tracked by an outer gradient: NumPy hands them on
        ans = func(*call_values, **kwargs)
    else:
        ans = rule.impl(*call_values, **kwargs) if kwargs else rule.plain(*call_values)
    if type(ans) is FORWARD[0]:  # a dual among the arguments (reverse over forward): see `_not_float`
        return FORWARD[1](func, args, kwargs)
    if type(ans) is not np.ndarray and is_chunked(ans):  # a Dask array met a tracked value: Dask took over
        raise not_chunkwise(func)
    if tape is None:
        return ans
    if rule is None:
        if func is np.sign and _is_complex(ans):
            raise UnsupportedFunctionError(
                "np.sign of a complex value is z / |z|, which is not piecewise constant: write z / np.abs(z) "
                "(0 at z = 0: np.where(z == 0, 0, z / np.abs(z))) to differentiate it")
        active = []  # a function whose results carry no gradient
    kept = bool(active) and rule.keeps_arguments
    if recorder is not None:
        recorder.hold(refs, kept)
    elif kept:
        keep_constants(tape, sequence)
    if kept and (rest or kwargs):
        keep_constants(tape, [*rest, *kwargs.values()])
    parents = [sequence[i] for i in active]
    if kind == OUTPUTS and isinstance(ans, (tuple, list)):  # else one array (svd without u, v): output 0
        results = [_record_result(tape, func, rule, j, a, ans, call_values, kwargs, parents, recorder, active)
                   for j, a in enumerate(ans)]
        outcome = type(ans)(results) if type(ans) in (list, tuple) else type(ans)(*results)  # a named tuple: fields
    else:
        results = [_record_result(tape, func, rule, None, ans, ans, call_values, kwargs, parents, recorder, active)]
        outcome = results[0]
    if (ans.base is not None) if type(ans) is np.ndarray else holds_view(ans):  # a view: x.T, np.split(x, 2)
        note_views(sequence, results, func is getitem)
    if recorder is not None:
        recorder.step(func, rule, refs, rest, kwargs, active, results, ans)
    return outcome


def _nested_in_recording(recorded, values):
    """Whether an operation is one of a gradient taken inside the function a prepared gradient records (a value
    of a deeper tape than the ``recorded`` one among ``values``): that gradient's tape records it, and what it
    computes on its values, which the recorded tape traces, becomes the recording's steps."""
    for a in values:
        kind = type(a)
        if kind is Tracked:
            if a.tape.level > recorded.level:
                return True
        elif (kind is list or kind is tuple) and _nested_in_recording(recorded, a):
            return True
    return False


def _record_result(tape, func, rule, j, a, ans, values, kwargs, parents, recorder, active):
    """One result ``a`` of ``func`` (output ``j`` of a tuple result, else None) as the tape carries it:
    tracked with one pullback per parent if it is a real float and depends on an active argument;
    where complex values take part, by `_record_complex`; else plain (an integer or a boolean: no
    gradient to lose; an error for object or text), except that a recorder keeps every array result
    traced (a replay recomputes it)."""
    floating = getattr(a, "dtype", None) is not None and a.dtype.kind == "f"
    if parents and (tape.complex or not floating) \
            and (_is_complex(a) or (tape.complex and _any_complex(values, kwargs))):
        return _record_complex(tape, func, rule, j, a, ans, values, kwargs, parents, recorder, active)
    if parents and not floating:
        a = constant_result(func, a)
    if recorder is not None and not isinstance(a, (np.ndarray, np.generic)):
        return a  # a plain result (a shape, a count): the recorder guards it by equality
    if not (parents and floating):
        return a if recorder is None else recorder.traced(a, func)
    backs = _pullbacks(tape, func, rule, j, ans, values, active, kwargs)
    if backs is None:  # the rule declares this output a constant
        return a if recorder is None else recorder.traced(a, func)
    return tape.record(a, _edges(parents, backs), func)


def _pullbacks(tape, func, rule, j, ans, values, active, kwargs):
    """The pullbacks ``rule``'s makers give the ``active`` arguments for result ``ans`` (output ``j`` of a tuple,
    else None); None for an output its rule declares constant.  On a nested tape a maker that cannot run on
    tracked values is the error naming the rule (`not_twice_differentiable`)."""
    try:
        if j is None:
            return rule.pullbacks(func, ans, values, active, kwargs)
        return output_pullbacks(func, rule.makers, j, ans, values, active, kwargs)
    except (TypeError, AttributeError) as error:
        if not tape.level or isinstance(error, (UnsupportedFunctionError, NotReplayableError)):
            raise
        raise not_twice_differentiable(func, error) from error


def _record_complex(tape, func, rule, j, a, ans, values, kwargs, parents, recorder, active):
    """One result ``a`` of ``func`` on tracked values where complex values take part (an argument or ``a``),
    recorded with ``func``'s complex rule (`registry.complex_rule`: JAX's convention, in which the
    pullback of a holomorphic function is ``g`` times its derivative).  A real parent's cotangent is
    the real part of what the rule gives (`RealPart`), so a real value's cotangent stays real."""
    rule = complex_rule(func)
    if rule is None:
        raise UnsupportedFunctionError(_complex_message(func))
    tape.complex = True
    if type(a) is complex:  # the tape holds NumPy values
        a = np.complex128(a)
        ans = a if j is None else ans
    backs = _pullbacks(tape, func, rule, j, ans, values, active, kwargs)
    if backs is None:  # the rule declares this output a constant
        return a if recorder is None else recorder.traced(a, func)
    backs = [back if _is_complex(p.value) or type(back) is IndexPullback else RealPart(back)
             for p, back in zip(parents, backs)]
    return tape.record(a, _edges(parents, backs), func)


def _complex_message(func):
    name = qualified_name(func)
    return (
        f"{name} has no derivative rule for complex values (its rule is for real numbers: {name} is not "
        "holomorphic, or has no meaning for complex numbers, as an order or a maximum). Differentiate a real "
        "function of the complex values (np.real, np.imag, np.abs), or apply it to db.cut(z) if you do not "
        "need its gradient."
    )


def _any_complex(values, kwargs):
    """Whether a complex value is among ``values`` (or in a list or tuple among them) or ``kwargs``'s (a value
    tracked by an outer gradient too)."""
    for v in [*values, *kwargs.values()]:
        kind = type(v)
        if kind is list or kind is tuple:
            if _any_complex(v, {}):
                return True
        elif kind is complex or (isinstance(v, (np.ndarray, np.generic, Tracked)) and v.dtype.kind == "c"):
            return True
    return False


def _unwrap(sequence):
    """The plain values of ``sequence``, the positions of its tracked values and their one tape
    (a clear error for a stale value or values of two evaluations)."""
    values = list(sequence)
    positions = []
    tape = None
    for i, a in enumerate(sequence):
        if type(a) is Pending:  # an argument NumPy did not dispatch on (np.full_like's fill value)
            settle_total(a)
        if type(a) is Tracked:
            if a.tape is not tape or tape.closed:
                if tape is not None and a.tape.level != tape.level:
                    return _unwrap_nested(sequence)
                tape = _check_tape(tape, a.tape)
            positions.append(i)
            values[i] = a.value
    return values, positions, tape


def _unwrap_nested(sequence):
    """`_unwrap` of values of nested gradients: those of the innermost tape are its arguments; the others,
    tracked on outer tapes, are constants of this operation, passed on as they are so that the outer
    tapes record what is computed from them."""
    tape = innermost([a.tape for a in sequence if type(a) is Tracked])
    positions = [i for i, a in enumerate(sequence) if type(a) is Tracked and a.tape is tape]
    values = [a.value if i in positions else a for i, a in enumerate(sequence)]
    return values, positions, tape


def innermost(tapes):
    """The tape of the innermost gradient evaluation among ``tapes``, open tapes of nested evaluations (each of
    its own level); a clear error for a stale value or for values of two evaluations at one level."""
    by_level = {}
    for tape in tapes:
        if tape.closed:
            _check_tape(None, tape)
        if by_level.setdefault(tape.level, tape) is not tape:
            _check_tape(tape, by_level[tape.level])
    return by_level[max(by_level)]


def _sequence_by_position(func, kwargs):
    """``func(arrays=[...], ...)`` as ``func([...], ...)``: a sequence rule reads its sequence first."""
    kwargs = dict(kwargs)  # NumPy's dispatcher has checked that the sequence is among them
    return (kwargs.pop(next(iter(inspect.signature(func).parameters))),), kwargs


def keep_constants(tape, args):
    """`Tape.keep` every constant array among ``args`` (and in lists or tuples among them)."""
    for a in args:
        kind = type(a)
        if kind is np.ndarray:
            tape.keep(a)
        elif kind is list or kind is tuple:
            keep_constants(tape, a)


def _dispatch(func, args, kwargs):
    """A NumPy call on tracked values: `_binary` for two tracked arguments, else `record_operation`."""
    if not kwargs and len(args) == 2 and type(args[0]) is Tracked and type(args[1]) is Tracked:
        return _binary(args[0], args[1], func)
    return record_operation(func, args, kwargs)


def _binary(x, y, func):
    """``func(x, y)``, and ``x op y`` for Tracked's arithmetic operators: `record_operation` specialised
    for a rule with one maker per argument (``rule.binary``), no keywords and no recorder, since a scalar
    model's gradient pays this once per operator.  A scalar result takes the pullbacks its rule declares
    (``scalar_backs``; ``bilinear``: the other argument); a scalar product of views holds its partials
    for their bases (`Tape.view_products`).  Everything else goes to `record_operation`.
    (``func`` comes last: the operators are this very function with ``func`` bound, see `_arithmetic`.)"""
    rule = RULES.get(func)
    tape = x.tape if type(x) is Tracked else y.tape
    if rule is None or not rule.binary or tape.recorder is not None or tape.complex or tape.level:
        return record_operation(func, (x, y), {})
    if tape.closed:
        _check_tape(None, tape)
    if type(x) is Tracked and type(y) is Tracked:
        if y.tape is not tape:
            if y.tape.level != tape.level:  # nested gradients: the outer value is a constant of the inner
                return record_operation(func, (x, y), {})
            _check_tape(tape, y.tape)
        xv, yv = x.value, y.value
        ans = rule.plain(xv, yv)
        scalar = type(ans) in FLOAT_SCALARS
        if scalar and rule.bilinear and x.slice_index is not None and y.slice_index is not None:
            index = len(tape.records)  # a dot of two slices in a loop: no edges to sweep
            products = tape.view_products[x.index]
            products.append(x.slice_index)  # three appends: half the time of += (x.slice_index, index, yv) here
            products.append(index)
            products.append(yv)
            products = tape.view_products[y.index]
            products.append(y.slice_index)
            products.append(index)
            products.append(xv)
            record = func
        else:
            if scalar and rule.bilinear:
                backs = (scalar_pullback(yv), scalar_pullback(xv))
            elif scalar and rule.scalar_backs is not None:
                backs = rule.scalar_backs
            elif scalar and rule.scalar_partials is not None:  # 1.4 us a record, against 3.0 us through the makers
                dx, dy = rule.scalar_partials
                back = rule.scalar_back
                backs = (back(dx(ans, xv, yv)), back(dy(ans, xv, yv)))
            elif scalar or _is_float(ans):
                backs = (rule.makers[0](ans, xv, yv), rule.makers[1](ans, xv, yv))
            else:
                return _not_float(tape, func, (x, y), ans)
            bx, by = backs
            if x.slice_index is not None or y.slice_index is not None:
                bx, by = _edge(x, bx), _edge(y, by)  # first: settling a view moves its index
            record = ((x.index, bx), (y.index, by)), func
    else:  # one tracked argument, at position k
        t, k, values, constant = (x, 0, (x.value, y), y) if type(x) is Tracked else (y, 1, (x, y.value), x)
        if type(constant) is np.ndarray:  # a pullback may keep it
            tape.keep(constant)
        ans = rule.plain(*values)
        scalar = type(ans) in FLOAT_SCALARS
        if scalar and rule.bilinear:
            back = scalar_pullback(values[1 - k])
        elif scalar and rule.scalar_backs is not None:
            back = rule.scalar_backs[k]
        elif scalar and rule.scalar_partials is not None:
            back = rule.scalar_back(rule.scalar_partials[k](ans, *values))
        elif scalar or _is_float(ans):
            back = rule.makers[k](ans, *values)
        else:
            return _not_float(tape, func, (x, y), ans)
        if t.slice_index is not None and scalar and rule.bilinear and type(back) is np.ndarray:
            products = tape.view_products[t.index]  # as for two views
            products.append(t.slice_index)
            products.append(len(tape.records))
            products.append(back)
            record = func
        else:
            if t.slice_index is not None:
                back = _edge(t, back)  # first: settling a view moves its index
            record = ((t.index, back),), func
    records = tape.records  # tape.record(ans, edges, func) inline: a frame less per operator
    index = len(records)
    records.append(record)
    if index == LONG_TAPE - 1:
        tape.grew_long()
    out = _new_tracked(Tracked)
    out.value = ans
    out.tape = tape
    out.index = index
    out.slice_index = None
    return out


def _edges(tracked, backs):
    """The edges ``(parent index, pullback)`` (see `_edge`) of the ``tracked`` arguments of one record."""
    edges = []
    for t, back in zip(tracked, backs):
        back = _edge(t, back)  # first: settling a view moves its index
        edges.append((t.index, back))
    return tuple(edges)


def _edge(t, back):
    """The pullback a record keeps for its argument ``t``: ``back`` itself, or for a view (an
    unrecorded slice), whose cotangent goes into its base, the pair ``(index, back)``, which
    the sweep applies in turn.  A consumer's own `IndexPullback` (a slice of a slice) is not
    paired so: that view is recorded after all (`settle`).
    Read the parent's ``t.index`` after this call.
    """
    if t.slice_index is None:
        return back
    if type(back) is IndexPullback:
        settle(t)
        return back
    return (t.slice_index, back)


def settle(t):
    """Record the view ``t`` as an ordinary tape value (a getitem of its base), in place."""
    if t.slice_index is not None:
        back = IndexPullback(t.slice_index, *t.tape.view_bases[t.index])
        t.index, t.slice_index = t.tape.record(t.value, ((t.index, back),), getitem).index, None
    return t


_BASIC_INDEX = {int, slice, type(None), type(Ellipsis)}  # basic indexing: a view of an array


def _check_tape(current, tape):
    """``tape`` if it may join ``current`` (None: no tape yet); a clear error for stale or mixed values."""
    if tape.closed:
        raise StaleValueError(
            "a tracked value from a finished gradient evaluation was used again; do not keep "
            "values from inside a differentiated function (store db.cut(x) instead)"
        )
    if current is not None:
        raise StaleValueError(
            "tracked values of two gradient evaluations that are not nested one in the other met in one "
            "operation (two threads, or a value kept from another evaluation); pass the value as an argument "
            "of the gradient that uses it, or db.cut(x) if it is a constant there"
        )
    return tape


def tape_of(parents):
    """The one open tape all ``parents`` belong to; a clear error for stale or mixed values."""
    tape = None
    for p in parents:
        if p.tape is not tape:
            tape = _check_tape(tape, p.tape)
    return tape


def _is_float(ans):
    """Whether ``ans`` is a real float array or NumPy scalar the tape carries (not a `db.jvp` dual: a tracked value
    met one, reverse over forward, and forward mode computes the result, see `_not_float`; not a Dask array:
    `_not_float` refuses it)."""
    dtype = getattr(ans, "dtype", None)
    return dtype is not None and dtype.kind == "f" and (type(ans) is np.ndarray or (
        type(ans) is not FORWARD[0] and not is_chunked(ans)))


def _is_complex(ans):
    """Whether ``ans`` is complex: a NumPy complex array or scalar, or a Python complex (``1j * s`` of a
    NumPy float scalar ``s`` is one: Python's complex multiplies it)."""
    if type(ans) is complex:
        return True
    dtype = getattr(ans, "dtype", None)
    return dtype is not None and dtype.kind == "c"


def _not_float(tape, func, args, ans):
    """A result of ``func`` on tracked values that is not a real float, from a fast path: a complex one is
    recorded by `record_operation`'s general path, which the tape takes from now on; a dual value (a tracked
    value met a `db.jvp`'s dual: reverse over forward) by forward mode, whose operations the tape records; else
    a constant (a Dask array, which Dask made of a tracked value's, is an error: `chunked`)."""
    if type(ans) is FORWARD[0]:
        return FORWARD[1](func, args, {})
    if is_chunked(ans):
        raise not_chunkwise(func)
    if _is_complex(ans):
        tape.complex = True
        return record_operation(func, args, {})
    return constant_result(func, ans)


_CONSTANT_KINDS = frozenset("biu")  # booleans and integers: piecewise constant, no gradient to lose
_CONSTANT_TYPES = frozenset((bool, int, tuple, type(None)))  # counts, flags, shapes


def constant_result(func, ans):
    """``ans``, a result of ``func`` on tracked values that carries no gradient (booleans, integers,
    shapes); an error for anything else (object, text), whose gradient would be lost."""
    dtype = getattr(ans, "dtype", None)
    if dtype.kind in _CONSTANT_KINDS if dtype is not None else type(ans) in _CONSTANT_TYPES:
        if isinstance(ans, tuple) and any(_holds_float(a) for a in ans):
            raise UnsupportedFunctionError(
                f"{qualified_name(func)} returned several results from tracked values, but its rule is for one "
                "result, so their gradients would be lost; register it with db.defvjp_outputs (one pullback "
                "per result), or apply it to db.cut(x) if you do not need its gradient"
            )
        return ans
    if getattr(ans, "kernel_symbol", False):
        raise KernelError(
            f"{qualified_name(func)} met a tracked value inside a db.sum/db.broadcast kernel, which reached it "
            "by a way the kernel does not see as its argument (an object it reads, a global); pass the value "
            "as an argument of db.sum/db.broadcast, or db.cut it if it is a constant of the kernel"
        )
    what = f"dtype {dtype}" if dtype is not None else f"type {type(ans).__name__}"
    raise UnsupportedFunctionError(
        f"{qualified_name(func)} of a tracked value gave a result of {what}, which the tape cannot carry "
        "(it carries real and complex floating point): its gradient would be lost. Keep the computation "
        "in floating point, or apply it to db.cut(x) if you do not need its gradient."
    )


def _holds_float(a):
    """Whether ``a`` is, or a tuple or list of it holds, a real or complex floating-point value."""
    if type(a) in (tuple, list):
        return any(map(_holds_float, a))
    return isinstance(a, (float, complex)) or getattr(getattr(a, "dtype", None), "kind", None) in ("f", "c")


def _strip(args):
    """The plain values of ``args`` and of the lists and tuples among them (each keeps its type: an ``axis``
    tuple must stay a tuple)."""
    return [type(x)(map(value_of, x)) if type(x) in (list, tuple) else value_of(x) for x in args]


def _strip_dict(kwargs):
    return {k: value_of(v) for k, v in kwargs.items()}


def _unsupported_message(func):
    name = qualified_name(func)
    if isinstance(func, np.ufunc) and all("O" in types for types in func.types):
        return (
            f"{name} is a Python function applied per element (np.frompyfunc or np.vectorize), which "
            "cannot be differentiated; write it with NumPy operations (db.broadcast runs a scalar-style "
            "function elementwise), or apply it to db.cut(x) if you do not need its gradient."
        )
    return (
        f"{name} has no derivative rule in dualbroadcast, so a gradient through it cannot be "
        f"computed. Register one: db.defvjp({name}, lambda ans, x: lambda g: <cotangent of x>) "
        f"(see db.defvjp), or apply {name} to db.cut(x) if you do not need its gradient."
    )


_OUT = (
    "{name} with out= or an in-place operator (+=, *=, ...) involving a tracked value would mutate "
    "an array and drop its gradient; write y = {example} instead of an in-place update."
)


_UFUNC_KEYWORDS = frozenset(("casting", "order", "subok"))  # they do not change a float result's values


def _check_ufunc_keywords(ufunc, kwargs):
    """A clear error for the keywords of a ufunc call whose effect a rule cannot honour."""
    name = f"np.{ufunc.__name__}"
    if kwargs.get("out") is not None:
        example = f"x {INFIX[ufunc]} y" if ufunc in INFIX else f"{name}(...)"
        raise InPlaceMutationError(_OUT.format(name=name, example=example))
    unsupported = sorted(kwargs.keys() - _UFUNC_KEYWORDS - {"out"})
    if "where" in unsupported:
        raise UnsupportedFunctionError(
            f"{name}(..., where=mask) on a tracked value leaves the masked-out elements uninitialised, so "
            f"their gradient is undefined; write np.where(mask, {name}(x), fill) instead"
        )
    if unsupported:
        raise UnsupportedFunctionError(
            f"{name} with the keyword(s) {unsupported} on a tracked value has no derivative rule; "
            f"call {name} without them and convert the result with .astype(...) if you need another dtype"
        )


def _ufunc_method(ufunc, method, inputs, kwargs):
    """``ufunc.method(*inputs, **kwargs)`` on tracked values: ``outer`` as the ufunc of ``A`` reshaped
    against ``B`` (so its derivative-table rule applies), the other methods by the rule registered on
    the bound method (``np.add.reduce``: np.sum's, see rules/reductions.py), else a clear error."""
    name = f"np.{ufunc.__name__}.{method}"
    if kwargs.get("out") is not None:
        raise InPlaceMutationError(_OUT.format(name=name, example=f"{name}(...)"))
    if method == "at":
        raise InPlaceMutationError(UFUNC_AT.format(name=name))
    if method == "outer" and ufunc.signature is None:
        a, b = inputs
        return ufunc(np.reshape(a, np.shape(a) + (1,) * np.ndim(b)), b, **kwargs)
    if method == "reduceat" and len(inputs) == 2:
        kwargs.pop("indices", None)  # NumPy passes ``indices=`` both by name and in ``inputs``
    func = getattr(ufunc, method)
    if func not in RULES:
        raise UnsupportedFunctionError(
            f"{name} has no derivative rule; use the NumPy function (np.sum, np.cumsum, np.max, ...) "
            f"or register a rule with db.defvjp({name}, ...)"
        )
    return record_operation(func, inputs, kwargs)


_NUMBERS = REAL_FLOATS | {int}  # a plain number beside a tracked value: `Tracked.__array_ufunc__`
_CONSTANTS = _NUMBERS | {np.ndarray}  # what `_binary` takes beside a tracked value (``array * x`` as ``x * array``)


class Tracked(Guarded):
    """A value derived from a differentiated input: NumPy operations on it are recorded.

    ``slice_index``: for a basic slice ``base[index]`` (a NumPy view), its ``index`` (the base's
    shape and dtype are the tape's ``view_bases[base index]``); it carries the base's tape
    ``index``.  Such a slice is not recorded: each operation on it adds its cotangent at
    ``index`` of the base's gradient buffer, so a slice in a loop costs one record less
    (see `_edges`; a scalar product of slices holds its partials for the base, see `_binary`).
    """

    __slots__ = ("value", "tape", "index", "slice_index", "__weakref__")  # weak: `guards.note_views`

    def __init__(self, value, tape, index, view=None):
        self.value = value
        self.tape = tape
        self.index = index
        self.slice_index = view

    # --- NumPy protocols -------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":
            return _ufunc_method(ufunc, method, inputs, kwargs)
        if kwargs:
            _check_ufunc_keywords(ufunc, kwargs)
        elif len(inputs) == 2:
            x, y = inputs
            if type(x) in _CONSTANTS or type(y) in _CONSTANTS:  # np.multiply(c, x), np.float64(2) * x, array * x:
                return _binary(x, y, ufunc)  # as `c * x` is
        return _dispatch(ufunc, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if kwargs:
            if kwargs.get("out") is not None:
                name = qualified_name(func)
                raise InPlaceMutationError(_OUT.format(name=name, example=f"{name}(...)"))
        elif len(args) == 2:
            x, y = args
            if type(x) is Tracked and type(y) is Tracked:
                return _binary(x, y, func)  # np.dot of two slices in a loop: one frame less
        return _dispatch(func, args, kwargs)

    # --- array attributes and views -------------------------------------
    T = property(lambda self: record_operation(np.transpose, (self,), {}))
    real = property(lambda self: record_operation(np.real, (self,), {}) if _is_complex(self.value) else self)
    imag = property(lambda self: record_operation(np.imag, (self,), {}))

    def __getitem__(self, index):
        tape = self.tape
        kind = type(index)
        if kind is tuple:  # X[:, j] (a loop's column) checked first, in 0.4 us less
            basic = (len(index) == 2 and type(index[0]) is slice and type(index[1]) is int) \
                or _BASIC_INDEX.issuperset(map(type, index))
        else:
            basic = kind in _BASIC_INDEX
            if index is None:
                index = (None,)  # the same, and never mistaken for "not a view"
        if basic and self.slice_index is None and tape.recorder is None and not tape.closed:
            base = self.value
            value = base[index]  # of a value an outer gradient tracks too (a gradient of a gradient): recorded there
            if type(value) is np.ndarray:  # a view into self: not recorded, see `view`
                bases = tape.view_bases
                if self.index not in bases:
                    bases[self.index] = (base.shape, base.dtype)
                    tape.view_products[self.index] = []
                view = _new_tracked(Tracked)  # as in Tape.record: no __init__ frame for a slice in a loop
                view.value = value
                view.tape = tape
                view.index = self.index
                view.slice_index = index
                return view
            if not tape.complex and (type(value) in FLOAT_SCALARS or type(value) is Tracked):
                # an element, or a value an outer gradient tracks: recorded as `record_operation` would, in a
                # call less (x[i] of a vector: 0.7 us, not 2.1 us here)
                return tape.record(value, ((self.index, IndexPullback(index, base.shape, base.dtype)),), getitem)
        return record_operation(getitem, (self, index), {})  # recorded (and a closed tape's clear error)

    def __repr__(self):
        return f"Tracked({self.value!r})"

    # --- operators: set after the class (`_arithmetic`, `_comparison`) -----
    __hash__ = None

    # --- methods: the NumPy function of the same name ------------------------
    def reshape(self, *shape, order="C", copy=None):
        shape = shape[0] if len(shape) == 1 else shape
        return record_operation(np.reshape, (self, shape), _given(order=(order, "C"), copy=(copy, None)))

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 else (axes or None)
        return record_operation(np.transpose, (self, axes), {})

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        keywords = _given(order=(order, "K"), casting=(casting, "unsafe"), subok=(subok, True), copy=(copy, True))
        return record_operation(astype, (self, dtype), keywords)

    def view(self, dtype=None, type=None):
        """``x.view()``, or ``x.view(dtype)`` of x's own dtype: the same values, so ``x`` itself (a tracked value
        is never written in place).  Another dtype reinterprets the bits, which has no derivative."""
        if type is None and (dtype is None or np.dtype(dtype) == self.value.dtype):
            return self
        raise ValueConversionError(
            f"x.view({dtype!r}) reinterprets the bits of a value being differentiated, which has no derivative; "
            "use x.astype(dtype) to convert the values, or db.cut(x).view(...) for a constant")

    def flatten(self, order="C"):
        return record_operation(np.ravel, (self,), _given(order=(order, "C"))).copy()


def _given(**keywords):
    """The keywords ``name=(value, default)`` whose value is not the default: a method passes on only
    those, so that its common call takes the path without keywords."""
    return {name: value for name, (value, default) in keywords.items() if value != default}


_new_tracked = object.__new__


def _arithmetic(func, reflected):
    """The operator method ``x op y`` (``y op x`` if ``reflected``) for ``func``.

    ``x op y`` is `_binary` itself with ``func`` as its default third argument: a copy
    of the function object sharing its code, so an operator costs no frame of its own
    (benchmarks.ab: foldminus 2% faster than a lambda calling `_binary`).
    """
    if reflected:
        return lambda self, other: _binary(other, self, func)
    return types.FunctionType(_binary.__code__, _binary.__globals__, f"_binary_{func.__name__}", (func,))


for _name, _func in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.divide),
                     ("pow", np.power), ("floordiv", np.floor_divide), ("mod", np.remainder), ("matmul", np.matmul)]:
    setattr(Tracked, f"__{_name}__", _arithmetic(_func, False))
    setattr(Tracked, f"__r{_name}__", _arithmetic(_func, True))
for _name, _func in [("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)]:
    # truth values a recording traces (its comparisons, `_comparison`) combined: `(x > 0) & mask`
    setattr(Tracked, f"__{_name}__", lambda self, other, func=_func: record_operation(func, (self, other), {}))
    setattr(Tracked, f"__r{_name}__", lambda self, other, func=_func: record_operation(func, (other, self), {}))
Tracked.__invert__ = lambda self: record_operation(np.invert, (self,), {})
for _name, _func in [("neg", np.negative), ("pos", np.positive), ("abs", np.absolute)]:
    setattr(Tracked, f"__{_name}__", lambda self, func=_func: record_operation(func, (self,), {}))


def _comparison(func, plain):
    """``x < y`` and the other comparisons: ``plain`` on the values, a truth value that carries no gradient;
    recorded as ``func`` while a prepared gradient is recorded, so that a replay recomputes it."""
    def compare(self, other):
        if RECORDER.get() is not None:
            return record_operation(func, (self, other), {})
        return plain(self.value, value_of(other))

    return compare


for _name, _func in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                     ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(Tracked, f"__{_name}__", _comparison(_func, getattr(operator, _name)))


def _method(func):
    def method(self, *args, **kwargs):
        return record_operation(func, (self,) + args, kwargs)

    method.__name__ = func.__name__
    method.__doc__ = f"Same as ``{qualified_name(func)}(x, ...)``."
    return method


for _name, _func in ARRAY_METHODS:
    setattr(Tracked, _name, _method(_func))
Tracked.conj = Tracked.conjugate = lambda self: record_operation(np.conjugate, (self,), {}) \
    if _is_complex(self.value) else self


# --- totals whose value may go unread: computed when first read ----------------------------------
class Pending(Tracked):
    """A tracked total (`np.sum` of a whole array, a `db.sum`) of a gradient whose value is computed when it is
    first read, so that a gradient that never reads it never computes it: ``db.gradient(lambda x:
    np.sum(x**2), x)`` needs ``2x``, not the sum (issue 18's dead values, in the eager tape).

    Its record is an ordinary one (the pullbacks of a total never read its value).  Any read of ``value`` computes
    it (`settle_total`) and makes the object a plain `Tracked` in place; so does every entry into the library
    (NumPy's protocols and the operators, which NumPy and Python hand to the subclass first, methods, attributes,
    `pytree.flatten`, hence `db.sum`, `db.cut`, nested gradients).  Only `gradient`'s tape makes them
    (`lazy_totals`; `value_and_gradient` returns the value, so computes it as it goes).  A read after the gradient
    returned (a value kept from inside ``f``) is a clear error, since what it was computed from may have changed.
    """

    __slots__ = ()
    value = property(lambda self: settle_total(self).value)


class Total:
    """What a `Pending` holds in place of its value: ``compute()`` gives it, of ``dtype``, while ``tape`` is open."""

    __slots__ = ("compute", "dtype", "tape")

    def __init__(self, compute, dtype, tape):
        self.compute, self.dtype, self.tape = compute, dtype, tape


_VALUE = Tracked.value  # the slot Pending's property hides: Tracked.value.__get__(t) reads it as stored


def settle_total(t, after_close=False):
    """``t`` with its value computed: a `Pending` becomes a plain `Tracked` in place (anything else is returned
    as it is).  ``after_close``: the gradient's own result, read by `value_and_gradient` once ``f`` returned."""
    if type(t) is Pending:
        total = _VALUE.__get__(t)
        if total.tape.closed and not after_close:
            raise StaleValueError(
                "the value of a sum computed inside a differentiated function was read after the gradient "
                "returned; db.gradient leaves a sum it does not need uncomputed. Return it with "
                "db.value_and_gradient, or store db.cut(s) inside the function"
            )
        _VALUE.__set__(t, total.compute())
        t.__class__ = Tracked
    return t


def drop_total(t):
    """Release what the `Pending` ``t`` would be computed from (`gradient`'s result, once ``f`` returned: no read
    may compute it any more): a sum of squares frees its squares before the sweep allocates the gradient, which
    then reuses their memory, still in cache (benchmarks: sum(x**2) of 1e5 float32, ~5 us less)."""
    _VALUE.__get__(t).compute = None


def lazy_totals(tape, size):
    """Whether a total over ``size`` elements recorded on ``tape`` may be left `Pending`: a tape of `gradient`
    (``unread``: swept once, its result's value dropped; not nested, not recorded for a prepared program), no
    complex value, and a total that costs more than leaving it pending (about a microsecond when read after all).
    Not while another gradient or a `db.jvp` runs inside it: their values would hold a pending one."""
    return size >= LAZY_TOTAL and tape.unread and not tape.level and tape.recorder is None and not tape.complex \
        and not tape.closed and ACTIVE_TAPE.get() is tape and not JVP_DEPTH.get()


LAZY_TOTAL = 1 << 14  # elements: np.sum of 16384 float64 takes ~4 us
TOTALS = {}  # function -> its rule, whose pullbacks read no result and whose total of a float array has its dtype
# (np.sum's, declared in rules/reductions.py; one a user registers again is not in it)


def _settle_all(x):
    """`settle_total` on every `Pending` in ``x`` and in the lists, tuples and dicts it holds."""
    kind = type(x)
    if kind is Pending:
        settle_total(x)
    elif kind is list or kind is tuple:
        for a in x:
            _settle_all(a)
    elif kind is dict:
        for a in x.values():
            _settle_all(a)


def _settling(name):
    """Pending's ``name``: its arguments' (and its own) totals computed, then `Tracked`'s ``name``."""
    attribute = getattr(Tracked, name)
    if isinstance(attribute, property):
        return property(lambda self: attribute.__get__(settle_total(self)))

    def method(self, *args, **kwargs):
        settle_total(self)
        _settle_all(args)
        _settle_all(kwargs)
        return attribute(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in {name for cls in (Tracked, Guarded) for name, a in vars(cls).items()
              if (callable(a) or isinstance(a, property)) and name not in ("__init__", "__init_subclass__",
                                                                          "__subclasshook__", "__new__")}:
    setattr(Pending, _name, _settling(_name))
# A total is one number: its dtype and sizes are known before its value.
Pending.dtype = property(lambda self: _VALUE.__get__(self).dtype)
Pending.shape, Pending.ndim, Pending.size = (), 0, 1
TRACKED = frozenset((Tracked, Pending))  # the types of tracked values: a `Pending` is one until it is computed
Pending.__repr__ = lambda self: "Tracked(<a sum the gradient did not compute>)" if self.tape.closed \
    else repr(settle_total(self))
pytree.SETTLE[Pending] = settle_total
pytree.leaf_type(Tracked)

# (forward.Dual, forward.apply_function), set by forward.py, which imports this module.
FORWARD = [None, None]


def primitive(f: Callable[..., Any]) -> Callable[..., Any]:
    """Make a user function a primitive: tracked arguments are recorded with its rule.

    Register the rule with `defvjp` on the decorated function, or its partial derivatives with
    `db.defderivative` (an elementwise function): inside a db.sum/db.broadcast kernel it is then one
    operation, else its body is traced there like the rest of the kernel.
    """
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        for a in args:  # a loop, not any(...): no generator per call (a plain call 0.7 -> 0.3 us)
            kind = type(a)
            if kind is Tracked or kind is Pending:
                return record_operation(wrapper, args, kwargs)
            if kind is Sym:
                return a.graph.primitive(wrapper, f, args, kwargs)
            if kind is FORWARD[0]:  # a dual value of db.jvp: forward mode finds the tangent from the rule
                return FORWARD[1](wrapper, args, kwargs)
        return f(*args, **kwargs)

    wrapper.__wrapped_primitive__ = f
    return wrapper
