"""Cases for the SciPy mirrors of ``dualbroadcast.scipy`` (no cases when SciPy is not installed).

``case.func`` is the mirror function (``special.logsumexp``, ``stats.norm.logpdf``): they are
primitives with rules of their own, registered when ``dualbroadcast.scipy`` is imported, so
``tests/rules/test_scipy_functions.py`` checks that every mirrored function has a case here.  SciPy's
distributions compute in float64 whatever the input's dtype: their cases cast the result back to the
input's (`in_dtype_of`), so the sweep's float32-in, float32-out check holds and a float32 argument's
cotangent is seen to come back in float32.
"""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, Y, Z, array_shape, broadcast_shapes, call, uniform
from .reductions import AXIS_KINDS, draw_axis

try:
    from dualbroadcast.scipy import signal, special, stats
except ImportError:  # SciPy is not installed: nothing to sweep
    special = None


def in_dtype_of(out, x):
    """``out`` in the dtype of the argument ``x`` (a distribution's float64 result of a float32 input)."""
    return out.astype(np.result_type(x))


# --- scipy.special ------------------------------------------------------------------------------------
def logsumexp_case(kind, keepdims, weighted, return_sign=False):
    """logsumexp over an axis of each kind; ``weighted``: ``b`` broadcast against ``a`` (differentiated
    too), negative elements allowed with ``return_sign``."""

    def build(draw, dtype):
        sa, sb = broadcast_shapes(draw, 2) if weighted else (array_shape(draw, min_dims=0), None)
        ndim = len(np.broadcast_shapes(sa, sb) if weighted else sa)
        axis = draw_axis(draw, ndim, kind if ndim else "none")
        args = [uniform(draw, sa, dtype)]
        b = Y if weighted else None
        if weighted:
            b_value = uniform(draw, sb, dtype, 0.5, 1.5)  # |b| >= 0.5: log|b e^a| is singular at b = 0
            args.append(b_value * np.sign(uniform(draw, sb, dtype, -1.0, 1.0)) if return_sign else b_value)
        f = call(draw, special.logsumexp, X, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
        return f, args

    name = f"logsumexp_axis_{kind}" + "_keepdims" * keepdims + "_b" * weighted + "_return_sign" * return_sign
    return Case(special.logsumexp, build, name=name)


def softmax_case(func, kind):
    def build(draw, dtype):
        s = array_shape(draw, min_dims=0 if kind == "none" else 1)
        return call(draw, func, X, axis=draw_axis(draw, len(s), kind)), [uniform(draw, s, dtype)]

    return Case(func, build, name=f"{func.__name__}_axis_{kind}")


def polygamma_case(draw, dtype):
    """polygamma(n, x) in x, the order n an integer (or integer array) broadcast against x."""
    sn, sx = broadcast_shapes(draw, 2)
    n = np.asarray(draw(st.sampled_from([0, 1, 2, 3]))) + np.zeros(sn, dtype=int)
    f = call(draw, special.polygamma, n, X)
    return (lambda x: in_dtype_of(f(x), x)), [uniform(draw, sx, dtype, 0.5, 3.0)]


def multigammaln_case(draw, dtype):
    d = draw(st.integers(1, 4))
    f = call(draw, special.multigammaln, X, d)
    return (lambda a: in_dtype_of(f(a), a)), [uniform(draw, array_shape(draw, min_dims=0), dtype, d / 2, d / 2 + 3)]


def factorial_case(draw, dtype):
    """factorial of floats, negative ones too (0 there, gradient 0)."""
    f = call(draw, special.factorial, X, exact=False, extend="zero")
    return (lambda n: in_dtype_of(f(n), n)), [uniform(draw, array_shape(draw, min_dims=0), dtype, -2.0, 4.0)]


def comb_case(repetition):
    def build(draw, dtype):
        sn, sk = broadcast_shapes(draw, 2)
        f = call(draw, special.comb, X, Y, exact=False, repetition=repetition)
        arrays = [uniform(draw, sn, dtype, 2.5, 6.0), uniform(draw, sk, dtype, 0.2, 2.3)]
        return (lambda n, k: in_dtype_of(f(n, k), n)), arrays

    return Case(special.comb, build, name="comb" + "_repetition" * repetition)


def sph_harm_y_case(draw, dtype):
    """Y_n^m(θ, φ) in both angles, degrees and orders broadcast against them; of a real dtype the real and
    imaginary parts (a gradient is of a real function), in the angles' dtype."""
    sn, st_, sp = broadcast_shapes(draw, 3)
    n = np.asarray(draw(st.sampled_from([0, 1, 2, 4]))) + np.zeros(sn, dtype=int)
    m = np.clip(draw(st.sampled_from([-2, 0, 1, 3])), -n, n)
    f = call(draw, special.sph_harm_y, n, m, X, Y)

    def parts(theta, phi):
        y = f(theta, phi)
        return in_dtype_of(np.real(y), theta), in_dtype_of(np.imag(y), theta)

    return parts, [uniform(draw, st_, dtype, 0.2, 2.9), uniform(draw, sp, dtype, 0.0, 6.2)]


def special_cases():
    return [
        Case(special.sph_harm_y, sph_harm_y_case, name="sph_harm_y"),
        Case(special.polygamma, polygamma_case, name="polygamma"),
        Case(special.multigammaln, multigammaln_case, name="multigammaln"),
        Case(special.factorial, factorial_case, name="factorial"),
        comb_case(False), comb_case(True),
        *(logsumexp_case(kind, keepdims, weighted) for kind in AXIS_KINDS for keepdims in (False, True)
          for weighted in (False, True)),
        logsumexp_case("int", False, True, return_sign=True),
        logsumexp_case("none", True, True, return_sign=True),
        logsumexp_case("tuple", False, True, return_sign=True),
        *(softmax_case(f, kind) for f in (special.softmax, special.log_softmax) for kind in AXIS_KINDS),
    ]


# --- scipy.stats location-scale families -------------------------------------------------------------
# (low, high) of each argument, inside the support: gamma's z = (x - loc)/scale > 0, beta's in (0, 1).
RANGES = {
    "norm": {"x": (-2.0, 2.0), "loc": (-1.0, 1.0), "scale": (0.5, 2.0)},
    "t": {"x": (-2.0, 2.0), "df": (1.0, 5.0), "loc": (-1.0, 1.0), "scale": (0.5, 2.0)},
    "gamma": {"x": (0.3, 3.0), "a": (0.5, 3.0), "loc": (-0.1, 0.1), "scale": (0.5, 2.0)},
    "beta": {"x": (0.15, 0.85), "a": (0.5, 3.0), "b": (0.5, 3.0), "loc": (-0.05, 0.05), "scale": (1.05, 1.3)},
    "chi2": {"x": (0.3, 4.0), "df": (0.8, 6.0), "loc": (-0.1, 0.1), "scale": (0.5, 2.0)},
    "expon": {"x": (0.2, 3.0), "loc": (-0.1, 0.1), "scale": (0.5, 2.0)},
    "laplace": {"x": (0.2, 2.0), "loc": (-0.1, 0.1), "scale": (0.5, 2.0)},  # x > loc: away from the kink
    "lognorm": {"x": (0.3, 3.0), "s": (0.3, 1.5), "loc": (-0.1, 0.1), "scale": (0.5, 2.0)},
}
Q = (0.05, 0.95)  # ppf's probabilities
SHAPE_CDFS = ("gamma", "chi2", "lognorm")  # the families whose cdf is differentiable in their shape parameters


def location_scale_case(name, method, differentiated):
    """``stats.<name>.<method>`` differentiated in the arguments named in ``differentiated`` (at most 3),
    the others constants; every argument drawn with its own broadcastable shape (ppf's first is ``q``,
    entropy has none)."""
    dist = getattr(stats, name)
    func = getattr(dist, method)
    ranges = {"ppf": {"q": Q}, "entropy": {}}.get(method, {"x": RANGES[name]["x"]})
    ranges.update((n, r) for n, r in RANGES[name].items() if n != "x")
    names = list(ranges)
    differentiated = [{"x": "q"}.get(n, n) if method == "ppf" else n for n in differentiated
                      if n != "x" or method != "entropy"]

    def build(draw, dtype):
        shapes = dict(zip(names, broadcast_shapes(draw, len(names))))
        values = {n: uniform(draw, shapes[n], dtype, *ranges[n]) for n in names}
        slots = dict(zip(differentiated, (X, Y, Z)))
        positional = [slots.get(n, values[n]) for n in names if n not in ("loc", "scale")]
        keywords = {n: slots.get(n, values[n]) for n in ("loc", "scale")}
        f = call(draw, func, *positional, **keywords)
        return lambda *a: in_dtype_of(f(*a), a[0]), [values[n] for n in differentiated]

    return Case(func, build, name=f"{name}_{method}_in_{'_'.join(differentiated)}")


def location_scale_cases():
    cases = []
    for name, ranges in RANGES.items():
        shape_parameters = [n for n in ranges if n not in ("x", "loc", "scale")]
        for method in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "entropy"):
            cases.append(location_scale_case(name, method, ("x", "loc", "scale")))
            if (method in ("logpdf", "pdf", "entropy") or name in SHAPE_CDFS) and shape_parameters:
                cases.append(location_scale_case(name, method, ("x", *shape_parameters)))
    return cases


