"""Reverse rules of the reductions: sum, mean, prod, max/min, var/std, cumsum/cumprod, norm.

Every reduction over ``axis`` (None, an int, a negative int or a tuple) with or
without ``keepdims`` pulls back by broadcasting the cotangent over the reduced
axes (`expand`) and multiplying by the partial derivative of the reduced value
with respect to each element.  ``where=`` masks (sum, mean, prod, max, min,
var, std) give masked-out elements a zero cotangent.

Conventions (each pinned by tests/test_conventions.py):

* max/min (and the ``inf``/``-inf``/``1``/``-1`` norms, which are maxima or
  minima too): tied extremes share the cotangent equally.  An element that
  ``where=`` leaves out takes no share, even if it equals the extreme.  An
  extreme set by ``initial`` alone gives every element zero; elements equal to
  ``initial`` share the cotangent among themselves (as ``np.maximum(x, c)``
  gives a tie to ``x``).
* prod and cumprod are exact when elements are zero: products of the other
  elements, no division by zero (cumprod divides only where ``x`` is nonzero).
* std of a constant slice has gradient 0 (exact for one element, a
  subgradient otherwise).
* norm: a zero element has partial sign(0) = 0 in the 1, inf and -inf norms
  (vector and matrix); ``ord=0`` (a count) has gradient 0.  At x = 0 the
  Euclidean/Frobenius norm and the p-norms with p > 1 give nan (0/0), and so
  does a zero element in a p-norm with p < 1.  The 2/-2 matrix norms at a
  repeated singular value and the nuclear norm of a rank-deficient matrix use
  the singular vectors LAPACK returns (one subgradient of many).
"""

import math

import numpy as np

from ..registry import defvjp


def expand(g, shape, axis, keepdims):
    """Broadcast the cotangent of a reduction over ``axis`` back to the input ``shape``."""
    if axis is not None and not keepdims:
        g = np.expand_dims(g, axis)
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
    x = np.asarray(x)
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

    A ``mean`` given (``np.var(x, mean=m)``) is used as NumPy uses it: a constant.
    """
    if mean is None:
        mean = np.mean(x, axis=axis, keepdims=True, where=where)
    return masked((x - mean) / (count(x, axis, where) - ddof), where)


def var_vjp(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None, correction=None):
    """∂ var(x) / ∂x = 2 (x - mean) / (n - ddof); ``correction`` is the Array API's name for ddof."""
    ddof = ddof if correction is None else correction
    shape, partial = np.shape(a), 2 * deviation_over_dof(a, axis, ddof, where, mean)
    return lambda g: expand(g, shape, axis, keepdims) * partial


def std_vjp(ans, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True, mean=None, correction=None):
    """∂ std(x) / ∂x = (x - mean) / ((n - ddof) std); 0 where std = 0 (there x - mean = 0 too)."""
    ddof = ddof if correction is None else correction
    shape = np.shape(a)
    std = expand(ans, shape, axis, keepdims)
    partial = deviation_over_dof(a, axis, ddof, where, mean) / np.where(std == 0, 1, std)
    return lambda g: expand(g, shape, axis, keepdims) * partial


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
def vector_norm_partial(x, norm, ord, axis):
    """∂‖x‖_ord / ∂x along one axis, ``norm`` broadcast to ``x``."""
    if ord == 0:  # the number of nonzero elements: piecewise constant
        return np.zeros_like(x)
    if ord in (np.inf, -np.inf):  # max / min of |x|
        return np.sign(x) * tie_weights(np.abs(x), norm, axis)
    return np.sign(x) * (np.abs(x) / norm) ** (ord - 1)  # (Σ|x|^p)^(1/p)


def matrix_norm_partial(x, norm, ord, axes):
    """∂‖x‖_ord / ∂x over the matrix axes ``(rows, cols)``, ``norm`` broadcast to ``x``."""
    rows, cols = axes
    if ord in (1, -1):  # max / min over columns of the column sums of |x|
        return np.sign(x) * tie_weights(np.sum(np.abs(x), axis=rows, keepdims=True), norm, cols)
    if ord in (np.inf, -np.inf):  # max / min over rows of the row sums of |x|
        return np.sign(x) * tie_weights(np.sum(np.abs(x), axis=cols, keepdims=True), norm, rows)
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
        partial = x / norm
    elif len(axes) == 1:
        partial = vector_norm_partial(x, norm, ord, axes)
    else:
        partial = matrix_norm_partial(x, norm, ord, axes)
    return lambda g: expand(g, shape, axes, keepdims) * partial


defvjp(np.sum, sum_vjp)
defvjp(np.mean, mean_vjp)
defvjp(np.prod, prod_vjp)
for _extreme in (np.max, np.amax, np.min, np.amin):  # amax/amin are separate functions in NumPy 2
    defvjp(_extreme, extreme_vjp)
defvjp(np.var, var_vjp)
defvjp(np.std, std_vjp)
defvjp(np.cumsum, cumsum_vjp)
defvjp(np.cumprod, cumprod_vjp)
defvjp(np.linalg.norm, norm_vjp)
