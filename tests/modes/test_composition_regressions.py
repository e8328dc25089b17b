"""Compositions that failed before issue 28, each checked against JAX or central differences."""

import subprocess
import sys

import numpy as np
import pytest

import dualbroadcast as db

jax = pytest.importorskip("jax")
jnp = jax.numpy

X = np.array([0.3, 0.7, 1.1])
V = np.array([1.0, -0.5, 0.25])
Z = np.array([0.3 + 0.4j, -0.5 + 1j, 1.1 - 0.2j])


def f_np(x):
    return np.sum(np.sin(x) * x ** 2) + np.dot(x, x[::-1]) ** 2


def f_jax(x):
    return jnp.sum(jnp.sin(x) * x ** 2) + jnp.dot(x, x[::-1]) ** 2


def vector_np(x):
    return np.sin(x) * np.cumprod(x)


def vector_jax(x):
    return jnp.sin(x) * jnp.cumprod(x)


def test_forward_over_reverse_is_jax_hessian_vector_product():
    with jax.enable_x64(True):
        want = jax.jvp(jax.grad(f_jax), (X,), (V,))
    got = db.jvp(lambda x: db.gradient(f_np, x), (X,), (V,))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13)


@pytest.mark.parametrize("outer", ["forward", "reverse"])
@pytest.mark.parametrize("inner", ["forward", "reverse"])
def test_jacobians_of_jacobians_are_jax_jacfwd_of_jacrev(outer, inner):
    with jax.enable_x64(True):
        want = jax.jacfwd(jax.jacrev(vector_jax))(X)
    got = db.jacobian(lambda x: db.jacobian(vector_np, x, mode=inner), X, mode=outer)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(db.jacfwd(lambda x: db.jacrev(vector_np, x), X), want, rtol=1e-12, atol=1e-14)


