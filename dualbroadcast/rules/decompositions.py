"""Reverse rules of the matrix decompositions, svd, svdvals, eigh, eigvalsh, eig, eigvals, cholesky, qr,
and of the functions NumPy computes through the SVD: pinv, lstsq, cond.

(The other np.linalg functions, inv, solve, det, matrix_power, tensorsolve, the products..., are in
linalg.py; np.linalg.norm is in reductions.py.)

Notation: ``Xᵀ`` transposes the last two axes, ``Xᴴ`` conjugates and transposes them (``Xᵀ`` for a real X),
and every formula is batched over leading axes as NumPy's functions are; ``Ā`` is the cotangent of the
input, ``Ū``, ``s̄``, ... those of the outputs.
Each output has its own pullback (the formulas are linear in the output cotangents).  The formulas
are those of Giles 2008 ("An extended collection of matrix derivative results") for eig, eigh and
svd, Townsend 2016 for the complement terms of a non-square svd, Murray 2016 for Cholesky, Walter &
Lehmann 2010 (arXiv:1001.1654) for a tall or square QR (a wide one splits A = [A₁ A₂], R₂ = QᵀA₂),
Golub & Pereyra 1973 for pinv; ``tests/rules/test_decompositions.py`` checks each against ``jax.vjp`` (float64 and
complex128) and ``tests/rules/test_rules.py`` against finite differences (complex128: in x and y apart).

Complex matrices, in JAX's convention (rules/complex.py).  Every formula but eig's is written with ``Xᴴ``,
as the literature writes complex matrix derivatives, for the pairing Re tr(Āᴴ dA): for a real matrix it is
the real formula, and for a complex one JAX's cotangents are its conjugates (`conjugate_cotangents`: in and
out).  The complex case adds to the real formulas only what the phases need: svd's phase term
i Im diag(UᴴŪ)/s (`rotation_factors`' diagonal), a real diagonal wherever LAPACK reads or makes one (the
diagonal of a Hermitian input, R's in qr: `one_triangle`, `copyltu`).  eig and eigvals are holomorphic in A
(but for the unit norm of V's columns), so their rule is written in JAX's convention, plain transposes; a
real matrix with complex eigenvalues gets the real part of its complex gradient.

Conventions:

* One triangle.  eigh and eigvalsh (``UPLO``), cholesky (``upper=``) and svd with ``hermitian=True``
  read one triangle of A (the other never changes NumPy's result), so the gradient lands in that
  triangle: ``Ā = tril(G + Gᴴ, -1) + Re diag(G)`` for the lower one, G the gradient on Hermitian
  (symmetric) matrices; LAPACK reads the real part of a complex diagonal.  For a Hermitian A built from
  other variables the chain rule gives the same gradient as JAX's (which symmetrises A first and spreads
  G over both triangles); on a non-Hermitian A finite differences agree with this one.
* Signs and phases.  Singular vectors and eigenvectors are unique up to sign, complex ones up to a phase
  e^{iθ} (for svd one phase for the pair uⱼ, vⱼ): the gradient is that of the vectors NumPy returned, exact
  for any loss that does not depend on their signs or phases (u uᴴ, U diag(s) Vᴴ, v conj(v₀)).  A loss that
  depends on the phases (Re u₀₀) gets JAX's gauge: for eigh and svd the derivative along the path on which
  V's phases are held, Im diag(Vᴴ dV) = 0 (svd's U's turn with V's); LAPACK's phases follow no such path,
  so finite differences of such a loss disagree (tests/rules/test_decompositions.py pins the path).  eig's
  eigenvectors are LAPACK's, each of unit norm with its largest component real, and that normalisation is
  differentiated (as JAX does): exact for every loss, finite differences agree.
* Repeated values.  Two eigenvalues or singular values equal within rounding (8 n ε max|v|) are a tie,
  where JAX gives inf or nan.  eigh: the factor 1/(wⱼ - wᵢ) of the eigenvectors' cotangent is 0 at a
  tie, exact for a loss of the repeated eigenvalue's eigenspace (its projector), whatever basis LAPACK
  chose in it.  svd: the vectors' factors are written 1/(sⱼ - sᵢ) ± 1/(sⱼ + sᵢ) and the first is 0 at a
  tie, exact for a loss invariant under U → UQ, V → VQ within a repeated value's singular subspaces
  (U Vᵀ, U diag(s) Vᵀ, projectors).  A zero singular value of a non-square matrix gets 1/s = 0 in
  its complement term, as in JAX.  eig's eigenvectors at a repeated eigenvalue are an error (when their
  gradient is needed).
* Completing columns.  svd(full_matrices=True) of a non-square matrix and qr(mode='complete') of a
  tall one add orthonormal columns completing a basis, which are not unique: their cotangent must
  be zero (use only ``u[..., :k]``), else an error.  JAX refuses svd's; for qr it differentiates the
  completion its Householder reflectors make (Papanicolopulos 2024), which NumPy does not promise.
  Rows of R that are zero by construction have no gradient.
* qr needs a full-rank leading square block (R invertible, else LinAlgError); cholesky a positive
  definite A (as NumPy itself).  pinv and lstsq's solution and residuals need a matrix of full rank
  (no singular value cut by rcond/rtol): at a rank change they are not differentiable, an error
  (for lstsq, when their gradient is needed: its singular values are differentiable).
* lstsq is differentiable in ``a`` and in ``b`` (its rank and singular values do not depend on ``b``).
"""

