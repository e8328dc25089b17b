"""Mirrors of ``scipy.linalg`` functions (see the package docstring): SciPy's signatures and values, one
tape operation each, for real matrices.  With ``G`` the cotangent of the result ``X``:

* ``expm``, ``sqrtm``, ``logm``: a primary matrix function's adjoint is its Fréchet derivative at ``Aᵀ``
  applied to ``G``, read off the same function of the block matrix ``[[Aᵀ, G], [0, Aᵀ]]`` (its upper right
  block); ``expm_frechet(A, E)`` is that block of ``expm``;
* ``solve_triangular`` (``op(A) X = B``): ``B̄ = op(A)⁻ᵀ G``, ``Ā = -B̄ Xᵀ`` (or ``-X B̄ᵀ`` for ``op = ᵀ``) in
  ``A``'s triangle (its diagonal zero with ``unit_diagonal``);
* ``solve_sylvester`` (``AX + XB = Q``): ``Q̄`` solves ``AᵀQ̄ + Q̄Bᵀ = G``, ``Ā = -Q̄Xᵀ``, ``B̄ = -XᵀQ̄``;
  ``solve_continuous_lyapunov`` (``AX + XAᵀ = Q``): ``Q̄`` solves ``AᵀQ̄ + Q̄A = G``, ``Ā = -(Q̄Xᵀ + Q̄ᵀX)``;
* ``solve_banded`` (``A X = B``, ``A`` in banded storage): ``B̄ = A⁻ᵀG``, ``Ā = -B̄Xᵀ`` on the band;
* ``cho_solve((c, lower), B)`` (``A = LLᵀ``, ``L`` the triangle of ``c``): ``B̄ = A⁻¹G``, ``Ā = -B̄Xᵀ``,
  ``L̄ = (Ā + Āᵀ)L`` in the triangle; ``cho_factor(A)``'s ``c`` is ``np.linalg.cholesky``'s factor (zeros in
  the other triangle, which SciPy leaves arbitrary), differentiated by its rule;
* ``lu_solve((lu, piv), B)`` (``A = PLU``): ``Ā = -B̄Xᵀ``, ``L̄ = PᵀĀUᵀ`` below the diagonal and ``Ū = LᵀPᵀĀ``
  on and above it; ``lu_factor(A)``: ``Ā = P L⁻ᵀ (tril(LᵀL̄, -1) + triu(ŪUᵀ)) U⁻ᵀ``;
* ``eigh`` (``A = VWVᵀ``, or the pairs of ``subset_by_index``/``subset_by_value``): Giles' rule over all n pairs
  (``np.linalg.eigh``'s), the cotangents outside the subset zero, ``Ā = V (diag(W̄) + F∘(VᵀV̄)) Vᵀ`` with
  ``Fᵢⱼ = 1/(Wⱼ - Wᵢ)`` (0 at ties), in the triangle SciPy reads (``lower``), as ``np.linalg.eigh``'s rule.

The rules compute with SciPy on plain values: these mirrors give first derivatives (a second derivative
through them is an error from the rule's SciPy call naming the function).
"""

import numpy as np
import scipy.linalg

from ..errors import UnsupportedFunctionError
from ..pullbacks import plain
from ..registry import defvjp, defvjp_outputs
from ..rules.decompositions import inverse_gaps, one_triangle
from ..tracked import primitive

__all__ = ["expm", "expm_frechet", "sqrtm", "logm", "solve_triangular", "solve_sylvester", "solve_continuous_lyapunov",
           "solve_banded", "cho_factor", "cho_solve", "lu_factor", "lu_solve", "eigh"]


def _block_adjoint(function, a, g):
    """The adjoint of a primary matrix function's Fréchet derivative at ``a`` applied to ``g``."""
    a, g = np.asarray(plain(a)), np.asarray(plain(g))
    n = a.shape[0]
    block = np.zeros((2 * n, 2 * n), dtype=np.result_type(a, g))
    block[:n, :n] = block[n:, n:] = a.T
    block[:n, n:] = g
    return np.real_if_close(function(block)[:n, n:])


# --- matrix functions ---------------------------------------------------------------------------------------
@primitive
def expm(A):
    """``scipy.linalg.expm``, differentiable in ``A``."""
    return scipy.linalg.expm(A)


UNSET = object()  # SciPy's default of its deprecated arguments (disp, blocksize): not passed on


@primitive
def sqrtm(A, disp=UNSET, blocksize=UNSET):
    """``scipy.linalg.sqrtm``, differentiable in ``A``."""
    given = {k: v for k, v in (("disp", disp), ("blocksize", blocksize)) if v is not UNSET}
    return scipy.linalg.sqrtm(A, **given)


