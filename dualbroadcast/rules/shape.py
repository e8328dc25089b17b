"""Reverse rules of the shape and indexing functions.

Each pullback is the inverse rearrangement applied to the cotangent ``g``:
reshape it back, transpose it by the inverse permutation, roll it back, sum the
copies that tile/repeat/broadcast_to made, cut out the slice of ``g`` that came
from one part of a concatenation or stack.

Where the result is a piece of the argument (indexing, ``np.take``, the parts of
``np.split``, ``np.diagonal``) the pullback returns an `IndexPullback`: the
sweep adds ``g`` at that index into the argument's one gradient buffer, so no
dense zero array is built per operation.  Closures keep only shapes, dtypes and
indices, never the arrays.

A function that only moves, copies or drops elements (``np.insert``, ``np.delete``,
``np.resize``, ``np.take_along_axis``) is applied to x's flat positions (`_positions`):
its result says where each element came from, and g is summed there (``np.pad`` too,
but in its mode mean and odd reflections, which pull back through one matrix per
axis, NumPy's padding of the identity, and median, see `_pad_medians`).

Convention: ``np.pad`` in the modes maximum and minimum gives a padded element's
cotangent to one element of its stretch, the last of equal maxima and the first of
equal minima (pinned in ``tests/rules/test_shape_rules.py``); median to the one or two
middle elements of the stretch sorted by value, then by position.

``np.atleast_1d`` (several arrays: a tuple of results), ``np.broadcast_arrays``, ``np.meshgrid``,
``np.select`` and ``np.block`` (tracked arrays inside lists) are compositions: NumPy calls on the
arguments, each recorded with its own rule (reshapes, ``np.broadcast_to``, nested ``np.where``,
``np.concatenate`` s).

``np.piecewise`` (its functions see the tracked slices ``x[cond]``), ``np.choose``, ``np.compress``,
``np.extract``, ``np.trim_zeros``, ``np.apply_along_axis`` and ``np.apply_over_axes`` are compositions
too: ``np.where``, ``np.select``, ``np.take``, a slice, the user's function on tracked slices.

Calls the tape cannot record are errors naming what to write instead: ``np.put_along_axis``,
``np.put``, ``np.place`` and ``np.fill_diagonal`` write in place.
"""

import numpy as np

from .. import pullbacks
from ..errors import InPlaceMutationError, UnsupportedFunctionError
from ..numpy_facts import astype, getitem
from ..pullbacks import Gather, IndexPullback, as_array, plain, unbroadcast
from ..registry import (
    RULES,
    defcomposition,
    defjvp,
    deflinear,
    defvjp,
    defvjp_outputs,
    defvjp_sequence,
    holds_for_complex,
)
from ..tracked import primitive


# --- helpers ------------------------------------------------------------------
def _along(axis, index):
    """The index that applies ``index`` to ``axis`` and keeps every axis before it whole."""
    return (slice(None),) * axis + (index,)


def _padded(shape, ndim):
    """``shape`` with leading 1s up to ``ndim`` axes (how tile, hstack and vstack promote)."""
    return (1,) * (ndim - len(shape)) + tuple(shape)


def _into(x, index, repeats=False):
    """Pullback of ``x[index]``: ``g`` added at ``index`` of x's gradient buffer."""
    return IndexPullback(index, x.shape, x.dtype, repeats)


def _into_flat(x, positions):
    """Pullback of ``x.ravel()[positions]``: ``g`` added at those positions of x."""
    shape, dtype = np.shape(x), x.dtype
    if not shape:  # every position of a 0-d x is its one element
        return lambda g: np.sum(g, dtype=dtype)
    return _into(x, np.unravel_index(positions, shape), repeats=np.ndim(positions) > 0)


def _positions(x):
    """x's flat positions in x's shape: a function that only moves, copies or drops elements, applied to
    them, tells where each element of its result comes from (``np.resize(_positions(x), s)``)."""
    return np.arange(np.size(x)).reshape(np.shape(x))


def _into_labelled(x, labels, weights=None):
    """Pullback of a result whose element at i is ``x.flat[labels[i]]`` (times ``weights[i]``), or not from x
    where ``labels[i] < 0``: g (times the weights) summed into the positions its elements came from."""
    taken = labels >= 0
    shape, dtype = np.shape(x), x.dtype
    if weights is None:
        def transform(g):
            return g[taken]
    else:
        weights = weights[taken]

        def transform(g):
            return g[taken] * weights
    if not shape:
        return lambda g: np.sum(transform(g), dtype=dtype)
    return IndexPullback(np.unravel_index(labels[taken], shape), shape, dtype, repeats=True, transform=transform)


def _checked_first(func, check):
    """``func``'s rule runs ``check(*args, **kwargs)`` before NumPy: it raises a clear error for a call the
    tape cannot differentiate (a tuple of results of several arrays, an array written in place)."""
    rule = RULES[func]
    implementation = rule.impl

    def checked(*args, **kwargs):
        check(*args, **kwargs)
        return implementation(*args, **kwargs)

    rule.impl = rule.plain = checked


def _may_repeat(index):
    """Whether ``index`` holds integer arrays or lists, whose positions may repeat."""
    parts = index if type(index) is tuple else (index,)
    return any(
        isinstance(p, (list, np.ndarray)) and np.asarray(p).dtype.kind in "iu" for p in parts
    )