# --- poisson, multivariate_normal, dirichlet ----------------------------------------------------------
def poisson_case(method):
    func = getattr(stats.poisson, method)

    def build(draw, dtype):
        sk, smu = broadcast_shapes(draw, 2)
        k = np.floor(uniform(draw, sk, np.float64, 0.0, 7.0)).astype(dtype)
        loc = draw(st.sampled_from([0, -1]))  # k - loc in the support
        f = call(draw, func, X, loc=loc) if method == "entropy" else call(draw, func, k, X, loc=loc)
        return lambda mu: in_dtype_of(f(mu), mu), [uniform(draw, smu, dtype, 0.5, 4.0)]

    return Case(func, build, name=f"poisson_{method}")


def mvn_entropy_case(cov_kind):
    """``multivariate_normal.entropy`` in cov (``A Aᵀ + dim·I``, a diagonal or ``c·I``)."""
    func = stats.multivariate_normal.entropy

    def build(draw, dtype):
        dim = draw(st.integers(1, 3))
        mean = uniform(draw, (dim,), dtype, -1.0, 1.0)
        f = call(draw, func, mean, X)
        if cov_kind == "matrix":
            eye = dim * np.eye(dim, dtype=dtype)
            return lambda a: in_dtype_of(f(a @ a.T + eye), a), [uniform(draw, (dim, dim), dtype, -1.0, 1.0)]
        c = uniform(draw, (dim,) if cov_kind == "diagonal" else (), dtype, 0.5, 2.0)
        return lambda c: in_dtype_of(f(c), c), [c]

    return Case(func, build, name=f"multivariate_normal_entropy_cov_{cov_kind}")