@primitive
def logm(A, disp=UNSET):
    """``scipy.linalg.logm``, differentiable in ``A``."""
    return scipy.linalg.logm(A) if disp is UNSET else scipy.linalg.logm(A, disp)


def expm_frechet(A, E, method=None, compute_expm=True, check_finite=True):
    """``scipy.linalg.expm_frechet``: ``(expm(A), L)`` or ``L``, the Fréchet derivative of expm at ``A`` in
    the direction ``E``, read off ``expm([[A, E], [0, A]])`` (differentiable in ``A`` and ``E``)."""
    n = np.shape(A)[0]
    zeros = np.zeros((n, n))
    big = expm(np.block([[A, E], [zeros, A]]))
    return (big[:n, :n], big[:n, n:]) if compute_expm else big[:n, n:]


defvjp(expm, lambda ans, A: lambda g: _block_adjoint(scipy.linalg.expm, A, g))
defvjp(sqrtm, lambda ans, A, *rest: lambda g: _block_adjoint(scipy.linalg.sqrtm, A, g), None, None)
defvjp(logm, lambda ans, A, *rest: lambda g: _block_adjoint(scipy.linalg.logm, A, g), None)


# --- triangular, Sylvester, Lyapunov, banded solves -------------------------------------------------------------
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    """``scipy.linalg.solve_triangular``, differentiable in ``a`` and ``b``."""
    trans = {"N": 0, "T": 1, "C": 1}.get(trans, trans)
    return solve_triangular_of(a, b, trans, lower, unit_diagonal)


@primitive
def solve_triangular_of(a, b, trans, lower, unit_diagonal):
    return scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)


def _triangle(m, lower, unit_diagonal):
    """``m`` in the triangle a triangular solve reads (without the diagonal for a unit one)."""
    kept = np.tril(m) if lower else np.triu(m)
    return kept - np.diag(np.diag(kept)) if unit_diagonal else kept


def _outer(u, v):
    """``u vᵀ`` for vectors, ``u @ vᵀ`` for matrices of columns."""
    return np.outer(u, v) if np.ndim(u) == 1 else u @ np.transpose(v)


def triangular_b(ans, a, b, trans, lower, unit_diagonal):
    return lambda g: solve_triangular_of(plain(a), g, 1 - trans, lower, unit_diagonal)


def triangular_a(ans, a, b, trans, lower, unit_diagonal):
    def back(g):
        b_bar = solve_triangular_of(plain(a), g, 1 - trans, lower, unit_diagonal)
        a_bar = -_outer(b_bar, ans) if trans == 0 else -_outer(ans, b_bar)
        return _triangle(a_bar, lower, unit_diagonal)
    return back


defvjp(solve_triangular_of, triangular_a, triangular_b, None, None, None)


@primitive
def solve_sylvester(a, b, q):
    """``scipy.linalg.solve_sylvester`` (``AX + XB = Q``), differentiable in ``a``, ``b`` and ``q``."""
    return scipy.linalg.solve_sylvester(a, b, q)


def _sylvester_q(a, b, g):
    return scipy.linalg.solve_sylvester(np.transpose(plain(a)), np.transpose(plain(b)), plain(g))


defvjp(solve_sylvester,
       lambda ans, a, b, q: lambda g: -_sylvester_q(a, b, g) @ np.transpose(ans),
       lambda ans, a, b, q: lambda g: -np.transpose(ans) @ _sylvester_q(a, b, g),
       lambda ans, a, b, q: lambda g: _sylvester_q(a, b, g))


@primitive
def solve_continuous_lyapunov(a, q):
    """``scipy.linalg.solve_continuous_lyapunov`` (``AX + XAᵀ = Q``), differentiable in ``a`` and ``q``."""
    return scipy.linalg.solve_continuous_lyapunov(a, q)


def _lyapunov_q(a, g):
    return scipy.linalg.solve_continuous_lyapunov(np.transpose(plain(a)), plain(g))


def lyapunov_a(ans, a, q):
    def back(g):
        q_bar = _lyapunov_q(a, g)
        return -(q_bar @ np.transpose(ans) + np.transpose(q_bar) @ ans)
    return back


defvjp(solve_continuous_lyapunov, lyapunov_a, lambda ans, a, q: lambda g: _lyapunov_q(a, g))


def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """``scipy.linalg.solve_banded``, differentiable in ``ab`` and ``b``."""
    lower, upper = l_and_u
    return solve_banded_of(int(lower), int(upper), ab, b)


@primitive
def solve_banded_of(lower, upper, ab, b):
    return scipy.linalg.solve_banded((lower, upper), ab, b)


