"""The tape of one gradient evaluation: `Tape`, a Wengert list of records (its format in `Tape`) whose inputs and
results are `tracked.Tracked` values, the constants its pullbacks read kept read-only until `thaw`, and Python's
garbage collector paused while a long tape grows or is swept (`GarbageCollectionPaused`).  What records an
operation is `tracked`; what sweeps the records back is `sweeps`."""

import gc
import threading

import numpy as np

from .tracked import LONG_TAPE, VALUE_SLOT, Tracked, new_tracked


class Tape:
    """A Wengert list: ``records[i]`` is ``(edges, operation)``, one edge ``(parent index, pullback)`` per
    tracked argument; None for an input; the bare operation for a scalar product of views, whose
    cotangent its views' bases read (see ``view_products``).  Outside the sweep, read it through
    `operation`, `edges` and `view_product_partials`.

    ``single_sweep``: the tape will be swept once (``gradient``), so a pullback may
    reuse a buffer it owns for its cotangent instead of allocating a new one.
    ``recorder``: the prepared-gradient recorder this tape is recorded by, if any
    (`record_binary` and `Tracked.__getitem__` then leave its operations to `record_operation`, which asks it).
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
    the cotangents ``grads[record] * partial`` of scalar products of views (`record_binary`),
    added into the base's buffer when the sweep reaches it (`add_view_products`).
    """

    __slots__ = ("records", "closed", "single_sweep", "collector_pause", "recorder", "inputs", "view_bases",
                 "view_products", "kept", "complex", "level", "unread", "element_pullbacks", "__weakref__")

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
        self.element_pullbacks = {}  # (parent index, int index) -> its `IndexPullback`, shared (`tracked._element`)

    # --- the record format, read by explain and replay through these (the sweep reads it inline) ---
    def operation(self, i):
        """What made value ``i``: None for an input, else the function (or `kernel_cache.KernelCall`) recorded."""
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
            t = new_tracked(Tracked)  # as in `record`: no __init__ frame per float of a tuple
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
        # Tracked(ans, self, index) without its __init__ frame, once per operation (here, in `leaves`, `record_binary`
        # and `Tracked.__getitem__`): benchmarks.ab measured foldminus 7% and slices B 3% faster so.
        if kind is None:
            t = new_tracked(Tracked)
            t.value = ans
        else:  # (a `Pending`'s value slot is hidden by its property)
            t = new_tracked(kind)
            VALUE_SLOT.__set__(t, ans)
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
