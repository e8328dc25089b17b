"""Partial derivatives of scipy.special's real ufuncs, entered in the derivative table when SciPy is importable.

A scipy.special ufunc called on a tracked value reaches the library through NumPy's
ufunc protocol, so ``from scipy.special import erf`` works on tracked values, inside
`db.sum`/`db.broadcast` kernels and in prepared replay: each entry below is read by
all three, as NumPy's own (``derivatives.py``).  Formulas are written with
scipy.special ufuncs and NumPy operators only, so kernels trace them.  An argument
whose partial is ``None`` is not differentiable: a tracked value there is an error
naming it.  Orders of Bessel functions, degrees of polynomials and the parameters of
the incomplete gamma and beta functions (``a``, ``b``) have derivatives SciPy has no
function for; they take constants.  ``np.i0``'s derivative is ``scipy.special.i1``
(NumPy has no I1), so it has a rule only with SciPy.

Deliberately not differentiable, and why:

- ``wofz``, ``hankel1``, ``hankel1e``, ``hankel2``, ``hankel2e``: complex results (not supported yet);
- ``polygamma``: a Python function that converts its arguments with ``np.asarray`` (use
  ``digamma``, whose derivative is ``zeta(2, x)``, or ``zeta(n + 1, x)``);
- ``zeta(x)`` (Riemann's), ``zetac``, and ``zeta(x, q)`` w.r.t. ``x``: no derivative in the
  exponent is expressible with scipy.special (``zeta(x, q)`` w.r.t. ``q`` is);
- ``gammainc``/``gammaincc``/``gammaincinv``/``gammainccinv`` w.r.t. ``a``, ``betainc``/``betaincc``/
  ``betaincinv``/``betainccinv`` w.r.t. ``a`` and ``b``, ``hyp0f1``/``hyp1f1``/``hyp2f1``/``hyperu``
  and the orthogonal polynomials w.r.t. their parameters, Bessel, Struve and Kelvin functions
  w.r.t. their order, ``eval_gegenbauer``/``eval_jacobi``/``eval_genlaguerre`` w.r.t. ``alpha``/``beta``:
  derivatives in a parameter are series scipy.special does not provide;
- ``round`` and ``gammasgn``: piecewise constant (their results are constants);
- ``eval_hermite``/``eval_hermitenorm``: integer degrees only, which the table's formulas receive as
  floats (their rule needs a maker of its own: not done yet);
- the other ufuncs (the distributions' ``*dtr*`` functions and their inverses, elliptic
  integrals other than ``ellipk``/``ellipe``/``ellipkm1``, Mathieu, spheroidal, Kelvin, parabolic
  cylinder and Airy-integral functions, ``agm``, ``lambertw``, ...): not done yet;
  `db.defderivative` registers any of them.

``softplus`` and ``logsumexp`` are Python functions over NumPy's: they need no entry.
"""

import math

import numpy as np

from ..derivatives import DERIVATIVES
from ..registry import defvjp_outputs, nondifferentiable
from .elementwise import NAMED_ARGUMENTS, _register, one_output_vjp, x_vjp

try:
    import scipy.special as sc
    from scipy.special import _ufuncs
except ImportError:  # SciPy is optional: without it there is nothing to register
    sc = None

SQRT_PI = math.sqrt(math.pi)
TWO_OVER_SQRT_PI = 2 / SQRT_PI
SQRT_2PI = math.sqrt(2 * math.pi)
SQRT2 = math.sqrt(2.0)
RAD = math.pi / 180  # one degree in radians
LN2 = math.log(2.0)
LN10 = math.log(10.0)


def lowered(polynomial, n, *args):
    """``polynomial(n - 1, *args)``, of the degree one less that a derivative gives; 0 for a polynomial of
    degree 0 (scipy evaluates degree -1, and -2 in a second derivative, as NaN)."""
    return np.where(n >= 1, polynomial(np.maximum(n - 1, 0), *args), 0)

def dividing(numerator, x, at_zero):
    """``numerator / x``, and ``at_zero`` where x is 0 (the limit, where the quotient is 0/0)."""
    return np.where(x == 0, at_zero, numerator / np.where(x == 0, 1, x))


