"""Linear algebra beyond finite differences: every formula of rules/linalg.py's newer rules and of
rules/decompositions.py against ``jax.vjp`` of the jax.numpy equivalent in float64 and complex128 (skipped
without JAX), and the conventions of decompositions.py's docstring pinned: one triangle, repeated values,
completing columns, rank deficiency, complex eigenvalues of real matrices, the phases of complex vectors.

JAX symmetrises the input of eigh and cholesky; NumPy reads one triangle, so JAX is given the symmetric
matrix of that triangle (`from_triangle`): the same function as NumPy's on every matrix.
"""

import functools

import numpy as np
import pytest

import dualbroadcast as db

RNG = np.random.default_rng(20261125)


@pytest.fixture(scope="module")
def jnp():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy

    return jax.numpy


def jax_gradient(f, *args):
    import jax

    grads = jax.jit(jax.grad(f, argnums=tuple(range(len(args)))))(*args)  # one compilation, not one per operation
    return grads[0] if len(args) == 1 else grads


def assert_matches_jax(f_numpy, f_jax, *args):
    """db.gradient of ``f_numpy`` equals jax.grad of ``f_jax`` (the same function; finite differences are
    tests/rules/test_rules.py's, over the same rules)."""
    ours = db.gradient(f_numpy, *args)
    theirs = jax_gradient(f_jax, *args)
    for a, b in zip(ours if len(args) > 1 else (ours,), theirs if len(args) > 1 else (theirs,)):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-9, atol=1e-11)


def from_triangle(m, a, lower=True):
    """The symmetric matrix of ``a``'s lower (upper) triangle, in module ``m`` (numpy or jax.numpy)."""
    t = m.tril(a) if lower else m.triu(a)
    return t + m.swapaxes(t, -1, -2) - t * m.eye(a.shape[-1])


def spaced_matrix(batch, m, n):
    """U diag(s) Vᵀ with s = 1, 1.7, 2.4, ... (no near tie)."""
    k = min(m, n)
    u = np.linalg.qr(RNG.standard_normal(batch + (m, m)))[0][..., :k]
    v = np.linalg.qr(RNG.standard_normal(batch + (n, n)))[0][..., :k]
    return (u * (1 + 0.7 * np.arange(k))) @ np.swapaxes(v, -1, -2)


SHAPES = [(3, 3), (2, 4, 2), (2, 2, 4), (1, 1)]


# --- decompositions against JAX ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_svd_matches_jax(jnp, shape):
    a = spaced_matrix(shape[:-2], *shape[-2:])
    k = min(shape[-2:])
    wu, ws, wv = (RNG.standard_normal(a.shape[:-2] + s) for s in [(shape[-2],) * 2, (k,), (shape[-1],) * 2])

    def loss(m, full):
        def f(a):
            u, s, vt = m.linalg.svd(a, full_matrices=full)
            u, vt = u[..., :k], vt[..., :k, :]
            projector_u, projector_v = u @ m.swapaxes(u, -1, -2), m.swapaxes(vt, -1, -2) @ vt
            return m.sum(projector_u * wu) + m.sum(s**3 * ws) + m.sum(projector_v * wv)

        return f

    assert_matches_jax(loss(np, False), loss(jnp, False), a)
    np.testing.assert_allclose(db.gradient(loss(np, True), a), db.gradient(loss(np, False), a), rtol=1e-12)
    assert_matches_jax(lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2 * ws),
                       lambda a: jnp.sum(jnp.linalg.svd(a, compute_uv=False) ** 2 * ws), a)
    assert_matches_jax(lambda a: np.sum(np.linalg.svdvals(a) * ws), lambda a: jnp.sum(jnp.linalg.svdvals(a) * ws), a)


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("batch", [(), (2,)], ids=str)
def test_eigh_and_eigvalsh_match_jax_on_the_triangle_read(jnp, uplo, batch):
    """A non-symmetric A: NumPy reads one triangle, so JAX is given that triangle's symmetric matrix."""
    a = RNG.standard_normal(batch + (4, 4)) + np.diag([0.0, 3.0, 6.0, 9.0])
    w1, w2 = RNG.standard_normal(batch + (4,)), RNG.standard_normal(batch + (4, 4))
    lower = uplo == "L"

    def eigh_loss(w, v, m):
        return m.sum(w * w1) + m.sum(v * v[..., :1, :] * w2)

    assert_matches_jax(lambda a: eigh_loss(*np.linalg.eigh(a, uplo), np),
                       lambda a: eigh_loss(*jnp.linalg.eigh(from_triangle(jnp, a, lower)), jnp), a)
    assert_matches_jax(lambda a: np.sum(np.sin(np.linalg.eigvalsh(a, UPLO=uplo)) * w1),
                       lambda a: jnp.sum(jnp.sin(jnp.linalg.eigvalsh(from_triangle(jnp, a, lower))) * w1), a)
    unread = np.triu(np.ones((4, 4)), 1) if lower else np.tril(np.ones((4, 4)), -1)
    assert np.all(db.gradient(lambda a: eigh_loss(*np.linalg.eigh(a, uplo), np), a) * unread == 0)