import numpy as np

from ..errors import UnsupportedFunctionError
from ..registry import COMPLEX_RULES, OUTPUTS, RULES, Rule, defvjp, defvjp_complex, defvjp_outputs, holds_for_complex
from .linalg import adjoint as H
from .linalg import conjugate_cotangents, inv_vjp
from .reductions import norm_vjp


def diagonal_matrix(v):
    """diag(v) for a stack of vectors: (..., k) -> (..., k, k)."""
    return v[..., :, None] * np.eye(np.shape(v)[-1], dtype=v.dtype)


def inverse_gaps(values):
    """F with Fᵢⱼ = 1 / (vⱼ - vᵢ), 0 on the diagonal and at ties: |vⱼ - vᵢ| within rounding, 8 n ε max|v|
    (LAPACK returns a repeated value with gaps of a few ε; see Conventions)."""
    gaps = values[..., None, :] - values[..., :, None]
    eps = np.finfo(values.dtype).eps
    tie = 8 * values.shape[-1] * eps * np.max(np.abs(values), axis=-1, initial=0)[..., None, None]
    return reciprocal(gaps, np.abs(gaps) > tie)


def reciprocal(s, where=None):
    """1/s where ``where`` (default: s ≠ 0), 0 elsewhere; written with np.where (no out=), so that a second
    derivative records it."""
    where = s != 0 if where is None else where
    return np.where(where, 1 / np.where(where, s, 1), 0)


def one_triangle(g, lower):
    """Ā for a function reading only one triangle of A, from its gradient G on Hermitian (symmetric)
    matrices: ``tril(G + Gᴴ, -1) + Re diag(G)`` (``triu`` for the upper triangle; LAPACK reads only the
    real part of a Hermitian matrix's diagonal)."""
    both = g + H(g)
    off = np.tril(both, -1) if lower else np.triu(both, 1)
    return off + np.real(g) * np.eye(np.shape(g)[-1], dtype=np.real(g).dtype)


def leading(g, k, axis, what):
    """The first ``k`` columns (axis -1) or rows (axis -2) of the cotangent ``g``: the others belong to
    columns completing an orthonormal basis, which are not unique, and must have a zero cotangent."""
    g = np.moveaxis(g, axis, -1)
    if np.any(g[..., k:]):
        raise UnsupportedFunctionError(
            f"{what} has no unique gradient: its columns past the first min(m, n) = {k} complete an "
            "orthonormal basis, any basis; use full_matrices=False (qr: mode='reduced'), or only "
            "the leading columns (u[..., :k])"
        )
    return np.moveaxis(g[..., :k], -1, axis)


# --- svd ------------------------------------------------------------------------------------------------
def singular_values_adjoint(u, vt, g):
    """A = U diag(s) Vᴴ: Ā = U diag(s̄) Vᴴ."""
    return (u * g[..., None, :]) @ vt


def rotation_factors(s, sign):
    """1/(sⱼ - sᵢ) ± 1/(sⱼ + sᵢ): the factors of the anti-Hermitian parts of UᴴŪ (+) and VᴴV̄ (-), the first
    0 at a tie, the second at sᵢ = sⱼ = 0.  Written apart, the ``1/(sᵢ + sⱼ)`` part of a repeated
    value survives (that of U Vᴴ: see Conventions); together they are 2sⱼ/(sⱼ² - sᵢ²) and 2sᵢ/(sⱼ² - sᵢ²).
    On the diagonal (the phases, imaginary: zero for real matrices) 1/sᵢ for U and 0 for V: a column pair's
    common phase is U's (JAX's gauge, see Conventions)."""
    factors = inverse_gaps(s) + sign * reciprocal(s[..., None, :] + s[..., :, None])
    return factors + diagonal_matrix(reciprocal(2 * s))


