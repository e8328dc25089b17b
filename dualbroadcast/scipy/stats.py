"""Mirrors of ``scipy.stats`` ``norm``, ``t``, ``gamma``, ``beta``, ``poisson``, ``multivariate_normal``
and ``dirichlet`` (see the package docstring): each method has SciPy's signature, returns SciPy's value
and is one tape operation with the reverse rule below.

Location-scale families, ``z = (x - loc) / scale`` and ``log f = log f₀(z; θ) - log scale`` with the
score ``s = ∂ log f₀ / ∂z``:

* logpdf: ``∂x = s / scale``, ``∂loc = -s / scale``, ``∂scale = -(s·z + 1) / scale``,
  ``∂θ = ∂ log f₀ / ∂θ``; pdf: the same times the pdf;
* cdf: ``∂x = pdf``, ``∂loc = -pdf``, ``∂scale = -pdf · z``; logcdf: the same divided by the cdf
  (``exp(logpdf - logcdf)``).  In a shape parameter: gamma's cdf ``P(a, z)`` has ``∂a`` the derivative of
  the regularised incomplete gamma function in ``a`` (`rules.scipy_special.gammainc_da`, JAX's
  series and continued fraction; its logcdf that over the cdf).  The cdfs of ``t`` (in ``df``) and
  ``beta`` (in ``a``, ``b``), derivatives of the incomplete beta function in its parameters, which
  neither SciPy nor JAX computes, are a clear error.

=========  =======================  ===============================================================
family     s(z)                     ∂ log f₀ / ∂θ
=========  =======================  ===============================================================
norm       -z
t(df)      -(df+1) z / (df + z²)    ½(ψ((df+1)/2) - ψ(df/2) - 1/df - log1p(z²/df))
                                    + (df+1) z² / (2 df (df + z²))
gamma(a)   (a-1)/z - 1              log z - ψ(a)
beta(a,b)  (a-1)/z - (b-1)/(1-z)    a: log z - ψ(a) + ψ(a+b);  b: log1p(-z) - ψ(b) + ψ(a+b)
=========  =======================  ===============================================================

``poisson`` is differentiable in ``mu``: ``∂ logpmf = n/mu - 1`` (``n = k - loc``), and
``∂ cdf = -pmf(⌊n⌋)``; ``k`` and ``loc`` are counts (an error if tracked).
``multivariate_normal`` (``r = x - mean``, ``u = Σ⁻¹ r``): ``∂x = -u``, ``∂mean = u``,
``∂Σ = ½(u uᵀ - Σ⁻¹)``, the symmetric gradient (JAX's convention; SciPy reads one triangle of ``cov``);
a 1-d ``cov`` (the diagonal) gets that matrix's diagonal, a scalar its trace; with
``allow_singular=True`` ``Σ⁻¹`` is the pseudo-inverse.  Its ``cdf`` and ``logcdf`` (numerical
integration) are not differentiable.  ``dirichlet`` (components along the first axis of ``x``):
``∂x = (alpha - 1)/x``, ``∂alpha = log x - ψ(alpha) + ψ(Σalpha)``; given K-1 components, the last is ``1 - Σx``.

Every partial is written with recorded calls (the methods' own primitives, ``logpdf`` in a cdf's partial,
and scipy.special's ufuncs), so it is differentiable again: Hessians work.  Outside the support (a
density of 0) every gradient is 0.  Calling a distribution freezes it, as in
SciPy: ``stats.norm(mu, sigma).logpdf(x)``.
"""

# The mirrors (the API reference documents these); the rest of the module is their rules.
__all__ = ["norm", "t", "gamma", "beta", "poisson", "multivariate_normal", "dirichlet"]

import numpy as np
import scipy.special
import scipy.stats

from ..errors import UnsupportedFunctionError
from ..pullbacks import as_array
from ..pullbacks import plain as untracked
from ..registry import defvjp
from ..rules.scipy_special import gammainc_da
from ..tracked import primitive
from ._common import cotangent, times

digamma = scipy.special.digamma


def scipy_method(name, method, call):
    """A primitive of positional arguments calling ``call(SciPy's dist.method, *args)``, named
    ``scipy.stats.<dist>.<method>`` in messages."""
    bound = getattr(getattr(scipy.stats, name), method)

    def impl(*args):
        return call(bound, *args)

    impl.__name__ = method
    impl.__qualname__ = f"{name}.{method}"
    impl.__module__ = "scipy.stats"
    return primitive(impl)