def _index_order(x, order):
    """The index order, 'C' or 'F', in which reshape/ravel with ``order`` read ``x``."""
    if order == "K" and not (x.flags.c_contiguous or x.flags.f_contiguous):
        raise UnsupportedFunctionError(
            "ravel/reshape with order='K' of a non-contiguous array has no derivative rule; "
            "use order='C' or order='F'"
        )
    return "F" if order == "F" or (order in ("A", "K") and np.isfortran(x)) else "C"


def _regroup_back(x, order="C"):
    """Pullback of a function that only regroups x's elements in ``order``: reshape g back."""
    shape = np.shape(x)
    order = _index_order(plain(x), order) if order in ("A", "K") else order  # its memory layout: of the plain value
    return lambda g: np.reshape(g, shape, order=order)


def _cast_back(x):
    """Pullback of a change of dtype: ``g`` cast back to x's dtype."""
    dtype = x.dtype
    return lambda g: g.astype(dtype, copy=False)


def full_like_template_vjp(ans, a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """``np.full_like(a, v)`` reads only a's shape and dtype: a's cotangent is zero."""
    return lambda g: np.zeros(np.shape(a), a.dtype)


def full_like_vjp(ans, a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """∂ full_like(a, v) / ∂v = 1 at every element: v's cotangent is g summed back to v's shape."""
    value_shape = np.shape(fill_value)
    return lambda g: unbroadcast(g, value_shape)


def _part(k, widths, axis, x):
    """Pullback of part k of a concatenation along ``axis`` of parts ``widths`` wide.

    Its cotangent is its slice of ``g``, in x's own shape and dtype.
    """
    start = sum(widths[:k])
    index = _along(axis, slice(start, start + widths[k]))
    shape, dtype = np.shape(x), x.dtype
    return lambda g: g[index].reshape(shape).astype(dtype, copy=False)


# --- regrouping and permuting axes ------------------------------------------------
def reshape_vjp(ans, a, /, shape=None, order="C", *, newshape=None, copy=None):
    """``newshape=``: NumPy 2.1 to 2.3's name of ``shape``."""
    return _regroup_back(a, order)


def ravel_vjp(ans, a, order="C"):
    return _regroup_back(a, order)


def expand_dims_vjp(ans, a, axis):
    return _regroup_back(a)


def squeeze_vjp(ans, a, axis=None):
    return _regroup_back(a)


def transpose_vjp(ans, a, axes=None):
    if axes is None:
        return lambda g: np.transpose(g)
    inverse = np.argsort(np.mod(np.atleast_1d(axes), np.ndim(a)))  # x.transpose(0) gives one int
    return lambda g: np.transpose(g, inverse)


def swapaxes_vjp(ans, a, axis1, axis2):
    return lambda g: np.swapaxes(g, axis1, axis2)


def moveaxis_vjp(ans, a, source, destination):
    return lambda g: np.moveaxis(g, destination, source)


def broadcast_to_vjp(ans, array, shape, subok=False):
    x_shape = np.shape(array)
    return lambda g: unbroadcast(g, x_shape)


# --- joining and splitting -------------------------------------------------------
# A part's cotangent is cast back to its dtype, so ``dtype=`` and ``casting=`` change no derivative.
def concatenate_vjp(k, ans, arrays, /, axis=0, out=None, *, dtype=None, casting="same_kind"):
    if axis is None:  # the parts are raveled first
        return _part(k, [np.size(a) for a in arrays], 0, arrays[k])
    axis = axis % np.ndim(ans)
    return _part(k, [np.shape(a)[axis] for a in arrays], axis, arrays[k])


def hstack_vjp(k, ans, tup, *, dtype=None, casting="same_kind"):
    shapes = [_padded(np.shape(a), 1) for a in tup]  # np.atleast_1d
    axis = 0 if len(shapes[0]) == 1 else 1
    return _part(k, [s[axis] for s in shapes], axis, tup[k])


def vstack_vjp(k, ans, tup, *, dtype=None, casting="same_kind"):
    shapes = [_padded(np.shape(a), 2) for a in tup]  # np.atleast_2d
    return _part(k, [s[0] for s in shapes], 0, tup[k])


def stack_vjp(k, ans, arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    index = _along(axis % np.ndim(ans), k)
    dtype = arrays[k].dtype
    if dtype == ans.dtype:
        return Gather(index)  # a class: a Hessian's sweep of all rows at once gathers them in one call
    return lambda g: g[index].astype(dtype, copy=False)


def split_vjp(j, ans, ary, indices_or_sections, axis=0):
    axis = axis % np.ndim(ary)
    start = sum(np.shape(part)[axis] for part in ans[:j])
    return _into(ary, _along(axis, slice(start, start + np.shape(ans[j])[axis])))


# --- copies: g summed over them ------------------------------------------------------
def tile_vjp(ans, A, reps):  # A: NumPy's name for it
    """Split each axis of g into (copy, element) and sum over the copies."""
    ndim, shape = np.ndim(ans), np.shape(A)
    copies = _padded(np.atleast_1d(reps), ndim)
    grouped = [n for pair in zip(copies, _padded(shape, ndim)) for n in pair]
    copy_axes = tuple(range(0, 2 * ndim, 2))
    return lambda g: np.sum(np.reshape(g, grouped), axis=copy_axes).reshape(shape)


def repeat_vjp(ans, a, repeats, axis=None):
    """Each element's cotangent is the sum of g over its copies."""
    shape = np.shape(a)
    if not shape:  # NumPy repeats a 0-d value as a 1-d one, whatever the axis
        axis = None
    if np.ndim(repeats) == 0:  # consecutive runs of equal length: reshape and sum
        flat = (np.size(a),) if axis is None else shape
        axis = 0 if axis is None else axis % len(shape)
        grouped = flat[: axis + 1] + (int(repeats),) + flat[axis + 1 :]
        return lambda g: np.sum(np.reshape(g, grouped), axis=axis + 1).reshape(shape)
    if axis is None:
        return _into_flat(a, np.repeat(np.arange(np.size(a)), repeats))
    axis = axis % len(shape)
    return _into(a, _along(axis, np.repeat(np.arange(shape[axis]), repeats)), repeats=True)


# --- reordering elements --------------------------------------------------------------
def flip_vjp(ans, m, axis=None):
    return lambda g: np.flip(g, axis)


def roll_vjp(ans, a, shift, axis=None):
    back = np.negative(shift)
    return lambda g: np.roll(g, back, axis)


# --- diagonals and triangles ----------------------------------------------------------
def diagonal_vjp(ans, a, offset=0, axis1=0, axis2=1):
    """g added along that diagonal of x, through an index that never repeats.

    NumPy puts the diagonal axis last; ``x[index]`` has it where the two index arrays
    stand when they are adjacent, and first otherwise, so g's last axis is moved there.
    """
    ndim = np.ndim(a)
    axis1, axis2 = axis1 % ndim, axis2 % ndim
    n = np.shape(ans)[-1]
    index = [slice(None)] * ndim
    index[axis1] = np.arange(n) + max(-offset, 0)
    index[axis2] = np.arange(n) + max(offset, 0)
    index = tuple(index)
    position = min(axis1, axis2) if abs(axis1 - axis2) == 1 else 0
    shape, dtype = np.shape(a), a.dtype
    return IndexPullback(index, shape, dtype, transform=lambda g: np.moveaxis(g, -1, position))


def diag_vjp(ans, v, k=0):
    if np.ndim(v) == 1:  # v placed on diagonal k of a matrix
        return lambda g: np.diagonal(g, k).copy()
    return diagonal_vjp(ans, v, k)


def triu_vjp(ans, m, k=0):
    """g's upper triangle; a 1-D m was stacked into rows by NumPy, so each element gets its column's sum."""
    if np.ndim(m) == 1:
        return lambda g: np.sum(np.triu(g, k), axis=0)
    return lambda g: np.triu(g, k)


def tril_vjp(ans, m, k=0):
    """g's lower triangle; for a 1-D m, each column's sum (see `triu_vjp`)."""
    if np.ndim(m) == 1:
        return lambda g: np.sum(np.tril(g, k), axis=0)
    return lambda g: np.tril(g, k)


def diagflat_vjp(ans, v, k=0):
    """v raveled onto diagonal k: that diagonal of g in v's shape."""
    shape = np.shape(v)
    return lambda g: np.diagonal(g, k).reshape(shape)


# --- promotions, rotations and permutations -------------------------------------------------------------
def rot90_vjp(ans, m, k=1, axes=(0, 1)):
    """Rotating back: np.rot90(g, -k, axes)."""
    return lambda g: np.rot90(g, -k, axes)


def rollaxis_vjp(ans, a, axis, start=0):
    """The inverse of the permutation np.rollaxis makes, read off an empty array whose axis i has length i."""
    permutation = np.shape(np.rollaxis(np.empty(tuple(range(np.ndim(a)))), axis, start))
    return lambda g: np.transpose(g, np.argsort(permutation))


def permute_dims_vjp(ans, a, axes=None):
    """np.permute_dims is np.transpose."""
    return transpose_vjp(ans, a, axes)


# --- more joining and splitting ---------------------------------------------------------------------------
def column_stack_vjp(k, ans, tup):
    """Part k's columns: a 0-d or 1-d part is one column, others are joined along axis 1."""
    return _part(k, [np.shape(a)[1] if np.ndim(a) > 1 else 1 for a in tup], 1, tup[k])


def dstack_vjp(k, ans, tup):
    """Part k's slice along axis 2 (np.atleast_3d puts a 0-d, 1-d or 2-d part's one slice there)."""
    return _part(k, [np.shape(a)[2] if np.ndim(a) > 2 else 1 for a in tup], 2, tup[k])


def append_vjp(k):
    """np.append(arr, values, axis) is np.concatenate((arr, values), axis), raveled first for axis None."""
    def maker(ans, arr, values, axis=None):
        parts = (arr, values)
        if axis is None:
            return _part(k, [np.size(p) for p in parts], 0, parts[k])
        axis = axis % np.ndim(ans)
        return _part(k, [np.shape(p)[axis] for p in parts], axis, parts[k])
    return maker


def unstack_vjp(j, ans, x, /, *, axis=0):
    """Output j is x's slice j along axis."""
    return _into(x, _along(axis % np.ndim(x), j))


def array_split_vjp(j, ans, ary, indices_or_sections, axis=0):
    return split_vjp(j, ans, ary, indices_or_sections, axis)


def hsplit_vjp(j, ans, ary, indices_or_sections):
    """np.hsplit splits along axis 1, or 0 for a 1-d ary."""
    return split_vjp(j, ans, ary, indices_or_sections, 1 if np.ndim(ary) > 1 else 0)


def vsplit_vjp(j, ans, ary, indices_or_sections):
    return split_vjp(j, ans, ary, indices_or_sections, 0)


def dsplit_vjp(j, ans, ary, indices_or_sections):
    return split_vjp(j, ans, ary, indices_or_sections, 2)


# --- elements moved, copied or dropped: where each came from is the function applied to `_positions` -----
def insert_arr_vjp(ans, arr, obj, values, axis=None):
    """arr's elements, wherever np.insert moved them."""
    return _into_labelled(arr, _inserted(arr, obj, values, axis))


def insert_values_vjp(ans, arr, obj, values, axis=None):
    """The inserted copies of values (broadcast, so a value may be inserted several times), summed back."""
    labels = -1 - _inserted(arr, obj, values, axis)
    return _into_labelled(values, labels)


def _inserted(arr, obj, values, axis):
    """np.insert applied to arr's flat positions and values' positions numbered -1, -2, ...:
    where each element of the result comes from."""
    return np.insert(_positions(arr), obj, -1 - _positions(values), axis)


def delete_vjp(ans, arr, obj, axis=None):
    """The elements np.delete keeps, each from one position of arr."""
    return _into_flat(arr, np.delete(_positions(arr), obj, axis))


def resize_vjp(ans, a, new_shape):
    """np.resize repeats a's elements cyclically: each gets g summed over its copies (none for an empty a)."""
    if np.size(a) == 0:
        shape, dtype = np.shape(a), a.dtype
        return lambda g: np.zeros(shape, dtype)
    return _into_flat(a, np.resize(_positions(a), new_shape))


def take_along_axis_vjp(ans, arr, indices, axis=-1):
    """g added at the positions np.take_along_axis read (repeats summed)."""
    return _into_flat(arr, np.take_along_axis(_positions(arr), indices, axis))


def _put_along_axis(arr, indices, values, axis):
    raise InPlaceMutationError(
        "np.put_along_axis writes into its first argument in place, which would drop the gradient; build the "
        "new array instead: np.where(mask, np.take_along_axis(np.broadcast_to(values, indices.shape), source, "
        "axis), arr), where the constants mask and source are np.put_along_axis of True and of "
        "np.indices(indices.shape)[axis] (each index's position) into np.zeros(arr.shape, bool) and "
        "np.zeros(arr.shape, int)"
    )


# --- padding ------------------------------------------------------------------------------------------------
# Most modes copy elements of x into the padding: np.pad of x's flat positions says which (constant_values
# -1 marks the constants).  linear_ramp scales the edge's copies: by np.pad of ones in that mode (end_values
# only add a constant).  The others are linear in x too: np.pad pads one axis after another, each fibre along
# it by the same map, so pad(x) is x with each axis i multiplied by Mᵢ = np.pad(np.eye(nᵢ), widths along
# axis 0) and the pullback contracts g with each Mᵢ (nᵢ² numbers: for the axes of images, not of signals).
_COPYING_PADS = ("constant", "edge", "reflect", "symmetric", "wrap")
_LINEAR_PADS = ("mean", "reflect", "symmetric")  # reflect_type="odd": 2 x_edge - x_mirror


def pad_vjp(ans, array, pad_width, mode="constant", *, stat_length=None, constant_values=0, end_values=0,
            reflect_type="even"):
    """g summed into the elements each padded element copies, or x̄ = g with each axis i contracted with Mᵢ."""
    if mode in ("maximum", "minimum"):  # the positions selected: plain values (a second derivative records none)
        return _into_flat(array, _pad_selection(plain(array), pad_width, mode, stat_length))
    if mode == "median":
        steps, dtype = _pad_medians(ans, plain(array), pad_width, stat_length), array.dtype

        def pullback(g):
            for shape, first, second in reversed(steps):
                half, size = g.ravel() / 2, int(np.prod(shape))
                g = (np.bincount(first.ravel(), half, size) + np.bincount(second.ravel(), half, size)).reshape(shape)
            return g.astype(dtype, copy=False)

        return pullback
    if mode in _COPYING_PADS and reflect_type != "odd":
        marks = {"constant_values": -1} if mode == "constant" else {}
        return _into_labelled(array, np.pad(_positions(array), pad_width, mode, **marks))
    if mode == "linear_ramp":
        ramps = np.pad(np.ones(np.shape(array), array.dtype), pad_width, mode)  # the edge's share, 1 inside
        return _into_labelled(array, np.pad(_positions(array), pad_width, "edge"), ramps)
    if callable(mode) or mode not in _LINEAR_PADS:
        modes = sorted({*_COPYING_PADS, *_LINEAR_PADS, "linear_ramp", "maximum", "minimum", "median"})
        raise UnsupportedFunctionError(
            f"np.pad with mode={mode!r} has no derivative rule (the modes with one: {', '.join(modes)}); pad "
            "with one of those, or build the padding with np.concatenate of the pieces you need"
        )
    ndim, dtype = np.ndim(array), array.dtype
    widths = _pad_widths(pad_width, ndim)
    lengths = _pad_widths(stat_length, ndim) if stat_length is not None else None
    keywords = {"mean": lambda i: {"stat_length": None if lengths is None else tuple(lengths[i])},
                "reflect": lambda i: {"reflect_type": reflect_type},
                "symmetric": lambda i: {"reflect_type": reflect_type}}[mode]
    matrices = [np.pad(np.eye(n, dtype=dtype), (tuple(widths[i]), (0, 0)), mode, **keywords(i))
                for i, n in enumerate(np.shape(array))]

    def pullback(g):
        for i, m in enumerate(matrices):
            g = np.moveaxis(np.tensordot(g, m, axes=([i], [0])), -1, i)
        return as_array(g, dtype)

    return pullback


def pad_with_tracked_constants(array, pad_width, mode="constant", **kwargs):
    """np.pad with a tracked ``constant_values``: x padded with zeros, and where NumPy writes constant k of
    (axis, side) (read off np.pad of the labels 2·axis + side), constant k taken from the values
    broadcast to (ndim, 2) as NumPy does; a later axis's constants take the corners, as in NumPy."""
    ndim = np.ndim(array)
    labels = np.arange(2 * ndim).reshape(ndim, 2)
    where = np.pad(np.full(np.shape(array), -1), pad_width, mode, **{**kwargs, "constant_values": labels})
    if not np.any(where >= 0):  # nothing padded (a 0-d array, widths 0): the constants are not used
        return np.pad(array, pad_width)
    values = np.reshape(np.broadcast_to(kwargs["constant_values"], (ndim, 2)), -1)
    constants = np.astype(np.take(values, np.maximum(where, 0)), np.result_type(array))
    return np.where(where >= 0, constants, np.pad(array, pad_width))


def _pad_selection(array, pad_width, mode, stat_length):
    """The flat position in x of each element of the result, the element the maxima (minima) chose: np.pad of x
    with its flat positions as imaginary parts chooses the same ones (NumPy orders complex numbers by their
    real parts first) and says which, the last of equal values for maximum, the first for minimum."""
    positions = _positions(array)
    chosen = np.pad(array + 1j * positions, pad_width, mode, stat_length=stat_length).imag
    return np.rint(chosen).astype(np.intp)


def _pad_medians(ans, array, pad_width, stat_length):
    """np.pad pads one axis after another; along one axis a padded element is the median of a stretch of its
    fibre, one element pₐ of it or the mean of two, pₐ and p_b.  np.pad of the array with its positions p as
    imaginary parts gives their mean m = (pₐ + p_b)/2, with p² the mean of their squares q, so
    pₐ, p_b = m ∓ sqrt(q - m²) (one position twice for one element), each weighing a half: one step
    ``(shape before, pₐ, p_b)`` per axis (``pₐ`` and ``p_b`` shaped as the result of the step)."""
    if np.size(ans) > 2**26:  # positions squared must be exact floats
        raise UnsupportedFunctionError("np.pad with mode='median' to more than 2**26 elements has no derivative "
                                       "rule; pad with mode='mean' or build the padding with np.concatenate")
    steps, padded = [], array
    for axis, width in enumerate(_pad_widths(pad_width, np.ndim(array))):
        widths = [(0, 0)] * np.ndim(array)
        widths[axis] = tuple(width)
        positions = _positions(padded).astype(float)
        mean = np.pad(padded + 1j * positions, widths, "median", stat_length=stat_length).imag
        square = np.pad(padded + 1j * positions**2, widths, "median", stat_length=stat_length).imag
        spread = np.sqrt(np.maximum(square - mean**2, 0))
        steps.append((np.shape(padded), np.rint(mean - spread).astype(np.intp), np.rint(mean + spread).astype(np.intp)))
        padded = np.pad(padded, widths, "median", stat_length=stat_length)
    return steps


def _pad_widths(pad_width, ndim):
    """(before, after) for each axis from np.pad's forms (of pad_width, stat_length): n, (n,), (b, a),
    ((b, a), ...), {axis: n or (b, a)}."""
    if not isinstance(pad_width, dict):
        return np.broadcast_to(np.asarray(pad_width), (ndim, 2))
    widths = np.zeros((ndim, 2), dtype=int)
    for axis, width in pad_width.items():
        widths[axis] = width
    return widths


# --- writing in place: errors naming the functional spelling -------------------------------------------------
def _in_place(message):
    def refuse(*args, **kwargs):
        raise InPlaceMutationError(message)

    return refuse


_PUT = ("np.put writes into its first argument in place, which would drop the gradient; build the new array "
        "instead: new = np.where(mask, np.take(v, source, mode='wrap'), a), where the constants mask and source are "
        "np.put of True and of np.arange(len(ind)) into np.zeros(a.shape, bool) and np.zeros(a.shape, int)")
_PLACE = ("np.place writes into its first argument in place, which would drop the gradient; build the new array "
          "instead: new = np.where(mask, np.take(vals, np.cumsum(mask).reshape(mask.shape) - 1, mode='wrap'), arr)")
_FILL_DIAGONAL = ("np.fill_diagonal writes into its first argument in place, which would drop the gradient; build "
                  "the new array instead: new = np.where(mask, val, a), where the constant mask is np.fill_diagonal "
                  "of True into np.zeros(a.shape, bool)")

_COPYTO = ("np.copyto writes into dst in place, which would drop the gradient (np.full_like(a, v) of a constant a "
           "and a tracked v calls it); build the new array instead: new = np.where(where, src, dst) "
           "(np.zeros_like(a) + v for np.full_like(a, v))")


# --- compositions: NumPy calls the tape records one by one (`registry.defcomposition`) ----------------
def piecewise_written(x, condlist, funclist, *args, **kw):
    """np.piecewise as nested np.where, a later condition over an earlier one (NumPy's order): a function
    piece is applied to x[cond] (a tracked slice) and its values are laid back where cond holds."""
    n2 = len(funclist)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray)) and np.ndim(x) != 0):
        condlist = [condlist]
    condlist = np.asarray(condlist, dtype=bool)  # conditions are truth values: plain, never tracked
    if len(condlist) == n2 - 1:  # the last piece holds where no condition does
        condlist = np.concatenate([condlist, ~np.any(condlist, axis=0, keepdims=True)], axis=0)
    elif len(condlist) != n2:
        raise ValueError(f"with {len(condlist)} condition(s), either {len(condlist)} or {len(condlist) + 1} "
                         "functions are expected")
    y = np.zeros(np.shape(x), x.dtype)
    for cond, func in zip(condlist, funclist):
        if not callable(func):
            y = np.where(cond, np.astype(func, x.dtype) if hasattr(func, "dtype") else func, y)
            continue
        values = func(x[cond], *args, **kw)
        if np.size(values) == 0:
            continue
        spread = np.reshape(values, -1)[np.maximum(np.cumsum(cond) - 1, 0).reshape(np.shape(cond))]
        y = np.where(cond, np.astype(spread, x.dtype), y)
    return y