def test_eig_matches_jax(jnp):
    """Real distinct eigenvalues; JAX computes eig in complex numbers, whose real part is NumPy's."""
    import jax

    p = np.eye(4) + 0.3 * RNG.standard_normal((4, 4))
    a = (p * np.array([-1.0, 0.5, 2.0, 3.0])) @ np.linalg.inv(p)
    w1, w2 = RNG.standard_normal(4), RNG.standard_normal((4, 4))

    def loss(m, real=lambda x: x):
        def f(a):
            w, v = np.linalg.eig(a) if m is np else jax.lax.linalg.eig(  # JAX asks for an opt-in
                a, compute_left_eigenvectors=False, enable_eigvec_derivs=True)
            order = m.argsort(real(w))  # the same order on both sides
            w, v = real(w)[order], v[:, order]
            v = v * m.sign(real(v[:1, :]))  # the same signs (JAX's vectors may differ by a phase: real here)
            return m.sum(w * w1) + m.sum(real(v) * w2)

        return f

    np.testing.assert_allclose(db.gradient(loss(np), a), np.asarray(jax_gradient(loss(jnp, jnp.real), a)),
                               rtol=1e-8, atol=1e-10)
    db.check_gradient(loss(np), a)
    b = (p * np.array([0.5, -1.0, 3.0, 2.0])) @ np.linalg.inv(p)
    assert_matches_jax(lambda a: np.sum(np.linalg.eigvals(a) ** 3),  # symmetric in the eigenvalues: any order
                       lambda a: jnp.sum(jnp.real(jnp.linalg.eigvals(a) ** 3)), b)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_jax_on_the_triangle_read(jnp, upper):
    b = RNG.standard_normal((2, 4, 4))
    a = b @ np.swapaxes(b, -1, -2) + 4 * np.eye(4) + 0.5 * RNG.standard_normal((2, 4, 4))  # not symmetric
    w = RNG.standard_normal((2, 4, 4))

    def jax_cholesky(a):
        lower = jnp.linalg.cholesky(from_triangle(jnp, a, lower=not upper))
        return jnp.swapaxes(lower, -1, -2) if upper else lower

    assert_matches_jax(lambda a: np.sum(np.linalg.cholesky(a, upper=upper) * w),
                       lambda a: jnp.sum(jax_cholesky(a) * w), a)


@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 3), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_jax(jnp, shape, mode):
    """Q and R scaled by R's diagonal, which no column sign changes."""
    m, n = shape[-2:]
    if mode == "complete" and m > n:
        pytest.skip("Q's completing columns are not unique (pinned below)")
    a, k = spaced_matrix(shape[:-2], m, n), min(m, n)
    wq, wr = RNG.standard_normal(shape[:-2] + (m, k)), RNG.standard_normal(shape[:-2] + (k, n))

    def loss(lib):
        def f(a):
            if mode == "r":
                r = lib.linalg.qr(a, mode="r")
                return lib.sum(r * lib.diagonal(r, 0, -2, -1)[..., :, None] * wr)
            q, r = lib.linalg.qr(a, mode=mode)
            d = lib.diagonal(r, 0, -2, -1)
            return lib.sum(q[..., :k] * d[..., None, :] * wq) + lib.sum(r[..., :k, :] * d[..., :, None] * wr)

        return f

    assert_matches_jax(loss(np), loss(jnp), a)


# --- the functions through the SVD and the other matrix functions against JAX -----------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 2), (2, 4)], ids=str)
def test_pinv_matches_jax(jnp, shape):
    a = spaced_matrix(shape[:-2], *shape[-2:])
    w = RNG.standard_normal(shape[:-2] + shape[-2:][::-1])
    assert_matches_jax(lambda a: np.sum(np.linalg.pinv(a) * w), lambda a: jnp.sum(jnp.linalg.pinv(a) * w), a)
    if shape[-1] == shape[-2]:
        assert_matches_jax(lambda a: np.sum(np.linalg.pinv(a, hermitian=True) * w),
                           lambda a: jnp.sum(jnp.linalg.pinv(from_triangle(jnp, a)) * w), a)


