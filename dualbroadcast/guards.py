"""What a tracked value does when code reads it as a plain value: a clear error, or a guard.

Converting a tracked value to a Python number, a bool, an index, a plain array or a list, or
measuring its shape, would drop its gradient or bake a value into the computation.  In
`db.gradient` each is an error saying what to write instead (a truth value and a size are read
as they are: Python control flow works; an integer conversion is a constant).  While a prepared
gradient is recorded, a conversion of a value that needs no gradient is a *guard*
(`prepared.Recorder.guard`): its result is checked on every replay, which records again where it
differs.
"""

import contextvars
import functools
import operator
import weakref

import numpy as np

from .callers import scipy_message
from .errors import InPlaceMutationError, ValueConversionError

# The recorder of a prepared gradient being recorded (prepared.Recorder), if any.
RECORDER = contextvars.ContextVar("dualbroadcast_recorder", default=None)

_CONVERSION = (
    "{what} on a tracked value would drop its gradient. Use np.* functions on the array "
    "(np.exp, not math.exp), or db.cut(x) to read the value without its gradient."
)

_TO_ARRAY = (
    "a tracked value (shape {shape}) was turned into a plain NumPy array, which would drop its "
    "gradient: this happens with np.asarray/np.array, np.float64(x), np.r_/np.c_, assignment into a NumPy array "
    "(a[i] = x) and code outside NumPy. Build arrays with NumPy functions instead: np.stack([x, y]) "
    "for np.array([x, y]), np.concatenate([x, y]) (np.hstack([x, y]) with 0-d pieces) for np.r_[x, y], "
    "np.column_stack([x, y]) for np.c_[x, y], np.where(mask, v, a) for a[mask] = v, "
    "np.broadcast_to(v, shape) for np.full(shape, v); the mirrors in "
    "dualbroadcast.scipy for scipy.special.logsumexp/softmax, scipy.stats, scipy.signal, scipy.integrate; or use "
    "db.cut(x) for the value without its gradient."
)


UFUNC_AT = ("{name} mutates an array in place and would drop its gradient; build the result functionally "
            "(np.where, np.bincount on a constant index)")


class NotReplayableError(ValueConversionError):
    """A prepared gradient's recording turned a traced argument into a plain array (np.vectorize, np.asarray):
    a replay could not see its new values, so `prepare_gradient` leaves that call signature to `gradient`."""


def _recorder_of(x):
    """The recorder of the prepared gradient being recorded, for a conversion of ``x``; None for a value of a
    gradient taken inside the recorded function (its value, traced by the recording, answers instead)."""
    recorder = RECORDER.get()
    if recorder is not None and x.tape.level > recorder.tape.level:
        return None
    return recorder


