"""Mirrors of ``scipy.stats`` ``norm``, ``t``, ``gamma``, ``beta``, ``chi2``, ``expon``, ``laplace``, ``lognorm``,
``poisson``, ``multivariate_normal`` and ``dirichlet`` (see the package docstring): each method has SciPy's
signature, returns SciPy's value and is one tape operation with the reverse rule below.

Location-scale families, ``z = (x - loc) / scale`` and ``log f = log f₀(z; θ) - log scale`` with the
score ``s = ∂ log f₀ / ∂z``:

* logpdf: ``∂x = s / scale``, ``∂loc = -s / scale``, ``∂scale = -(s·z + 1) / scale``,
  ``∂θ = ∂ log f₀ / ∂θ``; pdf: the same times the pdf;
* cdf: ``∂x = pdf``, ``∂loc = -pdf``, ``∂scale = -pdf · z``; logcdf: the same divided by the cdf
  (``exp(logpdf - logcdf)``).  In a shape parameter: gamma's cdf ``P(a, z)`` has ``∂a`` the derivative of
  the regularised incomplete gamma function in ``a`` (`rules.scipy_special.gammainc_da`, JAX's
  series and continued fraction; its logcdf that over the cdf); beta's ``I_z(a, b)`` and t's (below)
  the incomplete beta function's in ``a`` and ``b`` (`rules.scipy_special.betainc_da`/``betainc_db``, its
  series of positive terms differentiated term by term, which neither SciPy nor JAX computes).  Outside
  the support the cdf is 0 or 1 and these partials 0.
* sf = 1 - cdf and logsf: the cdf's partials negated (over the sf for logsf: ``-exp(logpdf - logsf)``, in
  log space, so far tails neither underflow nor divide 0 by 0);
* ppf, from ``cdf₀(z; θ) = q`` at ``x = loc + scale·z``: ``∂q = 1/pdf(x)``, ``∂θ = -∂cdf₀/∂θ(z) / pdf(x)``,
  ``∂loc = 1``, ``∂scale = z`` (0 where q is 0 or 1);
* entropy ``h = h₀(θ) + log scale``: ``∂scale = 1/scale``, ``∂θ = h₀'(θ)`` (last column below, ψ' = ζ(2, ·)).

==========  ======================  ===============================================  =================================
family      s(z)                    ∂ log f₀ / ∂θ                                    h₀'(θ)
==========  ======================  ===============================================  =================================
norm        -z
t(df)       -(df+1) z / (df + z²)   ½(ψ((df+1)/2) - ψ(df/2) - 1/df - log1p(z²/df))   (df+1)/4 (ψ'((df+1)/2) - ψ'(df/2))
                                    + (df+1) z² / (2 df (df + z²))                    + 1/(2 df)
gamma(a)    (a-1)/z - 1             log z - ψ(a)                                     1 + (1-a) ψ'(a)
beta(a,b)   (a-1)/z - (b-1)/(1-z)   a: log z - ψ(a) + ψ(a+b)                         (a+b-2) ψ'(a+b) - (a-1) ψ'(a)
                                    b: log1p(-z) - ψ(b) + ψ(a+b)                     (a+b-2) ψ'(a+b) - (b-1) ψ'(b)
chi2(df)    (df/2-1)/z - ½          ½(log(z/2) - ψ(df/2))                            ½ + ½(1 - df/2) ψ'(df/2)
expon       -1
laplace     -sign z
lognorm(s)  -(1 + log z / s²)/z     ((log z)²/s² - 1)/s                              1/s
==========  ======================  ===============================================  =================================

In a shape parameter the cdf is differentiable for gamma and beta (above), chi2 (``P(df/2, z/2)``: ½ ∂P/∂a),
lognorm (``Φ(log z / s)``: ``-φ(log z / s) log z / s²``) and t (``½ I_w(df/2, ½)`` for z < 0, one minus that for
z > 0, ``w = df / (df + z²)``: ``-sign(z)/4 · ∂I/∂a - z w^(df/2-1) (df + z²)^(-3/2) / (2 B(df/2, ½))``).

``poisson`` is differentiable in ``mu``: ``∂ logpmf = n/mu - 1`` (``n = k - loc``), and
``∂ cdf = -pmf(⌊n⌋)``; ``k`` and ``loc`` are counts (an error if tracked).
``sf``/``logsf`` likewise, ``∂ sf = +pmf(⌊n⌋)``; ``ppf``'s results are counts (no gradient); the entropy
``H = -Σₖ p log p`` has ``∂mu = -Σₖ p (k/mu - 1) log p``.
``multivariate_normal`` (``r = x - mean``, ``u = Σ⁻¹ r``): ``∂x = -u``, ``∂mean = u``,
``∂Σ = ½(u uᵀ - Σ⁻¹)``, the symmetric gradient (JAX's convention; SciPy reads one triangle of ``cov``);
a 1-d ``cov`` (the diagonal) gets that matrix's diagonal, a scalar its trace; with
``allow_singular=True`` ``Σ⁻¹`` is the pseudo-inverse.  Its ``cdf`` and ``logcdf`` (numerical
integration) are not differentiable; its entropy ``½ log det(2πe Σ)`` has ``∂Σ = ½ Σ⁻¹``.  ``dirichlet``
(components along the first axis of ``x``): ``∂x = (alpha - 1)/x``, ``∂alpha = log x - ψ(alpha) + ψ(Σalpha)``;
given K-1 components, the last is ``1 - Σx``; its entropy: ``∂αᵢ = (α₀ - K) ψ'(α₀) - (αᵢ - 1) ψ'(αᵢ)``.

Every partial is written with recorded calls (the methods' own primitives, ``logpdf`` in a cdf's partial,
and scipy.special's ufuncs), so it is differentiable again: Hessians work (but for the second derivatives of
the incomplete beta function in its parameters, an error naming them: t's cdf in df, beta's in a and b).
Outside the support (a density of 0) every gradient is 0.  Calling a distribution freezes it, as in SciPy:
``stats.norm(mu, sigma).logpdf(x)``.
"""