@pytest.mark.parametrize("m, n, k", [(5, 3, None), (5, 3, 2), (3, 3, 2), (2, 4, None)])
def test_lstsq_matches_jax(jnp, m, n, k):
    a = spaced_matrix((), m, n)
    b = RNG.standard_normal((m,) if k is None else (m, k))
    wx = RNG.standard_normal((n,) if k is None else (n, k))

    def loss(lib):
        def f(a, b):
            x, residuals, _, s = lib.linalg.lstsq(a, b, rcond=None)
            return lib.sum(x * wx) + lib.sum(residuals) + lib.sum(s**2)

        return f

    assert_matches_jax(loss(np), loss(jnp), a, b)


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf])
def test_cond_matches_jax(jnp, p):
    a = spaced_matrix((2,), 3, 3) + 0.1 * RNG.standard_normal((2, 3, 3))  # no tie in the 1 or inf norms
    w = RNG.standard_normal(2)
    assert_matches_jax(lambda a: np.sum(np.linalg.cond(a, p) * w), lambda a: jnp.sum(jnp.linalg.cond(a, p) * w), a)


@pytest.mark.parametrize("n", [-3, 0, 1, 5])
def test_matrix_power_matches_jax(jnp, n):
    a = spaced_matrix((2,), 3, 3) / 2
    w = RNG.standard_normal((2, 3, 3))
    assert_matches_jax(lambda a: np.sum(np.linalg.matrix_power(a, n) * w),
                       lambda a: jnp.sum(jnp.linalg.matrix_power(a, n) * w), a)


def test_tensorsolve_and_tensorinv_match_jax(jnp):
    a = (spaced_matrix((), 6, 6) + 2 * np.eye(6)).reshape(2, 3, 3, 2).transpose(0, 3, 1, 2).copy()
    b = RNG.standard_normal((2, 3))
    w = RNG.standard_normal((3, 2))
    assert_matches_jax(lambda a, b: np.sum(np.linalg.tensorsolve(a, b, axes=(1,)) * w),
                       lambda a, b: jnp.sum(jnp.linalg.tensorsolve(a, b, axes=(1,)) * w), a, b)
    a = (spaced_matrix((), 6, 6) + 2 * np.eye(6)).reshape(6, 2, 3)
    w = RNG.standard_normal((2, 3, 6))
    assert_matches_jax(lambda a: np.sum(np.linalg.tensorinv(a, ind=1) * w),
                       lambda a: jnp.sum(jnp.linalg.tensorinv(a, ind=1) * w), a)


def test_products_match_jax(jnp):
    """multi_dot with vector ends, kron of different ranks, cross with axes, einsum's sublist form."""
    x, a, b, y = (RNG.standard_normal(s) for s in [(3,), (3, 4), (4, 2), (2,)])
    assert_matches_jax(lambda x, a, b, y: np.linalg.multi_dot([x, a, b, y]),
                       lambda x, a, b, y: jnp.linalg.multi_dot([x, a, b, y]), x, a, b, y)
    p, q = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 1, 2))
    w = RNG.standard_normal(np.kron(p, q).shape)
    assert_matches_jax(lambda p, q: np.sum(np.kron(p, q) * w), lambda p, q: jnp.sum(jnp.kron(p, q) * w), p, q)
    u, v = RNG.standard_normal((3, 1, 4)), RNG.standard_normal((4, 3))
    w = RNG.standard_normal(np.cross(u, v, axisa=0, axisb=-1, axisc=1).shape)
    assert_matches_jax(lambda u, v: np.sum(np.cross(u, v, axisa=0, axisb=-1, axisc=1) * w),
                       lambda u, v: jnp.sum(jnp.cross(u, v, axisa=0, axisb=-1, axisc=1) * w), u, v)
    c, d = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((4, 3))
    w = RNG.standard_normal((2, 3))
    assert_matches_jax(lambda c, d: np.sum(np.einsum(c, [Ellipsis, 0, 1], d, [1, 0], [Ellipsis, 0]) * w),
                       lambda c, d: jnp.sum(jnp.einsum(c, [Ellipsis, 0, 1], d, [1, 0], [Ellipsis, 0]) * w), c, d)


MATRIX_ORDS = ["fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]
VECTOR_ORDS = [2, 1, 3, 0.5, -1, np.inf, -np.inf]


@pytest.mark.parametrize("ord", MATRIX_ORDS)
def test_matrix_norms_match_jax_and_np_linalg_norm(jnp, ord):
    """matrix_norm, its np.linalg.norm spelling (the rule in reductions.py) and JAX: one gradient."""
    a = spaced_matrix((2,), 3, 4) + 0.1 * RNG.standard_normal((2, 3, 4))
    w = RNG.standard_normal(2)
    assert_matches_jax(lambda a: np.sum(np.linalg.matrix_norm(a, ord=ord) * w),
                       lambda a: jnp.sum(jnp.linalg.matrix_norm(a, ord=ord) * w), a)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(np.linalg.norm(a, ord, axis=(-2, -1)) * w), a),
                               db.gradient(lambda a: np.sum(np.linalg.matrix_norm(a, ord=ord) * w), a), rtol=1e-12)