class Guarded:
    """The conversions of `tracked.Tracked` (its ``value`` and tape ``index``): errors, or a recorder's guards."""

    __slots__ = ()

    def __array__(self, dtype=None, copy=None):
        if dtype is not None and np.dtype(dtype).kind in "iub":  # np.int64(x), np.asarray(x, int)
            return self._integer(functools.partial(np.asarray, dtype=dtype))
        recorder = _recorder_of(self)
        if recorder is not None and self.index in recorder.inactive:
            raise NotReplayableError("a traced argument without a gradient was turned into a plain array")
        shape = np.shape(self.value)
        raise ValueConversionError(scipy_message(shape) or _TO_ARRAY.format(shape=shape))

    def __float__(self):
        return self._constant(float, "float() or a math.* function")

    def __int__(self):
        return self._integer(int)

    def _integer(self, convert):
        """An integer conversion (``int(x)``, ``np.int64(x)``): a constant, as ``x.astype(int)`` and ``np.trunc(x)``
        are (their derivative is 0 wherever it exists; JAX's ``int(x)`` too).  While a prepared gradient is
        recorded, a guard (a scalar's) or, for an array, left to `db.gradient` (its replay would bake it in)."""
        recorder = _recorder_of(self) if hasattr(self, "tape") else None  # a jvp's dual: its value answers
        if recorder is None:
            return convert(self.value)
        if np.ndim(untracked(self)) == 0:
            return recorder.guard(self, convert)
        raise NotReplayableError("a traced array was converted to integers (np.asarray(x, int)); write x.astype(int)")

    def _constant(self, convert, what):
        """A conversion is allowed only while recording a prepared gradient, of a value with no
        gradient: it becomes a guard, checked on every replay."""
        recorder = _recorder_of(self)
        if recorder is not None and self.index in recorder.inactive:
            return recorder.guard(self, convert)
        raise ValueConversionError(_CONVERSION.format(what=what))

    def __complex__(self):
        raise ValueConversionError(_CONVERSION.format(what="complex()"))

    def __round__(self, ndigits=None):
        raise ValueConversionError(_CONVERSION.format(what="round()") + " For a rounded array, use np.round(x).")

    def __format__(self, spec):
        """Formats the value (f"{x:.3f}"): printing reads it and drops no gradient."""
        return format(self.value, spec)

    def __index__(self):
        return self._constant(operator.index, "using it as an index")

    def item(self, *args):
        raise ValueConversionError(_CONVERSION.format(what=".item()"))

    def tolist(self):
        raise ValueConversionError(_CONVERSION.format(what=".tolist()"))

    def __setitem__(self, index, value):
        _write_without_gradient(self)
        raise InPlaceMutationError(
            "x[...] = v would mutate a tracked array in place and drop its gradient; build the "
            "new array instead: np.where(mask, v, x), np.concatenate, or x + np.eye(...) * v"
        )

    # ndarray methods and attributes whose NumPy function takes other arguments
    def clip(self, min=None, max=None, out=None, **kwargs):
        """``x.clip(0)``: ndarray's, one bound alone allowed (``np.clip(x, 0)`` is NumPy's TypeError)."""
        if out is not None:
            kwargs["out"] = out
        return np.clip(self, min, max, **kwargs)

    def compress(self, condition, axis=None, out=None):
        return np.compress(condition, self, axis) if out is None else np.compress(condition, self, axis, out)

    def __divmod__(self, other):
        return np.divmod(self, other)

    def __rdivmod__(self, other):
        return np.divmod(other, self)

    mT = property(lambda self: np.matrix_transpose(self))
    flat = property(lambda self: np.ravel(self), doc="``np.ravel(x)``: read by index or iterated, never written")

    def _sorts_in_place(self, *args, **kwargs):
        raise InPlaceMutationError("x.sort() sorts x in place, which would drop its gradient; write x = np.sort(x)")

    def _partitions_in_place(self, *args, **kwargs):
        raise InPlaceMutationError("x.partition(k) reorders x in place, which would drop its gradient; write "
                                   "x = np.partition(x, k)")

    def _writes_in_place(self, *args, **kwargs):
        raise InPlaceMutationError("x.fill, x.put, x.resize, x.setfield and x.byteswap(True) write into x in place, "
                                   "which would drop its gradient; build the new array instead: np.full_like(x, v) "
                                   "(np.zeros_like(x) + v of a tracked v), np.where, np.resize(x, shape)")

    sort = _sorts_in_place
    partition = _partitions_in_place
    fill = put = resize = setfield = _writes_in_place

    def byteswap(self, inplace=False):
        if inplace:
            self._writes_in_place()
        raise ValueConversionError(_CONVERSION.format(what=".byteswap()"))

    # y += x: NumPy writes into y's memory, a tracked value is rebound to the new value (`_update`)
    def __iadd__(self, other):
        return _update(self, other, operator.add, "+=")

    def __isub__(self, other):
        return _update(self, other, operator.sub, "-=")

    def __imul__(self, other):
        return _update(self, other, operator.mul, "*=")

    def __itruediv__(self, other):
        return _update(self, other, operator.truediv, "/=")

    def __ifloordiv__(self, other):
        return _update(self, other, operator.floordiv, "//=")

    def __imod__(self, other):
        return _update(self, other, operator.mod, "%=")

    def __ipow__(self, other):
        return _update(self, other, operator.pow, "**=")

    def __imatmul__(self, other):
        return _update(self, other, operator.matmul, "@=")

    def __bool__(self):
        if RECORDER.get() is None:  # the common case first: no call of `_recorder_of`
            return bool(self.value)
        recorder = _recorder_of(self)
        return bool(self.value) if recorder is None else recorder.guard(self, bool)

    # Sizes: read as they are, but guarded while a prepared gradient is recorded (see `_size`).
    shape = property(lambda self: self._size(np.shape))
    dtype = property(lambda self: self.value.dtype)
    ndim = property(lambda self: self._size(np.ndim))
    size = property(lambda self: self._size(np.size))

    def __len__(self):
        return self._size(len)

    def __iter__(self):
        return (self[i] for i in range(self._size(len)))

    def _size(self, measure):
        """``measure(value)`` (its shape, size, length): while a prepared gradient is recorded, a guard,
        since a size can depend on data (``d[d > 0]``) and the replay must not reuse a stale one."""
        if RECORDER.get() is None:
            return measure(self.value)
        recorder = _recorder_of(self)
        return measure(self.value) if recorder is None else recorder.guard(self, measure)


