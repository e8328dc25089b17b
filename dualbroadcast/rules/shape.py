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
"""

import numpy as np

from ..errors import UnsupportedFunctionError
from ..numpy_facts import astype, getitem
from ..pullbacks import IndexPullback, unbroadcast
from ..registry import RULES, defvjp, defvjp_outputs, defvjp_sequence


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
    shape, order = np.shape(x), _index_order(x, order)
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


def _frozen(index):
    """``index`` with its arrays and lists copied: user code may change them after indexing."""
    if type(index) is tuple:
        if any(isinstance(p, (np.ndarray, list)) for p in index):
            return tuple(np.array(p) if isinstance(p, (np.ndarray, list)) else p for p in index)
        return index
    return np.array(index) if isinstance(index, (np.ndarray, list)) else index


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
    RULES[getitem].keeps_arguments = False  # getitem_vjp copies an index array it keeps (`_frozen`)
    defvjp(astype, lambda ans, x, dtype, order="K", casting="unsafe", subok=True, copy=True: _cast_back(x))
    defvjp(np.copy, lambda ans, a, order="K", subok=False: lambda g: g)
    defvjp(np.full_like, full_like_template_vjp, full_like_vjp)


_register()