@pytest.mark.parametrize("ord", VECTOR_ORDS)
@pytest.mark.parametrize("axis", [None, 1], ids=str)
def test_vector_norms_match_jax_and_np_linalg_norm(jnp, ord, axis):
    x = RNG.uniform(0.2, 2, (2, 3, 4)) * np.sign(RNG.standard_normal((2, 3, 4)))
    axis = (0, 2) if axis is None and ord == 2 else axis  # the tuple form once
    w = RNG.standard_normal(np.linalg.vector_norm(x, axis=axis, ord=ord).shape)
    assert_matches_jax(lambda x: np.sum(np.linalg.vector_norm(x, axis=axis, ord=ord) * w),
                       lambda x: jnp.sum(jnp.linalg.vector_norm(x, axis=axis, ord=ord) * w), x)
    if axis == 1:
        np.testing.assert_allclose(db.gradient(lambda x: np.sum(np.linalg.norm(x, ord, axis) * w), x),
                                   db.gradient(lambda x: np.sum(np.linalg.vector_norm(x, axis=axis, ord=ord) * w), x),
                                   rtol=1e-12)


# --- conventions ------------------------------------------------------------------------------------------------------
def test_eigh_at_a_repeated_eigenvalue_is_exact_for_a_loss_of_the_eigenspace():
    """A = Q diag(1, 1, 3) Qᵀ: the projector on the eigenvalue-1 plane is differentiable, its basis is not.
    The gap factor is 0 on the tie, so the gradient of a loss of the projector is exact (finite, FD)."""
    q = np.linalg.qr(RNG.standard_normal((3, 3)))[0]
    a = (q * np.array([1.0, 1.0, 3.0])) @ q.T
    w = RNG.standard_normal((3, 3))

    def projector_loss(a):
        _, v = np.linalg.eigh(a)
        plane = v[:, :2]
        return np.sum((plane @ plane.T) * w)

    g = db.gradient(projector_loss, a)
    assert np.all(np.isfinite(g))
    db.check_gradient(projector_loss, a, rtol=1e-5)


def test_svd_at_a_repeated_singular_value_is_finite_and_exact_for_an_invariant_loss():
    """The identity: every singular value is 1; U Vᵀ (the orthogonal polar factor) is differentiable."""
    a = np.eye(3)
    w = RNG.standard_normal((3, 3))

    def polar(a):
        u, _, vt = np.linalg.svd(a)
        return np.sum((u @ vt) * w)

    g = db.gradient(polar, a)
    assert np.all(np.isfinite(g))
    db.check_gradient(polar, a, rtol=1e-5)


def test_svd_of_a_rank_deficient_tall_matrix_is_finite():
    """A zero singular value of a non-square matrix: 1/s is taken as 0 in the complement term (as JAX)."""
    a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0])
    g = db.gradient(lambda a: np.sum(np.linalg.svd(a, full_matrices=False)[0][:, 0] ** 2), a)
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize("shape, what", [((4, 2), "U"), ((2, 4), "Vᵀ")])
def test_svd_completing_columns_with_a_cotangent_are_an_error(shape, what):
    a = spaced_matrix((), *shape)
    index = (slice(None), -1) if what == "U" else (-1,)
    with pytest.raises(db.UnsupportedFunctionError, match="full_matrices=False"):
        db.gradient(lambda a: np.sum(np.linalg.svd(a)[0 if what == "U" else 2][index] ** 3), a)


def test_qr_complete_of_a_tall_matrix_q_columns_past_n_are_an_error():
    a = spaced_matrix((), 4, 2)
    with pytest.raises(db.UnsupportedFunctionError, match="mode='reduced'"):
        db.gradient(lambda a: np.sum(np.linalg.qr(a, mode="complete")[0] ** 3), a)
    r_only = db.gradient(lambda a: np.sum(np.linalg.qr(a, mode="complete")[1] ** 2), a)  # R's zero rows: no gradient
    np.testing.assert_allclose(r_only, db.gradient(lambda a: np.sum(np.linalg.qr(a)[1] ** 2), a), rtol=1e-12)


def test_qr_raw_is_an_error():
    with pytest.raises(db.UnsupportedFunctionError, match="raw"):
        db.gradient(lambda a: np.sum(np.linalg.qr(a, mode="raw")[0]), spaced_matrix((), 3, 3))