def in_support(d, support):
    """The partial ``d`` where the density is positive, 0 elsewhere."""
    return np.where(support, d, 0.0)


class Frozen:
    """``dist(*args, **kwds)``, as SciPy's frozen distributions: each method takes ``x`` (or ``k``) alone and
    the parameters given here (tracked ones are differentiated)."""

    def __init__(self, dist, *args, **kwds):
        self.dist, self.args, self.kwds = dist, args, kwds

    def logpdf(self, x):
        return self.dist.logpdf(x, *self.args, **self.kwds)

    def pdf(self, x):
        return self.dist.pdf(x, *self.args, **self.kwds)

    def cdf(self, x):
        return self.dist.cdf(x, *self.args, **self.kwds)

    def logcdf(self, x):
        return self.dist.logcdf(x, *self.args, **self.kwds)

    def logpmf(self, k):
        return self.dist.logpmf(k, *self.args, **self.kwds)

    def pmf(self, k):
        return self.dist.pmf(k, *self.args, **self.kwds)


class Freezable:
    def __call__(self, *args, **kwds):
        """The frozen distribution: ``stats.norm(loc, scale).logpdf(x)``."""
        return Frozen(self, *args, **kwds)


# --- location-scale families ------------------------------------------------------------------------
class LocationScale(Freezable):
    """``dist`` with shape parameters named ``shapes``: score ``s(z, *θ)`` and ``∂ log f₀/∂θ``."""

    def __init__(self, dist, shapes, score, shape_scores, cdf_function=None, cdf_shape_partials=None):
        self._dist = dist
        self._cdf_function = cdf_function
        self._cdf_shape_partials = cdf_shape_partials  # ∂cdf/∂θ(z, *θ) of each shape parameter, where known
        self._score = score
        self._shape_scores = shape_scores
        self._names = ("x", *shapes, "loc", "scale")
        for method in ("logpdf", "pdf", "cdf", "logcdf"):
            impl = scipy_method(dist.name, method, self._call)
            makers = [self._maker(method, i) for i in range(len(self._names))]
            defvjp(impl, *makers)
            setattr(self, f"_{method}", impl)

    @staticmethod
    def _call(bound, x, *params):
        *shapes, loc, scale = params
        return bound(x, *shapes, loc=loc, scale=scale)

    def _maker(self, method, i):
        def make(ans, x, *params):
            with np.errstate(divide="ignore", invalid="ignore"):  # outside the support: masked by in_support
                d = self._partial(method, i, ans, x, params)
            return times(d, (x, *params)[i])

        return make

    def _partial(self, method, i, ans, x, params):
        """∂ method / ∂ argument ``i`` (x, the shape parameters, loc, scale)."""
        *shapes, loc, scale = params
        z = (x - loc) / scale
        if method in ("logpdf", "pdf"):
            support = untracked(ans) > -np.inf if method == "logpdf" else untracked(ans) > 0
            if 0 < i <= len(shapes):
                d = self._shape_scores[i - 1](z, *shapes)
            else:
                s = self._score(z, *shapes)
                d = s / scale if i == 0 else -s / scale if self._names[i] == "loc" else -(s * z + 1) / scale
            return in_support(d * ans if method == "pdf" else d, support)
        if 0 < i <= len(shapes) and self._cdf_shape_partials:
            d = self._cdf_shape_partials[i - 1](np.where(z > 0, z, 1.0), *shapes)  # 0 below the support
            return in_support(d if method == "cdf" else d / np.exp(ans), untracked(z) > 0)
        if 0 < i <= len(shapes):
            raise UnsupportedFunctionError(
                f"scipy.stats.{self._dist.name}.{method} is differentiable in x, loc and scale, not in its shape "
                f"parameter {self._names[i]!r}: it needs the derivative of the {self._cdf_function} in its "
                f"parameters, which SciPy does not provide; pass {self._names[i]} as a constant (db.cut)"
            )
        logpdf = self._logpdf(x, *shapes, loc, scale)  # recorded: the partial is differentiable again
        density = np.exp(logpdf) if method == "cdf" else np.exp(logpdf - ans)
        dz = 1.0 if i == 0 else -1.0 if self._names[i] == "loc" else -z
        return in_support(density * dz, untracked(logpdf) > -np.inf)


