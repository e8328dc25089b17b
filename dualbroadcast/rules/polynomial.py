"""Reverse rules of NumPy's polynomial functions (coefficients highest power first): poly, polyadd,
polysub, polymul, polyder, polyint, polydiv, roots, polyfit.  (``np.polyval`` and ``np.vander`` are
in `signal`.)

Most are compositions (`registry.defcomposition`): NumPy's own steps written on the tracked
coefficients, each recorded by its rule.  Leading zeros are padded with ``np.concatenate``
(polyadd, polysub), stripped with ``np.trim_zeros`` (polymul, as ``np.poly1d`` does), products are
``np.convolve`` (polymul, and poly: Π (x - rₖ)), derivatives and integrals are the coefficients
scaled by their powers, and polydiv's long division subtracts each step's multiple of the divisor
(NumPy's ``r[k:k + n + 1] -= d * v``, written without writing in place).

Two have rules of their own:

* ``np.roots``: a simple root r of p moves as dr = -(dp)(r) / p'(r), so ∂rᵢ/∂pₖ = -rᵢ^(N-1-k) / p'(rᵢ)
  (N coefficients, leading and trailing zeros included: the roots NumPy returns are those of p).
  Roots are complex in general: the rule is holomorphic in p (JAX's convention), and a real p takes
  the real part of its cotangent.  A repeated root has no derivative: two or more trailing zeros
  (a repeated root at 0) are an error; other repeated roots give the infinite derivative 1/p'(r).
* ``np.polyfit``: c = A⁺ (w ⊙ y) with A = W V (V = vander(x, deg + 1), W = diag(w)), for a fit of
  full rank (a rank-deficient fit, which NumPy warns about, is an error).  With M = (AᵀA)⁻¹ = A⁺A⁺ᵀ,
  u = M c̄, the residuals e = y - V c and D = ∂V/∂x: ȳ = w ⊙ A⁺ᵀ c̄, w̄ = 2 w ⊙ e ⊙ (V u),
  x̄ = w² ⊙ ((D u) ⊙ e - (V u) ⊙ (D c)) (each summed over the columns of a 2-d y).  ``full=True``
  and ``cov=True`` (which add residuals, ranks or a covariance) are errors naming the spelling.
"""

import numpy as np

from ..errors import UnsupportedFunctionError
from ..pullbacks import as_array, plain
from ..registry import RULES, defcomposition, defjvp, defvjp, holds_for_complex


# --- sums, products, derivatives and integrals: NumPy's steps on the tracked coefficients ----------------
def _padded_front(a, n):
    """``a`` with leading zeros up to ``n`` coefficients (as np.polyadd pads the shorter)."""
    if len(a) == n:
        return a
    return np.concatenate((np.zeros(n - len(a), a.dtype), a))


def polyadd_written(a1, a2):
    """a1 + a2, the shorter padded with leading zeros."""
    a1, a2 = np.atleast_1d(a1), np.atleast_1d(a2)
    n = max(len(a1), len(a2))
    return _padded_front(a1, n) + _padded_front(a2, n)


def polysub_written(a1, a2):
    """a1 - a2, the shorter padded with leading zeros."""
    a1, a2 = np.atleast_1d(a1), np.atleast_1d(a2)
    n = max(len(a1), len(a2))
    return _padded_front(a1, n) - _padded_front(a2, n)


def _coefficients(c):
    """The coefficients np.poly1d keeps: leading zeros stripped, [0] for none."""
    c = np.atleast_1d(c)
    if np.ndim(c) > 1:
        raise ValueError("Polynomial must be 1d only.")
    c = np.trim_zeros(c, trim="f")
    return c if len(c) else np.zeros(1, c.dtype)


def polymul_written(a1, a2):
    """The product's coefficients: the convolution of the factors'."""
    return np.convolve(_coefficients(a1), _coefficients(a2))


def polyder_written(p, m=1):
    """m times p'ₖ = (n - k) pₖ (n the degree)."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    for _ in range(m):
        p = p[:-1] * np.arange(len(p) - 1, 0, -1)
    return p


def polyint_written(p, m=1, k=None):
    """m times ∫p: pₖ / (its power + 1), then the integration constant k[i] (tracked or not)."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = np.zeros(m, float) if k is None else np.atleast_1d(k)
    if len(k) == 1 and m > 1:
        k = k[0] * np.ones(m, float)
    if len(k) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    for i in range(m):
        p = np.concatenate((p / np.arange(len(p), 0, -1), np.reshape(k[i], (1,))))
    return p


