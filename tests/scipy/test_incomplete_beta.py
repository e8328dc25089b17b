"""The incomplete beta function I_x(a, b) in its parameters (`rules.scipy_special.betainc_parameter_partial`),
which neither SciPy nor JAX differentiates: against mpmath's derivative of its own betainc, and through it the
cdf, sf, ppf of stats.t in df and stats.beta in a and b."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db

pytest.importorskip("scipy")
import scipy.special as sc
import scipy.stats

from dualbroadcast.scipy import stats

mpmath = pytest.importorskip("mpmath")
mpmath.mp.dps = 30


def mpmath_partials(a, b, x):
    """(∂I/∂a, ∂I/∂b) of mpmath's regularised incomplete beta function, differentiated by mpmath."""
    f = lambda a, b: mpmath.betainc(a, b, 0, x, regularized=True)
    return float(mpmath.diff(f, (a, b), (1, 0))), float(mpmath.diff(f, (a, b), (0, 1)))


@settings(max_examples=40, deadline=None)
@given(log_a=st.floats(np.log(0.05), np.log(500)), log_b=st.floats(np.log(0.05), np.log(500)),
       x=st.floats(1e-4, 1 - 1e-4))
def test_betainc_in_a_and_b_against_mpmath(log_a, log_b, x):
    """From small parameters (a pole of the terms' factors near 0) to hundreds, on both sides of the switch
    between the series of I and of 1 - I."""
    a, b = np.exp(log_a), np.exp(log_b)
    got = db.gradient(lambda a, b: sc.betainc(a, b, x), a, b)
    want = mpmath_partials(a, b, x)
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-14)
    got_complement = db.gradient(lambda a, b: sc.betaincc(a, b, x), a, b)
    np.testing.assert_allclose(got_complement, -np.array(want), rtol=1e-8, atol=1e-14)


def test_fixed_points_in_every_regime_against_mpmath_in_one_call():
    """Without hypothesis, so that a wrong series fails in one call rather than in minutes of shrinking (a
    series whose terms do not decay runs its `BETA_SERIES_TERMS` terms and gives NaN): small and large a and b,
    on both sides of the switch between the series of I and of 1 - I."""
    a = np.array([0.05, 0.7, 3.0, 40.0, 300.0, 2.0])
    b = np.array([2.0, 0.3, 5.0, 25.0, 200.0, 0.08])
    x = np.array([0.3, 0.8, 0.2, 0.5, 0.55, 0.97])
    got = db.gradient(lambda a, b: np.sum(sc.betainc(a, b, x)), a, b)
    want = np.transpose([mpmath_partials(*point) for point in zip(a, b, x)])
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-14)


@settings(max_examples=20, deadline=None)
@given(shapes=st.lists(st.sampled_from([(), (1,), (3,), (2, 1), (2, 3)]), min_size=3, max_size=3),
       seed=st.integers(0, 2**16))
def test_broadcast_arguments_take_their_elements_partials(shapes, seed):
    """a, b and x of broadcasting shapes: each gradient is the sum, over the elements it broadcasts to, of the
    scalar partials (mpmath's)."""
    rng = np.random.default_rng(seed)
    a, b, x = (rng.uniform(low, high, shape) for (low, high), shape in zip([(0.3, 6), (0.3, 6), (0.05, 0.95)],
                                                                            shapes))
    weights = rng.uniform(-1, 1, np.broadcast_shapes(*shapes))
    ga, gb = db.gradient(lambda a, b: np.sum(weights * sc.betainc(a, b, x)), a, b)
    A, B, Z = np.broadcast_arrays(a, b, x)
    partials = np.array([mpmath_partials(*map(float, v)) for v in zip(A.ravel(), B.ravel(), Z.ravel())])
    for got, column, arg in ((ga, 0, a), (gb, 1, b)):
        full = (weights.ravel() * partials[:, column]).reshape(weights.shape)
        axes = tuple(range(full.ndim - np.ndim(arg)))
        reduced = np.sum(full, axis=axes)
        reduced = np.sum(reduced, axis=tuple(i for i, n in enumerate(np.shape(arg)) if n == 1), keepdims=True)
        np.testing.assert_allclose(got, reduced.reshape(np.shape(arg)), rtol=1e-8, atol=1e-13)


@pytest.mark.parametrize("inverse", [sc.betaincinv, sc.betainccinv])
def test_the_inverses_in_a_and_b_against_differences(inverse):
    a, b, y = np.array([0.6, 2.5, 40.0]), np.array([3.0, 0.8, 35.0]), np.array([0.2, 0.55, 0.9])
    ga, gb = db.gradient(lambda a, b: np.sum(inverse(a, b, y)), a, b)
    h = 1e-6
    np.testing.assert_allclose(ga, (inverse(a + h * a, b, y) - inverse(a - h * a, b, y)) / (2 * h * a), rtol=1e-6)
    np.testing.assert_allclose(gb, (inverse(a, b + h * b, y) - inverse(a, b - h * b, y)) / (2 * h * b), rtol=1e-6)


