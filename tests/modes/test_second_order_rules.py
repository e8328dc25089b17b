"""Second (and third) derivatives through the rules whose pullbacks used to refuse them, against independent
computations: `jax.hessian` of the jax.numpy / jax.scipy equivalent in float64, mpmath's numerical derivatives
of ζ(x, q) and P(a, x) (whose partials are series), SciPy's own second derivatives of sph_harm_y; and forward
mode (`db.jvp`) of the order statistics, np.pad's selections, np.roots, np.polyfit and np.gradient's
coordinates above the dense transposition's limit, against central differences and the transposition
identity."""

import math

import numpy as np
import pytest
import scipy.special as sc

import dualbroadcast as db
from dualbroadcast.scipy import special, stats

R = np.random.default_rng(16)


def flat(args):
    """The arguments as one float64 vector, and how to split it back into arrays of their shapes."""
    shapes = [np.shape(a) for a in args]
    sizes = [math.prod(s) for s in shapes]
    offsets = np.cumsum([0, *sizes])

    def split(v):
        return [v[offsets[k]:offsets[k + 1]].reshape(shapes[k]) for k in range(len(args))]

    return np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in args]), split


def hessians(ours, theirs, *args):
    """``db.hessian`` of ``ours`` and ``jax.hessian`` of ``theirs``, both of all arguments as one vector."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    v, split = flat(args)
    got = db.hessian(lambda w: ours(*split(w)), v)
    expected = np.asarray(jax.jit(jax.hessian(lambda w: theirs(*split(w))))(jax.numpy.asarray(v)))  # compiled once
    return got, expected


def assert_same_hessians(ours, theirs, *args, rtol=1e-7, atol=1e-9):
    got, expected = hessians(ours, theirs, *args)
    assert np.abs(expected).max() > 0  # a Hessian that says something
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    np.testing.assert_allclose(got, got.T, rtol=1e-9, atol=1e-12)


def jax_modules():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.scipy.special
    import jax.scipy.stats

    return jax.numpy, jax.scipy.special, jax.scipy.stats


# --- against jax.hessian -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["cdf", "logcdf"])
def test_norm_cdf_in_x_loc_scale(method):
    _, _, jst = jax_modules()
    x, w = R.standard_normal(4), R.standard_normal(4)
    assert_same_hessians(lambda x, loc, scale: np.sum(w * getattr(stats.norm, method)(x, loc, scale)),
                         lambda x, loc, scale: (w * getattr(jst.norm, method)(x, loc, scale)).sum(),
                         x, np.float64(0.3), np.float64(1.4))


def test_beta_cdf_in_x():
    _, _, jst = jax_modules()
    x, w = R.uniform(0.1, 0.9, 4), R.standard_normal(4)
    assert_same_hessians(lambda x: np.sum(w * stats.beta.cdf(x, 2.0, 3.5)),
                         lambda x: (w * jst.beta.cdf(x, 2.0, 3.5)).sum(), x)


def test_polygamma_in_x():
    _, js, _ = jax_modules()
    x = R.uniform(0.5, 3.0, 3)
    assert_same_hessians(lambda x: np.sum(special.polygamma(1, x) * x), lambda x: (js.polygamma(1, x) * x).sum(), x)


def test_logsumexp_with_signs_in_a_and_b():
    _, js, _ = jax_modules()
    a, b = R.standard_normal((3, 4)), R.uniform(0.5, 1.5, (3, 4)) * np.sign(R.standard_normal((3, 4)))
    w = R.standard_normal(4)
    assert_same_hessians(lambda a, b: np.sum(w * special.logsumexp(a, axis=0, b=b, return_sign=True)[0]),
                         lambda a, b: (w * js.logsumexp(a, axis=0, b=b, return_sign=True)[0]).sum(), a, b)


def test_quantile_in_a_and_q():
    jnp, _, _ = jax_modules()
    a, q = R.standard_normal((7, 3)), np.array([0.15, 0.55, 0.8])  # no q at a knot (JAX: slope 0 there)
    w = R.standard_normal((3, 3))
    got, expected = hessians(lambda a, q: np.sum(w * np.quantile(a, q, axis=0)),
                             lambda a, q: (w * jnp.quantile(a, q, axis=0)).sum(), a, q)
    assert np.abs(got[-3:, :-3]).max() > 0  # the mixed block: ∂/∂a of the slope in q
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_multivariate_normal_logpdf_in_x_and_mean():
    _, _, jst = jax_modules()
    c = R.standard_normal((3, 3))
    cov = c @ c.T + 3 * np.eye(3)
    x, mean = R.standard_normal((2, 3)), R.standard_normal(3)
    assert_same_hessians(lambda x, m: np.sum(stats.multivariate_normal.pdf(x, m, cov)),
                         lambda x, m: jst.multivariate_normal.pdf(x, m, cov).sum(), x, mean)


def test_dirichlet_logpdf_in_x_and_alpha():
    _, _, jst = jax_modules()
    x, alpha = np.array([0.2, 0.3, 0.5]), np.array([1.5, 2.0, 3.0])
    assert_same_hessians(lambda x, a: stats.dirichlet.logpdf(x, a), lambda x, a: jst.dirichlet.logpdf(x, a),
                         x, alpha)


def test_polyfit_in_x_and_y():
    jnp, _, _ = jax_modules()
    x, y, w = np.linspace(-1, 1, 6) + 0.05 * R.standard_normal(6), R.standard_normal(6), R.standard_normal(3)
    assert_same_hessians(lambda x, y: np.sum(w * np.polyfit(x, y, 2)),
                         lambda x, y: (w * jnp.polyfit(x, y, 2)).sum(), x, y, rtol=1e-6)


def test_gradient_in_f_and_its_coordinates():
    jnp, _, _ = jax_modules()
    f, x, w = R.standard_normal((3, 6)), np.cumsum(R.uniform(0.5, 1.5, 6)), R.standard_normal((3, 6))
    assert_same_hessians(lambda f, x: np.sum(w * np.gradient(f, x, axis=1)),
                         lambda f, x: (w * jnp.gradient(f, x, axis=1)).sum(), f, x)


@pytest.mark.parametrize("n", [3, 4, 7])
def test_gradient_in_its_coordinates_second_order_edges(n):
    """edge_order=2 (which jnp.gradient lacks) against central differences of the gradient."""
    f, x = R.standard_normal((n, 2)), np.cumsum(R.uniform(0.5, 1.5, n))
    w = R.standard_normal((n, 2))
    for edge_order in (1, 2):
        db.check_gradient(lambda f, x: np.sum(w * np.sin(np.gradient(f, x, axis=0, edge_order=edge_order))), f, x,
                          order=2)


def test_coordinates_cotangent_matches_the_complex_step_through_numpy():
    """np.gradient's stencils differentiated by hand against NumPy's own np.gradient at complex coordinates:
    ∂(D f)/∂x · e = Im(D(x + iεe) f) / ε, exact to rounding, for every unit vector e."""
    from dualbroadcast.rules.signal import coordinates_transpose

    for _ in range(40):
        edge_order = int(R.integers(1, 3))
        n = int(R.integers(edge_order + 1, 8))
        shape = [int(k) for k in R.integers(1, 4, R.integers(0, 3))]
        axis = int(R.integers(0, len(shape) + 1))
        shape.insert(axis, n)
        f, g, x = R.standard_normal(shape), R.standard_normal(shape), np.cumsum(R.uniform(0.3, 1.5, n))
        eps = 1e-20
        expected = [np.sum(g * np.gradient(f.astype(complex), x + 1j * eps * e, axis=axis,
                                           edge_order=edge_order).imag / eps) for e in np.eye(n)]
        np.testing.assert_allclose(coordinates_transpose(f, x, axis, edge_order, g), expected, rtol=1e-12,
                                   atol=1e-12)


# --- series partials against mpmath, to the third order ----------------------------------------------------------
def mp_derivative(f, point, orders):
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    return float(mpmath.diff(f, tuple(map(mpmath.mpf, point)), orders))


@pytest.mark.parametrize(("x", "q"), [(1.7, 0.4), (3.2, 2.5), (6.0, 9.0)])
def test_zeta_second_and_third_derivatives(x, q):
    mpmath = pytest.importorskip("mpmath")
    zeta = lambda s, a: mpmath.zeta(s, a)
    h = db.hessian(lambda v: sc.zeta(v[0], v[1]), np.array([x, q]))
    for (i, j), got in np.ndenumerate(h):
        orders = (int(i == 0) + int(j == 0), int(i == 1) + int(j == 1))
        np.testing.assert_allclose(got, mp_derivative(zeta, (x, q), orders), rtol=1e-11)
    third = db.gradient(lambda s: db.gradient(lambda s: db.gradient(lambda s: sc.zeta(s, q), s), s), x)
    np.testing.assert_allclose(third, mp_derivative(zeta, (x, q), (3, 0)), rtol=1e-11)


@pytest.mark.parametrize(("a", "x"), [(0.6, 0.3), (2.5, 1.7), (1.3, 4.0), (3.0, 12.0)])
def test_gammainc_second_and_third_derivatives(a, x):
    """Both branches of P's series (x <= max(1, a)) and Q's continued fraction, and gammaincc = 1 - P."""
    mpmath = pytest.importorskip("mpmath")
    p = lambda s, z: mpmath.gammainc(s, 0, z, regularized=True)
    h = db.hessian(lambda v: sc.gammainc(v[0], v[1]), np.array([a, x]))
    hc = db.hessian(lambda v: sc.gammaincc(v[0], v[1]), np.array([a, x]))
    for (i, j), got in np.ndenumerate(h):
        expected = mp_derivative(p, (a, x), (int(i == 0) + int(j == 0), int(i == 1) + int(j == 1)))
        np.testing.assert_allclose(got, expected, rtol=1e-10)
        np.testing.assert_allclose(hc[i, j], -expected, rtol=1e-10)
    third = db.gradient(lambda s: db.gradient(lambda s: db.gradient(lambda s: sc.gammainc(s, x), s), s), a)
    np.testing.assert_allclose(third, mp_derivative(p, (a, x), (3, 0)), rtol=1e-9)
    mixed = db.gradient(lambda z: db.gradient(lambda s: db.gradient(lambda s: sc.gammainc(s, z), s), a), x)
    np.testing.assert_allclose(mixed, mp_derivative(p, (a, x), (2, 1)), rtol=1e-9)


def test_gamma_cdf_hessian_in_a_and_x():
    mpmath = pytest.importorskip("mpmath")
    a, x, scale = 2.2, 1.9, 1.3
    h = db.hessian(lambda v: stats.gamma.cdf(v[1], v[0], 0.0, scale), np.array([a, x]))
    p = lambda s, z: mpmath.gammainc(s, 0, z / scale, regularized=True)
    for (i, j), got in np.ndenumerate(h):
        orders = (int(i == 0) + int(j == 0), int(i == 1) + int(j == 1))
        np.testing.assert_allclose(got, mp_derivative(p, (a, x), orders), rtol=1e-10)


def test_zeta_hessian_in_a_second_order_kernel():
    """A db.sum of ζ inside a gradient of a gradient: its second partials are the series' own partials."""
    x = np.array([1.6, 2.4, 5.0])
    fused = db.hessian(lambda v: db.sum(lambda s: sc.zeta(s, 1.5) * s, v), x)
    plain = db.hessian(lambda v: np.sum(sc.zeta(v, 1.5) * v), x)
    np.testing.assert_allclose(fused, plain, rtol=1e-12)
    assert np.all(np.diag(plain) != 0)