_VIEW_UPDATE = (
    "y {symbol} v on a tracked y that is a slice of another array (y = x[i]), or views memory a slice of it shares, "
    "would write through into that array in NumPy, which a tracked value cannot do: its gradient and the other "
    "array's value would be silently wrong. Build the new array instead: y = y {op} v for y alone, or "
    "x = np.where(mask, ..., x) / np.concatenate for the array it views."
)

_STALE_READ = (
    "this array was changed in place by y {symbol} v on a view y of it (np.reshape, x.T, x.ravel(), np.split, "
    "...): in NumPy that write goes through into it, which a tracked value cannot follow, so it cannot be read "
    "after the update (nor can any other view of the same array). Read y, which holds the new values, or update "
    "the array itself: x = x {op} np.reshape(v, x.shape) (with y = np.reshape(x, shape) after it)."
)


def _update(y, v, op, symbol):
    """``y op= v``: the new value ``y op v`` (JAX's ``y = y op v``) where that is NumPy's result, which
    writes in place: ``y``'s shape and dtype (cast as NumPy's ``same_kind``).  For a ``y`` whose memory
    another array shares (``np.reshape(x, s)``, ``x.T``), which NumPy would change too, that array and its
    other views become unreadable (`_make_unreadable`); a slice ``x[i]``, whose siblings are not known
    (`_sharing`), is an error."""
    views = _views_another(y)
    if views:
        _write_without_gradient(y)
        sharing = _sharing(y)
        if sharing is None:
            raise InPlaceMutationError(_VIEW_UPDATE.format(symbol=symbol, op=symbol[:-1]))
    new = op(y, v)
    old, value = untracked(y), untracked(new)
    if np.shape(value) != np.shape(old):
        raise ValueError(f"non-broadcastable output operand with shape {np.shape(old)} doesn't match the "
                         f"broadcast shape {np.shape(value)} (y {symbol} v keeps y's shape)")
    dtype, new_dtype = np.result_type(old), np.result_type(value)
    if new_dtype != dtype:
        if not np.can_cast(new_dtype, dtype, "same_kind"):
            raise TypeError(f"y {symbol} v cannot cast its {new_dtype} result to y's dtype {dtype} with casting "
                            "rule 'same_kind', as NumPy; write y = y " + symbol[:-1] + " v for a new array")
        new = new.astype(dtype)
    if views:
        _make_unreadable(sharing, _STALE_READ.format(symbol=symbol, op=symbol[:-1]))
    return new


# --- values sharing memory: which tracked values view one array ----------------------------------------------
# id(the array owning the memory) -> (a weak reference to it, {id(value): (weak reference to a tracked or dual
# value whose array is it or a view of it, whether that value is a slice x[i])}), filled where a NumPy function
# returns a view of a tracked argument (`note_views`), dropped when that array is freed.
_VIEWS = {}


def _memory_owner(a):
    """The array whose memory the array ``a`` views (``a`` itself if it owns it)."""
    while type(a.base) is np.ndarray:
        a = a.base
    return a


def note_views(inputs, results, sliced=False):
    """Remember the tracked (or dual) ``inputs`` whose memory the ``results`` of one NumPy function view
    (np.reshape(x, s), x.T, np.split; ``sliced``: x[i]), so that ``y op= v`` on one of them can make the others
    unreadable.  Called where a result's array is a view (or the argument's array itself)."""
    for result in results:
        a = untracked(result)
        if type(a) is not np.ndarray or not isinstance(result, Guarded):
            continue
        owner = _memory_owner(a)
        same = [x for x in inputs if isinstance(x, Guarded) and type(b := untracked(x)) is np.ndarray
                and _memory_owner(b) is owner]
        if not same:
            continue
        key = id(owner)
        entry = _VIEWS.get(key)
        if entry is None:
            entry = _VIEWS[key] = (weakref.ref(owner, functools.partial(_forget, key)), {})
        values = entry[1]
        if len(values) > 64:  # the values of earlier evaluations of a long-lived array: forgotten once freed
            for k in [k for k, (ref, _) in values.items() if ref() is None]:
                del values[k]
        for x in same:
            if values.get(id(x), (lambda: None,))[0]() is not x:  # new, or a freed value's id reused
                values[id(x)] = (weakref.ref(x), False)
        values[id(result)] = (weakref.ref(result), sliced)


def holds_view(result):
    """Whether ``result`` (a value, tracked or dual, or a tuple of them) is or holds a view of another array."""
    if type(result) in (tuple, list):
        return any(map(holds_view, result))
    a = untracked(result)
    return type(a) is np.ndarray and a.base is not None