def test_eig_at_a_repeated_eigenvalue_is_an_error_for_the_eigenvectors_only():
    repeated = np.array([[2.0, 1.0], [0.0, 2.0]]) * 0 + np.eye(2)
    with pytest.raises(db.UnsupportedFunctionError, match="repeated eigenvalue"):
        db.gradient(lambda a: np.sum(np.linalg.eig(a)[1] ** 2), repeated)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(np.linalg.eig(a)[0]), repeated), np.eye(2))  # trace


def test_rank_deficient_pinv_and_lstsq_are_an_error():
    a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0])
    with pytest.raises(db.UnsupportedFunctionError, match="rank-deficient"):
        db.gradient(lambda a: np.sum(np.linalg.pinv(a)), a)
    with pytest.raises(db.UnsupportedFunctionError, match="rank-deficient"):
        db.gradient(lambda a: np.sum(np.linalg.lstsq(a, np.ones(3), rcond=None)[0]), a)
    singular_values = db.gradient(lambda a: np.sum(np.linalg.lstsq(a, np.ones(3), rcond=None)[3]), a)
    np.testing.assert_allclose(singular_values, db.gradient(lambda a: np.sum(np.linalg.svdvals(a)), a), rtol=1e-12)


def test_lstsq_in_b_is_pinv_transposed_and_twice_the_residual():
    """x = A⁺b: b̄ = A⁺ᵀ x̄; the residual ‖b - Ax‖²: b̄ = 2 r.  Rank-deficient A: the clear error."""
    a = spaced_matrix((), 4, 2)
    b = np.array([1.0, -2.0, 0.5, 3.0])
    w = np.array([0.3, -1.1])
    got = db.gradient(lambda b: np.sum(np.linalg.lstsq(a, b, rcond=None)[0] * w), b)
    np.testing.assert_allclose(got, np.linalg.pinv(a).T @ w, rtol=1e-12)
    x = np.linalg.lstsq(a, b, rcond=None)[0]
    got = db.gradient(lambda b: np.sum(np.linalg.lstsq(a, b, rcond=None)[1]), b)
    np.testing.assert_allclose(got, 2 * (b - a @ x), rtol=1e-10, atol=1e-12)
    with pytest.raises(db.UnsupportedFunctionError, match="rank-deficient"):
        db.gradient(lambda b: np.sum(np.linalg.lstsq(np.outer([1.0, 2.0, 3.0, 4.0], [1.0, -1.0]), b)[0]), b)


def test_matrix_rank_is_a_constant():
    a = spaced_matrix((), 3, 3)
    assert db.gradient(lambda a: np.linalg.matrix_rank(a) * np.sum(a), a).tolist() == np.full((3, 3), 3.0).tolist()


