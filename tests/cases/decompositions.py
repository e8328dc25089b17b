"""Cases for the decompositions (dualbroadcast/rules/decompositions.py): svd, svdvals, eigh, eigvalsh, eig,
eigvals, cholesky, qr, over matrices built with well-separated singular values or eigenvalues (no near-tie
makes finite differences unreliable), batched (no batch axis, one or two) and k x k up to 4 x 4.

Singular vectors and eigenvectors are unique up to sign (up to a phase e^{iθ} for complex matrices), so each
case differentiates a function of the outputs that does not depend on them: each column times the conjugate of
its own first element (u conj(uᵢ₀) ...), or Q and R scaled by R's diagonal.  In complex128 (the complex sweep)
the matrices are complex: unitary factors, Hermitian matrices with noise in the unread triangle and in the
imaginary part of the diagonal (LAPACK reads its real part), complex eigenvalues for eig."""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, Y, array_shape, call, uniform


def side(draw):
    return draw(st.integers(1, 4))


def batch_shape(draw):
    return array_shape(draw, 0, 2, max_side=3)


def working(dtype):
    """The dtype matrices are built in: complex128 for a complex ``dtype``, else float64."""
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def orthogonal(draw, batch, n, dtype=np.float64):
    """A random orthogonal (unitary, for a complex ``dtype``) (n, n) matrix per batch element."""
    return np.linalg.qr(uniform(draw, batch + (n, n), working(dtype)))[0]


def spaced(draw, batch, n, low=1.0):
    """n values per batch element, shuffled, at least 0.5 apart: low, low + 0.5, ... (float64)."""
    values = low + 0.5 * np.arange(n) + uniform(draw, batch + (n,), np.float64, 0.0, 0.2)
    order = np.argsort(uniform(draw, batch + (n,), np.float64), axis=-1)
    return np.take_along_axis(values, order, axis=-1)


def with_singular_values(draw, dtype, batch, m, n):
    """U diag(s) Vᵀ with s spaced (1, 1.5, 2, ...): well-conditioned, no near-repeated singular value."""
    k = min(m, n)
    u, v = orthogonal(draw, batch, m, dtype)[..., :k], orthogonal(draw, batch, n, dtype)[..., :k]
    return ((u * spaced(draw, batch, k)[..., None, :]) @ np.conjugate(np.swapaxes(v, -1, -2))).astype(dtype)


def symmetric_with_noise(draw, dtype, batch, n, eigenvalues):
    """Q diag(w) Qᴴ plus noise in the upper triangle, which NumPy's default (lower) reading ignores, and (complex)
    in the imaginary part of the diagonal, which LAPACK ignores."""
    q = orthogonal(draw, batch, n, dtype)
    a = (q * eigenvalues[..., None, :]) @ np.conjugate(np.swapaxes(q, -1, -2))
    noise = np.triu(uniform(draw, batch + (n, n), working(dtype)), 1)
    if np.dtype(dtype).kind == "c":
        noise = noise + 1j * np.eye(n) * uniform(draw, batch + (n, 1), np.float64)
    return (a + noise).astype(dtype)


def transposed(a):
    """The matrices of ``a`` transposed (not conjugated: the unread triangle's noise moves to the other one,
    and the matrix read becomes the conjugate of the one read before)."""
    return np.swapaxes(a, -1, -2).copy()


def columns_sign_free(v):
    """vᵢⱼ conj(v₀ⱼ): each column times the conjugate of its own first element, unchanged by the column's sign
    (or phase)."""
    return v * np.conjugate(v[..., :1, :])


def rows_sign_free(vt):
    return vt * np.conjugate(vt[..., :, :1])


# --- svd, svdvals -------------------------------------------------------------------------------------------
def build_svd(full_matrices):
    def build(draw, dtype):
        m, n = side(draw), side(draw)
        a = with_singular_values(draw, dtype, batch_shape(draw), m, n)
        svd = call(draw, np.linalg.svd, X, full_matrices=full_matrices)
        k = min(m, n)

        def fn(a):
            u, s, vt = svd(a)
            return columns_sign_free(u[..., :k]), s, rows_sign_free(vt[..., :k, :])

        return fn, [a]

    return build


def build_svd_square_full(draw, dtype):
    """full_matrices=True (the default) of a square matrix: every column is unique up to sign."""
    n = side(draw)
    a = with_singular_values(draw, dtype, batch_shape(draw), n, n)
    svd = call(draw, np.linalg.svd, X)

    def fn(a):
        u, s, vt = svd(a)
        return u @ (s[..., :, None] * vt), columns_sign_free(u)

    return fn, [a]


def build_singular_values(func, **kwargs):
    def build(draw, dtype):
        a = with_singular_values(draw, dtype, batch_shape(draw), side(draw), side(draw))
        return call(draw, func, X, **kwargs), [a]

    return build