# --- sph_harm_y against SciPy's own second derivatives ---------------------------------------------------------------
@pytest.mark.parametrize(("n", "m"), [(0, 0), (2, 1), (3, -2), (4, 4)])
def test_sph_harm_y_hessian_against_scipys_second_derivatives(n, m):
    theta, phi = 0.8, 2.1
    second = sc.sph_harm_y(n, m, theta, phi, diff_n=2)[2]
    for part in (np.real, np.imag):
        h = db.hessian(lambda v: part(special.sph_harm_y(n, m, v[0], v[1])), np.array([theta, phi]))
        np.testing.assert_allclose(h, part(second), rtol=1e-10, atol=1e-12)


# --- forward mode above the dense transposition's limit ---------------------------------------------------------------
def central(f, args, tangents, h=1e-6):
    plus = f(*[a + h * t for a, t in zip(args, tangents)])
    minus = f(*[a - h * t for a, t in zip(args, tangents)])
    return (plus - minus) / (2 * h)


def transposition_gap(f, args, tangents):
    """|⟨vjp(u), t⟩ - ⟨u, jvp(t)⟩| for a random u, and the jvp's tangent."""
    value, tangent = db.jvp(f, tuple(args), tuple(tangents))
    u = R.standard_normal(np.shape(value))
    cotangents = db.gradient(lambda *a: np.sum(u * f(*a)), *args)
    cotangents = cotangents if isinstance(cotangents, tuple) else (cotangents,)
    left = sum(np.sum(c * t) for c, t in zip(cotangents, tangents))
    return abs(left - np.sum(u * tangent)) / max(abs(left), 1.0), tangent