class norm_gen(LocationScale):
    """``scipy.stats.norm``: differentiable in x, loc and scale."""

    def logpdf(self, x, loc=0, scale=1):
        return self._logpdf(x, loc, scale)

    def pdf(self, x, loc=0, scale=1):
        return self._pdf(x, loc, scale)

    def cdf(self, x, loc=0, scale=1):
        return self._cdf(x, loc, scale)

    def logcdf(self, x, loc=0, scale=1):
        return self._logcdf(x, loc, scale)


class t_gen(LocationScale):
    """``scipy.stats.t``: differentiable in x, df, loc and scale (cdf and logcdf: not in df)."""

    def logpdf(self, x, df, loc=0, scale=1):
        return self._logpdf(x, df, loc, scale)

    def pdf(self, x, df, loc=0, scale=1):
        return self._pdf(x, df, loc, scale)

    def cdf(self, x, df, loc=0, scale=1):
        return self._cdf(x, df, loc, scale)

    def logcdf(self, x, df, loc=0, scale=1):
        return self._logcdf(x, df, loc, scale)


class gamma_gen(LocationScale):
    """``scipy.stats.gamma``: differentiable in x, a, loc and scale."""

    def logpdf(self, x, a, loc=0, scale=1):
        return self._logpdf(x, a, loc, scale)

    def pdf(self, x, a, loc=0, scale=1):
        return self._pdf(x, a, loc, scale)

    def cdf(self, x, a, loc=0, scale=1):
        return self._cdf(x, a, loc, scale)

    def logcdf(self, x, a, loc=0, scale=1):
        return self._logcdf(x, a, loc, scale)


class beta_gen(LocationScale):
    """``scipy.stats.beta``: differentiable in x, a, b, loc and scale (cdf and logcdf: not in a, b)."""

    def logpdf(self, x, a, b, loc=0, scale=1):
        return self._logpdf(x, a, b, loc, scale)

    def pdf(self, x, a, b, loc=0, scale=1):
        return self._pdf(x, a, b, loc, scale)

    def cdf(self, x, a, b, loc=0, scale=1):
        return self._cdf(x, a, b, loc, scale)

    def logcdf(self, x, a, b, loc=0, scale=1):
        return self._logcdf(x, a, b, loc, scale)


def t_df_score(z, df):
    """∂ log f₀ / ∂df of Student's t."""
    return 0.5 * (digamma((df + 1) / 2) - digamma(df / 2) - 1 / df - np.log1p(z * z / df)) \
        + (df + 1) * z * z / (2 * df * (df + z * z))


def beta_a_score(z, a, b):
    return np.log(z) - digamma(a) + digamma(a + b)


def beta_b_score(z, a, b):
    return np.log1p(-z) - digamma(b) + digamma(a + b)


norm = norm_gen(scipy.stats.norm, (), lambda z: -z, ())
t = t_gen(scipy.stats.t, ("df",), lambda z, df: -(df + 1) * z / (df + z * z), (t_df_score,),
          "regularized incomplete beta function (scipy.special.betainc)")
gamma = gamma_gen(scipy.stats.gamma, ("a",), lambda z, a: (a - 1) / z - 1, (lambda z, a: np.log(z) - digamma(a),),
                  "regularized incomplete gamma function (scipy.special.gammainc)",
                  (lambda z, a: gammainc_da(a, z),))
beta = beta_gen(scipy.stats.beta, ("a", "b"), lambda z, a, b: (a - 1) / z - (b - 1) / (1 - z),
                (beta_a_score, beta_b_score), "regularized incomplete beta function (scipy.special.betainc)")