def polydiv_written(u, v):
    """Long division u = q v + r: each step's quotient d = r[k] / v[0] takes d v off r at k; then r's leading
    (near) zeros are dropped, as NumPy does."""
    u, v = np.atleast_1d(u) + 0.0, np.atleast_1d(v) + 0.0
    dtype = np.result_type(u[0] + v[0])
    m, n = len(u) - 1, len(v) - 1
    scale = 1.0 / v[0]
    r = np.astype(u, dtype)
    quotients = []
    for k in range(m - n + 1):
        d = scale * r[k]
        quotients.append(d)
        r = r - np.concatenate((np.zeros(k, dtype), d * v, np.zeros(m - n - k, dtype)))
    q = np.stack(quotients) if quotients else np.zeros(1, dtype)
    while np.allclose(r[0], 0, rtol=1e-14) and np.shape(r)[-1] > 1:
        r = r[1:]
    return q, r


def poly_written(seq_of_zeros):
    """Π (x - rₖ) as repeated convolutions with [1, -rₖ] (of a matrix: of its eigenvalues); real when the
    complex zeros come in conjugate pairs, as in NumPy."""
    shape = np.shape(seq_of_zeros)
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
        zeros = np.linalg.eigvals(seq_of_zeros)
    elif len(shape) == 1:
        zeros = seq_of_zeros
    else:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if len(zeros) == 0:
        return 1.0
    dtype = np.result_type(zeros)
    a = np.ones(1, dtype)
    for k in range(len(zeros)):
        a = np.convolve(a, np.concatenate((np.ones(1, dtype), -zeros[k:k + 1])))
    if dtype.kind == "c":
        conjugates = np.conj(zeros)
        if np.all(zeros[np.argsort(zeros)] == conjugates[np.argsort(conjugates)]):
            a = np.real(a)
    return a


# --- roots ---------------------------------------------------------------------------------------------------
def roots_vjp(ans, p):
    """p̄ₖ = Σᵢ ḡᵢ ∂rᵢ/∂pₖ, ∂rᵢ/∂pₖ = -rᵢ^(N-1-k) / p'(rᵢ)."""
    p = np.atleast_1d(p)
    nonzero = np.flatnonzero(p)
    if len(nonzero) and len(p) - nonzero[-1] - 1 > 1:
        raise UnsupportedFunctionError(
            f"np.roots of a polynomial with {len(p) - nonzero[-1] - 1} trailing zero coefficients has a repeated "
            "root at 0, which has no derivative; divide the zero roots out (np.roots(p[:-k])) and differentiate "
            "the others")
    r = as_array(ans)
    slopes = np.polyval(np.polyder(p), r)
    jacobian = -np.vander(r, len(p)) / slopes[:, None]
    real = p.dtype.kind != "c" and r.dtype.kind != "c"
    dtype = p.dtype

    def back(g):
        cotangent = as_array(g) @ jacobian
        return cotangent.astype(dtype, copy=False) if real else cotangent

    return back


# --- least-squares fits ----------------------------------------------------------------------------------------
def _fit(x, deg, w):
    """V = vander(x, deg + 1), the weights (ones if none) and A⁺ for A = W V, with NumPy's column scaling."""
    order = int(deg) + 1
    vander = np.vander(as_array(x, np.float64), order)
    weights = np.ones(len(vander)) if w is None else as_array(w, np.float64)
    scaled = vander * weights[:, None]
    scale = np.sqrt(np.sum(scaled * scaled, axis=0))
    if np.linalg.matrix_rank(plain(scaled / scale)) < order:
        raise UnsupportedFunctionError(
            f"np.polyfit of degree {deg} through these points is rank-deficient (NumPy warns: poorly "
            "conditioned), and its coefficients have no derivative; lower deg or use more distinct x")
    return vander, weights, np.linalg.pinv(scaled / scale) / scale[:, None]


def _columns(a):
    """``a`` as columns: a 1-d y (or coefficients) as one column."""
    return a[:, None] if np.ndim(a) == 1 else a