LARGE = 3 * 256  # result elements, above forward.DENSE_TRANSPOSE_LIMIT


@pytest.mark.parametrize("func", ["quantile", "percentile", "nanquantile", "nanpercentile", "median", "nanmedian"])
def test_order_statistics_jvp_at_a_large_size(func):
    a = R.standard_normal((9, LARGE))
    a[2, :5] = a[5, :5]  # ties: shared as the vjp shares them
    if func.startswith("nan"):
        a[R.random(a.shape) < 0.1] = np.nan
    ta, q, tq = R.standard_normal(a.shape), np.array([0.23, 0.55, 0.9]), R.standard_normal(3)  # q (n-1): no knot
    scale = 100.0 if "percentile" in func else 1.0
    if "median" in func:
        f, args, tangents = (lambda a: getattr(np, func)(a, axis=0)), [a], [ta]
    else:
        f, args, tangents = (lambda a, q: getattr(np, func)(a, q * scale, axis=0)), [a, q], [ta, tq]
    gap, tangent = transposition_gap(f, args, tangents)
    assert np.shape(tangent) == np.shape(f(*args)) and gap < 1e-10
    expected = central(f, args, tangents)  # not at the tied columns: the tangent there is the convention
    np.testing.assert_allclose(tangent[..., 5:], expected[..., 5:], rtol=1e-6, atol=1e-7)