def _band(lower, upper, n):
    """The rows ``i`` and columns ``j`` of ``A`` that banded storage ``ab[upper + i - j, j]`` holds."""
    rows, cols = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    inside = (cols - rows <= upper) & (rows - cols <= lower)
    return rows[inside], cols[inside]


def _transposed_band(lower, upper, ab):
    """``Aᵀ`` in banded storage (``upper`` and ``lower`` swapped) from ``A``'s ``ab``."""
    n = np.shape(ab)[1]
    rows, cols = _band(lower, upper, n)
    out = np.zeros((lower + upper + 1, n))
    out[lower + cols - rows, rows] = np.asarray(plain(ab))[upper + rows - cols, cols]
    return out


def banded_b(ans, lower, upper, ab, b):
    return lambda g: scipy.linalg.solve_banded((upper, lower), _transposed_band(lower, upper, ab), plain(g))


def banded_ab(ans, lower, upper, ab, b):
    def back(g):
        b_bar = scipy.linalg.solve_banded((upper, lower), _transposed_band(lower, upper, ab), plain(g))
        a_bar = -_outer(b_bar, ans)
        rows, cols = _band(lower, upper, np.shape(ab)[1])
        out = np.zeros(np.shape(ab))
        out[upper + rows - cols, cols] = a_bar[rows, cols]
        return out
    return back


defvjp(solve_banded_of, None, None, banded_ab, banded_b)


# --- Cholesky and LU factorisations ---------------------------------------------------------------------------
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``scipy.linalg.cho_factor``: ``(c, lower)``, ``c`` the factor in its triangle and zeros in the other
    (SciPy leaves that one arbitrary), differentiable in ``a`` through ``np.linalg.cholesky``'s rule."""
    factor = np.linalg.cholesky(a)
    return (factor if lower else np.transpose(factor)), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """``scipy.linalg.cho_solve``, differentiable in the factor ``c`` and in ``b``."""
    c, lower = c_and_lower
    return cho_solve_of(c, bool(lower), b)


@primitive
def cho_solve_of(c, lower, b):
    return scipy.linalg.cho_solve((c, lower), b)


def cho_solve_c(ans, c, lower, b):
    def back(g):
        b_bar = scipy.linalg.cho_solve((plain(c), lower), plain(g))
        a_bar = -_outer(b_bar, ans)
        a_bar = a_bar + a_bar.T
        factor = np.tril(plain(c)) if lower else np.triu(plain(c))
        return np.tril(a_bar @ factor) if lower else np.triu(factor @ a_bar)
    return back


defvjp(cho_solve_of, cho_solve_c, None,
       lambda ans, c, lower, b: lambda g: scipy.linalg.cho_solve((plain(c), lower), plain(g)))


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``scipy.linalg.lu_factor``: ``(lu, piv)``, ``lu`` differentiable in ``a``."""
    return lu_factor_of(a), scipy.linalg.lu_factor(plain(a))[1]


@primitive
def lu_factor_of(a):
    return scipy.linalg.lu_factor(a)[0]


def _permutation(piv):
    """The permutation ``p`` with ``A[p] = L U`` from LAPACK's row interchanges ``piv``."""
    order = np.arange(len(piv))
    for i, j in enumerate(piv):
        order[[i, j]] = order[[j, i]]
    return order


def _factors(lu):
    n = lu.shape[0]
    return np.tril(lu, -1) + np.eye(n), np.triu(lu)


def lu_factor_a(ans, a):
    def back(g):
        lower, upper = _factors(ans)
        order = _permutation(scipy.linalg.lu_factor(plain(a))[1])
        inner = np.tril(lower.T @ np.tril(g, -1), -1) + np.triu(np.triu(g) @ upper.T)
        core = scipy.linalg.solve_triangular(lower, scipy.linalg.solve_triangular(upper, inner.T, lower=False).T,
                                             trans=1, lower=True, unit_diagonal=True)
        out = np.empty_like(core)
        out[order] = core
        return out
    return back


defvjp(lu_factor_of, lu_factor_a)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """``scipy.linalg.lu_solve``, differentiable in ``lu`` and ``b`` (``trans=0``)."""
    lu, piv = lu_and_piv
    return lu_solve_of(lu, np.asarray(piv), b, trans)


@primitive
def lu_solve_of(lu, piv, b, trans):
    return scipy.linalg.lu_solve((lu, piv), b, trans=trans)


def lu_solve_b(ans, lu, piv, b, trans):
    return lambda g: scipy.linalg.lu_solve((plain(lu), piv), plain(g), trans=1 - trans if trans < 2 else 1)