def dirichlet_entropy_case():
    func = stats.dirichlet.entropy

    def build(draw, dtype):
        f = call(draw, func, X)
        return lambda a: in_dtype_of(f(a), a), [uniform(draw, (draw(st.integers(2, 4)),), dtype, 0.5, 3.0)]

    return Case(func, build, name="dirichlet_entropy")


def mvn_samples_shape(draw, dim):
    """A shape of ``x`` SciPy reads as samples of ``dim`` components (the last axis; a 1-d x of a
    1-dimensional distribution is a list of samples, a 0-d one a single sample)."""
    if dim == 1 and draw(st.booleans()):
        return array_shape(draw, min_dims=0, max_dims=1)
    return (*array_shape(draw, min_dims=0, max_dims=2), dim)


def mvn_case(method, cov_kind, allow_singular=False):
    """``multivariate_normal.<method>`` in x, mean and cov; a 2-d cov is ``A Aᵀ + dim·I`` of a differentiated
    ``A`` (symmetric, positive definite), a 1-d cov its diagonal, a scalar cov ``c·I``."""
    func = getattr(stats.multivariate_normal, method)

    def build(draw, dtype):
        dim = draw(st.integers(1, 3))
        x = uniform(draw, mvn_samples_shape(draw, dim), dtype, -1.5, 1.5)
        mean = uniform(draw, (dim,), dtype, -1.0, 1.0)
        if cov_kind == "matrix":
            c = uniform(draw, (dim, dim), dtype, -1.0, 1.0)
            eye = dim * np.eye(dim, dtype=dtype)
            f = call(draw, func, X, Y, Z, allow_singular=allow_singular)
            return lambda x, mean, a: in_dtype_of(f(x, mean, a @ a.T + eye), x), [x, mean, c]
        c = uniform(draw, (dim,) if cov_kind == "diagonal" else (), dtype, 0.5, 2.0)
        return (lambda f: lambda *a: in_dtype_of(f(*a), a[0]))(call(draw, func, X, Y, Z)), [x, mean, c]

    return Case(func, build, name=f"multivariate_normal_{method}_cov_{cov_kind}" + "_singular" * allow_singular)


