"""The SciPy mirrors of ``dualbroadcast.scipy``: every mirrored function has a case (swept against finite
differences in float64 and float32 by tests/rules/test_rules.py and replayed by tests/prepared/test_prepared.py), has
SciPy's signature, returns exactly what SciPy returns, agrees with ``jax.grad`` of ``jax.scipy``, and
gives a clear error where it has no derivative.  Skipped without SciPy."""

import functools
import inspect
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db

pytest.importorskip("scipy")
import scipy.special
import scipy.stats

from dualbroadcast.scipy import signal, special, stats

from ..cases.scipy_functions import CASES

METHODS = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "entropy", "logpmf", "pmf")
NOT_DIFFERENTIABLE = {"multivariate_normal.cdf", "multivariate_normal.logcdf",  # numerical integration
                      "poisson.ppf"}  # counts


def mirrored():
    """``(name, SciPy's callable, the mirror)`` for every mirrored function and distribution method."""
    pairs = []
    for module in (special, stats, signal):
        for original, mirror in module.MIRRORS.items():
            if inspect.isfunction(mirror):
                pairs.append((mirror.__name__, original, mirror))
                continue
            name = type(mirror).__name__.removesuffix("_gen")
            pairs += [(f"{name}.{m}", getattr(original, m), getattr(mirror, m)) for m in METHODS if hasattr(mirror, m)]
    return pairs


MIRRORED = mirrored()
IDS = [name for name, _, _ in MIRRORED]


def test_every_mirrored_function_has_a_case():
    covered = {case.func for case in CASES}
    missing = [name for name, _, mirror in MIRRORED if mirror not in covered and name not in NOT_DIFFERENTIABLE]
    assert not missing, f"mirrored functions without cases in tests/cases/scipy_functions.py: {missing}"
    assert len(MIRRORED) == 8 + 8 * 8 + 8 + 5 + 3 + 2


@pytest.mark.parametrize(("name", "original", "mirror"), MIRRORED, ids=IDS)
def test_the_mirror_has_scipys_signature(name, original, mirror):
    expected = inspect.signature(original)
    if name == "sph_harm_y":  # a MultiUFunc, (*args, **kwargs), documented so
        expected = "(n, m, theta, phi, *, diff_n=0)"
        assert "sph_harm_y(n, m, theta, phi, *, diff_n=0)" in original.__doc__
    dist = getattr(scipy.stats, name.split(".")[0], None)
    if isinstance(dist, scipy.stats.rv_continuous | scipy.stats.rv_discrete):
        # SciPy writes these (x, *args, **kwds) and documents (x, <shapes>, loc=0, scale=1)
        method = name.split(".")[1]
        first = [] if method == "entropy" else ["q"] if method == "ppf" \
            else ["x"] if isinstance(dist, scipy.stats.rv_continuous) else ["k"]
        shapes = [s.strip() for s in (dist.shapes or "").split(",") if s.strip()]
        scale = ", scale=1" if isinstance(dist, scipy.stats.rv_continuous) else ""
        expected = f"({', '.join([*first, *shapes, 'loc=0'])}{scale})"
    assert str(inspect.signature(mirror)) == str(expected)