def left_vectors_adjoint(u, s, vt, g):
    """Ā = U [F₊∘(X - Xᴴ)/2] Vᴴ + (I - UUᴴ) Ū S⁻¹ Vᴴ, X = UᴴŪ, F₊ = `rotation_factors` (+); the
    second term for tall A."""
    x = H(u) @ g
    a = u @ (rotation_factors(s, 1) * (x - H(x)) / 2) @ vt
    if u.shape[-2] > u.shape[-1]:
        a = a + ((g - u @ x) * reciprocal(s)[..., None, :]) @ vt
    return a


def right_vectors_adjoint(u, s, vt, g):
    """With V̄ = gᴴ: Ā = U [F₋∘(X - Xᴴ)/2] Vᴴ + U S⁻¹ V̄ᴴ (I - VVᴴ), X = VᴴV̄, F₋ = `rotation_factors` (-);
    the second term for wide A."""
    x = vt @ H(g)
    a = u @ (rotation_factors(s, -1) * (x - H(x)) / 2) @ vt
    if vt.shape[-1] > vt.shape[-2]:
        a = a + (u * reciprocal(s)[..., None, :]) @ (g - H(x) @ vt)
    return a


def read_by(pullback, hermitian):
    """``pullback`` as the cotangent of A itself: with ``hermitian``, NumPy reads A's lower triangle only."""
    return (lambda g: one_triangle(pullback(g), lower=True)) if hermitian else pullback


def svd_vjp(j, ans, a, full_matrices=True, compute_uv=True, hermitian=False):
    """(U, s, Vᴴ) = svd(A); with compute_uv=False the result is s alone (output 0)."""
    if not compute_uv:
        u, _, vt = np.linalg.svd(a, full_matrices=False, hermitian=hermitian)
        return read_by(lambda g: singular_values_adjoint(u, vt, g), hermitian)
    u, s, vt = ans
    k = s.shape[-1]
    u, vt = u[..., :, :k], vt[..., :k, :]
    backs = (
        lambda g: left_vectors_adjoint(u, s, vt, leading(g, k, -1, "U of svd(full_matrices=True)")),
        lambda g: singular_values_adjoint(u, vt, g),
        lambda g: right_vectors_adjoint(u, s, vt, leading(g, k, -2, "Vᴴ of svd(full_matrices=True)")),
    )
    return read_by(backs[j], hermitian)


def svdvals_vjp(ans, x, /):
    """s = svdvals(A): Ā = U diag(s̄) Vᴴ."""
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    return lambda g: singular_values_adjoint(u, vt, g)


# --- eigh, eigvalsh, eig, eigvals -----------------------------------------------------------------------
def eigh_vjp(j, ans, a, UPLO="L"):
    """(w, V) = eigh(A): G = V diag(w̄) Vᴴ, or G = V [F∘(VᴴV̄)] Vᴴ with Fᵢⱼ = 1/(wⱼ - wᵢ), into UPLO's triangle."""
    w, v = ans
    lower = UPLO.upper() == "L"
    if j == 0:
        return lambda g: one_triangle((v * g[..., None, :]) @ H(v), lower)
    gaps = inverse_gaps(w)
    return lambda g: one_triangle(v @ (gaps * (H(v) @ g)) @ H(v), lower)


def eigvalsh_vjp(ans, a, UPLO="L"):
    """w = eigvalsh(A): G = V diag(w̄) Vᴴ, into UPLO's triangle."""
    return eigh_vjp(0, np.linalg.eigh(a, UPLO), a, UPLO)


def eigenvector_basis_adjoint(v, d):
    """A = V diag(w) V⁻¹: Ā = V⁻ᵀ D̄ Vᵀ for the cotangent D̄ of V⁻¹ dA V (plain transposes: holomorphic)."""
    vt = np.swapaxes(v, -1, -2)
    return np.linalg.solve(vt, d @ vt)