def choose_written(a, choices, out=None, mode="raise"):
    """np.choose as np.select of ``index == k`` (the index after ``mode``, and NumPy's range check, from
    np.choose of the plain integers a over 0..n-1)."""
    if out is not None:
        raise UnsupportedFunctionError("np.choose with out= writes in place; drop out= and use the result")
    if np.result_type(a).kind not in "biu":
        raise TypeError(f"np.choose's index array must hold integers, not {np.result_type(a)}")
    n = len(choices)
    index = np.choose(a, np.arange(n), mode=mode)
    return np.select([index == k for k in range(n)], [choices[k] for k in range(n)])


def compress_written(condition, a, axis=None, out=None):
    """np.compress as np.take of the positions where ``condition`` holds."""
    if out is not None:
        raise UnsupportedFunctionError("np.compress with out= writes in place; drop out= and use the result")
    return np.take(a, np.flatnonzero(condition), axis=axis)


def extract_written(condition, arr):
    """np.extract as np.take of the flat positions where ``condition`` holds."""
    return np.take(np.ravel(arr), np.flatnonzero(np.ravel(condition)))


def trim_zeros_written(filt, trim="fb", axis=None):
    """np.trim_zeros as the slice it keeps, read off np.trim_zeros of ``filt != 0`` trimmed in front only and
    in full."""
    nonzero = np.asarray(filt != 0)
    kept = np.shape(np.trim_zeros(nonzero, trim, axis))
    front = np.shape(np.trim_zeros(nonzero, "f", axis)) if "f" in trim.lower() else np.shape(nonzero)
    return filt[tuple(slice(n - f, n - f + k) for n, f, k in zip(np.shape(nonzero), front, kept))]


