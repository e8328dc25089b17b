"""Reverse rules of the reductions: sum, mean, prod, max/min, var/std, cumsum/cumprod, norm; their nan
versions, ptp, average, cov, corrcoef, cumulative_sum/prod, bincount; and the ufunc methods that are reductions
(``np.add.reduce`` ...).  The order statistics (sort, partition, median, percentile, quantile) and the functions
written with a sort (unique, the set operations) are `rules/order_statistics.py`'s; their conventions are
listed here with the others'.

Every reduction over ``axis`` (None, an int, a negative int or a tuple) with or
without ``keepdims`` pulls back by broadcasting the cotangent over the reduced
axes (`expand`) and multiplying by the partial derivative of the reduced value
with respect to each element.  ``where=`` masks (sum, mean, prod, max, min,
var, std) give masked-out elements a zero cotangent.  A nan function is its
plain reduction with the NaN elements masked out.

The ufunc methods have rules keyed by the bound method (``np.add.reduce`` is
a dict key equal to itself), each the NumPy function's rule called with the
method's defaults (``axis=0``): ``add.reduce`` is np.sum's, ``multiply.reduce``
np.prod's, ``maximum``/``minimum.reduce`` np.max's, ``fmax``/``fmin.reduce``
np.nanmax's, ``add``/``multiply.accumulate`` np.cumsum's and np.cumprod's.
``ufunc.outer(a, b)`` is recorded by the tape as ``ufunc(a reshaped, b)``, the
derivative table's rule.  ``np.average(..., returned=True)`` is differentiated in
both results (an outputs rule: the sum of weights in ``weights``).

Conventions (each pinned by tests/rules/test_conventions.py):

* max/min (and the ``inf``/``-inf``/``1``/``-1`` norms, which are maxima or
  minima too): tied extremes share the cotangent equally.  An element that
  ``where=`` leaves out takes no share, even if it equals the extreme.  An
  extreme set by ``initial`` alone gives every element zero; elements equal to
  ``initial`` share the cotangent among themselves (as ``np.maximum(x, c)``
  gives a tie to ``x``).
* prod and cumprod are exact when elements are zero: products of the other
  elements, no division by zero (cumprod divides only where ``x`` is nonzero).
* std of a constant slice has gradient 0 (exact for one element, a
  subgradient otherwise).  The tangent of var/std over an empty slice is NaN,
  as the value (and mean's tangent) is.
* norm: a zero element has partial sign(0) = 0 in the 1, inf and -inf norms
  (vector and matrix); ``ord=0`` (a count) has gradient 0.  At x = 0 the
  Euclidean/Frobenius norm and the p-norms with p > 1 have gradient 0 (not 0/0:
  as hypot's and |x|'s at 0); a zero element in a p-norm with p < 1 gives nan.  The 2/-2 matrix norms at a
  repeated singular value and the nuclear norm of a rank-deficient matrix use
  the singular vectors LAPACK returns (one subgradient of many).
* sort, median, percentile, quantile (and their nan versions): tied elements
  share equally the cotangents of the sorted positions they occupy (each gets
  the mean of ``g`` over its tie group), so a median or quantile at a tied order
  statistic is split equally among the tied elements, as max is.  JAX's sort
  instead gives each position's cotangent to one element (the stable sort's),
  so its median of [2, 1, 2] has gradient [1, 0, 0] where ours is [½, 0, ½].
  partition gives each position's cotangent to the element np.argpartition
  puts there (no sharing: only the kth positions are order statistics).
* ptp is max - min with their tie rule (0 for a constant slice); the running
  max/min of ``np.maximum.accumulate``/``minimum.accumulate`` share as max does.
* The nan functions give NaN elements a zero gradient (an all-NaN slice: all 0);
  a quantile or median whose value is NaN (NaN data) has gradient 0, as max's.
* quantile/percentile of every method are linear in the sorted data (NumPy
  picks two order statistics and a weight from ``n`` and ``q`` alone), so every
  method is differentiable in ``a``; in ``q`` only ``'linear'`` is (the others
  are piecewise constant in q or not supported), with ∂/∂q = (n-1)(s[i+1]-s[i])
  the slope to the right of q (0 at q = 1).
* np.unique (and unique_values/_counts/_inverse/_all, union1d, setdiff1d,
  setxor1d): a value that several equal elements hold is taken from the first
  of them (the element np.unique(..., return_index=True) names), which gets
  its whole cotangent.  np.intersect1d: a value in both arrays is a tie between
  them, half to each array's first occurrence.  The array-API unique functions
  give their values sorted (NumPy leaves the order unspecified).
* np.bincount is linear in its weights: w̄ᵢ = ḡ[xᵢ].
"""