# --- the mirror returns exactly what SciPy returns ----------------------------------------------------------
R = np.random.default_rng(7)
X = R.uniform(0.2, 0.8, (3, 4))
SPD = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, -0.2], [0.1, -0.2, 1.2]])
EXAMPLES = {  # name: (args, kwargs)
    "logsumexp": ((X,), {"axis": 1, "b": X[0], "keepdims": True}),
    "softmax": ((X,), {"axis": 0}),
    "polygamma": ((np.array([[0], [1], [3]]), X), {}),
    "multigammaln": ((X + 1.5, 3), {}),
    "factorial": ((X * 5 - 1.5,), {}),
    "comb": ((X * 5 + 1, X * 3), {"repetition": True}),
    "sph_harm_y": ((np.array([[2], [3], [0]]), np.array([[1], [-2], [0]]), X * 3, X[::-1] * 6), {}),
    "log_softmax": ((X,), {"axis": (0, 1)}),
    "norm": ((X,), {"loc": 0.1, "scale": 1.3}),
    "t": ((X, 3.5), {"loc": 0.1, "scale": 1.3}),
    "gamma": ((X, 2.5), {"loc": 0.1, "scale": 1.3}),
    "beta": ((X, 2.5, 1.5), {"loc": 0.01, "scale": 1.1}),
    "chi2": ((X * 3, 3.3), {"loc": 0.1, "scale": 1.3}),
    "expon": ((X,), {"loc": 0.1, "scale": 1.3}),
    "laplace": ((X,), {"loc": 0.4, "scale": 1.3}),
    "lognorm": ((X * 2, 0.7), {"loc": 0.1, "scale": 1.3}),
    "poisson": ((np.array([0.0, 1.0, 3.0, 2.5]), np.array([0.5, 1.0, 2.0, 3.0])), {"loc": 0}),
    "multivariate_normal": ((X[:, :3],), {"mean": X[0, 1:], "cov": SPD}),
    "dirichlet": ((X[:2] / 4, np.array([1.5, 2.0, 0.7])), {}),
    "convolve": ((X, X[:2, :3]), {"mode": "same", "method": "direct"}),
    "correlate": ((X, X[:2, :3]), {"mode": "valid", "method": "fft"}),
}


def example(name):
    """The arguments of ``name`` (a distribution's method: the first is x, k or ppf's q; entropy takes none)."""
    args, kwargs = EXAMPLES[name.split(".")[0]]
    return (args[1:], kwargs) if name.endswith(".entropy") else (args, kwargs)


def assert_identical(a, b):
    """The same type, dtype and values (nan where SciPy gives nan); tuples element by element."""
    assert type(a) is type(b)
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            assert_identical(x, y)
        return
    assert np.result_type(a) == np.result_type(b) and np.shape(a) == np.shape(b)
    assert np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize(("name", "original", "mirror"), MIRRORED, ids=IDS)
def test_on_plain_arrays_the_mirror_returns_exactly_scipys_result(name, original, mirror):
    args, kwargs = example(name)
    if name in NOT_DIFFERENTIABLE and name.startswith("multivariate_normal"):
        kwargs = {**kwargs, "rng": 0}  # a Monte Carlo integration: the same draws on both sides
    assert_identical(mirror(*args, **kwargs), original(*args, **kwargs))


def test_logsumexp_with_its_sign_is_scipys():
    b = -X[0]
    assert_identical(special.logsumexp(X, axis=1, b=b, return_sign=True),
                     scipy.special.logsumexp(X, axis=1, b=b, return_sign=True))
    ours = db.pullback(lambda a: special.logsumexp(a, axis=1, b=b, return_sign=True), X)[0]
    assert_identical(tuple(map(np.asarray, ours)),
                     tuple(map(np.asarray, scipy.special.logsumexp(X, axis=1, b=b, return_sign=True))))


@pytest.mark.parametrize(("name", "original", "mirror"), [m for m in MIRRORED if m[0] not in NOT_DIFFERENTIABLE],
                         ids=[i for i in IDS if i not in NOT_DIFFERENTIABLE])
def test_on_tracked_values_the_value_is_scipys(name, original, mirror):
    args, kwargs = example(name)
    if name.endswith(".entropy") and not args:  # in the scale, or the covariance
        key = "scale" if "scale" in kwargs else "cov"
        ours, _ = db.pullback(lambda s: mirror(*args, **{**kwargs, key: s}), np.asarray(kwargs[key]))
    elif name.startswith("poisson.entropy"):
        ours, _ = db.pullback(mirror, args[0])
    elif name.startswith(("poisson", "polygamma")):  # differentiable in mu (x) only
        ours, _ = db.pullback(lambda mu: mirror(args[0], mu, **kwargs), args[1])
    elif name == "sph_harm_y":  # in the angles
        ours, _ = db.pullback(lambda theta: mirror(*args[:2], theta, args[3], **kwargs), args[2])
    else:
        ours, _ = db.pullback(lambda x: mirror(x, *args[1:], **kwargs), args[0])
    assert_identical(np.asarray(ours), np.asarray(original(*args, **kwargs)))


# --- against jax.grad of jax.scipy, float64 ------------------------------------------------------------------
@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.scipy.signal
    import jax.scipy.special
    import jax.scipy.stats
    return jax