def apply_along_axis_written(func1d, axis, arr, *args, **kwargs):
    """np.apply_along_axis as ``func1d`` of each 1-d slice along ``axis``, its results stacked where NumPy
    lays them (arr's axes before ``axis``, the result's axes, then the others)."""
    ndim = np.ndim(arr)
    axis = np.lib.array_utils.normalize_axis_index(axis, ndim)
    moved = np.moveaxis(arr, axis, -1)
    outer = np.shape(moved)[:-1]
    if 0 in outer:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    results = [func1d(moved[i], *args, **kwargs) for i in np.ndindex(outer)]
    inner = np.ndim(results[0])
    laid = np.reshape(np.stack(results), outer + np.shape(results[0]))
    return np.moveaxis(laid, tuple(range(ndim - 1, ndim - 1 + inner)), tuple(range(axis, axis + inner)))


def apply_over_axes_written(func, a, axes):
    """np.apply_over_axes: ``func(a, axis)`` for each axis in turn, an axis it drops put back (NumPy's loop)."""
    value = a
    for axis in (axes,) if np.ndim(axes) == 0 else axes:
        axis = axis + np.ndim(a) if axis < 0 else axis
        result = func(value, axis)
        if np.ndim(result) != np.ndim(value):
            result = np.expand_dims(result, axis)
            if np.ndim(result) != np.ndim(value):
                raise ValueError("function is not returning an array of the correct shape")
        value = result
    return value