def build_svd_hermitian(draw, dtype):
    """hermitian=True reads the lower triangle of a symmetric matrix; eigenvalues of both signs, distinct |w|."""
    n, batch = side(draw), batch_shape(draw)
    signs = np.where(uniform(draw, batch + (n,), np.float64) > 0, 1.0, -1.0)
    a = symmetric_with_noise(draw, dtype, batch, n, signs * spaced(draw, batch, n))
    svd = call(draw, np.linalg.svd, X, hermitian=True)

    def fn(a):
        u, s, vt = svd(a)
        return columns_sign_free(u), s, rows_sign_free(vt)

    return fn, [a]


# --- eigh, eigvalsh, eig, eigvals ------------------------------------------------------------------------------
def build_eigh(uplo, values_only=False):
    def build(draw, dtype):
        n, batch = side(draw), batch_shape(draw)
        a = symmetric_with_noise(draw, dtype, batch, n, spaced(draw, batch, n, low=-1.0))
        if uplo == "U":
            a = transposed(a)  # the noise in the lower triangle, which UPLO='U' ignores
        if values_only:
            return call(draw, np.linalg.eigvalsh, X, UPLO=uplo), [a]
        eigh = call(draw, np.linalg.eigh, X, UPLO=uplo)

        def fn(a):
            w, v = eigh(a)
            return w, columns_sign_free(v)

        return fn, [a]

    return build


def with_real_eigenvalues(draw, dtype, batch, n):
    """P diag(w) P⁻¹, P = I + noise well-conditioned, w spaced: real distinct eigenvalues, generic vectors
    (complex ``dtype``: complex P and w, the real parts of w spaced)."""
    p = np.eye(n) + uniform(draw, batch + (n, n), working(dtype), -0.3, 0.3)
    w = spaced(draw, batch, n, low=-1.0)
    if np.dtype(dtype).kind == "c":
        w = w + 1j * uniform(draw, batch + (n,), np.float64, -1.0, 1.0)
    a = (p * w[..., None, :]) @ np.linalg.inv(p)
    return a.astype(dtype)


def with_complex_eigenvalues(draw, dtype, batch, n):
    """A real matrix (complex for a complex ``dtype``) P B P⁻¹ with B of 2 x 2 blocks [[a, -b], [b, a]],
    eigenvalues a ± ib (b >= 0.5, the real parts a spaced), and one real eigenvalue when n is odd."""
    p = np.eye(n) + uniform(draw, batch + (n, n), working(dtype), -0.3, 0.3)
    real, imag = spaced(draw, batch, n, low=-1.0), uniform(draw, batch + (n,), np.float64, 0.5, 1.5)
    b = np.zeros(batch + (n, n))
    for k in range(0, n - 1, 2):
        b[..., k, k] = b[..., k + 1, k + 1] = real[..., k]
        b[..., k + 1, k], b[..., k, k + 1] = imag[..., k], -imag[..., k]
    if n % 2:
        b[..., -1, -1] = real[..., -1]
    return (p @ b @ np.linalg.inv(p)).astype(dtype)


def parts(outputs):
    """The real and imaginary parts of each output: real results of a real matrix's complex eigenvalues
    (the sweeps of real dtypes project real results)."""
    return [p for o in outputs for p in (np.real(o), np.imag(o))]


def build_eig(eigenvalues):
    def build(draw, dtype):
        a = eigenvalues(draw, dtype, batch_shape(draw), side(draw))

        def fn(a):
            w, v = np.linalg.eig(a)
            return parts([w, columns_sign_free(v)])

        return fn, [a]

    return build


def build_eigvals(eigenvalues):
    def build(draw, dtype):
        a = eigenvalues(draw, dtype, batch_shape(draw), side(draw))
        if eigenvalues is with_real_eigenvalues:
            return call(draw, np.linalg.eigvals, X), [a]
        return (lambda a: parts([np.linalg.eigvals(a)])), [a]

    return build


# --- cholesky, qr ------------------------------------------------------------------------------------------------
def build_cholesky(draw, dtype):
    """A symmetric positive definite matrix plus noise in the triangle that ``upper`` leaves unread."""
    n, batch = side(draw), batch_shape(draw)
    upper = draw(st.booleans())
    a = symmetric_with_noise(draw, dtype, batch, n, spaced(draw, batch, n))
    if upper:
        a = transposed(a)
    cholesky = call(draw, np.linalg.cholesky, X, upper=upper) if upper or draw(st.booleans()) \
        else call(draw, np.linalg.cholesky, X)
    return cholesky, [a]


