"""Reverse and forward rules of the order statistics: sort, partition, median, percentile, quantile (and their nan
versions); and the functions written with a sort: np.unique (and the array-API unique functions), the set
operations, sort_complex.

The order statistics pull back through the sorting permutation: each slice
along the reduced axes is laid out as one row (`as_rows`), sorted, the
cotangent placed at sorted positions, shared among ties, and unsorted.

Their conventions (sort, median, percentile, quantile, partition, np.unique and the set operations) are
listed with the reductions' in `rules/reductions.py`, each pinned by tests/rules/test_conventions.py.
"""

import math
import warnings

import numpy as np

from ..errors import UnsupportedFunctionError
from ..guards import Guarded
from ..pullbacks import as_array
from ..registry import defcomposition, defjvp, defvjp
from .reductions import reduced_axes


# --- sort, partition: permutations ------------------------------------------------
def as_rows(x, axes):
    """``x`` with ``axes`` moved last and merged into one: shape (kept..., n)."""
    x = as_array(x)
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    kept = moved.shape[: x.ndim - len(axes)]
    return moved.reshape(kept + (math.prod(moved.shape[len(kept) :]),))


def from_rows(rows, shape, axes):
    """An array of ``shape`` from its `as_rows` layout over ``axes``."""
    moved = tuple(n for i, n in enumerate(shape) if i not in axes) + tuple(shape[a] for a in axes)
    return np.moveaxis(rows.reshape(moved), range(len(shape) - len(axes), len(shape)), axes)


def sorted_rows(rows):
    """The stable sorting permutation of each row and the sorted rows."""
    order = np.argsort(rows, axis=-1, kind="stable")
    return order, np.take_along_axis(rows, order, axis=-1)


def unsort(g, order):
    """x̄ with x̄[order[k]] = ḡ[k] along the last axis: the transpose of taking ``order``, a take of ḡ at the
    inverse permutation (a gather, so a tracked ḡ stays recorded).  The inverse is a scatter of positions, or
    where a prepared program traces ``order`` (`db.prepare_hvp`), which records no scatter, its argsort."""
    if isinstance(order, Guarded):
        return np.take_along_axis(g, np.argsort(order, axis=-1), axis=-1)
    inverse = np.empty_like(order)
    np.put_along_axis(inverse, order, np.broadcast_to(np.arange(order.shape[-1]), order.shape), axis=-1)
    return np.take_along_axis(g, inverse, axis=-1)


def tie_group_mean(s, g):
    """``g`` averaged over each run of equal values of the sorted rows ``s`` (tied elements share)."""
    starts = np.ones(s.shape, bool)
    starts[..., 1:] = s[..., 1:] != s[..., :-1]  # NaN != NaN: NaNs never tie
    if starts.all():
        return g
    first = np.flatnonzero(starts)
    sizes = np.diff(first, append=starts.size)
    means = (np.add.reduceat(g.ravel(), first) / sizes).astype(g.dtype, copy=False)
    return np.repeat(means, sizes).reshape(g.shape)


def sort_axes(a, axis):
    """The array a sort along ``axis`` sees (flattened for None) and its sorted axes."""
    return (np.ravel(a), (0,)) if axis is None else (a, reduced_axes(axis, np.ndim(a)))


# --- unique values and set operations: compositions that take each value from one element of x --------
def _distinct(ar, equal_nan):
    """The sorted distinct values of ``ar``, each the first of its equal elements in ``ar`` (a tracked
    selection), and labels: each element's rank among them (plain integers of ar's shape), on which NumPy's
    own np.unique gives every other result."""
    flat = np.ravel(ar)
    order = np.argsort(flat, kind="stable")
    s = flat[order]
    new = np.asarray(s[1:] != s[:-1])
    if equal_nan:
        new &= ~(np.isnan(s[1:]) & np.isnan(s[:-1]))
    first = np.concatenate(([True], new))[:len(order)]
    labels = np.empty(len(order), np.intp)
    labels[order] = np.cumsum(first) - 1
    return s[first], labels.reshape(np.shape(ar))