# --- complex matrices (JAX's convention) ----------------------------------------------------------------------------
# Each loss is real and, where vectors are involved, invariant under their phases (u uᴴ, U diag(s) Vᴴ, v conj(v₀));
# JAX is given the Hermitian matrix of the triangle NumPy reads (`hermitian_from_triangle`).
def complex_normal(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def hermitian_from_triangle(m, a, lower=True):
    """The Hermitian matrix of ``a``'s lower (upper) triangle and the real part of its diagonal, in module ``m``."""
    a = a if lower else m.conj(m.swapaxes(a, -1, -2))
    t = m.tril(a, -1)
    return t + m.conj(m.swapaxes(t, -1, -2)) + m.real(a) * m.eye(a.shape[-1])


def unitary_spaced(batch, m, n):
    """U diag(s) Vᴴ with complex unitary U, V and s = 1, 1.7, 2.4, ..."""
    k = min(m, n)
    u = np.linalg.qr(complex_normal(*batch, m, m))[0][..., :k]
    v = np.linalg.qr(complex_normal(*batch, n, n))[0][..., :k]
    return (u * (1 + 0.7 * np.arange(k))) @ np.conj(np.swapaxes(v, -1, -2))


def hermitian_part(m, x):
    return m.conj(m.swapaxes(x, -1, -2))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_complex_svd_matches_jax(jnp, shape):
    a = unitary_spaced(shape[:-2], *shape[-2:]) + 0.05 * complex_normal(*shape)
    k = min(shape[-2:])
    wu, wv, wa = complex_normal(*shape[:-2], shape[-2], shape[-2]), complex_normal(*shape[:-2], shape[-1], shape[-1]), \
        complex_normal(*shape)
    ws = RNG.standard_normal(shape[:-2] + (k,))

    def loss(m, full):
        def f(a):
            u, s, vt = m.linalg.svd(a, full_matrices=full)
            u, vt = u[..., :k], vt[..., :k, :]
            projectors = m.sum(u @ hermitian_part(m, u) * wu) + m.sum(hermitian_part(m, vt) @ vt * wv)
            products = m.sum(((u * s[..., None, :]) @ vt) ** 2 * wa) + m.sum((u @ vt) * wa)
            return m.real(projectors + products) + m.sum(s**3 * ws)

        return f

    assert_matches_jax(loss(np, False), loss(jnp, False), a)
    np.testing.assert_allclose(db.gradient(loss(np, True), a), db.gradient(loss(np, False), a), rtol=1e-12)
    assert_matches_jax(lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2 * ws),
                       lambda a: jnp.sum(jnp.linalg.svd(a, compute_uv=False) ** 2 * ws), a)
    assert_matches_jax(lambda a: np.sum(np.linalg.svdvals(a) * ws), lambda a: jnp.sum(jnp.linalg.svdvals(a) * ws), a)
    if shape[-1] == shape[-2]:
        h = a + 2 * np.swapaxes(a, -1, -2)  # not Hermitian: NumPy reads its lower triangle
        assert_matches_jax(lambda a: np.sum(np.linalg.svd(a, hermitian=True, compute_uv=False) * ws),
                           lambda a: jnp.sum(jnp.linalg.svdvals(hermitian_from_triangle(jnp, a)) * ws), h)
        assert_matches_jax(lambda a: np.real(np.sum(np.linalg.pinv(a, hermitian=True) * wa)),
                           lambda a: jnp.real(jnp.sum(jnp.linalg.pinv(hermitian_from_triangle(jnp, a)) * wa)), h)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_complex_eigh_and_eigvalsh_match_jax_on_the_triangle_read(jnp, uplo):
    a = complex_normal(2, 4, 4) + np.diag([0.0, 3.0, 6.0, 9.0])
    w1, w2 = RNG.standard_normal((2, 4)), complex_normal(2, 4, 4)
    lower = uplo == "L"

    def eigh_loss(w, v, m):
        return m.sum(w * w1) + m.real(m.sum(v * m.conj(v[..., :1, :]) * w2))

    assert_matches_jax(lambda a: eigh_loss(*np.linalg.eigh(a, uplo), np),
                       lambda a: eigh_loss(*jnp.linalg.eigh(hermitian_from_triangle(jnp, a, lower)), jnp), a)
    assert_matches_jax(lambda a: np.sum(np.sin(np.linalg.eigvalsh(a, UPLO=uplo)) * w1),
                       lambda a: jnp.sum(jnp.sin(jnp.linalg.eigvalsh(hermitian_from_triangle(jnp, a, lower))) * w1), a)
    g = db.gradient(lambda a: eigh_loss(*np.linalg.eigh(a, uplo), np), a)
    unread = np.triu(np.ones((4, 4)), 1) if lower else np.tril(np.ones((4, 4)), -1)
    assert np.all(g * unread == 0) and np.all(np.diagonal(g, 0, -2, -1).imag == 0)  # LAPACK reads Re diag


@pytest.mark.parametrize("real", [False, True], ids=["complex matrix", "real matrix, complex eigenvalues"])
def test_complex_eig_and_eigvals_match_jax(jnp, real):
    import jax

    p = np.eye(4) + 0.3 * (RNG.standard_normal((4, 4)) if real else complex_normal(4, 4))
    block = np.array([[1.0, -2.0], [2.0, 1.0]])  # eigenvalues 1 ± 2i
    b = np.block([[block, np.zeros((2, 2))], [np.zeros((2, 2)), np.diag([-1.0, 3.0])]])
    a = p @ (b if real else b + np.diag(complex_normal(4))) @ np.linalg.inv(p)
    w1, w2 = complex_normal(4), complex_normal(4, 4)

    def loss(m, eig):
        def f(a):
            w, v = eig(a)
            order = m.argsort(m.real(w) + 1e-3 * m.imag(w))  # the same order on both sides
            w, v = w[order], v[:, order]
            return m.real(m.sum(w * w1) + m.sum(v * m.conj(v[:1, :]) * w2))  # a loss of each vector's phase-free part

        return f

    jax_eig = functools.partial(jax.lax.linalg.eig, compute_left_eigenvectors=False, enable_eigvec_derivs=True)
    np.testing.assert_allclose(db.gradient(loss(np, np.linalg.eig), a), np.asarray(jax_gradient(loss(jnp, jax_eig), a)),
                               rtol=1e-8, atol=1e-10)
    db.check_gradient(loss(np, np.linalg.eig), a)
    assert db.gradient(loss(np, np.linalg.eig), a).dtype == a.dtype  # a real matrix gets a real gradient
    assert_matches_jax(lambda a: np.real(np.sum(np.linalg.eigvals(a) ** 3 * (1 - 2j))),
                       lambda a: jnp.real(jnp.sum(jnp.linalg.eigvals(a) ** 3 * (1 - 2j))), a)