def _forget(key, _ref):
    _VIEWS.pop(key, None)


def _sharing(y):
    """The tracked values of ``y``'s evaluation whose elements may be ``y``'s (``y`` among them; ``y`` alone for
    a view of a NumPy temporary: np.roll, x[:, [0, 2]]), or None where a slice ``x[i]`` of that memory is alive:
    NumPy would change a slice's elements alone, and a slice is not recorded in a gradient
    (`tape.Tracked.slice_index`: it costs a loop nothing), so slices are not known there: refused in every
    mode alike."""
    a = untracked(y)
    entry = _VIEWS.get(id(_memory_owner(a)))
    values = [y]
    for ref, sliced in list(entry[1].values()) if entry is not None else ():
        x = ref()
        if x is not None and sliced:
            return None
        if x is not None and x is not y:
            values.append(x)
    for x in values:
        while isinstance(x, Guarded):
            if getattr(x, "slice_index", None) is not None:
                return None
            index = getattr(x, "index", None)
            if index is not None and index in x.tape.view_bases:
                return None
            x = x.value
    return [x for x in values if _same_level(x, y) and np.may_share_memory(untracked(x), a)]  # np.split's others: no


def _same_level(x, y):
    """Whether ``x`` is a value of the same evaluation as ``y`` (its tape, or its `db.jvp` call): the values of
    outer ones inside them may be held by a pullback that read them before the update, and must stay readable."""
    return type(x) is type(y) and getattr(x, "tape", None) is getattr(y, "tape", None) \
        and getattr(x, "level", None) == getattr(y, "level", None)


def _refuse(self, *args, **kwargs):
    raise InPlaceMutationError(object.__getattribute__(self, "value"))


_UNREADABLE = {}  # class -> its unreadable subclass (`_unreadable_class`)
_KEPT_METHODS = {"__init__", "__new__", "__init_subclass__", "__subclasshook__", "__getattribute__", "__repr__",
                 "__class__", "__slots__", "__doc__", "__module__", "__qualname__", "__weakref__"}


def _unreadable_class(cls):
    """A subclass of ``cls`` (same slots) whose every method and attribute raises the message kept in its
    ``value`` slot: what a value of ``cls`` becomes once NumPy would have changed it through a view."""
    unreadable = _UNREADABLE.get(cls)
    if unreadable is None:
        names = {name for c in cls.__mro__ if c is not object for name, attr in vars(c).items()
                 if callable(attr) and name not in _KEPT_METHODS}
        namespace = dict.fromkeys(names | {"__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__"}, _refuse)
        namespace.update(
            __slots__=(),
            __getattribute__=lambda self, name: type(self) if name == "__class__" else _refuse(self),
            __repr__=lambda self: f"<unreadable {cls.__name__}: {object.__getattribute__(self, 'value')}>",
        )
        unreadable = _UNREADABLE[cls] = type(f"Unreadable{cls.__name__}", (cls,), namespace)
    return unreadable


def _make_unreadable(values, message):
    """Every one of ``values`` (tracked or dual, sharing memory NumPy changed in place) raises ``message`` when
    read from now on: its class swapped, not a flag every operation would have to test."""
    for x in values:
        cls = type(x)
        if cls in _UNREADABLE.values():
            continue
        x.value = message
        x.__class__ = _unreadable_class(cls)


def _write_without_gradient(x):
    """A write into a value a prepared program's recording traces without a gradient (computed from cut
    arguments alone): plain NumPy in `db.gradient`, which a replay cannot repeat: the recording is left to it."""
    if x.index is not None and RECORDER.get() is not None:
        recorder = _recorder_of(x)
        if recorder is not None and x.index in recorder.inactive:
            raise NotReplayableError("a value computed from cut arguments alone was written in place")


def untracked(x):
    """``x``'s value untracked by any gradient, to read its shape or dtype (never to choose elements:
    `pullbacks.plain`)."""
    while isinstance(x, Guarded):
        x = x.value
    return x


def _views_another(x):
    """Whether ``x``'s memory is another array's too (a slice, ``x.T``, ``x.reshape``): not asked of an
    argument of f, whose caller's array f's result does not see."""
    while isinstance(x, Guarded):
        if getattr(x, "slice_index", None) is not None:  # a slice of a tracked value (`tracked.Tracked`)
            return True
        index = getattr(x, "index", None)
        if index is not None and x.tape.records[index] is None:  # an input of its tape
            return False
        x = x.value
    return isinstance(x, np.ndarray) and x.base is not None