def lapack_normalisation_adjoint(v, g):
    """V̄' = V̄ - conj(V) Re(d) - i eₖ Im(d) / vₖ (per column, d = diag(VᵀV̄), k its largest component): the
    cotangent of U in dV = U + V diag(c), where c fixes LAPACK's normalisation of each column, a unit norm
    (Re c = -Re vᴴu) and its largest component real (Im c = -Im uₖ / vₖ)."""
    d = np.sum(v * g, axis=-2, keepdims=True)
    g = g - np.conjugate(v) * np.real(d)
    if not np.iscomplexobj(v):
        return g
    largest = np.argmax(np.abs(v), axis=-2)[..., None, :]  # the first of equal ones, as LAPACK's
    at_largest = np.arange(v.shape[-2])[:, None] == largest
    return g - 1j * at_largest * np.imag(d) / np.real(np.take_along_axis(v, largest, axis=-2))


def eig_vjp(j, ans, a):
    """(w, V) = eig(A), V's columns as LAPACK normalises them: Ā = V⁻ᵀ diag(w̄) Vᵀ, or Ā = V⁻ᵀ [F∘(Vᵀ V̄')] Vᵀ
    with V̄' the cotangent before the normalisation (`lapack_normalisation_adjoint`) and Fᵢⱼ = 1/(wⱼ - wᵢ).
    In JAX's convention as written: w and V⁻¹ dA V are holomorphic in A, the normalisation is not."""
    w, v = ans
    if j == 0:
        return lambda g: eigenvector_basis_adjoint(v, diagonal_matrix(g))
    gaps = inverse_gaps(w)
    repeated = np.any(np.sum(gaps == 0, axis=-1) > 1)

    def pullback(g):
        if repeated:
            raise UnsupportedFunctionError(
                "the eigenvectors of np.linalg.eig have no derivative at a repeated eigenvalue; differentiate "
                "the eigenvalues only, or use np.linalg.eigh for a symmetric matrix"
            )
        g = lapack_normalisation_adjoint(v, g)
        return eigenvector_basis_adjoint(v, gaps * (np.swapaxes(v, -1, -2) @ g))

    return pullback


def eigvals_vjp(ans, a):
    """w = eigvals(A): Ā = V⁻ᵀ diag(w̄) Vᵀ."""
    return eig_vjp(0, np.linalg.eig(a), a)


# --- cholesky -------------------------------------------------------------------------------------------
def half_diagonal_lower(x):
    """Φ(X): the lower triangle of X with its diagonal halved."""
    return np.tril(x) - 0.5 * x * np.eye(np.shape(x)[-1], dtype=x.dtype)


def cholesky_vjp(ans, a, /, *, upper=False):
    """A = L Lᴴ: G = L⁻ᴴ Φ(Lᴴ L̄) L⁻¹ into the lower triangle; upper=True: L = Rᴴ, L̄ = R̄ᴴ, the upper one."""
    lower = H(ans) if upper else ans
    inverse = np.linalg.inv(lower)

    def pullback(g):
        g = H(g) if upper else g
        return one_triangle(H(inverse) @ half_diagonal_lower(H(lower) @ g) @ inverse, lower=not upper)

    return pullback


# --- qr ---------------------------------------------------------------------------------------------------
def copyltu(m):
    """triu(M, 1) + triu(M, 1)ᴴ + Re diag(M): the Hermitian matrix of M's upper triangle (R's diagonal
    is real: LAPACK's Householder QR makes it so)."""
    return np.triu(m, 1) + H(np.triu(m, 1)) + np.real(m) * np.eye(np.shape(m)[-1], dtype=np.real(m).dtype)


def qr_adjoint(q, r, q_bar, r_bar):
    """A = QR, Q (m, k), R (k, n), k = min(m, n).  m >= n: Ā = (Q̄ + Q copyltu(M)) R⁻ᴴ with
    M = R̄Rᴴ - QᴴQ̄.  m < n, A = [A₁ A₂], R = [R₁ R₂]: Ā₂ = Q R̄₂, and Ā₁ the square case with Q̄ + A₂ R̄₂ᴴ."""
    m, n = q.shape[-2], r.shape[-1]
    if m < n:
        r1, r2, r1_bar, r2_bar = r[..., :m], r[..., m:], r_bar[..., :m], r_bar[..., m:]
        a1_bar = qr_adjoint(q, r1, q_bar + (q @ r2) @ H(r2_bar), r1_bar)
        return np.concatenate([a1_bar, q @ r2_bar], axis=-1)
    x = q_bar + q @ copyltu(r_bar @ H(r) - H(q) @ q_bar)
    return H(np.linalg.solve(r, H(x)))