@pytest.mark.parametrize("real", [False, True], ids=["complex matrix", "real matrix, complex eigenvalues"])
def test_eig_differentiates_lapack_normalisation_so_a_loss_of_the_phases_is_exact(jnp, real):
    """eig's eigenvectors are LAPACK's: unit norm, largest component real.  A loss of V itself (not phase-free)
    has the gradient of that normalisation: JAX's (the same vectors here), and finite differences'."""
    import jax

    p = np.eye(4) + 0.3 * (RNG.standard_normal((2, 4, 4)) if real else complex_normal(2, 4, 4))
    b = np.diag([-1.0, 0.5, 2.0, 3.0]) + np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, -1.5], [0, 0, 1.5, 0]])
    a = p @ (b if real else b + np.diag(complex_normal(4))) @ np.linalg.inv(p)
    w = complex_normal(2, 4, 4)

    def loss(a):
        return np.real(np.sum(np.linalg.eig(a)[1] * w))

    order = [np.argsort(np.asarray(jax.lax.linalg.eig(m, compute_left_eigenvectors=False)[0]))
             for m in map(jnp.asarray, a)]
    mine = [np.argsort(np.linalg.eigvals(m)) for m in a]
    assert all(np.array_equal(o, m) for o, m in zip(order, mine)), "JAX and NumPy order the eigenvalues alike"

    def jax_loss(a):
        v = jax.lax.linalg.eig(a, compute_left_eigenvectors=False, enable_eigvec_derivs=True)[1]
        return jnp.real(jnp.sum(v * w))

    np.testing.assert_allclose(db.gradient(loss, a), np.asarray(jax_gradient(jax_loss, a)), rtol=1e-8, atol=1e-10)
    db.check_gradient(loss, a)


@pytest.mark.parametrize("upper", [False, True])
def test_complex_cholesky_matches_jax_on_the_triangle_read(jnp, upper):
    b = complex_normal(2, 4, 4)
    a = b @ hermitian_part(np, b) + 4 * np.eye(4) + 0.5 * complex_normal(2, 4, 4)  # not Hermitian
    w = complex_normal(2, 4, 4)

    def jax_cholesky(a):
        lower = jnp.linalg.cholesky(hermitian_from_triangle(jnp, a, lower=not upper))
        return hermitian_part(jnp, lower) if upper else lower

    assert_matches_jax(lambda a: np.real(np.sum(np.linalg.cholesky(a, upper=upper) * w)),
                       lambda a: jnp.real(jnp.sum(jax_cholesky(a) * w)), a)


@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 3), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_complex_qr_matches_jax(jnp, shape, mode):
    """R's diagonal is real (LAPACK's Householder QR), so Q and R are differentiable as returned."""
    m, n = shape[-2:]
    if mode == "complete" and m > n:
        pytest.skip("Q's completing columns are not unique")
    a, k = unitary_spaced(shape[:-2], m, n), min(m, n)
    wq, wr = complex_normal(*shape[:-2], m, k), complex_normal(*shape[:-2], k, n)

    def loss(lib):
        def f(a):
            if mode == "r":
                return lib.real(lib.sum(lib.linalg.qr(a, mode="r") * wr))
            q, r = lib.linalg.qr(a, mode=mode)
            return lib.real(lib.sum(q[..., :k] * wq) + lib.sum(r[..., :k, :] * wr))

        return f

    assert_matches_jax(loss(np), loss(jnp), a)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 2), (2, 4)], ids=str)
def test_complex_pinv_matches_jax(jnp, shape):
    a = unitary_spaced(shape[:-2], *shape[-2:])
    w = complex_normal(*shape[:-2], *shape[-2:][::-1])
    assert_matches_jax(lambda a: np.real(np.sum(np.linalg.pinv(a) * w)),
                       lambda a: jnp.real(jnp.sum(jnp.linalg.pinv(a) * w)), a)


@pytest.mark.parametrize("m, n, k", [(5, 3, None), (5, 3, 2), (3, 3, 2), (2, 4, None)])
def test_complex_lstsq_matches_jax(jnp, m, n, k):
    a = unitary_spaced((), m, n)
    b = complex_normal(m) if k is None else complex_normal(m, k)
    wx = complex_normal(n) if k is None else complex_normal(n, k)

    def loss(lib):
        def f(a):
            x, residuals, _, s = lib.linalg.lstsq(a, b, rcond=None)
            return lib.real(lib.sum(x * wx)) + lib.sum(residuals) + lib.sum(s**2)

        return f

    assert_matches_jax(loss(np), loss(jnp), a)


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, np.inf, -np.inf])
def test_complex_cond_matches_jax(jnp, p):
    a = unitary_spaced((2,), 3, 3) + 0.1 * complex_normal(2, 3, 3)
    w = RNG.standard_normal(2)
    assert_matches_jax(lambda a: np.sum(np.linalg.cond(a, p) * w), lambda a: jnp.sum(jnp.linalg.cond(a, p) * w), a)