# --- poisson -------------------------------------------------------------------------------------------
class poisson_gen(Freezable):
    """``scipy.stats.poisson``: differentiable in mu (k and loc are counts)."""

    def __init__(self):
        for method in ("logpmf", "pmf", "cdf", "logcdf"):
            impl = scipy_method("poisson", method, lambda bound, k, mu, loc: bound(k, mu, loc=loc))
            defvjp(impl, self._count_maker(method, "k"), self._mu_maker(method), self._count_maker(method, "loc"))
            setattr(self, f"_{method}", impl)

    @staticmethod
    def _count_maker(method, name):
        def make(ans, k, mu, loc):
            raise UnsupportedFunctionError(
                f"scipy.stats.poisson.{method} is differentiable in mu only; {name} is a count (the "
                f"function is piecewise constant in it): pass {name} as a constant (db.cut)"
            )

        return make

    @staticmethod
    def _mu_maker(method):
        def make(ans, k, mu, loc):
            with np.errstate(divide="ignore", invalid="ignore"):  # outside the support: masked by in_support
                return times(partial(ans, untracked(k) - untracked(loc), mu), mu)

        def partial(ans, n, mu):
            if method in ("logpmf", "pmf"):
                support = untracked(ans) > -np.inf if method == "logpmf" else untracked(ans) > 0
                return in_support(n / mu - 1 if method == "logpmf" else ans * (n / mu - 1), support)
            logpmf = poisson.logpmf(np.floor(n), mu)  # recorded: the partial is differentiable again
            density = np.exp(logpmf) if method == "cdf" else np.exp(logpmf - ans)
            return in_support(-density, untracked(logpmf) > -np.inf)

        return make

    def logpmf(self, k, mu, loc=0):
        return self._logpmf(k, mu, loc)

    def pmf(self, k, mu, loc=0):
        return self._pmf(k, mu, loc)

    def cdf(self, k, mu, loc=0):
        return self._cdf(k, mu, loc)

    def logcdf(self, k, mu, loc=0):
        return self._logcdf(k, mu, loc)


poisson = poisson_gen()


# --- multivariate normal -----------------------------------------------------------------------------
def gaussian_terms(x, mean, cov, allow_singular):
    """``(u, Σ⁻¹)``: ``u = Σ⁻¹(x - mean)`` one row per sample (shaped as SciPy reads ``x``), and ``Σ⁻¹``
    (the pseudo-inverse with ``allow_singular``)."""
    c = cov.covariance if isinstance(cov, scipy.stats.Covariance) else as_array(cov, np.float64)
    dim = c.shape[0] if c.ndim else np.size(mean) if mean is not None else 1
    sigma = c if c.ndim == 2 else np.diag(c) if c.ndim == 1 else c * np.eye(dim)
    inverse = np.linalg.pinv(sigma, hermitian=True) if allow_singular else np.linalg.inv(sigma)
    r = np.reshape(x, (-1, dim)) - (0.0 if mean is None else mean)
    return r @ inverse, inverse


def mvn_weights(method, ans, g):
    """The cotangent of each sample's log density: ``g``, times the density for the pdf."""
    g = np.reshape(g, -1)
    return g * np.reshape(ans, -1) if method == "pdf" else g


def mvn_x(method):
    def make(ans, x, mean, cov, allow_singular):
        """x̄ = -ȳ u."""
        u, _ = gaussian_terms(x, mean, cov, allow_singular)
        return lambda g: cotangent(x, np.reshape(-mvn_weights(method, ans, g)[:, None] * u, np.shape(x)))

    return make


def mvn_mean(method):
    def make(ans, x, mean, cov, allow_singular):
        """mean̄ = Σ ȳ u over the samples."""
        u, _ = gaussian_terms(x, mean, cov, allow_singular)
        return lambda g: cotangent(mean, mvn_weights(method, ans, g) @ u)

    return make


def mvn_cov(method):
    def make(ans, x, mean, cov, allow_singular):
        """Σ̄ = ½(Σ ȳ u uᵀ - Σ ȳ · Σ⁻¹), its diagonal for a 1-d cov, its trace for a scalar."""
        u, inverse = gaussian_terms(x, mean, cov, allow_singular)

        def back(g):
            w = mvn_weights(method, ans, g)
            gc = 0.5 * ((u.T * w) @ u - np.sum(w) * inverse)
            return cotangent(cov, gc if np.ndim(cov) == 2 else np.diag(gc) if np.ndim(cov) == 1 else np.trace(gc))

        return back

    return make