# --- indexing ----------------------------------------------------------------------------
def take_vjp(ans, a, indices, axis=None, out=None, mode="raise"):
    n = np.size(a) if axis is None else np.shape(a)[axis]
    positions = np.clip(indices, 0, n - 1) if mode == "clip" else np.mod(indices, n)
    if axis is None:
        return _into_flat(a, positions)
    return _into(a, _along(axis % np.ndim(a), positions), repeats=np.ndim(positions) > 0)


_BASIC_INDEX = (int, slice, type(None), type(Ellipsis))


def getitem_vjp(ans, x, index):
    for part in index if type(index) is tuple else (index,):
        if type(part) not in _BASIC_INDEX:
            return _into(x, _frozen(index), repeats=_may_repeat(index))
    return _into(x, index)  # basic indexing: a view, no repeats, nothing to copy


def scatter_vjp(ans, g, index, shape, dtype, repeats=False):
    """ḡ of ``scatter(g, index)`` (the pullback of ``x[index]``, recorded by a gradient of a gradient): the
    gather ``h[index]``."""
    return Gather(index)


def _frozen(index):
    """``index`` with its arrays and lists copied: user code may change them after indexing."""
    if type(index) is tuple:
        if any(isinstance(p, (np.ndarray, list)) for p in index):
            return tuple(np.array(p) if isinstance(p, (np.ndarray, list)) else p for p in index)
        return index
    return np.array(index) if isinstance(index, (np.ndarray, list)) else index