@pytest.mark.parametrize("ord", MATRIX_ORDS)
def test_complex_matrix_norms_match_jax_and_np_linalg_norm(jnp, ord):
    a = unitary_spaced((2,), 3, 4) + 0.1 * complex_normal(2, 3, 4)
    w = RNG.standard_normal(2)
    assert_matches_jax(lambda a: np.sum(np.linalg.matrix_norm(a, ord=ord) * w),
                       lambda a: jnp.sum(jnp.linalg.matrix_norm(a, ord=ord) * w), a)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(np.linalg.norm(a, ord, axis=(-2, -1)) * w), a),
                               db.gradient(lambda a: np.sum(np.linalg.matrix_norm(a, ord=ord) * w), a), rtol=1e-12)


@pytest.mark.parametrize("ord", VECTOR_ORDS)
def test_complex_vector_norms_match_jax(jnp, ord):
    x = complex_normal(2, 3, 4)
    w = RNG.standard_normal((2, 4))
    assert_matches_jax(lambda x: np.sum(np.linalg.vector_norm(x, axis=1, ord=ord) * w),
                       lambda x: jnp.sum(jnp.linalg.vector_norm(x, axis=1, ord=ord) * w), x)


# --- the phases of complex singular vectors and eigenvectors (a loss that depends on them) ---------------------------
def along_parallel_phases(decompose, a, direction, h=1e-6):
    """The derivative of ``decompose``'s vectors along ``direction``, their phases carried so that
    Im diag(Vᴴ dV) = 0 (V the columns whose phases are held; the paired columns U turn with them):
    the central difference of ``decompose(a ± h direction)`` with each column pair rotated to V(a)'s phase."""
    _, v0 = decompose(a)

    def aligned(b):
        u, v = decompose(b)
        phase = np.sum(np.conj(v0) * v, axis=0)
        phase = phase / np.abs(phase)
        return np.conj(phase) * u, np.conj(phase) * v

    (up, vp), (um, vm) = aligned(a + h * direction), aligned(a - h * direction)
    return (up - um) / (2 * h), (vp - vm) / (2 * h)


def svd_vectors(a):
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    return u, np.conj(vt.T)


def test_a_loss_of_the_phases_of_svd_gets_jax_gauge_v_phases_held():
    """U's and V's columns share a free phase; JAX's (and this library's) derivative holds V's phases
    (Im diag(Vᴴ dV) = 0) and lets U's turn: the gradient of a loss of U's phases alone, e.g. Re u₀₀, is
    its derivative along that path, checked here by finite differences of the aligned vectors."""
    a = unitary_spaced((), 4, 3)
    w = complex_normal(4, 3)

    def phase_dependent(a):
        return np.real(np.sum(np.linalg.svd(a, full_matrices=False)[0] * w))

    gradient = db.gradient(phase_dependent, a)
    for _ in range(3):
        direction = complex_normal(4, 3)
        du, dv = along_parallel_phases(svd_vectors, a, direction)
        assert np.allclose(np.imag(np.sum(np.conj(svd_vectors(a)[1]) * dv, axis=0)), 0, atol=1e-6)
        np.testing.assert_allclose(np.real(np.sum(gradient * direction)), np.real(np.sum(w * du)), rtol=1e-5)


def test_a_loss_of_the_phases_of_eigh_gets_the_phases_held():
    """eigh's eigenvectors: the derivative with Im diag(Vᴴ dV) = 0 (JAX's too)."""
    a = complex_normal(4, 4)
    a = a + hermitian_part(np, a) + np.diag([0.0, 3.0, 6.0, 9.0])
    w = complex_normal(4, 4)

    def eigh_vectors(a):
        v = np.linalg.eigh(a)[1]
        return v, v

    gradient = db.gradient(lambda a: np.real(np.sum(np.linalg.eigh(a)[1] * w)), a)
    for _ in range(3):
        direction = complex_normal(4, 4)
        direction = direction + hermitian_part(np, direction)  # the matrices eigh sees are Hermitian
        dv, _ = along_parallel_phases(eigh_vectors, a, direction)
        np.testing.assert_allclose(np.real(np.sum(gradient * direction)), np.real(np.sum(w * dv)), rtol=1e-5)