import math

import numpy as np

from ..derivatives import over_norm
from ..pullbacks import as_array, plain, unbroadcast
from ..registry import RULES, defjvp, deflinear, defvjp, defvjp_outputs, holds_for_complex
from ..tracked import TOTALS


def expand(g, shape, axis, keepdims):
    """Broadcast the cotangent of a reduction over ``axis`` back to the input ``shape``."""
    if axis is not None and not keepdims:
        g = np.expand_dims(g, axis)
    elif type(g) is np.ndarray and g.ndim == 0 and g.dtype.kind in "fc":
        g = g[()]
    if isinstance(g, np.inexact):  # a total's cotangent: the view np.broadcast_to makes, at a tenth of its cost
        return np.ndarray(shape, g.dtype, g, 0, (0,) * len(shape))  # (read-only: a NumPy scalar's buffer)
    return np.broadcast_to(g, shape)


def reduced_axes(axis, ndim):
    """``axis`` (None, an int or a tuple, negatives allowed) as a tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,)))


def masked(gx, where):
    """The cotangent ``gx`` with the elements a ``where=`` mask leaves out set to zero."""
    return gx if where is True else np.where(where, gx, 0)


def count(x, axis, where):
    """How many elements of ``x`` each result of a reduction over ``axis`` combines."""
    if where is True:
        return math.prod(np.shape(x)[a] for a in reduced_axes(axis, np.ndim(x)))
    included = np.broadcast_to(where, np.shape(x)).astype(np.result_type(x))
    return np.sum(included, axis=axis, keepdims=True)


def tie_weights(values, extreme, axis, where=True):
    """1/(number of ties) where ``values`` attains ``extreme`` along ``axis``, 0 elsewhere."""
    hits = ((values == extreme) & where).astype(np.result_type(values))
    return hits / np.maximum(np.sum(hits, axis=axis, keepdims=True), 1)


def product_of_others(x, axes):
    """For each element of ``x``, the product of the other elements along ``axes``.

    Exclusive prefix products times exclusive suffix products over the reduced
    axes laid out as one row: exact when elements are zero, unlike ``prod / x``.
    """
    x = as_array(x)
    last = tuple(range(x.ndim - len(axes), x.ndim))
    moved = np.moveaxis(x, axes, last)
    kept = moved.shape[: x.ndim - len(axes)]
    rows = moved.reshape(kept + (math.prod(moved.shape[len(kept) :]),))
    one = np.ones_like(rows[..., :1])
    before = np.cumprod(np.concatenate([one, rows[..., :-1]], axis=-1), axis=-1)
    after = np.cumprod(np.concatenate([one, rows[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    return np.moveaxis((before * after).reshape(moved.shape), last, axes)


def reverse_cumsum(g, axis):
    """``out[i] = g[i] + g[i+1] + ...`` along ``axis``: the transpose of cumsum."""
    return np.flip(np.cumsum(np.flip(g, axis), axis=axis), axis)


# --- sum, mean, prod -----------------------------------------------------------
def sum_vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """∂ Σ x / ∂x = 1 (``initial`` is a constant)."""
    shape = np.shape(a)
    return lambda g: masked(expand(g, shape, axis, keepdims), where)


def sum_plain(a, axis=None, *rest):
    """np.sum without keywords: of an array, its own ``np.add.reduce`` call, without np.sum's dispatch."""
    return np.add.reduce(a, axis, *rest) if type(a) is np.ndarray else np.sum(a, axis, *rest)


def mean_vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """∂ mean(x) / ∂x = 1 / n."""
    shape, n = np.shape(a), count(a, axis, where)
    return lambda g: masked(expand(g, shape, axis, keepdims) / n, where)


def prod_vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """∂ (initial · Π x) / ∂xᵢ = initial · Π_{j≠i} xⱼ."""
    shape = np.shape(a)
    included = a if where is True else np.where(where, a, 1)  # left-out elements count as 1
    others = product_of_others(included, reduced_axes(axis, np.ndim(a)))
    if initial is not None:
        others = others * initial
    return lambda g: masked(expand(g, shape, axis, keepdims) * others, where)


# --- max, min -------------------------------------------------------------------
def extreme_vjp(ans, a, axis=None, out=None, keepdims=False, initial=None, where=True):
    """∂ max(x) / ∂xᵢ = 1 where xᵢ is the maximum (shared among ties); the same for min."""
    shape = np.shape(a)
    share = tie_weights(a, expand(ans, shape, axis, keepdims), axis, where)
    return lambda g: expand(g, shape, axis, keepdims) * share