def unique_written(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
                   sorted=True):
    """np.unique: the distinct values (each from its first occurrence), the other results NumPy's of the labels."""
    if axis is not None:
        raise UnsupportedFunctionError(
            "np.unique(..., axis=...) of a tracked array (unique rows) has no derivative rule; take the rows' "
            "indices from np.unique(db.cut(x), axis=..., return_index=True) and index x with them")
    distinct, labels = _distinct(ar, equal_nan)
    result = np.unique(labels, return_index, return_inverse, return_counts, equal_nan=equal_nan, sorted=sorted)
    if isinstance(result, tuple):
        return (distinct[result[0]], *result[1:])
    return distinct[result]


def unique_array_api(func):
    """np.unique_values/_counts/_inverse/_all (NaNs distinct): np.unique's results, sorted (NumPy leaves their
    order unspecified), in ``func``'s named tuple."""

    def written(x):
        distinct, labels = _distinct(x, equal_nan=False)
        found = np.unique(labels, return_index=True, return_inverse=True, return_counts=True, equal_nan=False)
        values, indices, inverse, counts = distinct[found[0]], *found[1:]
        if func is np.unique_values:
            return values
        fields = {"values": values, "indices": indices, "inverse_indices": inverse, "counts": counts}
        result = func(labels[:0].reshape(-1))  # an empty call: the named tuple's type
        return type(result)(**{name: fields[name] for name in result._fields})

    return written


def union1d_written(ar1, ar2):
    """The distinct values of both, ar1's element for a value in both."""
    return np.unique(np.concatenate((np.ravel(ar1), np.ravel(ar2))))


def setdiff1d_written(ar1, ar2, assume_unique=False):
    """The distinct values of ar1 not in ar2 (ar2's gradient is zero)."""
    values = np.ravel(ar1) if assume_unique else np.unique(ar1)
    return values[np.isin(values, ar2, invert=True)]


def setxor1d_written(ar1, ar2, assume_unique=False):
    """The values in exactly one of the two, sorted (no ties among them)."""
    if not assume_unique:
        ar1, ar2 = np.unique(ar1), np.unique(ar2)
    values = np.sort(np.concatenate((np.ravel(ar1), np.ravel(ar2))))
    if np.size(values) == 0:
        return values
    flag = np.concatenate(([True], np.asarray(values[1:] != values[:-1]), [True]))
    return values[flag[1:] & flag[:-1]]


def intersect1d_written(ar1, ar2, assume_unique=False, return_indices=False):
    """The values in both, half from each array's first occurrence (equal values: a tie, split as ties are)."""
    flat1, flat2 = np.ravel(ar1), np.ravel(ar2)
    _, labels = _distinct(np.concatenate((flat1, flat2)), equal_nan=False)  # NaN is in no intersection
    n = np.size(flat1)
    _, i1, i2 = np.intersect1d(labels[:n], labels[n:], assume_unique, return_indices=True)
    values = (flat1[i1] + flat2[i2]) / 2
    return (values, i1, i2) if return_indices else values


def sort_complex_written(a):
    """np.sort_complex as a composition: complex values taken in np.argsort's (lexicographic) order, real ones
    sorted by np.sort (tied values share) and cast to the complex dtype NumPy gives."""
    if np.iscomplexobj(a):
        return np.take_along_axis(a, np.argsort(a, axis=-1), -1)
    return np.astype(np.sort(a), np.sort_complex(np.zeros(0, np.result_type(a))).dtype)


def sort_vjp(ans, a, axis=-1, kind=None, order=None, *, stable=None):
    """x̄ᵢ = ḡ at the position xᵢ is sorted to, averaged over the positions of the elements tied with xᵢ."""
    shape = np.shape(a)
    x, axes = sort_axes(a, axis)
    permutation, s = sorted_rows(as_rows(x, axes))
    return lambda g: from_rows(unsort(tie_group_mean(s, as_rows(g, axes)), permutation), x.shape, axes).reshape(shape)


def partition_vjp(ans, a, kth, axis=-1, kind="introselect", order=None):
    """x̄ᵢ = ḡ at the position np.argpartition puts xᵢ."""
    shape = np.shape(a)
    x, axes = sort_axes(a, axis)
    rows = as_rows(x, axes)
    at = np.argpartition(rows, kth, axis=-1, kind=kind)
    if not np.array_equal(np.take_along_axis(rows, at, axis=-1), as_rows(ans, axes), equal_nan=True):
        raise UnsupportedFunctionError(  # never seen: np.partition and np.argpartition share their algorithm
            "np.argpartition placed the elements otherwise than np.partition here, so the gradient of "
            "np.partition is unknown; use np.sort (its gradient is defined) or np.take_along_axis(x, idx)"
        )
    return lambda g: from_rows(unsort(as_rows(g, axes), at), x.shape, axes).reshape(shape)