def lu_solve_lu(ans, lu, piv, b, trans):
    def back(g):
        if trans != 0:
            raise NotImplementedError("the gradient of lu_solve in lu with trans=1: pass trans=0 (solve with Aᵀ's "
                                      "factors) or db.cut(lu)")
        lu_value = plain(lu)
        b_bar = scipy.linalg.lu_solve((lu_value, piv), plain(g), trans=1)
        a_bar = -_outer(b_bar, ans)
        lower, upper = _factors(lu_value)
        permuted = a_bar[_permutation(piv)]  # PᵀĀ
        return np.tril(permuted @ upper.T, -1) + np.triu(lower.T @ permuted)
    return back


defvjp(lu_solve_of, lu_solve_lu, None, lu_solve_b, None)


# --- symmetric eigenproblem -------------------------------------------------------------------------------------
def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, type=1,
         check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """``scipy.linalg.eigh`` of a real symmetric ``a``: ``(w, v)``, or ``w`` with ``eigvals_only``, all eigenpairs
    or those of ``subset_by_index``/``subset_by_value``, differentiable in ``a`` (``b=None``)."""
    if b is not None:
        raise UnsupportedFunctionError(
            "scipy.linalg.eigh's generalized problem (b=) has no derivative rule here: with L = cholesky(b), solve "
            "the standard problem of L⁻¹ a L⁻ᵀ (linalg.solve_triangular) and map the vectors back with L⁻ᵀ")
    subset = ("index", tuple(subset_by_index)) if subset_by_index is not None \
        else ("value", tuple(subset_by_value)) if subset_by_value is not None else None
    if eigvals_only:
        return eigvalsh_of(a, lower, subset, driver, check_finite)
    return eigh_of(a, lower, subset, driver, check_finite)


def _subset_keywords(subset):
    return {} if subset is None else {f"subset_by_{subset[0]}": subset[1]}


@primitive
def eigh_of(a, lower, subset, driver, check_finite):
    return scipy.linalg.eigh(a, lower=lower, driver=driver, check_finite=check_finite, **_subset_keywords(subset))


@primitive
def eigvalsh_of(a, lower, subset, driver, check_finite):
    return scipy.linalg.eigh(a, lower=lower, eigvals_only=True, driver=driver, check_finite=check_finite,
                             **_subset_keywords(subset))


def _all_pairs(a, lower, subset, w, v):
    """The full eigendecomposition ``(W, V)`` of ``a`` and the positions in it of the ``k`` pairs returned
    (``w`` and, where given, their vectors ``v``, which replace V's columns there: the signs SciPy chose)."""
    values, vectors = np.linalg.eigh(a, "L" if lower else "U")
    k = len(w)
    if subset is None or subset[0] == "index":
        first = 0 if subset is None else subset[1][0]
    else:  # eigenvalues in (lo, hi]
        first = min(int(np.searchsorted(values, subset[1][0], side="right")), len(values) - k)
    positions = np.arange(first, first + k)
    if v is not None:
        vectors[:, positions] = v
    return values, vectors, positions


def eigh_a(j, ans, a, lower, subset, driver, check_finite):
    """Ā = V (diag(W̄) + F∘(VᵀV̄)) Vᵀ in the triangle SciPy reads, ``Fᵢⱼ = 1/(Wⱼ - Wᵢ)``, over all n pairs with
    zero cotangents outside the subset (a subset's vectors move along every other eigenvector)."""
    w, v = ans
    values, vectors, positions = _all_pairs(plain(a), lower, subset, plain(w), plain(v))

    def back(g):
        full = np.zeros((len(values), len(values)))
        if j == 0:
            full[positions, positions] = plain(g)
        else:
            full[:, positions] = vectors.T @ plain(g)
            full = inverse_gaps(values) * full
        return one_triangle(vectors @ full @ vectors.T, lower)

    return back


def eigvalsh_a(ans, a, lower, subset, driver, check_finite):
    """Ā = Σ w̄ᵢ vᵢvᵢᵀ over the returned eigenvalues, in the triangle SciPy reads."""
    _, vectors, positions = _all_pairs(plain(a), lower, subset, plain(ans), None)
    chosen = vectors[:, positions]
    return lambda g: one_triangle((chosen * plain(g)) @ chosen.T, lower)


defvjp_outputs(eigh_of, eigh_a, None, None, None, None)
defvjp(eigvalsh_of, eigvalsh_a, None, None, None, None)

MIRRORS = {getattr(scipy.linalg, name): globals()[name] for name in (
    "expm", "expm_frechet", "sqrtm", "logm", "solve_triangular", "solve_sylvester", "solve_continuous_lyapunov",
    "solve_banded", "cho_factor", "cho_solve", "lu_factor", "lu_solve", "eigh")}