def test_a_kernel_and_forward_mode_take_the_same_partials():
    a, b, x = np.array([0.7, 2.0, 9.0]), 1.5, np.array([0.3, 0.5, 0.95])
    tape = db.gradient(lambda a: np.sum(sc.betainc(a, b, x)), a)
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(lambda a, x: sc.betainc(a, b, x), a, x), a), tape,
                               rtol=1e-13)
    np.testing.assert_allclose(db.jvp(lambda a: np.sum(sc.betainc(a, b, x)), (a,), (np.ones(3),))[1],
                               np.sum(tape), rtol=1e-13)


def test_at_the_ends_the_partials_are_zero_and_outside_the_domain_nan():
    with np.errstate(invalid="ignore"):
        g = db.gradient(lambda a: sc.betainc(a, 2.0, 1.5), 1.5)
    np.testing.assert_array_equal(db.gradient(lambda a: np.sum(sc.betainc(a, 2.0, np.array([0.0, 1.0]))), 1.5), 0.0)
    assert np.isnan(g)  # 1.5 is outside [0, 1]: SciPy's value is NaN too


def test_second_derivatives_in_x_are_the_densitys_and_in_a_a_clear_error():
    """∂²I/∂x∂a = density · (log x - ψ(a) + ψ(a+b)), recorded calls; ∂²I/∂a² is not computed."""
    a, b, x = 2.5, 1.5, 0.35
    mixed = db.gradient(lambda x: db.gradient(lambda a: sc.betainc(a, b, x), a), x)
    h = 1e-6
    expected = (db.gradient(lambda a: sc.betainc(a, b, x + h), a) - db.gradient(lambda a: sc.betainc(a, b, x - h), a))
    assert mixed == pytest.approx(expected / (2 * h), rel=1e-7)
    with pytest.raises(db.UnsupportedFunctionError, match="second derivatives of the incomplete beta function"):
        db.hessian(lambda a: sc.betainc(a, b, x), a)


def t_cdf(x, df):
    """Student's t cdf from mpmath's incomplete beta function."""
    half = mpmath.betainc(df / 2, 0.5, 0, df / (df + x * x), regularized=True) / 2
    return half if x < 0 else 1 - half


@pytest.mark.parametrize("df", [0.6, 3.0, 25.0, 300.0])
def test_t_cdf_in_df_against_mpmath(df):
    x = np.array([-6.0, -1.1, -0.2, 0.0, 0.3, 2.0, 9.0])
    got = [db.gradient(lambda d: stats.t.cdf(xi, d), df) for xi in x]
    want = [float(mpmath.diff(lambda d: t_cdf(mpmath.mpf(xi), d), df)) for xi in x]
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-15)


def test_beta_cdf_in_a_and_b_against_mpmath_inside_and_outside_the_support():
    z = np.array([-0.3, 0.0, 0.05, 0.5, 0.97, 1.0, 1.4])
    for a, b in ((2.0, 3.0), (0.4, 0.6), (30.0, 5.0)):
        got = [db.gradient(lambda a, b: stats.beta.cdf(zi, a, b), a, b) for zi in z]
        want = [mpmath_partials(a, b, min(max(zi, 0.0), 1.0)) if 0 < zi < 1 else (0.0, 0.0) for zi in z]
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-15)


METHODS = {
    "t": ((4.5,), np.array([-2.0, 0.3, 1.7]), np.array([0.05, 0.5, 0.9])),
    "beta": ((2.5, 1.5), np.array([0.15, 0.6, 0.9]), np.array([0.1, 0.5, 0.95])),
}


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("method", ["cdf", "logcdf", "sf", "logsf", "ppf"])
def test_every_probability_method_in_the_shape_parameters_against_differences(name, method):
    """With loc and scale, each shape parameter: central differences of SciPy's method; forward mode equal."""
    shapes, x, q = METHODS[name]
    point = q if method == "ppf" else 0.2 + 1.5 * x
    ours, theirs = getattr(getattr(stats, name), method), getattr(getattr(scipy.stats, name), method)
    for i, shape in enumerate(shapes):
        def f(s, i=i):
            moved = list(shapes)
            moved[i] = s
            return ours(point, *moved, loc=0.2, scale=1.5)

        def plain(s, i=i):
            moved = list(shapes)
            moved[i] = s
            return theirs(point, *moved, loc=0.2, scale=1.5)

        h = 1e-6 * shape
        weights = np.array([0.3, -1.1, 0.8])
        got = db.gradient(lambda s: np.sum(weights * f(s)), shape)
        assert got == pytest.approx(np.sum(weights * (plain(shape + h) - plain(shape - h))) / (2 * h), rel=1e-6)
        assert db.jvp(lambda s: np.sum(weights * f(s)), (shape,), (1.0,))[1] == pytest.approx(got, rel=1e-12)