def build_qr(mode, shape):
    """Q and R scaled by R's diagonal (qᵢⱼ rⱼⱼ, rᵢⱼ rᵢᵢ): unchanged by the sign LAPACK gives each column."""

    def build(draw, dtype):
        n = side(draw)
        m = {"square": n, "tall": n + draw(st.integers(1, 2)), "wide": max(n - draw(st.integers(1, 3)), 1)}[shape]
        a = with_singular_values(draw, dtype, batch_shape(draw), m, n)
        k = min(m, n)
        qr = call(draw, np.linalg.qr, X, mode=mode) if mode != "reduced" or draw(st.booleans()) \
            else call(draw, np.linalg.qr, X)

        def fn(a):
            if mode == "r":
                r = qr(a)
                return r * np.diagonal(r, 0, -2, -1)[..., :, None]
            q, r = qr(a)
            d = np.diagonal(r, 0, -2, -1)
            return q[..., :k] * d[..., None, :], r[..., :k, :] * d[..., :, None]

        return fn, [a]

    return build


CASES = [
    Case(np.linalg.svd, build_svd(False), name="svd_reduced"),
    Case(np.linalg.svd, build_svd(True), name="svd_full_matrices_leading_columns"),
    Case(np.linalg.svd, build_svd_square_full, name="svd_square_full"),
    Case(np.linalg.svd, build_singular_values(np.linalg.svd, compute_uv=False), name="svd_compute_uv_false"),
    Case(np.linalg.svd, build_svd_hermitian, name="svd_hermitian"),
    Case(np.linalg.svdvals, build_singular_values(np.linalg.svdvals), name="svdvals"),
    Case(np.linalg.eigh, build_eigh("L"), name="eigh_lower"),
    Case(np.linalg.eigh, build_eigh("U"), name="eigh_upper"),
    Case(np.linalg.eigvalsh, build_eigh("L", values_only=True), name="eigvalsh_lower"),
    Case(np.linalg.eigvalsh, build_eigh("U", values_only=True), name="eigvalsh_upper"),
    Case(np.linalg.eig, build_eig(with_real_eigenvalues), name="eig_real_distinct"),
    Case(np.linalg.eigvals, build_eigvals(with_real_eigenvalues), name="eigvals_real_distinct"),
    Case(np.linalg.eig, build_eig(with_complex_eigenvalues), name="eig_complex_eigenvalues"),
    Case(np.linalg.eigvals, build_eigvals(with_complex_eigenvalues), name="eigvals_complex_eigenvalues"),
    Case(np.linalg.cholesky, build_cholesky, name="cholesky"),
    *[Case(np.linalg.qr, build_qr(mode, shape), name=f"qr_{mode}_{shape}")
      for mode in ("reduced", "r") for shape in ("square", "tall", "wide")],
    Case(np.linalg.qr, build_qr("complete", "square"), name="qr_complete_square"),
    Case(np.linalg.qr, build_qr("complete", "wide"), name="qr_complete_wide"),
    Case(np.linalg.qr, build_qr("complete", "tall"), name="qr_complete_tall_leading_columns"),
]


# --- pinv, lstsq, cond ---------------------------------------------------------------------------------------------
def build_pinv(draw, dtype):
    """Square, tall and wide, batched; the cutoff by rcond or rtol (no singular value cut), or hermitian."""
    batch = batch_shape(draw)
    if draw(st.booleans()):
        n = side(draw)
        signs = np.where(uniform(draw, batch + (n,), np.float64) > 0, 1.0, -1.0)
        a = symmetric_with_noise(draw, dtype, batch, n, signs * spaced(draw, batch, n))
        return call(draw, np.linalg.pinv, X, hermitian=True), [a]
    a = with_singular_values(draw, dtype, batch, side(draw), side(draw))
    cutoff = draw(st.sampled_from([{}, {"rcond": 1e-3}, {"rtol": 1e-3}, {"rtol": None}]))
    return call(draw, np.linalg.pinv, X, **cutoff), [a]


def build_lstsq(draw, dtype):
    """x, residuals (tall A: ‖b - Ax‖² per column) and s, in A and in b (a vector or k columns)."""
    n = side(draw)
    m = n + draw(st.integers(-min(n - 1, 2), 2))
    a = with_singular_values(draw, dtype, (), m, n)
    b = uniform(draw, (m,) if draw(st.booleans()) else (m, side(draw)), dtype)
    lstsq = call(draw, np.linalg.lstsq, X, Y, rcond=None)

    def fn(a, b):
        x, residuals, _, s = lstsq(a, b)
        return x, residuals, s

    return fn, [a, b]


def build_cond(p):
    def build(draw, dtype):
        n = side(draw)
        m = n if p not in (None, 2, -2) else side(draw)
        a = with_singular_values(draw, dtype, batch_shape(draw), m, n)
        return (call(draw, np.linalg.cond, X) if p is None else call(draw, np.linalg.cond, X, p)), [a]

    return build


COND_ORDS = (None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf)

CASES += [
    Case(np.linalg.pinv, build_pinv, name="pinv"),
    Case(np.linalg.lstsq, build_lstsq, name="lstsq"),
    *[Case(np.linalg.cond, build_cond(p), name=f"cond_p_{p}") for p in COND_ORDS],
]