def qr_vjp(j, ans, a, mode="reduced"):
    """(Q, R) = qr(A) (mode 'reduced' or 'complete'), or R alone (mode 'r', output 0)."""
    if mode not in ("reduced", "complete", "r"):
        raise UnsupportedFunctionError(
            f"np.linalg.qr(a, mode={mode!r}) has no derivative rule (Householder reflectors); "
            "use mode='reduced', 'complete' or 'r'"
        )
    q, r = (np.linalg.qr(a)[0], ans) if mode == "r" else ans
    k = min(np.shape(a)[-2:])
    q, r = q[..., :, :k], r[..., :k, :]  # complete, tall: R's last rows are zero by construction
    if j == 0 and mode != "r":
        return lambda g: qr_adjoint(q, r, leading(g, k, -1, "Q of qr(mode='complete')"), np.zeros_like(r))
    return lambda g: qr_adjoint(q, r, np.zeros_like(q), g[..., :k, :])


# --- pinv, lstsq, cond: through the SVD -----------------------------------------------------------------------
def full_rank(a, rcond, hermitian, rtol, name):
    """A clear error when NumPy's cutoff (rcond or rtol times the largest singular value) drops a singular value."""
    if rcond is None:
        rcond = 1e-15 if rtol is np._NoValue else max(np.shape(a)[-2:]) * np.finfo(a.dtype).eps if rtol is None \
            else rtol
    s = np.linalg.svd(a, compute_uv=False, hermitian=hermitian)
    if not np.all(s > np.asarray(rcond)[..., None] * np.max(s, axis=-1, keepdims=True)):
        raise UnsupportedFunctionError(
            f"{name} of a rank-deficient matrix (a singular value at or below the rcond/rtol cutoff) is not "
            "differentiable: its rank changes under perturbation; regularise the matrix (A + εI, ridge) or "
            "remove the dependent rows/columns"
        )


def pseudo_inverse_adjoint(a, x, g):
    """X = A⁺, A of full rank: Ā = -Xᴴ G Xᴴ + (I - A X) Gᴴ X Xᴴ + Xᴴ X Gᴴ (I - X A) (Golub & Pereyra 1973)."""
    xt, gt = H(x), H(g)
    return -xt @ g @ xt + (gt - a @ (x @ gt)) @ (x @ xt) + (xt @ x) @ (gt - (gt @ x) @ a)


def lower_hermitian(a):
    """The Hermitian (symmetric) matrix of A's lower triangle and the real part of its diagonal, what NumPy
    reads with hermitian=True."""
    lower = np.tril(a, -1)
    return lower + H(lower) + np.real(a) * np.eye(np.shape(a)[-1], dtype=np.real(a).dtype)


