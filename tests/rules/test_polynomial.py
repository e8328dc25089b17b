"""The polynomial functions against jax.vjp of their jax.numpy equivalents, with random cotangents; and the
errors where they have no derivative."""

import numpy as np
import pytest

import dualbroadcast as db

RNG = np.random.default_rng(11)
P, Q = RNG.standard_normal(5), RNG.standard_normal(3)
X = np.linspace(-1.0, 1.5, 8) + RNG.uniform(-0.05, 0.05, 8)
Y, W = RNG.standard_normal((8, 2)), RNG.uniform(0.5, 1.5, 8)
DISTINCT = np.poly([2.0, -1.0, 0.5]) * 1.5  # real roots
COMPLEX = np.polymul([1.0, -0.5], [2.0, 0.4, 1.0])  # a real root and a complex pair


def cases():
    import jax.numpy as jnp

    return [
        ("polyadd", np.polyadd, jnp.polyadd, (P, Q)),
        ("polysub", np.polysub, jnp.polysub, (Q, P)),
        ("polymul", np.polymul, jnp.polymul, (P, Q)),
        ("polyder", lambda p: np.polyder(p, 2), lambda p: jnp.polyder(p, 2), (P,)),
        ("polyint", lambda p, k: np.polyint(p, 2, k), lambda p, k: jnp.polyint(p, 2, k), (P, Q[:2])),
        ("polydiv", np.polydiv, lambda u, v: (lambda q, r: (q, r[3:]))(*jnp.polydiv(u, v)), (P, Q)),  # r: 3 zeros
        ("poly", np.poly, jnp.poly, (Q,)),
        ("roots_real", np.roots, lambda p: jnp.roots(p, strip_zeros=False), (DISTINCT,)),
        ("polyfit", lambda x, y, w: np.polyfit(x, y, 3, None, False, w),
         lambda x, y, w: jnp.polyfit(x, y, 3, None, False, w), (X, Y, W)),
    ]


@pytest.mark.parametrize("index", range(9))
def test_pullback_matches_jax_vjp(index):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    name, numpy_f, jax_f, args = cases()[index]
    y, back = db.pullback(numpy_f, *args)
    expected_y, expected_back = jax.vjp(jax_f, *args)
    if name == "roots_real":  # eigenvalues in the order each library finds them
        order, expected_order = np.argsort(np.real(y)), np.argsort(np.real(np.asarray(expected_y)))
        cotangent = RNG.standard_normal(len(y))
        got = back(cotangent[np.argsort(order)])
        expected = expected_back(cotangent[np.argsort(expected_order)].astype(np.asarray(expected_y).dtype))
        np.testing.assert_allclose(np.real(got), np.real(expected[0]), rtol=1e-9)
        return
    outputs = y if isinstance(y, tuple) else (y,)
    cotangent = tuple(RNG.standard_normal(np.shape(o)) for o in outputs)
    cotangent = cotangent if isinstance(y, tuple) else cotangent[0]
    got = back(cotangent)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected_back(cotangent)):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


def test_complex_roots_move_as_minus_dp_over_p_prime():
    """The roots of a real polynomial with a complex pair, seen through Re Σ φ(rᵢ) (φ' differs from root to
    root, whatever order the roots come in): against jax.grad and against finite differences."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def loss(roots_of, xp):
        def f(p):
            r = roots_of(p)
            return xp.real(xp.sum((0.3 + 1j) * r + (0.2 - 0.5j) * r**2 + xp.sin(r)))
        return f

    got = db.gradient(loss(np.roots, np), COMPLEX)
    expected = jax.grad(loss(lambda p: jnp.roots(p, strip_zeros=False), jnp))(COMPLEX)
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    db.check_gradient(loss(np.roots, np), COMPLEX)


@pytest.mark.parametrize("zeros", [2, 3])
def test_the_repeated_zero_root_error_counts_the_trailing_zeros(zeros):
    p = np.concatenate([[1.0, 2.0], np.zeros(zeros)])
    with pytest.raises(db.UnsupportedFunctionError, match=f"with {zeros} trailing zero coefficients"):
        db.gradient(lambda p: np.sum(np.roots(p)), p)


def test_repeated_zero_roots_and_extra_results_are_clear_errors():
    with pytest.raises(db.UnsupportedFunctionError, match="repeated root at 0"):
        db.gradient(lambda p: np.sum(np.roots(p)), np.array([1.0, 2.0, 0.0, 0.0]))
    with pytest.raises(db.UnsupportedFunctionError, match="full=True or cov=True"):
        db.gradient(lambda y: np.sum(np.polyfit(X, y, 2, full=True)[0]), Y[:, 0])
    with pytest.raises(db.UnsupportedFunctionError, match="rank-deficient"):
        db.gradient(lambda y: np.sum(np.polyfit(np.ones(4), y, 2)), Y[:4, 0])


@pytest.mark.parametrize("shape", [(2,), (2, 3)])
def test_polyval_of_coefficient_arrays_in_x(shape):
    """np.polyval of p with trailing axes (a polynomial per position): x̄ = Σ_k (N-1-k) p_k x^(N-2-k), by hand."""
    p, x = RNG.standard_normal((4, *shape)), RNG.standard_normal(shape)
    by_hand = sum((len(p) - 1 - k) * p[k] * x ** (len(p) - 2 - k) for k in range(len(p) - 1))
    np.testing.assert_allclose(db.gradient(lambda x: np.sum(np.polyval(p, x)), x), by_hand, rtol=1e-12)