def assert_same_gradients(ours, theirs, *args):
    """``db.gradient(ours)`` equals ``jax.grad(theirs)`` in every argument."""
    from jax import grad, jit

    expected = jit(grad(theirs, argnums=tuple(range(len(args)))))(*args)  # one compilation, not one per operation
    got = db.gradient(ours, *args)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-7, atol=1e-10)


W = R.standard_normal((3, 4))


@pytest.mark.parametrize(("axis", "keepdims", "return_sign"), [(None, False, False), (1, True, False),
                                                                 ((0, 1), False, True), (-2, False, True)])
def test_logsumexp_against_jax(jax, axis, keepdims, return_sign):
    b = R.uniform(-0.5 if return_sign else 0.5, 1.5, (1, 4))
    w = R.standard_normal(np.shape(scipy.special.logsumexp(X, axis=axis, b=b, keepdims=keepdims)))

    def loss(lse, xp):
        def f(a, b):
            out = lse(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
            return xp.sum(w * (out[0] if return_sign else out))
        return f

    assert_same_gradients(loss(special.logsumexp, np), loss(jax.scipy.special.logsumexp, jax.numpy), X, b)


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_against_jax(jax, name, axis):
    ours, theirs = getattr(special, name), getattr(jax.scipy.special, name)
    assert_same_gradients(lambda x: np.sum(W * ours(x, axis=axis)),
                          lambda x: jax.numpy.sum(W * theirs(x, axis=axis)), X)


def test_functions_over_special_ufuncs_against_jax(jax):
    js, n = jax.scipy.special, np.array([[0], [1], [3]])
    assert_same_gradients(lambda x: np.sum(W * special.polygamma(n, x)),
                          lambda x: jax.numpy.sum(W * js.polygamma(n, x)), X)
    for d in (1, 3):
        assert_same_gradients(lambda a: np.sum(W * special.multigammaln(a, d)),
                              lambda a: jax.numpy.sum(W * js.multigammaln(a, d)), X + 1.5)
    assert_same_gradients(lambda x: np.sum(W * special.factorial(x)),
                          lambda x: jax.numpy.sum(W * js.factorial(x)), X * 6 - 2)
    for repetition in (False, True):  # k beyond N and k = 0 included: comb is 0 (1) there, gradient 0
        k = np.concatenate([X[:, :3] * 3, np.zeros((3, 1))], axis=1)
        assert_same_gradients(lambda N, k: np.sum(W * special.comb(N, k, repetition=repetition)),
                              lambda N, k: jax.numpy.sum(W * js.comb(N, k, repetition=repetition)), X * 3 + 0.5, k)


def test_sph_harm_y_against_jax(jax):
    """JAX's convention for a real angle of a complex result: the gradient of Re Σ c·Y, complex c."""
    n, m = np.array([2, 3, 1, 4, 0]), np.array([1, -2, 0, 3, 0])
    theta, phi = np.array([0.7, 1.2, 2.0, 0.4, 1.0]), np.array([0.4, 2.0, 5.0, 1.1, 3.0])
    c = R.standard_normal(5) + 1j * R.standard_normal(5)
    theirs = jax.scipy.special.sph_harm_y
    assert_same_gradients(lambda t, p: np.real(np.sum(c * special.sph_harm_y(n, m, t, p))),
                          lambda t, p: jax.numpy.real(jax.numpy.sum(c * theirs(n, m, t, p, n_max=4))), theta, phi)


def test_integer_valued_variants_are_clear_errors():
    assert special.factorial(5, exact=True) == 120 and special.comb(5, 2, exact=True) == 10  # SciPy's values
    for f in (lambda n: special.factorial(n, exact=True), lambda n: special.factorial(n, extend="complex"),
              lambda n: special.comb(n, 2.0, exact=True)):
        with pytest.raises(db.UnsupportedFunctionError, match="exact=False"):
            db.gradient(f, 4.0)
    with pytest.raises(db.UnsupportedFunctionError, match="diff_n=0"):
        db.gradient(lambda t: np.real(special.sph_harm_y(2, 1, t, 0.5, diff_n=1)[0]), 0.7)


PROBABILITIES = ("cdf", "logcdf", "sf", "logsf")
LOCATION_SCALE = [  # (name, shape parameters, methods jax.scipy.stats has; lognorm and entropies: tests/cases)
    ("norm", (), ("logpdf", "pdf", *PROBABILITIES, "ppf")),
    ("t", (3.5,), ("logpdf", "pdf")),
    ("gamma", (2.5,), ("logpdf", "pdf", *PROBABILITIES)),
    ("beta", (2.5, 1.5), ("logpdf", "pdf", *PROBABILITIES)),
    ("chi2", (3.3,), ("logpdf", "pdf", *PROBABILITIES)),
    ("expon", (), ("logpdf", "pdf", *PROBABILITIES, "ppf")),
    ("laplace", (), ("logpdf", "pdf", "cdf")),
]
SHAPE_CDFS = ("gamma", "chi2")  # of those, the families whose cdf is differentiable in their shape parameters


@pytest.mark.parametrize(("name", "shapes", "method"),
                         [(n, s, m) for n, s, ms in LOCATION_SCALE for m in ms], ids=lambda v: str(v))
def test_location_scale_families_against_jax(jax, name, shapes, method):
    ours, theirs = getattr(getattr(stats, name), method), getattr(getattr(jax.scipy.stats, name), method)
    loc, scale = np.array([0.01, -0.02, 0.03, 0.0]), np.float64(1.1)
    assert_same_gradients(lambda x, loc, scale: np.sum(W * ours(x, *shapes, loc, scale)),
                          lambda x, loc, scale: jax.numpy.sum(W * theirs(x, *shapes, loc, scale)), X, loc, scale)
    if (method in ("logpdf", "pdf") or name in SHAPE_CDFS) and shapes:
        params = tuple(np.float64(s) for s in shapes)
        assert_same_gradients(lambda x, *p: np.sum(W * ours(x, *p, 0.01, 1.1)),
                              lambda x, *p: jax.numpy.sum(W * theirs(x, *p, 0.01, 1.1)), X, *params)


@functools.cache
def jax_gradient(name, method, arity):
    """``jax.grad`` of ``jax.scipy.stats.<name>.<method>`` in its ``arity`` positional arguments, compiled once."""
    import jax

    return jax.jit(jax.grad(getattr(getattr(jax.scipy.stats, name), method), argnums=tuple(range(arity))))


def assert_same_as_jax(name, method, *args):
    """``stats.<name>.<method>(*args)``'s gradient equals JAX's in every argument."""
    got = db.gradient(getattr(getattr(stats, name), method), *map(np.float64, args))
    for g, e in zip(got, jax_gradient(name, method, len(args))(*map(np.float64, args)), strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-7, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(x=st.floats(2.0, 35.0), loc=st.floats(-1.0, 1.0), scale=st.floats(0.3, 3.0))
def test_the_normal_tails_against_jax(jax, x, loc, scale):
    """logsf and logcdf far in the tails (sf down to 1e-270), where the density over the probability is the
    gradient: taken in log space, with neither underflowing."""
    assert_same_as_jax("norm", "logsf", loc + x * scale, loc, scale)
    assert_same_as_jax("norm", "logcdf", loc - x * scale, loc, scale)


@settings(max_examples=20, deadline=None)
@given(df=st.floats(0.5, 30.0), quantile=st.floats(1e-12, 1 - 1e-12), scale=st.floats(0.3, 3.0))
def test_chi2_and_gamma_over_their_domain_against_jax(jax, df, quantile, scale):
    """In x, the shape parameter and scale, from deep in the lower tail to far in the upper one (x at the
    drawn quantile), for sf and logsf and the cdfs."""
    x = scipy.stats.chi2.ppf(quantile, df, scale=scale)
    for method in PROBABILITIES:
        for name in ("chi2", "gamma"):
            assert_same_as_jax(name, method, x, df, 0.0, scale)


@pytest.mark.parametrize("method", ["logpmf", "pmf", "cdf"])
def test_poisson_against_jax(jax, method):
    k = np.array([[0.0, 1.0, 3.0, 6.0]])
    ours, theirs = getattr(stats.poisson, method), getattr(jax.scipy.stats.poisson, method)
    assert_same_gradients(lambda mu: np.sum(W * ours(k, mu)), lambda mu: jax.numpy.sum(W * theirs(k, mu)),
                          np.array([0.5, 1.0, 2.0, 3.5]))


def test_multivariate_normal_against_jax(jax):
    x = R.standard_normal((5, 3))
    w = R.standard_normal(5)
    assert_same_gradients(lambda x, m, c: np.sum(w * stats.multivariate_normal.logpdf(x, m, c)),
                          lambda x, m, c: jax.numpy.sum(w * jax.scipy.stats.multivariate_normal.logpdf(x, m, c)),
                          x, X[0, :3], SPD)


def test_dirichlet_against_jax(jax):
    x, alpha = X[:2] / 4, np.array([1.5, 2.0, 0.7])
    assert_same_gradients(lambda x, a: np.sum(W[0] * stats.dirichlet.logpdf(x, a)),
                          lambda x, a: jax.numpy.sum(W[0] * jax.scipy.stats.dirichlet.logpdf(x, a)), x, alpha)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("name", ["convolve", "correlate"])
@pytest.mark.parametrize(("s1", "s2"), [((6,), (3,)), ((3,), (5,)), ((3, 4), (2, 3)), ((2, 2, 3), (3, 2, 4))])
def test_convolutions_against_jax(jax, name, mode, s1, s2):
    """(JAX asks one array to be at least as large as the other along every axis in every mode; the cases
    sweep the other shapes against finite differences.)"""
    in1, in2 = R.standard_normal(s1), R.standard_normal(s2)
    ours, theirs = getattr(signal, name), getattr(jax.scipy.signal, name)
    w = R.standard_normal(np.shape(ours(in1, in2, mode)))
    assert_same_gradients(lambda a, b: np.sum(w * ours(a, b, mode)),
                          lambda a, b: jax.numpy.sum(w * theirs(a, b, mode)), in1, in2)


# --- conventions and errors ------------------------------------------------------------------------------
def test_outside_the_support_the_gradient_is_zero():
    x = np.array([-1.0, 0.5, 2.0])
    for f in (stats.gamma.logpdf, stats.gamma.pdf, stats.gamma.cdf, stats.gamma.logcdf):
        g = db.gradient(lambda x, scale: np.sum(np.where(np.isfinite(f(x, 2.0, 0, scale)), f(x, 2.0, 0, scale), 0.0)),
                        x, 1.5)
        assert g[0][0] == 0 and np.all(g[0][1:] != 0) and np.isfinite(g[1]) and g[1] != 0
    g = db.gradient(lambda a: np.sum(stats.gamma.pdf(x, a)), 2.0)
    assert g == db.gradient(lambda a: np.sum(stats.gamma.pdf(x[1:], a)), 2.0)
    g = db.gradient(lambda mu: np.sum(stats.poisson.pmf(np.array([-1.0, 2.5, 2.0]), mu)), 1.5)
    np.testing.assert_allclose(g, stats.poisson.pmf(2.0, 1.5) * (2.0 / 1.5 - 1))


@pytest.mark.parametrize("method", ["cdf", "logcdf"])
def test_gamma_cdf_in_its_shape_parameter_against_jax(jax, method):
    """∂P(a, z)/∂a (scipy_special.gammainc_da) against jax.grad; below the support (x < loc) the cdf is 0
    and its gradient 0 (JAX's logcdf there is -inf, compared where finite)."""
    x = np.concatenate([X.ravel() * 6, [-0.5]])
    ours, theirs = getattr(stats.gamma, method), getattr(jax.scipy.stats.gamma, method)
    w = R.standard_normal(x.shape)
    inside = x > 0.1
    assert_same_gradients(lambda x, a: np.sum(w * np.where(inside, ours(x, a, 0.1, 1.3), 0.0)),
                          lambda x, a: jax.numpy.sum(w[inside] * theirs(x[inside], a, 0.1, 1.3)), x, np.float64(2.5))
    g = db.gradient(lambda a: np.sum(ours(np.array([-0.5, 0.05]), a, 0.1)), 2.5) if method == "cdf" else 0.0
    assert g == 0


def test_counts_and_integrations_are_clear_errors():
    with pytest.raises(db.UnsupportedFunctionError, match="differentiable in mu only; k is a count"):
        db.gradient(lambda k: np.sum(stats.poisson.logpmf(k, 2.0)), np.array([1.0, 2.0]))
    with pytest.raises(db.UnsupportedFunctionError, match="numerical integration"):
        db.gradient(lambda x: stats.multivariate_normal.cdf(x, cov=SPD), X[0, :3])


def test_multivariate_normal_cov_gradient_is_symmetric():
    g = db.gradient(lambda c: stats.multivariate_normal.logpdf(X[:, :3], X[0, :3], c).sum(), SPD)
    np.testing.assert_allclose(g, g.T)


def test_dualbroadcast_works_without_scipy_and_the_mirror_names_it():
    """SciPy is optional: without it the library imports and differentiates (scipy.special's rules are
    registered only when SciPy is importable), and the mirrors say what is missing."""
    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "import numpy as np, dualbroadcast as db\n"
        "print(db.gradient(lambda x: np.sum(np.sin(x)), np.zeros(2)))\n"
        "try:\n    import dualbroadcast.scipy\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("[1. 1.]") and "needs the package 'scipy'" in out and "pip install scipy" in out


def test_the_mirror_is_one_tape_operation():
    report = str(db.explain(lambda x: np.sum(stats.norm.logpdf(x, 0.2, 1.5)), X))
    assert "scipy.stats.norm.logpdf" in report and "2 operations" in report  # and np.sum


@pytest.mark.parametrize(("name", "params", "method"), [
    ("norm", ((), {"loc": 0.2, "scale": 1.5}), "logpdf"), ("norm", ((), {"loc": 0.2, "scale": 1.5}), "logcdf"),
    ("t", ((3.0,), {"scale": 1.2}), "logpdf"), ("gamma", ((2.0, 0.1), {}), "pdf"), ("beta", ((2.0, 1.5), {}), "logpdf"),
    ("poisson", ((2.5,), {}), "pmf"),
    ("multivariate_normal", ((X[0, :3], SPD), {}), "logpdf"), ("dirichlet", ((np.array([1.5, 2.0, 0.7]),), {}), "pdf"),
])
def test_a_frozen_distribution_is_scipys_and_differentiates_its_parameters(name, params, method):
    args, kwargs = params
    x = {"poisson": np.array([0.0, 2.0, 3.0]), "multivariate_normal": X[:, :3], "dirichlet": X[:2] / 4}.get(name, X)
    mirror, original = getattr(stats, name), getattr(scipy.stats, name)
    assert_identical(getattr(mirror(*args, **kwargs), method)(x), getattr(original(*args, **kwargs), method)(x))
    first = args[0] if args else kwargs["loc"]
    frozen = db.gradient(lambda p: np.sum(getattr(mirror(p, *args[1:], **kwargs), method)(x)), first) if args \
        else db.gradient(lambda p: np.sum(getattr(mirror(loc=p, scale=kwargs["scale"]), method)(x)), first)
    direct = db.gradient(lambda p: np.sum(getattr(mirror, method)(x, p, *args[1:], **kwargs)), first) if args \
        else db.gradient(lambda p: np.sum(getattr(mirror, method)(x, loc=p, scale=kwargs["scale"])), first)
    np.testing.assert_array_equal(frozen, direct)
    assert np.all(frozen != 0)


def test_scipys_own_function_on_a_tracked_value_names_the_mirror():
    with pytest.raises(db.ValueConversionError, match=r"dualbroadcast\.scipy"):
        db.gradient(lambda m: scipy.stats.norm.logpdf(1.0, loc=m), np.float64(0.2))


def test_a_mirror_on_complex_values_is_an_error_not_a_real_formula():
    """The mirrors' rules are for real arguments: registered by the library after import, they must not be
    taken for a user's rule, which JAX's convention lets hold for complex values as written."""
    with pytest.raises(db.UnsupportedFunctionError, match="complex"):
        db.gradient(lambda z: np.real(stats.norm.logpdf(z, 0.2, 1.5)), np.array([1.0 + 0.5j]))


@pytest.mark.parametrize("mode", ["tape", "kernel"])
def test_a_parameter_without_a_derivative_is_a_clear_error_in_every_mode(mode):
    """gammaincinv in a and jv in its order: the error says why, on the tape and in a kernel (where a tangent
    reaching a table entry's None partial gave NaN)."""
    a = np.array([1.5, 2.5])
    for f, why in ((lambda v: scipy.special.gammaincinv(v, 0.3), "not done yet"),
                   (lambda v: scipy.special.jv(v, 2.0), "not differentiable")):
        loss = (lambda v: np.sum(f(v))) if mode == "tape" else (lambda v: db.sum(f, v))
        with pytest.raises(db.DifferentiationError, match=why):
            db.gradient(loss, a)


def test_the_guides_table_says_what_each_method_is_differentiable_in():
    """docs/guide/scipy.md's row of each location-scale family, cell by cell, is `differentiable_in`."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "guide" / "scipy.md").read_text()
    columns = (("logpdf", "pdf"), ("cdf", "logcdf", "sf", "logsf"), ("ppf",), ("entropy",))
    for original, mirror in stats.MIRRORS.items():
        if not isinstance(mirror, stats.LocationScale):
            continue
        [row] = [line for line in page.splitlines() if line.startswith(f"| `{original.name}` |")]
        cells = [cell.strip() for cell in row.strip("|").split("|")[1:]]
        for cell, methods in zip(cells, columns, strict=True):
            for method in methods:
                assert cell == ", ".join(f"`{n}`" for n in mirror.differentiable_in(method)), (original.name, method)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["t", "laplace", "lognorm", "beta"]), method=st.sampled_from(["sf", "logsf"]),
       quantile=st.floats(1e-12, 1 - 1e-12), scale=st.floats(0.3, 3.0))
def test_survival_functions_over_their_domain_against_differences(name, method, quantile, scale):
    """The families JAX has no sf of, in x, loc and scale (and lognorm's s), from deep in the lower tail to far
    in the upper one (x at the drawn quantile): central differences with a step relative to each argument, and
    within a hundredth of x's distance to an end of the support (which moves with loc and scale)."""
    shapes = {"t": (3.5,), "laplace": (), "lognorm": (0.7,), "beta": (2.5, 1.5)}[name]
    x = getattr(scipy.stats, name).ppf(quantile, *shapes, loc=0.1, scale=scale)
    ours = getattr(getattr(stats, name), method)
    args = [np.float64(x), *map(np.float64, shapes[:1 if name == "lognorm" else 0]), np.float64(0.1), np.float64(scale)]

    def f(*a):
        return ours(a[0], *a[1:-2], *shapes[len(a) - 3:], a[-2], a[-1])

    grads = db.gradient(f, *args)
    edges = getattr(scipy.stats, name).support(*shapes, loc=0.1, scale=scale)
    room = min(abs(x - edge) for edge in edges if np.isfinite(edge)) if np.isfinite(edges).any() else np.inf
    for i, g in enumerate(grads):
        h = min(1e-6 * max(abs(args[i]), 1e-3), room / 100)
        up, down = list(args), list(args)
        up[i], down[i] = args[i] + h, args[i] - h
        expected = (f(*up) - f(*down)) / (2 * h)
        assert g == pytest.approx(expected, rel=2e-5, abs=1e-9 * max(1.0, abs(f(*args)))), (i, g, expected)


def test_a_second_derivative_in_the_shape_registers_only_the_orders_it_needs():
    """The Hessian of gamma's cdf in its shape needs ∂P/∂a and ∂²P/∂a²; registering a rule must not run its
    formulas (each names the next order), which once registered ~200 orders per family until recursion."""
    from dualbroadcast.rules import scipy_special

    h = db.hessian(lambda a: stats.gamma.cdf(1.5, a[0]), np.array([2.0]))[0, 0]
    eps = 1e-4
    central = (db.gradient(lambda a: stats.gamma.cdf(1.5, a), 2.0 + eps)
               - db.gradient(lambda a: stats.gamma.cdf(1.5, a), 2.0 - eps)) / (2 * eps)
    assert np.isclose(h, central, rtol=1e-6)
    assert max(order for family, order in scipy_special.ORDERS if family is scipy_special.gammainc_da_series) <= 3