def test_gradient_in_coordinates_jvp_at_a_large_size():
    x = np.cumsum(R.uniform(0.5, 1.5, LARGE))
    f = np.sin(x / 10)
    tx, tf = R.standard_normal(LARGE), R.standard_normal(LARGE)
    for edge_order in (1, 2):
        g = lambda f, x: np.gradient(f, x, edge_order=edge_order)
        gap, tangent = transposition_gap(g, [f, x], [tf, tx])
        assert gap < 1e-10
        np.testing.assert_allclose(tangent, central(g, [f, x], [tf, tx]), rtol=1e-6, atol=1e-7)


def test_roots_and_polyfit_jvp():
    p, tp = np.array([1.0, -0.5, -2.0, 0.3, 1.1]), R.standard_normal(5)
    _, tangent = db.jvp(np.roots, (p,), (tp,))
    np.testing.assert_allclose(tangent, central(np.roots, [p], [tp]), rtol=1e-6, atol=1e-8)
    x, y, w = np.linspace(-1, 1, LARGE), R.standard_normal(LARGE), R.uniform(0.5, 2.0, LARGE)
    tx, ty, tw = (R.standard_normal(LARGE) for _ in range(3))
    fit = lambda x, y, w: np.polyfit(x, y, 3, None, False, w)  # a dual w positionally
    gap, tangent = transposition_gap(fit, [x, y, w], [tx, ty, tw])
    assert gap < 1e-10
    np.testing.assert_allclose(tangent, central(fit, [x, y, w], [tx, ty, tw]), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["maximum", "minimum", "median"])
def test_pad_selections_jvp_at_a_large_size(mode):
    """np.pad's selections take the tangent at the elements they chose (the median: the mean at its two)."""
    a, ta = R.standard_normal((20, 30)), R.standard_normal((20, 30))
    f = lambda a: np.pad(a, ((2, 3), (1, 4)), mode, stat_length=((4, 5), (6, 3)))
    gap, tangent = transposition_gap(f, [a], [ta])
    assert np.size(tangent) > 256 and gap < 1e-10
    np.testing.assert_allclose(tangent, central(f, [a], [ta]), rtol=1e-6, atol=1e-8)