# --- var, std -------------------------------------------------------------------
def deviation_over_dof(x, axis, ddof, where, mean=None):
    """(x - mean) / (n - ddof), the half-gradient of the variance (masked-out elements: 0).

    A ``mean`` given (``np.var(x, mean=m)``) is used as NumPy uses it: a constant (a tracked one takes
    `spread_with_tracked_mean`).
    """
    if mean is None:
        mean = np.mean(x, axis=axis, keepdims=True, where=where)
    return masked((x - mean) / (count(x, axis, where) - ddof), where)


def var_partial(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
                correction=None):
    """∂ var(x) / ∂x = 2 (x - mean) / (n - ddof); ``correction`` is the Array API's name for ddof."""
    return 2 * deviation_over_dof(a, axis, ddof if correction is None else correction, where, mean)


def std_partial(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
                correction=None):
    """∂ std(x) / ∂x = (x - mean) / ((n - ddof) std); 0 where std = 0 (there x - mean = 0 too)."""
    std = expand(ans, np.shape(a), axis, keepdims)
    ddof = ddof if correction is None else correction
    return deviation_over_dof(a, axis, ddof, where, mean) / np.where(std == 0, 1, std)


def spread_vjp(partial_of):
    """The vjp of var or std from its partial: ``g`` expanded to x's shape, times the partial."""
    def vjp(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
            correction=None):
        partial = partial_of(ans, a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction)
        return lambda g: expand(g, np.shape(a), axis, keepdims) * partial

    return vjp


var_vjp, std_vjp = spread_vjp(var_partial), spread_vjp(std_partial)