# --- median, percentile, quantile: two order statistics ------------------------------
class OrderStatistics:
    """What ``quantile(a, q / scale)`` picks from each sorted slice ``s`` (laid out as rows, `as_rows`).

    Every method is ``(1 - t) s[i] + t s[i+1]``, with ``i`` and ``t`` depending on ``n`` and ``q`` alone:
    NumPy's own quantile of the ranks 0..n-1 gives ``i + t`` (``lower``, ``gamma``; ``upper`` is ``i + 1``
    clipped to the slice's non-NaN elements).  Results are rows of m quantiles per slice (``(kept..., m)``,
    `q_axes_last`); ``counted`` is False where the result is NaN (its derivatives are 0, as np.max's)."""

    def __init__(self, ans, a, q, axis, method, keepdims, nan, scale, overwrite_input, weights, wrt):
        if overwrite_input:
            raise UnsupportedFunctionError(
                "overwrite_input=True lets NumPy reorder a tracked value in place, which would misplace its "
                "gradient; drop overwrite_input")
        if weights is not None:
            raise UnsupportedFunctionError(
                "quantiles with weights= have no derivative rule; sort the data and interpolate the cumulative "
                "weights yourself (np.sort, np.cumsum, np.interp), or pass db.cut(a)")
        if wrt == 1 and method != "linear":
            raise UnsupportedFunctionError(
                f"a quantile with method={method!r} is piecewise constant or not differentiable in q; "
                "use method='linear' for a gradient in q, or pass q as a constant (db.cut(q))")
        if nan and np.ndim(q) > 1 and isinstance(axis, tuple) and len(axis) > 1:
            raise UnsupportedFunctionError(
                "NumPy's nanquantile/nanpercentile over several axes lays out a q of two or more dimensions "
                "otherwise than documented (one of q's axes comes last), so its gradient cannot be placed; "
                "pass q flattened (np.ravel(q)) and reshape the result, or reduce over one axis")
        self.shape, self.ans_shape, self.scale = np.shape(a), np.shape(ans), scale
        self.axes = reduced_axes(axis, len(self.shape))
        self.order, s = sorted_rows(as_rows(a, self.axes))
        self.s, self.kept, self.n = s, s.shape[:-1], s.shape[-1]
        qs = as_array(q, np.float64) / scale
        self.q_shape = qs.shape
        kept_dims = tuple(1 if i in self.axes else k for i, k in enumerate(self.shape)) if keepdims else self.kept
        expected = qs.shape + kept_dims
        if np.shape(ans) != expected:  # never seen but for the case refused above
            raise UnsupportedFunctionError(
                f"this quantile has shape {np.shape(ans)} where NumPy documents {expected}, so its gradient "
                "cannot be placed; pass q flattened (np.ravel(q)) and reshape the result, or reduce over one axis")
        if self.n == 0:  # quantiles of empty slices are NaN
            return
        ranks = np.where(np.isnan(s), np.nan, np.arange(self.n, dtype=float))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: the value is NaN already
            position = (np.nanquantile if nan else np.quantile)(ranks, qs, axis=-1, method=method)
        position = q_axes_last(position, qs.shape, self.kept)  # (kept..., m)
        self.counted = ~np.isnan(position)
        position = np.where(self.counted, position, 0)
        self.valid = self.n - np.sum(np.isnan(s), axis=-1, keepdims=True)  # non-NaN elements per slice
        self.lower = np.floor(position).astype(np.intp)
        self.upper = np.clip(self.lower + 1, 0, np.maximum(self.valid - 1, 0))
        self.gamma = position - self.lower

    def rows_of(self, g):
        """A result-shaped ``g`` as rows ``(kept..., m)``."""
        return q_axes_last(np.reshape(g, self.q_shape + self.kept), self.q_shape, self.kept)

    def from_rows(self, rows):
        """Rows ``(kept..., m)`` as a result-shaped array (the inverse of `rows_of`)."""
        values = np.reshape(rows, self.kept + self.q_shape)
        k = len(self.kept)
        return np.moveaxis(values, range(k, k + len(self.q_shape)), range(len(self.q_shape))).reshape(self.ans_shape)

    def slope(self):
        """∂/∂q of 'linear' (i + t = q (n - 1)): (n - 1)(s[i+1] - s[i]) / scale, 0 where not counted."""
        s, lower, upper = self.s, self.lower, self.upper
        slope = (self.valid - 1) * (np.take_along_axis(s, upper, -1) - np.take_along_axis(s, lower, -1)) / self.scale
        return np.where(self.counted, slope, 0)

    def a_pullback(self):
        """ā: (1 - t) ḡ at sorted position i and t ḡ at i+1, shared among ties (`tie_group_mean`), unsorted."""
        s, n, kept = self.s, self.n, self.kept
        start = (np.arange(math.prod(kept)) * n).reshape(kept + (1,))

        def pullback(g):
            g = np.where(self.counted, self.rows_of(g), 0)
            at_sorted = np.bincount((start + self.lower).ravel(), ((1 - self.gamma) * g).ravel(), minlength=s.size) \
                + np.bincount((start + self.upper).ravel(), (self.gamma * g).ravel(), minlength=s.size)
            at_sorted = at_sorted.reshape(s.shape).astype(s.dtype)
            return from_rows(unsort(tie_group_mean(s, at_sorted), self.order), self.shape, self.axes)

        return pullback

    def a_tangent(self, t):
        """ȧ's quantiles: (1 - t) ṡ[i] + t ṡ[i+1] of the tangent in sorting order, ṡ shared among ties."""
        ts = tie_group_mean(self.s, np.take_along_axis(as_rows(t, self.axes), self.order, axis=-1))
        rows = (1 - self.gamma) * np.take_along_axis(ts, self.lower, -1) \
            + self.gamma * np.take_along_axis(ts, self.upper, -1)
        return self.from_rows(np.where(self.counted, rows, 0))

    def q_tangent(self, t):
        """q̇'s: slope · q̇ ('linear' only)."""
        return self.from_rows(self.slope() * np.reshape(as_array(t), -1))