# The mirrors (the API reference documents these); the rest of the module is their rules.
__all__ = ["norm", "t", "gamma", "beta", "chi2", "expon", "laplace", "lognorm", "poisson", "multivariate_normal",
           "dirichlet"]

import inspect
import math

import numpy as np
import scipy.special
import scipy.stats

from ..errors import UnsupportedFunctionError
from ..pullbacks import as_array
from ..pullbacks import plain as untracked
from ..registry import defvjp, nondifferentiable
from ..rules.scipy_special import betainc_da, betainc_db, gammainc_da
from ..tracked import primitive
from ._common import cotangent, times

digamma = scipy.special.digamma
SQRT_2PI = math.sqrt(2 * math.pi)


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

    def sf(self, x):
        return self.dist.sf(x, *self.args, **self.kwds)

    def logsf(self, x):
        return self.dist.logsf(x, *self.args, **self.kwds)

    def ppf(self, q):
        return self.dist.ppf(q, *self.args, **self.kwds)

    def entropy(self):
        return self.dist.entropy(*self.args, **self.kwds)

    def logpmf(self, k):
        return self.dist.logpmf(k, *self.args, **self.kwds)

    def pmf(self, k):
        return self.dist.pmf(k, *self.args, **self.kwds)


class Freezable:
    def __call__(self, *args, **kwds):
        """The frozen distribution: ``stats.norm(loc, scale).logpdf(x)``."""
        return Frozen(self, *args, **kwds)


# --- location-scale families ------------------------------------------------------------------------
DENSITIES = ("logpdf", "pdf")
PROBABILITIES = ("cdf", "logcdf", "sf", "logsf")  # their partials: the density, over the probability for a log
METHODS = (*DENSITIES, *PROBABILITIES, "ppf", "entropy")