def spread_with_tracked_mean(root):
    """np.var (np.std with ``root``) given a tracked ``mean=`` (NumPy 2's keyword-only argument): NumPy's own
    formula ``Σ |x - mean|² / max(n - ddof, 0)`` over each slice, written with NumPy calls so that the mean's
    derivative (and x's, the mean held fixed) comes from theirs."""
    def composition(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
                    correction=None):
        deviation = a - mean
        squares = np.real(deviation * np.conj(deviation)) if np.iscomplexobj(deviation) else deviation * deviation
        total = np.sum(squares, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
        n = count(a, axis, where)
        if where is not True and not keepdims:
            n = np.squeeze(n, axis=reduced_axes(axis, np.ndim(a)))
        var = np.divide(total, np.maximum(n - (ddof if correction is None else correction), 0), out=out)
        return np.sqrt(var, out=out) if root else var

    return composition


def spread_jvp(partial_of):
    """The jvp of var or std: Σ partial · ẋ over each slice, and NaN over an empty slice, where the value is NaN
    (as mean's tangent: JAX's too), not the empty sum's 0."""
    def jvp(tangents, ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
            correction=None):
        partial = partial_of(ans, a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction)
        tangent = np.sum(partial * tangents[0], axis=axis, keepdims=keepdims)
        return tangent if np.size(a) else tangent + np.nan

    return jvp


# --- cumsum, cumprod --------------------------------------------------------------
def cumsum_vjp(ans, a, axis=None, dtype=None, out=None):
    """x̄ᵢ = Σ_{k≥i} ḡₖ (axis=None: along the flattened array)."""
    shape = np.shape(a)
    return lambda g: reverse_cumsum(g, 0 if axis is None else axis).reshape(shape)


def cumprod_vjp(ans, a, axis=None, dtype=None, out=None):
    """x̄ᵢ = Σ_{k≥i} ḡₖ ∂yₖ/∂xᵢ with y = cumprod(x) and ∂yₖ/∂xᵢ = Π_{j≤k, j≠i} xⱼ, which is yₖ / xᵢ
    where xᵢ ≠ 0 (see `cumprod_pullback_with_zeros` for the others)."""
    shape = np.shape(a)
    along = 0 if axis is None else axis
    a = np.ravel(a) if axis is None else a
    zero = a == 0
    if zero.any():
        return cumprod_pullback_with_zeros(ans, a, zero, along, shape)
    return lambda g: (reverse_cumsum(g * ans, along) / a).reshape(shape)


def cumprod_pullback_with_zeros(ans, x, zero, axis, shape):
    """cumprod's pullback, exact where ``x`` has zeros.

    Where xᵢ ≠ 0, ∂yₖ/∂xᵢ = yₖ / xᵢ.  Where xᵢ = 0, it is yₖ with xᵢ replaced by 1: the products
    with each row's first zero replaced by 1 give that at the first zero, and 0 (rightly) past
    it, where another zero remains in every product.
    """
    first = zero & (np.cumsum(zero, axis=axis) == 1)
    without_first = np.cumprod(np.where(first, 1, x), axis=axis)
    divisor = np.where(zero, 1, x)

    def pullback(g):
        at_zeros = reverse_cumsum(g * without_first, axis)
        return np.where(zero, at_zeros, reverse_cumsum(g * ans, axis) / divisor).reshape(shape)

    return pullback


# --- norm -------------------------------------------------------------------------
def sign_of(x):
    """``np.sign(x)`` of real ``x``; of complex ``x``, ``x / |x|`` (0 at 0) written out, which is no constant: a
    second derivative must see it (complex rules conjugate it)."""
    if np.result_type(plain(x)).kind != "c":
        return np.sign(x)
    size = np.abs(x)
    nonzero = size != 0
    return np.where(nonzero, x / np.where(nonzero, size, 1), 0)


def vector_norm_partial(x, norm, ord, axis):
    """∂‖x‖_ord / ∂x along one axis, ``norm`` broadcast to ``x``."""
    if ord == 0:  # the number of nonzero elements: piecewise constant
        return np.zeros_like(x)
    if ord in (np.inf, -np.inf):  # max / min of |x|
        return sign_of(x) * tie_weights(np.abs(x), norm, axis)
    if ord > 1:  # (Σ|x|^p)^(1/p): 0 at x = 0 (there every |x|/norm is 0/0), as the 2-norm's
        norm = np.where(norm == 0, 1, norm)
    return sign_of(x) * (np.abs(x) / norm) ** (ord - 1)


def matrix_norm_partial(x, norm, ord, axes):
    """∂‖x‖_ord / ∂x over the matrix axes ``(rows, cols)``, ``norm`` broadcast to ``x``."""
    rows, cols = axes
    if ord in (1, -1):  # max / min over columns of the column sums of |x|
        return sign_of(x) * tie_weights(np.sum(np.abs(x), axis=rows, keepdims=True), norm, cols)
    if ord in (np.inf, -np.inf):  # max / min over rows of the row sums of |x|
        return sign_of(x) * tie_weights(np.sum(np.abs(x), axis=cols, keepdims=True), norm, rows)
    return singular_vectors_partial(x, ord, axes)


def singular_vectors_partial(x, ord, axes):
    """∂‖x‖/∂x = U Vᵀ for the nuclear norm, u vᵀ of the largest (2) / smallest (-2) singular value."""
    u, _, vt = np.linalg.svd(np.moveaxis(x, axes, (-2, -1)), full_matrices=False)
    if ord != "nuc":
        k = [0] if ord == 2 else [-1]
        u, vt = u[..., k], vt[..., k, :]
    return np.moveaxis(u @ vt, (-2, -1), axes)


def norm_vjp(ans, x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: Euclidean/Frobenius ``x / ‖x‖``, or the vector/matrix ``ord`` norm's partial."""
    shape = np.shape(x)
    axes = reduced_axes(axis, len(shape))
    norm = expand(ans, shape, axes, keepdims)
    if ord is None or ord in ("fro", "f"):
        partial = over_norm(x, norm)  # 0 at x = 0, as hypot's
    elif len(axes) == 1:
        partial = vector_norm_partial(x, norm, ord, axes)
    else:
        partial = matrix_norm_partial(x, norm, ord, axes)
    return lambda g: expand(g, shape, axes, keepdims) * partial


def bincount_weights_vjp(ans, x, /, weights=None, minlength=0):
    """result[b] = Σ_{xᵢ = b} wᵢ (in float64, as NumPy computes it): w̄ᵢ = ḡ[xᵢ] in the weights' dtype."""
    dtype = weights.dtype
    return lambda g: as_array(g[x], dtype)


def bincount_by_position(x, /, weights=None, minlength=0):
    """np.bincount with tracked weights passed by name: the same call with them in their position."""
    return np.bincount(x, weights, minlength)


# --- the nan functions: NaN elements are left out ----------------------------------
def present(a, where=True):
    """The elements a nan function combines: not NaN (and selected by ``where``)."""
    return ~np.isnan(a) & where


def nansum_vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """np.sum over the elements that are not NaN."""
    return sum_vjp(ans, a, axis, dtype, out, keepdims, initial, present(a, where))


def nanmean_vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """np.mean over the elements that are not NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):  # an all-NaN slice: its elements get 0 anyway
        return mean_vjp(ans, a, axis, dtype, out, keepdims, where=present(a, where))


def nanprod_vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """np.prod over the elements that are not NaN."""
    return prod_vjp(ans, a, axis, dtype, out, keepdims, initial, present(a, where))


def nanextreme_vjp(ans, a, axis=None, out=None, keepdims=False, initial=None, where=True):
    """np.max / np.min over the elements that are not NaN (an all-NaN slice: 0)."""
    return extreme_vjp(ans, a, axis, out, keepdims, initial, present(a, where))


def nanvar_vjp(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
               correction=None):
    """np.var over the elements that are not NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return var_vjp(ans, a, axis, dtype, out, ddof, keepdims, where=present(a, where), mean=mean,
                       correction=correction)


def nanstd_vjp(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None,
               correction=None):
    """np.std over the elements that are not NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return std_vjp(ans, a, axis, dtype, out, ddof, keepdims, where=present(a, where), mean=mean,
                       correction=correction)


def nancumsum_vjp(ans, a, axis=None, dtype=None, out=None):
    """np.cumsum with NaN read as 0."""
    back, mask = cumsum_vjp(ans, a, axis, dtype), present(a)
    return lambda g: masked(back(g), mask)


def nancumprod_vjp(ans, a, axis=None, dtype=None, out=None):
    """np.cumprod with NaN read as 1."""
    mask = present(a)
    back = cumprod_vjp(ans, np.where(mask, a, 1), axis, dtype)
    return lambda g: masked(back(g), mask)


# --- ptp, average ----------------------------------------------------------------
def ptp_vjp(ans, a, axis=None, out=None, keepdims=False):
    """np.ptp = max - min, each with its tie rule."""
    top = extreme_vjp(np.max(a, axis, keepdims=keepdims), a, axis, keepdims=keepdims)
    bottom = extreme_vjp(np.min(a, axis, keepdims=keepdims), a, axis, keepdims=keepdims)
    return lambda g: top(g) - bottom(g)


def weights_along(w, shape, axes):
    """The weights of np.average laid along ``axes`` of an array of ``shape``, as NumPy lays them
    (unchanged when they have its shape)."""
    if np.shape(w) == shape:
        return w
    return np.reshape(np.transpose(w, np.argsort(axes)), [n if i in axes else 1 for i, n in enumerate(shape)])


def average_maker(wrt):
    """The vjp maker of output j of np.average (the average, then with ``returned=True`` the sum of
    weights) for ``a`` (wrt 0) or ``weights`` (wrt 1): ā = ḡ w / Σw, w̄ = Σ ḡ (a - avg) / Σw over the
    axes the weights were broadcast along; the sum of weights has w̄ = its ḡ, and no ā."""
    def maker(j, ans, a, axis=None, weights=None, returned=False, *, keepdims=False):
        avg = ans[0] if returned else ans
        if j == 1 and (wrt == 0 or weights is None):
            return None
        if weights is None:
            return mean_vjp(avg, a, axis, keepdims=keepdims)
        shape = np.shape(a)
        axes = reduced_axes(axis, len(shape))
        w = weights_along(weights, shape, axes)
        total = np.sum(w, axis=axes, keepdims=True)
        if wrt == 0:
            share, dtype = np.broadcast_to(w / total, shape), np.result_type(a)
            return lambda g: (expand(g, shape, axis, keepdims) * share).astype(dtype, copy=False)
        factor = 1 if j == 1 else (a - expand(avg, shape, axis, keepdims)) / total
        w_shape, dtype = np.shape(weights), np.result_type(weights)

        def pullback(g):
            along = unbroadcast(expand(g, shape, axis, keepdims) * factor, np.shape(w)).astype(dtype, copy=False)
            if w_shape == shape:
                return along
            return np.transpose(along.reshape(np.array(w_shape)[np.argsort(axes)]), np.argsort(np.argsort(axes)))

        return pullback

    return maker


# --- cov, corrcoef --------------------------------------------------------------------
def variables(m, y, rowvar):
    """The observations matrix np.cov builds (one row per variable), and the function that turns its
    cotangent into the cotangents of ``m`` and ``y``."""
    rows = [np.atleast_2d(m) if rowvar or np.ndim(m) == 1 else np.atleast_2d(m).T]
    if y is not None:
        y2 = np.atleast_2d(y)
        rows.append(y2 if rowvar or y2.shape[0] == 1 else y2.T)
    split = rows[0].shape[0]

    def parts(gx):
        gm, gy = gx[:split], gx[split:]
        if not rowvar and np.ndim(m) != 1:
            gm = gm.T
        if y is not None and not rowvar and np.atleast_2d(y).shape[0] != 1:
            gy = gy.T
        return gm.reshape(np.shape(m)), (None if y is None else gy.reshape(np.shape(y)))

    return np.concatenate(rows, axis=0), parts


def cov_pullback(m, y, rowvar, bias, ddof, fweights, aweights):
    """g -> (m̄, ȳ) for C = X_c diag(w) X_cᵀ / f: X̄ = (Ḡ + Ḡᵀ) X_c diag(w) / f.

    The centering adds nothing, as Σₖ wₖ X_c[:, k] = 0.  ``w`` and ``f`` are NumPy's:
    w = fweights · aweights, f = Σw - ddof Σ(w · aweights) / Σw (N - ddof without weights).
    """
    x, parts = variables(m, y, rowvar)
    ddof = (0 if bias else 1) if ddof is None else ddof
    w = np.ones(x.shape[1])
    for given in (fweights, aweights):
        if given is not None:
            w = w * np.asarray(given, dtype=float)
    total = np.sum(w)
    if aweights is None:
        f = total - ddof
    else:
        f = total - ddof * np.sum(w * np.asarray(aweights, dtype=float)) / total
    weighted = (x - np.average(x, axis=1, weights=w)[:, None]) * w / max(f, 0.0)
    n = x.shape[0]

    def pullback(g):
        g = np.reshape(g, (n, n))
        return parts((g + g.T) @ weighted)

    return pullback


def cov_maker(wrt):
    """The vjp maker of np.cov for ``m`` (wrt 0) or ``y`` (wrt 1)."""
    def maker(ans, m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
        back = cov_pullback(m, y, rowvar, bias, ddof, fweights, aweights)
        argument_dtype = np.result_type(m if wrt == 0 else y)
        return lambda g: back(g)[wrt].astype(argument_dtype, copy=False)

    return maker


def corrcoef_maker(wrt):
    """The vjp maker of np.corrcoef: R = C / (σᵢ σⱼ), C̄ᵢⱼ = R̄ᵢⱼ / (σᵢ σⱼ) - δᵢⱼ Σₖ (R̄ᵢₖ Rᵢₖ + R̄ₖᵢ Rₖᵢ) / (2 Cᵢᵢ)
    (a single variable's R = 1: gradient 0)."""
    def maker(ans, x, y=None, rowvar=True, *, dtype=None):
        argument = x if wrt == 0 else y
        if np.ndim(ans) == 0:
            return lambda g: np.zeros(np.shape(argument), np.result_type(argument))
        back = cov_maker(wrt)(None, x, y, rowvar)
        c = np.cov(x, y, rowvar)
        variance = np.diag(c)
        sigma = np.sqrt(variance)

        def pullback(g):
            diagonal = np.sum(g * ans + (g * ans).T, axis=1) / (2 * variance)
            return back(g / np.outer(sigma, sigma) - np.diag(diagonal))

        return pullback

    return maker


# --- cumulative_sum, cumulative_prod --------------------------------------------------
def without_initial(g, axis, include_initial):
    """The cotangent of the cumulative values, without the one of the initial 0 or 1."""
    return np.delete(g, 0, axis) if include_initial else g


def cumulative_sum_vjp(ans, x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    """np.cumsum along ``axis`` (the only one of a 1-d array), after an initial 0 when asked."""
    along = 0 if axis is None else axis
    back = cumsum_vjp(None, x, along)
    return lambda g: back(without_initial(g, along, include_initial))


def cumulative_prod_vjp(ans, x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    """np.cumprod along ``axis`` (the only one of a 1-d array), after an initial 1 when asked."""
    along = 0 if axis is None else axis
    back = cumprod_vjp(without_initial(ans, along, include_initial), x, along)
    return lambda g: back(without_initial(g, along, include_initial))


# --- ufunc methods: np.add.reduce is np.sum along axis 0, ... -------------------------
def along(array, axis):
    """A ufunc method's ``axis`` as the NumPy function's: a 0-d array has none to reduce (NumPy returns it)."""
    return None if np.ndim(array) == 0 else axis


def ufunc_reduce_maker(function_vjp):
    """The vjp maker of ``ufunc.reduce`` from the maker of the NumPy function it is (axis 0 by default)."""
    def maker(ans, array, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=True):
        return function_vjp(ans, array, along(array, axis), dtype, out, keepdims, initial, where)

    return maker


def extreme_of_reduce(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """`extreme_vjp` called as a ufunc reduction is (with a dtype)."""
    return extreme_vjp(ans, a, axis, out, keepdims, initial, where)


def nanextreme_of_reduce(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """`nanextreme_vjp` called as a ufunc reduction is: fmax and fmin leave NaN out."""
    return nanextreme_vjp(ans, a, axis, out, keepdims, initial, where)


def log_sum_exp_vjp(base):
    """The vjp of ``logaddexp.reduce`` (base e) or ``logaddexp2.reduce`` (base 2): x̄ = ḡ base^(x - ans)."""
    def vjp(ans, a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        shape = np.shape(a)
        partial = masked(np.power(base, a - expand(ans, shape, axis, keepdims)), where)
        return lambda g: expand(g, shape, axis, keepdims) * partial

    return vjp


def ufunc_accumulate_maker(function_vjp):
    """The vjp maker of ``ufunc.accumulate`` from the maker of np.cumsum or np.cumprod (axis 0 by default)."""
    def maker(ans, array, axis=0, dtype=None, out=None):
        return function_vjp(ans, array, along(array, axis), dtype)

    return maker


def running_extreme_vjp(ans, array, axis=0, dtype=None, out=None):
    """``np.maximum.accumulate`` (and minimum, fmax, fmin): x̄ᵢ = Σₖ ḡₖ / cₖ over the k ≥ i whose running
    extreme yₖ is xᵢ, cₖ being how many of x₀..xₖ tie for it (max's rule at every k).

    The k with one y form a run; its elements equal to y (the hits) share it, counted by a cumulative sum
    restarted at each run, and x̄ at a hit is the sum of ḡₖ / cₖ from it to the end of its run.
    """
    axis = along(array, axis)
    if np.size(array) == 0:
        return lambda g: np.zeros_like(g)
    x, y = np.moveaxis(array, axis, -1), np.moveaxis(ans, axis, -1)
    n = x.shape[-1]
    index = np.arange(n)
    starts = np.ones(y.shape, bool)
    starts[..., 1:] = y[..., 1:] != y[..., :-1]
    hits = x == y  # a NaN extreme has none (and passes on no gradient)
    up_to = np.cumsum(hits, axis=-1)
    run_start = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
    count = up_to - np.take_along_axis(up_to - hits, run_start, axis=-1)
    share = np.where(np.isnan(y), 0, 1 / np.maximum(count, 1)).astype(y.dtype)
    run_end = np.minimum.accumulate(np.where(starts, index, n)[..., ::-1], axis=-1)[..., ::-1]  # next start ≥ i
    run_end = np.concatenate([run_end[..., 1:], np.full(y.shape[:-1] + (1,), n)], axis=-1)  # > i

    def pullback(g):
        to_end = reverse_cumsum(np.moveaxis(g, axis, -1) * share, -1)
        to_end = np.concatenate([to_end, np.zeros_like(to_end[..., :1])], axis=-1)
        gx = np.where(hits, to_end[..., :n] - np.take_along_axis(to_end, run_end, axis=-1), 0)
        return np.moveaxis(gx, -1, axis)

    return pullback


def add_reduceat_vjp(ans, array, indices, axis=0, dtype=None, out=None):
    """x̄ⱼ = Σ ḡᵢ over the sums i that hold xⱼ: x[indices[i]:indices[i+1]], or x[indices[i]] alone where
    indices[i+1] <= indices[i], the last one to the end.  For increasing indices: ḡ repeated."""
    n = np.shape(array)[axis]
    starts = np.asarray(indices) % n
    ends = np.append(starts[1:], n)
    lengths = np.where(ends > starts, ends, starts + 1) - starts
    summed_by = np.repeat(np.arange(len(starts)), lengths)  # which sum each (sum, element) pair is in
    elements = starts[summed_by] + np.arange(len(summed_by)) - np.repeat(np.cumsum(lengths) - lengths, lengths)

    def pullback(g):
        g = np.moveaxis(g, axis, 0)
        gx = np.zeros((n,) + g.shape[1:], g.dtype)
        np.add.at(gx, elements, g[summed_by])
        return np.moveaxis(gx, 0, axis)

    return pullback


defvjp(np.sum, sum_vjp)
RULES[np.sum].plain = sum_plain
TOTALS[np.sum] = RULES[np.sum]  # sum_vjp reads no ``ans``: a gradient may leave the total pending
defvjp(np.mean, mean_vjp)
defvjp(np.prod, prod_vjp)
for _extreme in (np.max, np.amax, np.min, np.amin):  # amax/amin are separate functions in NumPy 2
    defvjp(_extreme, extreme_vjp)
defvjp(np.var, var_vjp)
defvjp(np.std, std_vjp)
defjvp(np.var, spread_jvp(var_partial))
defjvp(np.std, spread_jvp(std_partial))
RULES[np.var].tracked_keywords = spread_with_tracked_mean(root=False)
RULES[np.std].tracked_keywords = spread_with_tracked_mean(root=True)
defvjp(np.cumsum, cumsum_vjp)
defvjp(np.cumprod, cumprod_vjp)
defvjp(np.linalg.norm, norm_vjp)

defvjp(np.bincount, None, bincount_weights_vjp)
RULES[np.bincount].tracked_keywords = bincount_by_position
defvjp(np.nansum, nansum_vjp)
defvjp(np.nanmean, nanmean_vjp)
defvjp(np.nanprod, nanprod_vjp)
defvjp(np.nanmax, nanextreme_vjp)
defvjp(np.nanmin, nanextreme_vjp)
defvjp(np.nanvar, nanvar_vjp)
defvjp(np.nanstd, nanstd_vjp)
defvjp(np.nancumsum, nancumsum_vjp)
defvjp(np.nancumprod, nancumprod_vjp)
defvjp(np.ptp, ptp_vjp)
defvjp_outputs(np.average, average_maker(0), None, average_maker(1))
defvjp(np.cov, cov_maker(0), cov_maker(1))
defvjp(np.corrcoef, corrcoef_maker(0), corrcoef_maker(1))
defvjp(np.cumulative_sum, cumulative_sum_vjp)
defvjp(np.cumulative_prod, cumulative_prod_vjp)

# ufunc methods on tracked values: rules keyed by the bound method (np.add.reduce == np.add.reduce)
defvjp(np.add.reduce, ufunc_reduce_maker(sum_vjp))
defvjp(np.multiply.reduce, ufunc_reduce_maker(prod_vjp))
for _ufunc in (np.maximum, np.minimum):
    defvjp(_ufunc.reduce, ufunc_reduce_maker(extreme_of_reduce))
for _ufunc in (np.fmax, np.fmin):
    defvjp(_ufunc.reduce, ufunc_reduce_maker(nanextreme_of_reduce))
defvjp(np.logaddexp.reduce, ufunc_reduce_maker(log_sum_exp_vjp(np.e)))
defvjp(np.logaddexp2.reduce, ufunc_reduce_maker(log_sum_exp_vjp(2.0)))
defvjp(np.add.accumulate, ufunc_accumulate_maker(cumsum_vjp))
defvjp(np.multiply.accumulate, ufunc_accumulate_maker(cumprod_vjp))
defvjp(np.add.reduceat, add_reduceat_vjp)
for _ufunc in (np.maximum, np.minimum, np.fmax, np.fmin):
    defvjp(_ufunc.accumulate, running_extreme_vjp)



def extreme_jvp(tangents, ans, a, axis=None, out=None, keepdims=False, initial=None, where=True):
    """ṁ = Σ share · ṫ: the tangent of the maximum, shared among ties (the transpose of `extreme_vjp`)."""
    share = tie_weights(a, expand(ans, np.shape(a), axis, keepdims), axis, where)
    return np.sum(share * tangents[0], axis=axis, keepdims=keepdims)


for _extreme in (np.max, np.amax, np.min, np.amin):
    defjvp(_extreme, extreme_jvp)
# Forward mode: sums, means and running sums are linear (``initial`` is an offset: its tangent is 0).
deflinear(np.sum, np.add.reduce, np.cumulative_sum, constants=("initial",))
deflinear(np.mean, np.cumsum, np.add.accumulate, np.add.reduceat)
# Complex values (JAX's convention, rules/complex.py): sums, means, products and running ones are holomorphic with
# plain transposes; the maximum and minimum select by NumPy's order of complex numbers (real part, then
# imaginary part), the selected elements' derivative shared at a tie.  Their rules hold as they are.
holds_for_complex(np.sum, np.mean, np.prod, np.cumsum, np.cumprod, np.cumulative_sum, np.cumulative_prod)
holds_for_complex(np.max, np.amax, np.min, np.amin, np.nanmax, np.nanmin, np.ptp, np.maximum.reduce,
                  np.minimum.reduce, np.fmax.reduce, np.fmin.reduce)