def atleast_written(func):
    """``func`` (np.atleast_1d/2d/3d) as the reshape that adds its axes of length 1, one result per array."""

    def written(*arys):
        shapes = [np.shape(func(np.broadcast_to(False, np.shape(a)))) for a in arys]  # NumPy's promotion
        results = [np.reshape(a, shape) for a, shape in zip(arys, shapes)]
        return results[0] if len(results) == 1 else tuple(results)

    return written


def select_written(condlist, choicelist, default=0):
    """np.select as nested np.where, the first condition outermost: the first true condition chooses."""
    if len(condlist) != len(choicelist):  # NumPy's errors, as it words them
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    if any(np.result_type(c).kind != "b" for c in condlist):
        raise TypeError("invalid entry 0 in condlist: should be boolean ndarray")
    result = default
    for condition, choice in zip(reversed(condlist), reversed(choicelist)):
        result = np.where(condition, choice, result)
    return result


def block_written(arrays):
    """np.block as np.concatenate of its nested lists, the innermost along the last axis, each block first
    given the result's number of axes (leading 1s), as NumPy does (which also checks the layout here)."""
    ndim = np.ndim(np.block(_nested(arrays, lambda a: np.broadcast_to(False, np.shape(a)))))

    def joined(item, depth):
        if type(item) is list:
            return np.concatenate([joined(part, depth - 1) for part in item], axis=-depth)
        return np.reshape(item, (1,) * (ndim - np.ndim(item)) + np.shape(item))

    return joined(arrays, _depth(arrays))