class LocationScale(Freezable):
    """``dist`` with shape parameters named ``shapes``: score ``s(z, *θ)``, ``∂ log f₀/∂θ``, the derivatives of the
    standard entropy and of the standard cdf in each shape parameter, and the standard support ``(lo, hi)``
    (outside it the cdf is constant).  Its methods (`METHODS`) take SciPy's arguments,
    ``(x, *shapes, loc=0, scale=1)``."""

    def __init__(self, dist, shapes, score, shape_scores, entropy_partials, cdf_shape_partials=(),
                 support=(0.0, np.inf)):
        self._dist = dist
        self._cdf_shape_partials = cdf_shape_partials  # ∂cdf/∂θ(z, *θ) of each shape parameter
        self._support = support
        self._score = score
        self._shape_scores = shape_scores
        self._entropy_partials = entropy_partials  # ∂h₀/∂θ(*θ) of the standard entropy h₀
        self._shapes = shapes
        self._names = ("x", *shapes, "loc", "scale")
        for method in METHODS:
            impl = scipy_method(dist.name, method, self._entropy_call if method == "entropy" else self._call)
            makers = [self._entropy_maker(i) for i in range(len(shapes) + 2)] if method == "entropy" \
                else [self._maker(method, i) for i in range(len(self._names))]
            defvjp(impl, *makers)
            setattr(self, f"_{method}", impl)

    @staticmethod
    def _call(bound, x, *params):
        *shapes, loc, scale = params
        return bound(x, *shapes, loc=loc, scale=scale)

    @staticmethod
    def _entropy_call(bound, *params):
        *shapes, loc, scale = params
        return bound(*shapes, loc=loc, scale=scale)

    def differentiable_in(self, method):
        """The arguments ``method`` is differentiable in: all of them."""
        first = () if method == "entropy" else ("q",) if method == "ppf" else ("x",)
        return (*first, *self._shapes, "loc", "scale")

    def _maker(self, method, i):
        def make(ans, x, *params):
            with np.errstate(divide="ignore", invalid="ignore"):  # outside the support: masked by in_support
                d = self._ppf_partial(i, ans, x, params) if method == "ppf" \
                    else self._partial(method, i, ans, x, params)
            return times(d, (x, *params)[i])

        return make

    def _entropy_maker(self, i):
        def make(ans, *params):
            """h = h₀(θ) + log scale: ∂θ = ∂h₀/∂θ, ∂loc = 0, ∂scale = 1/scale."""
            *shapes, loc, scale = params
            d = self._entropy_partials[i](*shapes) if i < len(shapes) else 0.0 * loc if i == len(shapes) \
                else 1 / scale
            return times(d, params[i])

        return make

    def _inside(self, z):
        """``(where z is inside the support, z there and a point inside elsewhere)``: the cdf's shape partials are
        evaluated inside only (outside, the cdf is 0 or 1)."""
        lo, hi = self._support
        inside = (untracked(z) > lo) & (untracked(z) < hi)
        point = 0.0 if lo == -np.inf else lo + 1.0 if hi == np.inf else (lo + hi) / 2
        return inside, np.where(inside, z, point)

    def _partial(self, method, i, ans, x, params):
        """∂ method / ∂ argument ``i`` (x, the shape parameters, loc, scale)."""
        *shapes, loc, scale = params
        z = (x - loc) / scale
        if method in DENSITIES:
            support = untracked(ans) > -np.inf if method == "logpdf" else untracked(ans) > 0
            if 0 < i <= len(shapes):
                d = self._shape_scores[i - 1](z, *shapes)
            else:
                s = self._score(z, *shapes)
                d = s / scale if i == 0 else -s / scale if self._names[i] == "loc" else -(s * z + 1) / scale
            return in_support(d * ans if method == "pdf" else d, support)
        sign = 1.0 if method in ("cdf", "logcdf") else -1.0  # sf = 1 - cdf
        if 0 < i <= len(shapes):
            inside, z = self._inside(z)
            d = sign * self._cdf_shape_partials[i - 1](z, *shapes)
            return in_support(d if method in ("cdf", "sf") else d / np.exp(ans), inside)
        logpdf = self._logpdf(x, *shapes, loc, scale)  # recorded: the partial is differentiable again
        density = sign * (np.exp(logpdf) if method in ("cdf", "sf") else np.exp(logpdf - ans))
        dz = 1.0 if i == 0 else -1.0 if self._names[i] == "loc" else -z
        return in_support(density * dz, untracked(logpdf) > -np.inf)

    def _ppf_partial(self, i, ans, q, params):
        """∂ ppf / ∂ argument ``i`` (q, the shape parameters, loc, scale) of ``x = loc + scale · ppf₀(q; θ)``,
        from ``cdf₀(z; θ) = q``: ``∂q = 1 / pdf(x)``, ``∂θ = -∂cdf₀/∂θ(z) / pdf(x)``, ``∂loc = 1``, ``∂scale = z``;
        0 where q is not inside (0, 1)."""
        *shapes, loc, scale = params
        inside = (untracked(q) > 0) & (untracked(q) < 1)
        if self._names[i] == "loc":
            return in_support(1.0 + 0.0 * ans, inside)
        if self._names[i] == "scale":
            return in_support((ans - loc) / scale, inside)
        x = np.where(inside, ans, loc + scale)  # a point of the support where q is 0 or 1 (masked)
        over_density = np.exp(-self._logpdf(x, *shapes, loc, scale))  # recorded: differentiable again
        if i == 0:
            return in_support(over_density, inside)
        z = (x - loc) / scale
        return in_support(-self._cdf_shape_partials[i - 1](z, *shapes) * over_density, inside)