def polyfit_vjp(argnum):
    """x̄, ȳ or w̄ of the coefficients c = A⁺ (w ⊙ y) (see the module docstring)."""

    def maker(ans, x, y, deg, rcond=None, full=False, w=None, cov=False):
        vander, weights, pinv = _fit(x, deg, w)
        dtype = np.result_type((x, y, None, None, None, w)[argnum])
        if argnum == 1:
            along = weights.reshape((-1,) + (1,) * (np.ndim(y) - 1))
            return lambda g: (along * (pinv.T @ g)).astype(dtype)
        c = _columns(as_array(ans, np.float64))
        residuals = _columns(as_array(y, np.float64)) - vander @ c
        derivative = _vander_derivative(as_array(x, np.float64), vander.shape[1]) if argnum == 0 else None

        def back(g):
            u = pinv @ (pinv.T @ _columns(as_array(g, np.float64)))  # M c̄, M = (AᵀA)⁻¹
            if argnum == 5:
                return np.sum(2 * weights[:, None] * residuals * (vander @ u), axis=1).astype(dtype)
            terms = (derivative @ u) * residuals - (vander @ u) * (derivative @ c)
            return np.sum(weights[:, None] ** 2 * terms, axis=1).astype(dtype)

        return back

    return maker


def roots_jvp(tangents, ans, p):
    """ṙ = -ṗ(r) / p'(r): the tangent polynomial at each root over the slope there."""
    p, r = np.atleast_1d(p), as_array(ans)
    t = np.polyval(np.atleast_1d(tangents[0]), r) / -np.polyval(np.polyder(p), r)
    return t if r.dtype.kind == "c" else np.real(t)


def polyfit_jvp(tangents, ans, x, y, deg, rcond=None, full=False, w=None, cov=False):
    """ċ = M (Dᵀ(w² ẋ e) - Vᵀ(w² ẋ (D c)) + Vᵀ(w² ẏ) + 2 Vᵀ(w ẇ e)), M = (AᵀA)⁻¹ = A⁺A⁺ᵀ: the normal
    equations VᵀW²V c = VᵀW²y differentiated (e = y - V c, D = ∂V/∂x; the transpose of `polyfit_vjp`)."""
    tx, ty, tw = tangents[0], tangents[1], tangents[5] if len(tangents) > 5 else None
    vander, weights, pinv = _fit(x, deg, w)
    c = _columns(as_array(ans, np.float64))
    residuals = _columns(as_array(y, np.float64)) - vander @ c
    squared = (weights ** 2)[:, None]
    rhs = 0.0
    if tx is not None:
        derivative = _vander_derivative(as_array(x, np.float64), vander.shape[1])
        moved = squared * _columns(tx)
        rhs = rhs + derivative.T @ (moved * residuals) - vander.T @ (moved * (derivative @ c))
    if ty is not None:
        rhs = rhs + vander.T @ (squared * _columns(ty))
    if tw is not None:
        rhs = rhs + vander.T @ (2 * (weights * tw)[:, None] * residuals)
    return np.reshape(pinv @ (pinv.T @ rhs), np.shape(ans))


def _vander_derivative(x, order):
    """D = ∂vander(x, order)/∂x row by row: D[i, j] = (order - 1 - j) xᵢ^(order - 2 - j), 0 in the last column."""
    powers = np.arange(order - 1, 0, -1)
    return np.hstack([np.vander(x, order - 1) * powers, np.zeros((len(x), 1))])


def _fit_coefficients_only(x, y, deg, rcond=None, full=False, w=None, cov=False):
    if full or cov:
        raise UnsupportedFunctionError(
            "np.polyfit with full=True or cov=True on tracked values has no derivative rule (its residuals, "
            "rank and covariance are further results); call np.polyfit(x, y, deg, w=w) for the coefficients "
            "and compute what you need from them (residuals: y - np.polyval(c, x))")
    return np.polyfit(x, y, deg, rcond, w=w)


def _register():
    defcomposition(np.polyadd, polyadd_written)
    defcomposition(np.polysub, polysub_written)
    defcomposition(np.polymul, polymul_written)
    defcomposition(np.polyder, polyder_written)
    defcomposition(np.polyint, polyint_written)
    defcomposition(np.polydiv, polydiv_written)
    defcomposition(np.poly, poly_written)
    defvjp(np.roots, roots_vjp)
    holds_for_complex(np.roots)
    defvjp(np.polyfit, polyfit_vjp(0), polyfit_vjp(1), None, None, None, polyfit_vjp(5))
    RULES[np.polyfit].impl = RULES[np.polyfit].plain = _fit_coefficients_only
    defjvp(np.roots, roots_jvp)
    defjvp(np.polyfit, polyfit_jvp)


_register()