def broadcast_arrays_written(*args, subok=False):
    """np.broadcast_arrays as np.broadcast_to of each array to the shape they broadcast to."""
    shape = np.broadcast_shapes(*map(np.shape, args))
    return tuple(np.broadcast_to(a, shape) for a in args)


def meshgrid_written(*xi, copy=True, sparse=False, indexing="xy"):
    """np.meshgrid as each vector reshaped along its axis of the grid (NumPy's sparse layout, read off a
    meshgrid of index vectors), then broadcast to the whole grid unless ``sparse``."""
    axes = np.meshgrid(*(np.arange(np.size(x)) for x in xi), sparse=True, indexing=indexing)
    grids = [np.reshape(x, np.shape(a)) for x, a in zip(xi, axes)]
    if sparse:
        return tuple(grids)
    shape = np.broadcast_shapes(*map(np.shape, axes))
    return tuple(np.broadcast_to(g, shape) for g in grids)


def _nested(item, f):
    """``item``'s nested lists with ``f`` applied to each element."""
    return [_nested(part, f) for part in item] if type(item) is list else f(item)


def _depth(item):
    """How many lists deep ``item``'s first element sits (np.block has checked they all do)."""
    return 1 + _depth(item[0]) if type(item) is list else 0


def _register():
    defvjp(np.reshape, reshape_vjp)
    defvjp(np.ravel, ravel_vjp)
    defvjp(np.expand_dims, expand_dims_vjp)
    defvjp(np.squeeze, squeeze_vjp)
    defvjp(np.transpose, transpose_vjp)
    defvjp(np.swapaxes, swapaxes_vjp)
    defvjp(np.moveaxis, moveaxis_vjp)
    defvjp(np.broadcast_to, broadcast_to_vjp)
    defvjp_sequence(np.concatenate, concatenate_vjp)
    defvjp_sequence(np.hstack, hstack_vjp)
    defvjp_sequence(np.vstack, vstack_vjp)
    defvjp_sequence(np.stack, stack_vjp)
    defvjp_outputs(np.split, split_vjp)
    defvjp(np.tile, tile_vjp)
    defvjp(np.repeat, repeat_vjp)
    defvjp(np.flip, flip_vjp)
    defvjp(np.roll, roll_vjp)
    defvjp(np.diagonal, diagonal_vjp)
    defvjp(np.diag, diag_vjp)
    defvjp(np.triu, triu_vjp)
    defvjp(np.tril, tril_vjp)
    defvjp(np.take, take_vjp)
    defvjp(getitem, getitem_vjp)
    pullbacks.SCATTER_RECORDED = primitive(pullbacks.scatter)
    defvjp(pullbacks.SCATTER_RECORDED, scatter_vjp, None, None, None, None)
    holds_for_complex(pullbacks.SCATTER_RECORDED)  # linear: its transpose is the gather, for complex g too
    RULES[getitem].keeps_arguments = False  # getitem_vjp copies an index array it keeps (`_frozen`)
    defvjp(astype, lambda ans, x, dtype, order="K", casting="unsafe", subok=True, copy=True: _cast_back(x))
    defvjp(np.copy, lambda ans, a, order="K", subok=False: lambda g: g)
    defvjp(np.full_like, full_like_template_vjp, full_like_vjp)
    for func in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
        defcomposition(func, atleast_written(func))
    defvjp(np.fliplr, lambda ans, m: np.fliplr)
    defvjp(np.flipud, lambda ans, m: np.flipud)
    defvjp(np.rot90, rot90_vjp)
    defvjp(np.rollaxis, rollaxis_vjp)
    defvjp(np.permute_dims, permute_dims_vjp)
    defvjp(np.matrix_transpose, lambda ans, x, /: np.matrix_transpose)
    defvjp(np.astype, lambda ans, x, dtype, /, *, copy=True, device=None: _cast_back(x))
    defvjp_sequence(np.concat, concatenate_vjp)
    defvjp_sequence(np.column_stack, column_stack_vjp)
    defvjp_sequence(np.dstack, dstack_vjp)
    defcomposition(np.block, block_written)
    defvjp(np.append, append_vjp(0), append_vjp(1))
    defvjp(np.insert, insert_arr_vjp, None, insert_values_vjp)
    defvjp(np.delete, delete_vjp)
    defvjp(np.resize, resize_vjp)
    defvjp(np.take_along_axis, take_along_axis_vjp)
    defvjp(np.put_along_axis, None, None, None)
    _checked_first(np.put_along_axis, _put_along_axis)
    for func, message in ((np.put, _PUT), (np.place, _PLACE), (np.fill_diagonal, _FILL_DIAGONAL),
                          (np.copyto, _COPYTO)):
        defvjp(func, None, None, None)
        _checked_first(func, _in_place(message))
    defvjp_outputs(np.unstack, unstack_vjp)
    defvjp_outputs(np.array_split, array_split_vjp)
    defvjp_outputs(np.hsplit, hsplit_vjp)
    defvjp_outputs(np.vsplit, vsplit_vjp)
    defvjp_outputs(np.dsplit, dsplit_vjp)
    defvjp(np.diagflat, diagflat_vjp)
    defvjp(np.pad, pad_vjp)
    RULES[np.pad].tracked_keywords = pad_with_tracked_constants
    defcomposition(np.select, select_written)
    defcomposition(np.broadcast_arrays, broadcast_arrays_written)
    defcomposition(np.meshgrid, meshgrid_written)
    defcomposition(np.piecewise, piecewise_written)
    defcomposition(np.choose, choose_written)
    defcomposition(np.compress, compress_written)
    defcomposition(np.extract, extract_written)
    defcomposition(np.trim_zeros, trim_zeros_written)
    defcomposition(np.apply_along_axis, apply_along_axis_written)
    defcomposition(np.apply_over_axes, apply_over_axes_written)