def distribution_method(method, shapes):
    """The public ``method`` of a location-scale family with shape parameters ``shapes``, SciPy's signature
    (``(x, <shapes>, loc=0, scale=1)``; ``q`` for ppf, none for entropy)."""
    P = inspect.Parameter
    first = () if method == "entropy" else ("q",) if method == "ppf" else ("x",)
    signature = inspect.Signature([
        P("self", P.POSITIONAL_OR_KEYWORD), *(P(n, P.POSITIONAL_OR_KEYWORD) for n in (*first, *shapes)),
        P("loc", P.POSITIONAL_OR_KEYWORD, default=0), P("scale", P.POSITIONAL_OR_KEYWORD, default=1)])

    def call(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return getattr(self, f"_{method}")(*list(bound.arguments.values())[1:])

    call.__signature__ = signature
    call.__name__ = call.__qualname__ = method
    return call


def location_scale_family(name, shapes, **rules):
    """The mirror of ``scipy.stats.<name>`` (a `LocationScale` of the ``rules``) as an instance of its own class
    ``<name>_gen``, whose methods have SciPy's signatures and say what they are differentiable in."""
    cls = type(f"{name}_gen", (LocationScale,), {"__module__": __name__})
    mirror = cls(getattr(scipy.stats, name), shapes, **rules)
    cls.__doc__ = f"``scipy.stats.{name}``: differentiable in " + "; ".join(
        f"{m} in {', '.join(mirror.differentiable_in(m))}" for m in METHODS) + "."
    for method in METHODS:
        call = distribution_method(method, shapes)
        arguments = ", ".join(mirror.differentiable_in(method))
        call.__doc__ = f"``scipy.stats.{name}.{method}``, differentiable in {arguments}."
        setattr(cls, method, call)
    return mirror


def t_df_score(z, df):
    """∂ log f₀ / ∂df of Student's t."""
    return 0.5 * (digamma((df + 1) / 2) - digamma(df / 2) - 1 / df - np.log1p(z * z / df)) \
        + (df + 1) * z * z / (2 * df * (df + z * z))


def beta_a_score(z, a, b):
    return np.log(z) - digamma(a) + digamma(a + b)


def beta_b_score(z, a, b):
    return np.log1p(-z) - digamma(b) + digamma(a + b)


def trigamma(x):
    """ψ'(x) = ζ(2, x), the ufunc scipy.special differentiates (`rules.scipy_special`)."""
    return scipy.special.zeta(2.0, x)


def lognorm_cdf_s(z, s):
    """∂Φ(log z / s)/∂s = -φ(log z / s) · log z / s²."""
    w = np.log(z) / s
    return -np.exp(-0.5 * w * w) / SQRT_2PI * w / s


def t_cdf_df(z, df):
    """∂cdf/∂df of Student's t (the module docstring's formula; 0 at z = 0, where the cdf is ½ for every df)."""
    w = df / (df + z * z)
    return -0.25 * np.sign(z) * betainc_da(df / 2, 0.5, w) \
        - 0.5 * z * np.exp((df / 2 - 1) * np.log(w) - 1.5 * np.log(df + z * z) - scipy.special.betaln(df / 2, 0.5))


norm = location_scale_family("norm", (), score=lambda z: -z, shape_scores=(), entropy_partials=())
t = location_scale_family(
    "t", ("df",), score=lambda z, df: -(df + 1) * z / (df + z * z), shape_scores=(t_df_score,),
    entropy_partials=(lambda df: (df + 1) / 4 * (trigamma((df + 1) / 2) - trigamma(df / 2)) + 1 / (2 * df),),
    cdf_shape_partials=(t_cdf_df,), support=(-np.inf, np.inf))
gamma = location_scale_family(
    "gamma", ("a",), score=lambda z, a: (a - 1) / z - 1, shape_scores=(lambda z, a: np.log(z) - digamma(a),),
    entropy_partials=(lambda a: 1 + (1 - a) * trigamma(a),),
    cdf_shape_partials=(lambda z, a: gammainc_da(a, z),))
beta = location_scale_family(
    "beta", ("a", "b"), score=lambda z, a, b: (a - 1) / z - (b - 1) / (1 - z),
    shape_scores=(beta_a_score, beta_b_score),
    entropy_partials=(lambda a, b: (a + b - 2) * trigamma(a + b) - (a - 1) * trigamma(a),
                      lambda a, b: (a + b - 2) * trigamma(a + b) - (b - 1) * trigamma(b)),
    cdf_shape_partials=(lambda z, a, b: betainc_da(a, b, z), lambda z, a, b: betainc_db(a, b, z)), support=(0.0, 1.0))
chi2 = location_scale_family(
    "chi2", ("df",), score=lambda z, df: (df / 2 - 1) / z - 0.5,
    shape_scores=(lambda z, df: 0.5 * (np.log(z / 2) - digamma(df / 2)),),
    entropy_partials=(lambda df: 0.5 + 0.5 * (1 - df / 2) * trigamma(df / 2),),
    cdf_shape_partials=(lambda z, df: 0.5 * gammainc_da(df / 2, z / 2),))
expon = location_scale_family("expon", (), score=lambda z: -1.0 + 0.0 * z, shape_scores=(), entropy_partials=())
laplace = location_scale_family("laplace", (), score=lambda z: -np.sign(z), shape_scores=(), entropy_partials=())
lognorm = location_scale_family(
    "lognorm", ("s",), score=lambda z, s: -(1 + np.log(z) / (s * s)) / z,
    shape_scores=(lambda z, s: (np.log(z) ** 2 / (s * s) - 1) / s,), entropy_partials=(lambda s: 1 / s,),
    cdf_shape_partials=(lognorm_cdf_s,))
# Their classes, by name (as in SciPy, stats.norm is a norm_gen; the API reference documents them).
norm_gen, t_gen, gamma_gen, beta_gen, chi2_gen, expon_gen, laplace_gen, lognorm_gen = map(
    type, (norm, t, gamma, beta, chi2, expon, laplace, lognorm))


# --- poisson -------------------------------------------------------------------------------------------
class poisson_gen(Freezable):
    """``scipy.stats.poisson``: differentiable in mu (k and loc are counts; ppf's results are counts)."""

    def __init__(self):
        for method in ("logpmf", "pmf", "cdf", "logcdf", "sf", "logsf"):
            impl = scipy_method("poisson", method, lambda bound, k, mu, loc: bound(k, mu, loc=loc))
            defvjp(impl, self._count_maker(method, "k"), self._mu_maker(method), self._count_maker(method, "loc"))
            setattr(self, f"_{method}", impl)
        self._ppf = scipy_method("poisson", "ppf", lambda bound, q, mu, loc: bound(q, mu, loc=loc))
        nondifferentiable(self._ppf, reason="piecewise constant: its results are counts")
        self._entropy = scipy_method("poisson", "entropy", lambda bound, mu, loc: bound(mu, loc=loc))
        defvjp(self._entropy, self._entropy_mu, self._count_maker("entropy", "loc"))

    @staticmethod
    def _count_maker(method, name):
        def make(ans, *args):
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
            density = np.exp(logpmf) if method in ("cdf", "sf") else np.exp(logpmf - ans)
            return in_support(-density if method in ("cdf", "logcdf") else density, untracked(logpmf) > -np.inf)

        return make

    @staticmethod
    def _entropy_mu(ans, mu, loc):
        """H = -Σₖ p log p over the counts k, so ∂H/∂mu = -Σₖ p (k/mu - 1) log p (Σₖ ∂p/∂mu = 0), the sum taken
        to 40 standard deviations past mu (beyond, p log p underflows)."""
        count = int(np.max(untracked(mu) + 40 * np.sqrt(untracked(mu)) + 40))
        k = np.reshape(np.arange(count, dtype=np.float64), (count,) + (1,) * np.ndim(mu))
        logpmf = poisson.logpmf(k, mu)  # recorded: the partial is differentiable again
        return times(-np.sum(np.exp(logpmf) * (k / mu - 1) * logpmf, axis=0), mu)

    def logpmf(self, k, mu, loc=0):
        return self._logpmf(k, mu, loc)

    def pmf(self, k, mu, loc=0):
        return self._pmf(k, mu, loc)

    def cdf(self, k, mu, loc=0):
        return self._cdf(k, mu, loc)

    def logcdf(self, k, mu, loc=0):
        return self._logcdf(k, mu, loc)

    def sf(self, k, mu, loc=0):
        return self._sf(k, mu, loc)

    def logsf(self, k, mu, loc=0):
        return self._logsf(k, mu, loc)

    def ppf(self, q, mu, loc=0):
        """``scipy.stats.poisson.ppf``: counts (piecewise constant: no gradient)."""
        return self._ppf(q, mu, loc)

    def entropy(self, mu, loc=0):
        return self._entropy(mu, loc)


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


def mvn_entropy_mean(ans, mean, cov):
    """The entropy does not depend on the mean: mean̄ = 0."""
    return lambda g: cotangent(mean, np.zeros(np.shape(mean)))


def mvn_entropy_cov(ans, mean, cov):
    """h = ½ log det(2πe Σ): Σ̄ = ȳ Σ⁻¹ / 2, its diagonal for a 1-d cov, its trace for a scalar."""
    dim = np.size(mean) if mean is not None and np.ndim(cov) == 0 else 1
    if np.ndim(cov) == 2:
        return times(0.5 * np.linalg.inv(cov), cov)
    return times(0.5 * dim / cov, cov)


class multivariate_normal_gen(Freezable):
    """``scipy.stats.multivariate_normal``: logpdf and pdf differentiable in x, mean and cov, entropy in cov."""

    def __init__(self):
        for method in ("logpdf", "pdf"):
            impl = scipy_method("multivariate_normal", method,
                                lambda bound, x, mean, cov, allow_singular: bound(x, mean, cov, allow_singular))
            defvjp(impl, mvn_x(method), mvn_mean(method), mvn_cov(method), None)
            setattr(self, f"_{method}", impl)
        self._entropy = scipy_method("multivariate_normal", "entropy", lambda bound, mean, cov: bound(mean, cov))
        defvjp(self._entropy, mvn_entropy_mean, mvn_entropy_cov)
        self._dist = scipy.stats.multivariate_normal

    def entropy(self, mean=None, cov=1):
        return self._entropy(mean, cov)

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


def dirichlet_entropy_alpha(ans, alpha):
    """h = log B(alpha) + (α₀ - K) ψ(α₀) - Σ (αⱼ - 1) ψ(αⱼ): ᾱᵢ = ȳ ((α₀ - K) ψ'(α₀) - (αᵢ - 1) ψ'(αᵢ))."""
    total = np.sum(alpha)
    return times((total - np.size(alpha)) * trigamma(total) - (alpha - 1) * trigamma(alpha), alpha)


class dirichlet_gen(Freezable):
    """``scipy.stats.dirichlet``: logpdf and pdf differentiable in x and alpha, entropy in alpha."""

    def __init__(self):
        for method in ("logpdf", "pdf"):
            impl = scipy_method("dirichlet", method, lambda bound, x, alpha: bound(x, alpha))
            defvjp(impl, dirichlet_x(method), dirichlet_alpha(method))
            setattr(self, f"_{method}", impl)
        self._entropy = scipy_method("dirichlet", "entropy", lambda bound, alpha: bound(alpha))
        defvjp(self._entropy, dirichlet_entropy_alpha)

    def entropy(self, alpha):
        return self._entropy(alpha)

    def logpdf(self, x, alpha):
        return self._logpdf(x, alpha)

    def pdf(self, x, alpha):
        return self._pdf(x, alpha)


dirichlet = dirichlet_gen()

MIRRORS = {
    scipy.stats.norm: norm, scipy.stats.t: t, scipy.stats.gamma: gamma, scipy.stats.beta: beta,
    scipy.stats.chi2: chi2, scipy.stats.expon: expon, scipy.stats.laplace: laplace, scipy.stats.lognorm: lognorm,
    scipy.stats.poisson: poisson, scipy.stats.multivariate_normal: multivariate_normal,
    scipy.stats.dirichlet: dirichlet,
}