class multivariate_normal_gen(Freezable):
    """``scipy.stats.multivariate_normal``: logpdf and pdf differentiable in x, mean and cov."""

    def __init__(self):
        for method in ("logpdf", "pdf"):
            impl = scipy_method("multivariate_normal", method,
                                lambda bound, x, mean, cov, allow_singular: bound(x, mean, cov, allow_singular))
            defvjp(impl, mvn_x(method), mvn_mean(method), mvn_cov(method), None)
            setattr(self, f"_{method}", impl)
        self._dist = scipy.stats.multivariate_normal

    def logpdf(self, x, mean=None, cov=1, allow_singular=False):
        return self._logpdf(x, mean, cov, allow_singular)

    def pdf(self, x, mean=None, cov=1, allow_singular=False):
        return self._pdf(x, mean, cov, allow_singular)

    def cdf(self, x, mean=None, cov=1, allow_singular=False, maxpts=None, abseps=1e-05, releps=1e-05, *,
            lower_limit=None, rng=None):
        """``scipy.stats.multivariate_normal.cdf`` on plain values (not differentiable: numerical integration)."""
        return self._dist.cdf(*plain("cdf", x, mean, cov), allow_singular, maxpts, abseps, releps,
                             **given(lower_limit=lower_limit, rng=rng))

    def logcdf(self, x, mean=None, cov=1, allow_singular=False, maxpts=None, abseps=1e-05, releps=1e-05, *,
               lower_limit=None, rng=None):
        """``scipy.stats.multivariate_normal.logcdf`` on plain values (not differentiable)."""
        return self._dist.logcdf(*plain("logcdf", x, mean, cov), allow_singular, maxpts, abseps, releps,
                                **given(lower_limit=lower_limit, rng=rng))


def given(**keywords):
    """The keywords not left at None (an older SciPy has no ``rng=``)."""
    return {k: v for k, v in keywords.items() if v is not None}


def plain(method, *args):
    """``args``, or a clear error if one is tracked (its gradient would be dropped)."""
    from ..tracked import Tracked

    if any(type(a) is Tracked for a in args):
        raise UnsupportedFunctionError(
            f"scipy.stats.multivariate_normal.{method} is a numerical integration with no derivative rule; "
            "differentiate logpdf/pdf, or pass constants (db.cut)"
        )
    return args


multivariate_normal = multivariate_normal_gen()


# --- dirichlet -------------------------------------------------------------------------------------------
def dirichlet_components(x, alpha):
    """``x`` with all K components along its first axis (SciPy adds ``1 - Σx`` when given K-1), and
    ``alpha`` shaped to broadcast against it."""
    x = as_array(x, np.float64)
    if x.shape[0] == len(alpha) - 1:
        x = np.concatenate([x, 1 - np.sum(x, axis=0, keepdims=True)])
    return x, np.reshape(alpha, (-1,) + (1,) * (x.ndim - 1))


def dirichlet_x(method):
    def make(ans, x, alpha):
        """x̄ = ȳ (alpha - 1)/x (minus the last component's partial for K-1 given components)."""
        full, a = dirichlet_components(x, alpha)
        d = (a - 1) / full
        if full.shape[0] != np.shape(x)[0]:
            d = d[:-1] - d[-1:]
        d = d * ans if method == "pdf" else d
        return lambda g: cotangent(x, g * d)

    return make


def dirichlet_alpha(method):
    def make(ans, x, alpha):
        """ᾱ = Σ ȳ (log x - ψ(alpha) + ψ(Σalpha)) over the samples."""
        full, a = dirichlet_components(x, alpha)
        d = np.log(full) - digamma(a) + digamma(np.sum(alpha))
        d = d * ans if method == "pdf" else d
        return lambda g: cotangent(alpha, np.reshape(np.sum(g * d, axis=tuple(range(1, full.ndim))), np.shape(alpha)))

    return make


class dirichlet_gen(Freezable):
    """``scipy.stats.dirichlet``: logpdf and pdf differentiable in x and alpha."""

    def __init__(self):
        for method in ("logpdf", "pdf"):
            impl = scipy_method("dirichlet", method, lambda bound, x, alpha: bound(x, alpha))
            defvjp(impl, dirichlet_x(method), dirichlet_alpha(method))
            setattr(self, f"_{method}", impl)

    def logpdf(self, x, alpha):
        return self._logpdf(x, alpha)

    def pdf(self, x, alpha):
        return self._pdf(x, alpha)


dirichlet = dirichlet_gen()

MIRRORS = {
    scipy.stats.norm: norm, scipy.stats.t: t, scipy.stats.gamma: gamma, scipy.stats.beta: beta,
    scipy.stats.poisson: poisson, scipy.stats.multivariate_normal: multivariate_normal,
    scipy.stats.dirichlet: dirichlet,
}