def order_statistic_pullback(wrt, ans, a, q, axis, method, keepdims, nan, scale=1.0, overwrite_input=False,
                             weights=None):
    """The pullback of ``quantile(a, q / scale)`` for ``a`` (wrt 0) or ``q`` (wrt 1) (`OrderStatistics`):
    ā puts (1 - t) ḡ at sorted position i and t ḡ at i+1, and for 'linear', where i + t = q (n - 1),
    q̄ = Σ ḡ (n - 1)(s[i+1] - s[i])."""
    stats = OrderStatistics(ans, a, q, axis, method, keepdims, nan, scale, overwrite_input, weights, wrt)
    if stats.n == 0:
        return lambda g: np.zeros(np.shape(q) if wrt else stats.shape, np.result_type(q if wrt else a))
    if wrt == 1:
        slope, q_dtype = stats.slope(), np.result_type(q)
        return lambda g: np.sum(stats.rows_of(g) * slope, axis=tuple(range(len(stats.kept)))).reshape(
            stats.q_shape).astype(q_dtype)
    return stats.a_pullback()


def order_statistic_tangent(tangents, ans, a, q, axis, method, keepdims, nan, scale=1.0, overwrite_input=False,
                            weights=None):
    """The tangent of ``quantile(a, q / scale)``: ȧ's and q̇'s (`OrderStatistics`), the transpose of the pullbacks."""
    ta, tq = tangents[0], tangents[1] if len(tangents) > 1 else None
    stats = OrderStatistics(ans, a, q, axis, method, keepdims, nan, scale, overwrite_input, weights,
                            1 if tq is not None else 0)
    if stats.n == 0:
        return np.zeros(np.shape(ans), np.result_type(ans))
    terms = ([] if ta is None else [stats.a_tangent(ta)]) + ([] if tq is None else [stats.q_tangent(tq)])
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def q_axes_last(values, q_shape, kept):
    """Quantile results of shape q_shape + kept as (kept..., m): one row of m quantiles per slice."""
    values = np.reshape(values, q_shape + kept)
    moved = np.moveaxis(values, range(len(q_shape)), range(len(kept), len(kept) + len(q_shape)))
    return moved.reshape(kept + (math.prod(q_shape),))