def pinv_vjp(ans, a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """X = A⁺ (`pseudo_inverse_adjoint`); hermitian=True reads A's lower triangle."""
    full_rank(a, rcond, hermitian, rtol, "np.linalg.pinv")
    a = lower_hermitian(a) if hermitian else a
    return read_by(lambda g: pseudo_inverse_adjoint(a, ans, g), hermitian)


def lstsq_vjp(j, ans, a, b, rcond=None):
    """(x, residuals, rank, s) = lstsq(A, b), A of full rank: x = A⁺ b, so Ā is A⁺'s adjoint for
    Ḡ = x̄ bᴴ; residuals ‖b - A x‖² at the optimum: Ā = -2 r diag(ḡ) xᴴ, r = b - A x; s as svdvals."""
    if j == 3:
        return svdvals_vjp(ans[3], a)
    x, residuals, rank, _ = ans
    if j == 1 and np.size(residuals) == 0:  # NumPy returns none (rank-deficient, square or wide A)
        return lambda g: np.zeros_like(a)
    if rank < min(np.shape(a)):
        return rank_deficient_lstsq
    b, x = (b[:, None], x[:, None]) if np.ndim(b) == 1 else (b, x)
    if j == 1:
        r = b - a @ x
        return lambda g: -2 * (r * g) @ H(x)
    inverse = np.linalg.pinv(a)
    return lambda g: pseudo_inverse_adjoint(a, inverse, np.reshape(g, x.shape) @ H(b))


def lstsq_b_vjp(j, ans, a, b, rcond=None):
    """(x, residuals, rank, s) = lstsq(A, b) in b, A of full rank: x = A⁺ b, so b̄ = A⁺ᴴ x̄; residuals
    ‖b - A x‖², whose gradient in b is 2 r (r = b - A x is orthogonal to A's range): b̄ = 2 r diag(ḡ); rank and
    s do not depend on b."""
    if j >= 2:
        return None
    x, residuals, rank, _ = ans
    if j == 1 and np.size(residuals) == 0:  # NumPy returns none (rank-deficient, square or wide A)
        return None
    if rank < min(np.shape(a)):
        return rank_deficient_lstsq
    shape = np.shape(b)
    if j == 1:
        r = b - a @ x
        return lambda g: np.reshape(2 * np.reshape(r, (shape[0], -1)) * g, shape)
    return lambda g: H(np.linalg.pinv(a)) @ g


def rank_deficient_lstsq(g):
    """The pullback of lstsq's solution for a rank-deficient matrix: an error once its gradient is needed."""
    raise UnsupportedFunctionError(
        "np.linalg.lstsq of a rank-deficient matrix has no derivative (the solution is not "
        "differentiable where the rank changes); regularise the problem (ridge) or remove dependent columns"
    )


def cond_vjp(ans, x, p=None):
    """p None/2/-2: c = s₁/sₙ (-2: sₙ/s₁), so Ā = U diag(s̄) Vᴴ with s̄ from the quotient rule; any other p:
    c = ‖A‖ ‖A⁻¹‖ through the norm rule (reductions.py, written with conjugates as this module) and inv's
    (in JAX's convention: conjugated)."""
    if p is None or p in (2, -2):
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        top, bottom = (0, -1) if p != -2 else (-1, 0)
        n = np.shape(s)[-1]
        first, last = (np.arange(n) == top % n), (np.arange(n) == bottom % n)  # a 1 x 1 matrix: 1/s - s/s² = 0
        weights = (first - last * s[..., top, None] / s[..., bottom, None]) / s[..., bottom, None]
        return lambda g: singular_values_adjoint(u, vt, np.expand_dims(g, -1) * weights)
    inverse = np.linalg.inv(x)
    norms = [np.linalg.norm(m, p, axis=(-2, -1)) for m in (x, inverse)]
    x_back, inverse_back = (norm_vjp(n, m, p, (-2, -1)) for n, m in zip(norms, (x, inverse)))
    inverse_adjoint = conjugate_cotangents(inv_vjp)(inverse, x)
    return lambda g: x_back(g * norms[1]) + inverse_adjoint(inverse_back(g * norms[0]))


defvjp_outputs(np.linalg.svd, svd_vjp)
defvjp(np.linalg.svdvals, svdvals_vjp)
defvjp_outputs(np.linalg.eigh, eigh_vjp)
defvjp(np.linalg.eigvalsh, eigvalsh_vjp)
defvjp_outputs(np.linalg.eig, eig_vjp)
defvjp(np.linalg.eigvals, eigvals_vjp)
defvjp(np.linalg.cholesky, cholesky_vjp)
defvjp_outputs(np.linalg.qr, qr_vjp)
defvjp(np.linalg.pinv, pinv_vjp)
defvjp_outputs(np.linalg.lstsq, lstsq_vjp, lstsq_b_vjp)
defvjp(np.linalg.cond, cond_vjp)


def defvjp_outputs_complex(func, *makers):
    """Register the complex rule of a tuple-valued ``func``: one maker per argument, as `defvjp_outputs`."""
    COMPLEX_RULES[func] = Rule(RULES[func].impl, OUTPUTS, tuple(makers))


# Complex values: eig and eigvals are written in JAX's convention (holomorphic but for the normalisation);
# the others with conjugate transposes, their complex rules conjugating the cotangents.
holds_for_complex(np.linalg.eig, np.linalg.eigvals)
for _func in (np.linalg.svd, np.linalg.eigh, np.linalg.qr, np.linalg.lstsq):
    defvjp_outputs_complex(_func, *[m and conjugate_cotangents(m) for m in RULES[_func].makers])
for _func in (np.linalg.svdvals, np.linalg.eigvalsh, np.linalg.cholesky, np.linalg.pinv, np.linalg.cond):
    defvjp_complex(_func, *map(conjugate_cotangents, RULES[_func].makers))