_register()


# Forward mode: each of these is linear in its array arguments, so its tangent is itself applied to the tangents.
deflinear(np.reshape, np.ravel, np.expand_dims, np.squeeze, np.transpose, np.swapaxes, np.moveaxis, np.broadcast_to,
          np.concatenate, np.hstack, np.vstack, np.stack, np.split, np.tile, np.repeat, np.flip, np.roll, np.diagonal,
          np.diag, np.triu, np.tril, np.take, getitem, astype, np.copy, np.fliplr, np.flipud, np.rot90, np.rollaxis,
          np.permute_dims, np.matrix_transpose, np.astype, np.concat, np.column_stack, np.dstack, np.append,
          np.insert, np.delete, np.resize, np.take_along_axis, np.unstack, np.array_split, np.hsplit, np.vsplit,
          np.dsplit, np.diagflat, np.full_like)
# Complex values (JAX's convention, rules/complex.py): functions that move, copy or add elements (coefficients 0
# and 1) hold as they are.  Named one by one, not by family: a shape rule choosing elements by their order
# (np.pad's maximum mode) does not.
holds_for_complex(
    np.reshape, np.ravel, np.expand_dims, np.squeeze, np.transpose, np.swapaxes, np.moveaxis, np.broadcast_to,
    np.concatenate, np.hstack, np.vstack, np.stack, np.split, np.tile, np.repeat, np.flip, np.roll,
    np.diagonal, np.diag, np.triu, np.tril, np.take, getitem, astype, np.copy, np.full_like,
    np.fliplr, np.flipud, np.rot90, np.rollaxis, np.matrix_transpose, np.astype, np.column_stack, np.dstack,
    np.append, np.insert, np.delete, np.resize, np.take_along_axis, np.unstack, np.array_split, np.hsplit,
    np.vsplit, np.dsplit, np.diagflat,
)


def pad_jvp(tangents, ans, array, pad_width, mode="constant", *, stat_length=None, constant_values=0, end_values=0,
            reflect_type="even"):
    """ṫ padded the same way: every mode but the selections is linear in the array, its constants entering as 0;
    maximum and minimum take ṫ at the elements they chose, median the mean of ṫ at its one or two (axis by axis)."""
    if mode in ("maximum", "minimum"):
        return np.reshape(tangents[0], -1)[_pad_selection(plain(array), pad_width, mode, stat_length)]
    if mode == "median":
        t = tangents[0]
        for _, first, second in _pad_medians(ans, plain(array), pad_width, stat_length):
            flat = np.reshape(t, -1)
            t = (flat[first] + flat[second]) / 2
        return t
    if callable(mode):
        raise UnsupportedFunctionError(
            "np.pad with a function as its mode has no forward-mode rule; use db.gradient or db.pullback, or pad "
            "with one of NumPy's modes")
    keywords = {"constant": {"constant_values": 0}, "linear_ramp": {"end_values": 0},
                "mean": {"stat_length": stat_length}, "reflect": {"reflect_type": reflect_type},
                "symmetric": {"reflect_type": reflect_type}}.get(mode, {})
    return np.pad(tangents[0], pad_width, mode, **keywords)


defjvp(np.pad, pad_jvp)