def boxcox_dlambda(x, y, lmbda, log_x):
    """∂boxcox(x, λ)/∂λ = (x^λ log x - y)/λ, and (log x)²/2 at λ = 0 (``log_x``: log x, or log1p for boxcox1p)."""
    return dividing(np.exp(lmbda * log_x) * log_x - y, lmbda, 0.5 * log_x * log_x)


def special_partials():
    """The table entries of the scipy.special ufuncs, by function."""
    hurwitz_zeta = _ufuncs._zeta  # what scipy.special.zeta(x, q) calls: the ufunc a tracked value reaches
    trigamma = lambda x: hurwitz_zeta(2.0, x)  # noqa: E731 - polygamma(1, x), as a ufunc
    return {
        # error functions and the normal distribution
        sc.erf: (lambda ans, x: TWO_OVER_SQRT_PI * np.exp(-x * x),),
        sc.erfc: (lambda ans, x: -TWO_OVER_SQRT_PI * np.exp(-x * x),),
        sc.erfinv: (lambda ans, x: SQRT_PI / 2 * np.exp(ans * ans),),
        sc.erfcinv: (lambda ans, x: -SQRT_PI / 2 * np.exp(ans * ans),),
        sc.erfcx: (lambda ans, x: 2 * x * ans - TWO_OVER_SQRT_PI,),
        sc.erfi: (lambda ans, x: TWO_OVER_SQRT_PI * np.exp(x * x),),
        sc.dawsn: (lambda ans, x: 1 - 2 * x * ans,),
        sc.ndtr: (lambda ans, x: np.exp(-0.5 * x * x) / SQRT_2PI,),
        sc.log_ndtr: (lambda ans, x: np.exp(-0.5 * x * x - ans) / SQRT_2PI,),  # φ(x)/Φ(x) without underflow
        sc.ndtri: (lambda ans, x: SQRT_2PI * np.exp(0.5 * ans * ans),),
        sc.ndtri_exp: (lambda ans, x: SQRT_2PI * np.exp(x + 0.5 * ans * ans),),
        sc.owens_t: (
            lambda ans, h, a: -np.exp(-0.5 * h * h) * sc.erf(a * h / SQRT2) / (2 * SQRT_2PI),
            lambda ans, h, a: np.exp(-0.5 * h * h * (1 + a * a)) / (2 * math.pi * (1 + a * a)),
        ),
        # logistic
        sc.expit: (lambda ans, x: ans * (1 - ans),),
        sc.logit: (lambda ans, x: 1 / (x * (1 - x)),),
        sc.log_expit: (lambda ans, x: sc.expit(-x),),
        # gamma and beta functions
        sc.gamma: (lambda ans, x: ans * sc.digamma(x),),
        sc.rgamma: (lambda ans, x: -ans * sc.digamma(x),),
        sc.gammaln: (lambda ans, x: sc.digamma(x),),
        sc.loggamma: (lambda ans, x: sc.digamma(x),),
        sc.digamma: (lambda ans, x: trigamma(x),),
        sc.beta: (lambda ans, a, b: ans * (sc.digamma(a) - sc.digamma(a + b)),
                  lambda ans, a, b: ans * (sc.digamma(b) - sc.digamma(a + b))),
        sc.betaln: (lambda ans, a, b: sc.digamma(a) - sc.digamma(a + b),
                    lambda ans, a, b: sc.digamma(b) - sc.digamma(a + b)),
        sc.poch: (lambda ans, z, m: ans * (sc.digamma(z + m) - sc.digamma(z)),
                  lambda ans, z, m: ans * sc.digamma(z + m)),
        sc.binom: (lambda ans, n, k: ans * (sc.digamma(n + 1) - sc.digamma(n - k + 1)),
                   lambda ans, n, k: ans * (sc.digamma(n - k + 1) - sc.digamma(k + 1))),
        hurwitz_zeta: (None, lambda ans, x, q: -x * hurwitz_zeta(x + 1, q)),
        # incomplete gamma and beta functions, in x (their densities) and their inverses in y
        sc.gammainc: (None, lambda ans, a, x: np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))),
        sc.gammaincc: (None, lambda ans, a, x: -np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))),
        sc.gammaincinv: (None, lambda ans, a, y: np.exp(ans - (a - 1) * np.log(ans) + sc.gammaln(a))),
        sc.gammainccinv: (None, lambda ans, a, y: -np.exp(ans - (a - 1) * np.log(ans) + sc.gammaln(a))),
        sc.betainc: (None, None, lambda ans, a, b, x: np.exp(
            (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - sc.betaln(a, b))),
        sc.betaincc: (None, None, lambda ans, a, b, x: -np.exp(
            (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - sc.betaln(a, b))),
        sc.betaincinv: (None, None, lambda ans, a, b, y: np.exp(
            sc.betaln(a, b) - (a - 1) * np.log(ans) - (b - 1) * np.log1p(-ans))),
        sc.betainccinv: (None, None, lambda ans, a, b, y: -np.exp(
            sc.betaln(a, b) - (a - 1) * np.log(ans) - (b - 1) * np.log1p(-ans))),
        # exponential integrals, Spence's function, elliptic integrals
        sc.exp1: (lambda ans, x: -np.exp(-x) / x,),
        sc.expi: (lambda ans, x: np.exp(x) / x,),
        sc.expn: (None, lambda ans, n, x: np.where(n == 0, -ans * (1 + 1 / x), -sc.expn(n - 1, x))),
        sc.spence: (lambda ans, z: dividing(-np.log(z), z - 1, -1.0),),
        sc.ellipk: (lambda ans, m: dividing(sc.ellipe(m) - (1 - m) * ans, 2 * m * (1 - m), math.pi / 8),),
        sc.ellipe: (lambda ans, m: dividing(ans - sc.ellipk(m), 2 * m, -math.pi / 8),),
        sc.ellipkm1: (lambda ans, p: -(sc.ellipe(1 - p) - p * ans) / (2 * p * (1 - p)),),
        # information theory
        sc.entr: (lambda ans, x: -(np.log(x) + 1),),
        sc.rel_entr: (lambda ans, x, y: np.log(x / y) + 1, lambda ans, x, y: -x / y),
        sc.kl_div: (lambda ans, x, y: np.log(x / y), lambda ans, x, y: 1 - x / y),
        sc.xlogy: (lambda ans, x, y: np.log(y), lambda ans, x, y: dividing(x, y, 0.0)),
        sc.xlog1py: (lambda ans, x, y: np.log1p(y), lambda ans, x, y: dividing(x, 1 + y, 0.0)),
        sc.huber: (lambda ans, delta, r: np.where(np.abs(r) <= delta, 0, np.abs(r) - delta),
                   lambda ans, delta, r: np.clip(r, -delta, delta)),
        sc.pseudo_huber: (
            lambda ans, delta, r: 2 * ans / delta - r * r / (delta * np.sqrt(1 + (r / delta) ** 2)),
            lambda ans, delta, r: r / np.sqrt(1 + (r / delta) ** 2),
        ),
        # Box-Cox transforms and their inverses (∂x/∂λ of the inverse: -∂boxcox/∂λ over ∂boxcox/∂x)
        sc.boxcox: (lambda ans, x, lmbda: np.power(x, lmbda - 1),
                    lambda ans, x, lmbda: boxcox_dlambda(x, ans, lmbda, np.log(x))),
        sc.boxcox1p: (lambda ans, x, lmbda: np.power(1 + x, lmbda - 1),
                      lambda ans, x, lmbda: boxcox_dlambda(1 + x, ans, lmbda, np.log1p(x))),
        sc.inv_boxcox: (lambda ans, y, lmbda: np.power(ans, 1 - lmbda),
                        lambda ans, y, lmbda: -np.power(ans, 1 - lmbda) * boxcox_dlambda(ans, y, lmbda, np.log(ans))),
        sc.inv_boxcox1p: (lambda ans, y, lmbda: np.power(1 + ans, 1 - lmbda),
                          lambda ans, y, lmbda: -np.power(1 + ans, 1 - lmbda) * boxcox_dlambda(
                              1 + ans, y, lmbda, np.log1p(ans))),
        # elementary functions scipy.special has under its own names
        sc.exprel: (lambda ans, x: dividing(np.exp(x) - ans, x, 0.5),),
        sc.powm1: (lambda ans, x, y: y * np.power(x, y - 1), lambda ans, x, y: (ans + 1) * np.log(x)),
        sc.cosm1: (lambda ans, x: -np.sin(x),),
        sc.exp10: (lambda ans, x: LN10 * ans,),
        sc.exp2: (lambda ans, x: LN2 * ans,),
        sc.expm1: (lambda ans, x: ans + 1,),
        sc.log1p: (lambda ans, x: 1 / (1 + x),),
        sc.cbrt: (lambda ans, x: 1 / (3 * ans * ans),),
        sc.sindg: (lambda ans, x: RAD * sc.cosdg(x),),
        sc.cosdg: (lambda ans, x: -RAD * sc.sindg(x),),
        sc.tandg: (lambda ans, x: RAD * (1 + ans * ans),),
        sc.cotdg: (lambda ans, x: -RAD * (1 + ans * ans),),
        sc.radian: (RAD, RAD / 60, RAD / 3600),
        # Bessel functions: recurrences in the order (∂/∂x of order v from orders v - 1 and v + 1)
        sc.j0: (lambda ans, x: -sc.j1(x),),
        sc.j1: (lambda ans, x: (sc.j0(x) - sc.jv(2.0, x)) / 2,),
        sc.y0: (lambda ans, x: -sc.y1(x),),
        sc.y1: (lambda ans, x: (sc.y0(x) - sc.yv(2.0, x)) / 2,),
        sc.i0: (lambda ans, x: sc.i1(x),),
        sc.i0e: (lambda ans, x: sc.i1e(x) - np.sign(x) * ans,),
        sc.i1: (lambda ans, x: (sc.i0(x) + sc.iv(2.0, x)) / 2,),
        sc.i1e: (lambda ans, x: (sc.i0e(x) + sc.ive(2.0, x)) / 2 - np.sign(x) * ans,),
        sc.k0: (lambda ans, x: -sc.k1(x),),
        sc.k1: (lambda ans, x: -(sc.k0(x) + sc.kv(2.0, x)) / 2,),
        sc.k0e: (lambda ans, x: ans - sc.k1e(x),),
        sc.k1e: (lambda ans, x: ans - (sc.k0e(x) + sc.kve(2.0, x)) / 2,),
        sc.jv: (None, lambda ans, v, x: (sc.jv(v - 1, x) - sc.jv(v + 1, x)) / 2),  # also scipy.special.jn
        sc.jve: (None, lambda ans, v, x: (sc.jve(v - 1, x) - sc.jve(v + 1, x)) / 2),  # jv for real x
        sc.yv: (None, lambda ans, v, x: (sc.yv(v - 1, x) - sc.yv(v + 1, x)) / 2),
        sc.yve: (None, lambda ans, v, x: (sc.yve(v - 1, x) - sc.yve(v + 1, x)) / 2),
        sc.yn: (None, lambda ans, n, x: (sc.yn(n - 1, x) - sc.yn(n + 1, x)) / 2),
        sc.iv: (None, lambda ans, v, x: (sc.iv(v - 1, x) + sc.iv(v + 1, x)) / 2),
        sc.ive: (None, lambda ans, v, x: (sc.ive(v - 1, x) + sc.ive(v + 1, x)) / 2 - np.sign(x) * ans),
        sc.kv: (None, lambda ans, v, x: -(sc.kv(v - 1, x) + sc.kv(v + 1, x)) / 2),
        sc.kve: (None, lambda ans, v, x: ans - (sc.kve(v - 1, x) + sc.kve(v + 1, x)) / 2),
        sc.kn: (None, lambda ans, n, x: -(sc.kn(n - 1, x) + sc.kn(n + 1, x)) / 2),
        sc.struve: (None, lambda ans, v, x: sc.struve(v - 1, x) - v / x * ans),
        sc.modstruve: (None, lambda ans, v, x: sc.modstruve(v - 1, x) - v / x * ans),
        # hypergeometric functions, in their argument
        sc.hyp0f1: (None, lambda ans, v, z: sc.hyp0f1(v + 1, z) / v),
        sc.hyp1f1: (None, None, lambda ans, a, b, x: a / b * sc.hyp1f1(a + 1, b + 1, x)),
        sc.hyp2f1: (None, None, None, lambda ans, a, b, c, z: a * b / c * sc.hyp2f1(a + 1, b + 1, c + 1, z)),
        sc.hyperu: (None, None, lambda ans, a, b, x: -a * sc.hyperu(a + 1, b + 1, x)),
        # orthogonal polynomials, in x: derivatives are polynomials of one degree less
        sc.eval_legendre: (None, lambda ans, n, x: lowered(sc.eval_gegenbauer, n, 1.5, x)),
        sc.eval_sh_legendre: (None, lambda ans, n, x: 2 * lowered(sc.eval_gegenbauer, n, 1.5, 2 * x - 1)),
        sc.eval_chebyt: (None, lambda ans, n, x: n * lowered(sc.eval_chebyu, n, x)),
        sc.eval_sh_chebyt: (None, lambda ans, n, x: 2 * n * lowered(sc.eval_chebyu, n, 2 * x - 1)),
        sc.eval_chebyu: (None, lambda ans, n, x: 2 * lowered(sc.eval_gegenbauer, n, 2.0, x)),
        sc.eval_sh_chebyu: (None, lambda ans, n, x: 4 * lowered(sc.eval_gegenbauer, n, 2.0, 2 * x - 1)),
        sc.eval_chebyc: (None, lambda ans, n, x: n * lowered(sc.eval_chebys, n, x)),
        sc.eval_chebys: (None, lambda ans, n, x: lowered(sc.eval_gegenbauer, n, 2.0, 0.5 * x)),
        sc.eval_gegenbauer: (None, None, lambda ans, n, alpha, x: 2 * alpha * lowered(
            sc.eval_gegenbauer, n, alpha + 1, x)),
        sc.eval_jacobi: (None, None, None, lambda ans, n, alpha, beta, x: (n + alpha + beta + 1) / 2 * lowered(
            sc.eval_jacobi, n, alpha + 1, beta + 1, x)),
        sc.eval_laguerre: (None, lambda ans, n, x: -lowered(sc.eval_genlaguerre, n, 1.0, x)),
        sc.eval_genlaguerre: (None, None, lambda ans, n, alpha, x: -lowered(sc.eval_genlaguerre, n, alpha + 1, x)),
    }


# Ufuncs with several outputs, w.r.t. their one argument: one partial per output.
def special_outputs():
    return {
        sc.sici: (lambda ans, x: dividing(np.sin(x), x, 1.0), lambda ans, x: np.cos(x) / x),
        sc.shichi: (lambda ans, x: dividing(np.sinh(x), x, 1.0), lambda ans, x: np.cosh(x) / x),
        sc.fresnel: (lambda ans, x: np.sin(0.5 * math.pi * x * x), lambda ans, x: np.cos(0.5 * math.pi * x * x)),
        sc.airy: (lambda ans, x: ans[1], lambda ans, x: x * ans[0], lambda ans, x: ans[3], lambda ans, x: x * ans[2]),
    }


if sc is not None:
    DERIVATIVES[np.i0] = (lambda ans, x: sc.i1(x),)
    NAMED_ARGUMENTS[np.i0] = x_vjp
    for _func, _partials in {np.i0: DERIVATIVES[np.i0], **special_partials()}.items():
        DERIVATIVES[_func] = _partials
        _register(_func, _partials)
    for _func, _partials in special_outputs().items():
        defvjp_outputs(_func, one_output_vjp(_partials))
    nondifferentiable(sc.round, sc.gammasgn, reason="piecewise constant: derivative 0 wherever it exists")
