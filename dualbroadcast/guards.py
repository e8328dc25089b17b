"""What a tracked value does when code reads it as a plain value: a clear error, or a guard.

Converting a tracked value to a Python number, a bool, an index, a plain array or a list, or
measuring its shape, would drop its gradient or bake a value into the computation.  In
`db.gradient` each is an error saying what to write instead (a truth value and a size are read
as they are: Python control flow works).  While a prepared gradient is recorded, a conversion
of a value that needs no gradient is a *guard* (`prepared.Recorder.guard`): its result is
checked on every replay, which records again where it differs.
"""

import contextvars
import operator

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
    "gradient: this happens with np.asarray/np.array, np.r_/np.c_, assignment into a NumPy array "
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
        recorder = _recorder_of(self)
        if recorder is not None and self.index in recorder.inactive:
            raise NotReplayableError("a traced argument without a gradient was turned into a plain array")
        shape = np.shape(self.value)
        raise ValueConversionError(scipy_message(shape) or _TO_ARRAY.format(shape=shape))

    def __float__(self):
        return self._constant(float, "float() or a math.* function")

    def __int__(self):
        return self._constant(int, "int()")

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
    "y {symbol} v on a tracked y that is a view of another array (a slice y = x[i], x.T, x.reshape, x.ravel(), "
    "...) would write through into that array in NumPy, which a tracked value cannot do: its gradient and "
    "the other array's value would be silently wrong. Build the new array instead: y = y {op} v for the view "
    "alone, or x = np.where(mask, ..., x) / np.concatenate for the array it views."
)


def _update(y, v, op, symbol):
    """``y op= v``: the new value ``y op v`` (JAX's ``y = y op v``) where that is NumPy's result, which
    writes in place: ``y``'s shape and dtype (cast as NumPy's ``same_kind``), and an error for a ``y``
    whose memory another array shares (a slice, ``x.T``): NumPy would change that array too."""
    if _views_another(y):
        _write_without_gradient(y)
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
    return new


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