def test_a_jvp_of_a_hessian_and_of_an_hvp_are_third_derivatives():
    with jax.enable_x64(True):
        hessian = jax.jvp(jax.hessian(f_jax), (X,), (V,))[1]
        hvp = jax.jvp(lambda x: jax.jvp(jax.grad(f_jax), (x,), (V,))[1], (X,), (V,))[1]
    np.testing.assert_allclose(db.jvp(lambda x: db.hessian(f_np, x), (X,), (V,))[1], hessian, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db.jvp(lambda x: db.hvp(f_np, x, V), (X,), (V,))[1], hvp, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("func", [np.dot, np.outer, np.vdot])
def test_forward_over_forward_through_a_multilinear_rule(func):
    """The rule's plain implementation once received the outer level's duals."""
    jfunc = getattr(jnp, func.__name__)
    with jax.enable_x64(True):
        want = jax.jvp(lambda x: jax.jvp(lambda y: jnp.sum(jfunc(y, jnp.sin(y))), (x,), (V,))[1], (X,), (V,))[1]
    got = db.jvp(lambda x: db.jvp(lambda y: np.sum(func(y, np.sin(y))), (x,), (V,))[1], (X,), (V,))[1]
    np.testing.assert_allclose(got, want, rtol=1e-13)


def complex_f(z, np_):
    return np_.sum(np_.abs(np_.diff(z)) ** 3) + np_.linalg.norm(z, 3) + np_.sum(np_.abs(np_.fft.fft(z, n=5)) ** 2)


def test_second_order_of_complex_diff_norm_and_fft_against_jax():
    """np.diff's and the FFT's pullbacks padded a complex cotangent with np.pad (whose rule is for real values),
    the norm's called np.sign of a complex value."""
    u = np.array([0.5 - 1j, 0.25 + 0.5j, -1 + 0.1j])
    with jax.enable_x64(True):
        g = jax.grad(lambda z: complex_f(z, jnp))
        want = jax.grad(lambda z: jnp.real(jnp.sum(g(z) * u)))(Z)
    got = db.gradient(lambda z: np.real(np.sum(db.gradient(lambda w: complex_f(w, np), z) * u)), Z)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_forward_mode_through_scipy_special_whatever_the_import_order():
    code = ("import numpy as np, dualbroadcast as db, scipy.special\n"
            "print(db.jvp(scipy.special.erf, (np.array([0.3]),), (np.array([1.0]),))[1][0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(out) == pytest.approx(2 / np.sqrt(np.pi) * np.exp(-0.09), rel=1e-14)


def test_hvp_of_a_real_function_of_a_complex_argument_is_jax_jvp_of_grad():
    """The gradient of Re Σ ∇f·v (the pairing of JAX's convention); was a NonScalarOutputError (Σ ∇f·v complex)."""
    u = np.array([0.5 - 1j, 0.25 + 0.5j, -1 + 0.1j])

    def f(a, np_=np):
        return np_.sum(np_.abs(a) ** 3) + np_.real(np_.sum(a ** 2 * np_.conj(a[::-1])))

    with jax.enable_x64(True):
        want = jax.jvp(jax.grad(lambda a: f(a, jnp)), (Z,), (u,))[1]
    np.testing.assert_allclose(db.hvp(f, Z, u), want, rtol=1e-13)
    np.testing.assert_allclose(db.jvp(lambda a: db.gradient(f, a), (Z,), (u,))[1], want, rtol=1e-13)


A = np.array([[1.0 + 0.5j, 0.3 - 0.2j], [-0.4 + 0.1j, 0.8 - 0.6j], [0.2 + 0.3j, -0.5 + 0.4j]])
B = np.array([0.5 - 0.3j, 1.0 + 0.2j, -0.7 + 0.1j])


def decomposition_f(a, b, np_):
    """A real function of complex svd and lstsq results that their vectors' phases leave unchanged."""
    u, s, vt = np_.linalg.svd(a, full_matrices=False)
    x, residuals, _, _ = np_.linalg.lstsq(a, b, rcond=None)
    weights = np_.arange(1.0, 7.0).reshape(3, 2) ** 0.5
    phase_free = np_.sum(u * np_.conj(u[:1, :]) * weights) + np_.sum(vt * np_.conj(vt[:, :1]) * weights[1:])
    return np_.real(phase_free + np_.sum(x * x)) + np_.sum(s * np_.array([1.0, -2])) \
        + np_.sum(np_.linalg.svd(a, compute_uv=False) ** 3) + np_.sum(residuals)


@pytest.mark.parametrize("composition", ["fwd_fwd", "fwd_rev", "rev_fwd", "rev_rev"])
def test_second_order_of_complex_svd_and_lstsq_against_jax(composition):
    """Forward mode took the real rule of svd and lstsq where the matrix was an outer dual or a tracked value (only
    plain arrays were asked whether they are complex): second derivatives silently wrong in every composition but
    rev_rev."""
    rng = np.random.default_rng(1)
    v, u = ([rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape) for x in (A, B)] for _ in range(2))
    f = lambda a, b: decomposition_f(a, b, np)

    def pair(grads, directions):
        return sum(np.real(np.sum(g * d)) for g, d in zip(grads, directions))

    def first(mode, a, b):
        if mode == "fwd":
            return db.jvp(f, (a, b), tuple(v))[1]
        return pair(db.gradient(f, a, b), v)

    outer, inner = composition.split("_")
    if outer == "fwd":
        got = db.jvp(lambda a, b: first(inner, a, b), (A, B), tuple(u))[1]
    else:
        got = pair(db.gradient(lambda a, b: first(inner, a, b), A, B), u)
    with jax.enable_x64(True):
        g = lambda a, b: decomposition_f(a, b, jnp)
        want = jax.jvp(lambda a, b: jax.jvp(g, (a, b), tuple(v))[1], (A, B), tuple(u))[1]
    assert got == pytest.approx(float(want), rel=1e-11)


def kernels_f(x, np_, sum_, broadcast):
    p = sum_(lambda r, s: np_.exp(-3 * (r + 1)) * s, x, np_.sum(x) * np_.array([0.5, -0.2, 0.4]))
    return p ** 2 + np_.sum(broadcast(lambda r: np_.sin(r) * r, x) * np_.array([1.0, 2.0, -1.0]))


@pytest.mark.parametrize("composition", ["fwd_fwd", "fwd_rev", "rev_fwd", "rev_rev", "fwd_rev_rev", "fwd_fwd_fwd"])
def test_kernels_in_every_composition_against_jax(composition):
    """A db.sum/db.broadcast of a dual of a dual (fwd_fwd and deeper) was a KernelError: it runs f's NumPy calls."""
    from ..compositions import derivative, jax_derivative

    rng = np.random.default_rng(0)
    directions = [[rng.standard_normal(3)] for _ in range(3)]
    got = derivative(composition, lambda x: kernels_f(x, np, db.sum, db.broadcast), [X], directions)
    want = jax_derivative(lambda x: kernels_f(x, jnp, lambda f, *a: jnp.sum(f(*a)), lambda f, *a: f(*a)), [X],
                          directions, len(composition.split("_")))
    assert got == pytest.approx(want, rel=1e-13, abs=1e-15)


BASE = np.array([0.5, -1.0, 2.0])


def wide_closure_f(x, np_, sum_):
    """A db.sum whose function reads a closure (c, shape (3,)) wider than its argument (x, shape (4, 1))."""
    c = np_.sum(x) * BASE
    return sum_(lambda r: np_.sin(r * c) * r ** 2, x)


def test_second_order_of_a_sum_reading_a_closure_wider_than_its_argument():
    """Its kernel, run on the arguments as they are in second order, broadcast f's (4, 3) result to the
    arguments' (4, 1): NumPy's ValueError in db.hessian, a gradient of a gradient, a jvp of a jvp."""
    x = np.linspace(0.1, 0.9, 4).reshape(4, 1)
    v = np.linspace(1.0, -1.0, 4).reshape(4, 1)
    f = lambda x: wide_closure_f(x, np, db.sum)
    with jax.enable_x64(True):
        hessian = np.asarray(jax.hessian(lambda x: wide_closure_f(x, jnp, lambda g, a: jnp.sum(g(a))))(x))
    hv = np.tensordot(hessian, v, 2)
    np.testing.assert_allclose(db.hessian(f, x), hessian, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db.jacobian(lambda y: db.gradient(f, y), x), hessian, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db.gradient(lambda y: np.sum(db.gradient(f, y) * v), x), hv, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db.hvp(f, x, v), hv, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db.jvp(lambda y: db.gradient(f, y), (x,), (v,))[1], hv, rtol=1e-12, atol=1e-13)
    assert db.jvp(lambda y: db.jvp(f, (y,), (v,))[1], (x,), (v,))[1] == pytest.approx(np.sum(hv * v), rel=1e-12)
    prog = db.prepare_hvp(f, x)
    for scale in (1.0, 1.3):
        with jax.enable_x64(True):
            want = jax.hessian(lambda x: wide_closure_f(x, jnp, lambda g, a: jnp.sum(g(a))))(x * scale)
        np.testing.assert_allclose(prog(x * scale, v), np.tensordot(np.asarray(want), v, 2), rtol=1e-12, atol=1e-13)