def dirichlet_case(method, given):
    """``dirichlet.<method>`` in x and alpha: ``given`` K-1 components of x (the last is 1 - Σx), or all K
    as the softmax of a differentiated array (in float64: SciPy checks that they sum to 1 within 1e-9)."""
    func = getattr(stats.dirichlet, method)

    def build(draw, dtype):
        k = draw(st.integers(2, 4))
        samples = array_shape(draw, min_dims=0, max_dims=1)  # SciPy takes 1-d or 2-d x
        alpha = uniform(draw, (k,), dtype, 0.5, 3.0)
        f = call(draw, func, X, Y)
        if given == "all":
            y = uniform(draw, (k, *samples), dtype)
            return (lambda y, a: in_dtype_of(f(special.softmax(y.astype(np.float64), axis=0), a), y)), [y, alpha]
        x = uniform(draw, (k - 1, *samples), dtype, 0.05, 0.9 / k)
        return (lambda x, a: in_dtype_of(f(x, a), x)), [x, alpha]

    return Case(func, build, name=f"dirichlet_{method}_{given}_components")


def other_stats_cases():
    return [
        *(poisson_case(m) for m in ("logpmf", "pmf", "cdf", "logcdf", "sf", "logsf", "entropy")),
        *(mvn_case(m, kind) for m in ("logpdf", "pdf") for kind in ("matrix", "diagonal", "scalar")),
        *(mvn_entropy_case(kind) for kind in ("matrix", "diagonal", "scalar")),
        dirichlet_entropy_case(),
        mvn_case("logpdf", "matrix", allow_singular=True),
        *(dirichlet_case(m, given) for m in ("logpdf", "pdf") for given in ("all", "k-1")),
    ]


# --- scipy.signal ----------------------------------------------------------------------------------
def convolution_case(func, mode):
    """``func(in1, in2, mode, method)`` of N-d arrays (0-d to 3-d); in 'valid' mode one array is at least
    as large as the other along every axis, either way round."""

    def build(draw, dtype):
        s1 = array_shape(draw, min_dims=0)
        s2 = tuple(draw(st.integers(1, 4)) for _ in s1)
        if mode == "valid":
            smaller = tuple(min(a, b) for a, b in zip(s1, s2))
            s1, s2 = (s1, smaller) if draw(st.booleans()) else (smaller, s1)
        method = draw(st.sampled_from(["auto", "direct", "fft"]))
        f = call(draw, func, X, Y, mode=mode, method=method)
        return f, [uniform(draw, s1, dtype), uniform(draw, s2, dtype)]

    return Case(func, build, name=f"{func.__name__}_{mode}")


def signal_cases():
    return [convolution_case(f, mode) for f in (signal.convolve, signal.correlate)
            for mode in ("full", "same", "valid")]


CASES = [] if special is None else [*special_cases(), *location_scale_cases(), *other_stats_cases(), *signal_cases()]