def quantile_maker(wrt, scale=1.0, nan=False):
    """The vjp maker of np.quantile (scale 1) or np.percentile (scale 100), or their nan versions, for
    argument ``wrt``."""
    def maker(ans, a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
              weights=None):
        return order_statistic_pullback(wrt, ans, a, q, axis, method, keepdims, nan, scale, overwrite_input,
                                        weights)

    return maker


def quantile_jvp(scale=1.0, nan=False):
    """The jvp rule of np.quantile (scale 1) or np.percentile (scale 100), or their nan versions."""
    def jvp(tangents, ans, a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
            weights=None):
        return order_statistic_tangent(tangents, ans, a, q, axis, method, keepdims, nan, scale, overwrite_input,
                                       weights)

    return jvp


def median_vjp(ans, a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median is the 0.5 quantile (method 'linear': the mean of the two middle elements of an even n)."""
    return order_statistic_pullback(0, ans, a, 0.5, axis, "linear", keepdims, False, 1.0, overwrite_input)


def nanmedian_vjp(ans, a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.nanmedian is the 0.5 nanquantile."""
    return order_statistic_pullback(0, ans, a, 0.5, axis, "linear", keepdims, True, 1.0, overwrite_input)


def median_jvp(tangents, ans, a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """ṁ: the 0.5 quantile's tangent."""
    return order_statistic_tangent([tangents[0], None], ans, a, 0.5, axis, "linear", keepdims, False, 1.0,
                                   overwrite_input)


def nanmedian_jvp(tangents, ans, a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """ṁ: the 0.5 nanquantile's tangent."""
    return order_statistic_tangent([tangents[0], None], ans, a, 0.5, axis, "linear", keepdims, True, 1.0,
                                   overwrite_input)


defvjp(np.sort, sort_vjp)


defcomposition(np.sort_complex, sort_complex_written)
defcomposition(np.unique, unique_written)
for _func in (np.unique_values, np.unique_counts, np.unique_inverse, np.unique_all):
    defcomposition(_func, unique_array_api(_func))
defcomposition(np.union1d, union1d_written)
defcomposition(np.setdiff1d, setdiff1d_written)
defcomposition(np.setxor1d, setxor1d_written)
defcomposition(np.intersect1d, intersect1d_written)
defvjp(np.partition, partition_vjp)
defvjp(np.median, median_vjp)
defvjp(np.nanmedian, nanmedian_vjp)
defvjp(np.quantile, quantile_maker(0), quantile_maker(1))
defvjp(np.percentile, quantile_maker(0, 100.0), quantile_maker(1, 100.0))
defvjp(np.nanquantile, quantile_maker(0, nan=True), quantile_maker(1, nan=True))
defvjp(np.nanpercentile, quantile_maker(0, 100.0, nan=True), quantile_maker(1, 100.0, nan=True))


def sort_jvp(tangents, ans, a, axis=-1, kind=None, order=None, *, stable=None):
    """ṡ = ṫ in sorting order, averaged over each run of tied elements (the transpose of `sort_vjp`)."""
    x, axes = sort_axes(a, axis)
    permutation, s = sorted_rows(as_rows(x, axes))
    t = sort_axes(tangents[0], axis)[0]
    return from_rows(tie_group_mean(s, np.take_along_axis(as_rows(t, axes), permutation, axis=-1)), x.shape, axes)


def partition_jvp(tangents, ans, a, kth, axis=-1, kind="introselect", order=None):
    """ṗ = ṫ at the positions np.argpartition puts the elements (the transpose of `partition_vjp`)."""
    x, axes = sort_axes(a, axis)
    at = np.argpartition(as_rows(x, axes), kth, axis=-1, kind=kind)
    t = sort_axes(tangents[0], axis)[0]
    return from_rows(np.take_along_axis(as_rows(t, axes), at, axis=-1), x.shape, axes)


defjvp(np.sort, sort_jvp)
defjvp(np.partition, partition_jvp)
defjvp(np.median, median_jvp)
defjvp(np.nanmedian, nanmedian_jvp)
defjvp(np.quantile, quantile_jvp())
defjvp(np.percentile, quantile_jvp(100.0))
defjvp(np.nanquantile, quantile_jvp(nan=True))
defjvp(np.nanpercentile, quantile_jvp(100.0, nan=True))
