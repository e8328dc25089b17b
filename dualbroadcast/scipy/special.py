"""Mirrors of ``scipy.special.logsumexp``, ``softmax`` and ``log_softmax`` (see the package docstring).

With ``s = Σ b·exp(a)`` over ``axis`` and ``y = log|s|``:

* logsumexp: ``ā = ȳ · sign(s) · b · exp(a - y)``, ``b̄ = ȳ · sign(s) · exp(a - y)``
  (the softmax weights; ``sign(s)`` is 1 unless ``b`` has negative elements);
* softmax ``p``: ``x̄ = p · (ȳ - Σ ȳ·p)``;
* log_softmax: ``x̄ = ȳ - p · Σ ȳ`` with ``p = exp(y)``.

``return_sign=True`` returns the sign as a constant (it is piecewise constant).

And of the Python functions over scipy.special's ufuncs that convert their arguments with ``np.asarray``
(JAX differentiates each of them in the same arguments):

* polygamma ``ψ⁽ⁿ⁾(x)``: ``x̄ = ȳ · ψ⁽ⁿ⁺¹⁾(x)`` (``n`` is an integer order);
* multigammaln ``log Γ_d(a) = d(d-1)/4 · log π + Σ_{j<d} log Γ(a - j/2)``: ``ā = ȳ · Σ_{j<d} ψ(a - j/2)``;
* factorial ``n! = Γ(n + 1)`` (0 for ``n < 0``): ``n̄ = ȳ · n! · ψ(n + 1)`` (0 for ``n < 0``);
* comb ``C(N, k) = binom(N, k)`` where ``0 <= k <= N`` (0 elsewhere): binom's partials there, 0 elsewhere;
  with ``repetition=True`` it is ``binom(N + k - 1, k)`` (1 at ``k = 0``).

* sph_harm_y ``Y_n^m(θ, φ)`` (complex) in the real angles: ``θ̄ = Re(ȳ · ∂Y/∂θ)``, ``φ̄ = Re(ȳ · i m Y)`` (JAX's
  convention for a real argument of a complex result), ``∂Y/∂θ`` SciPy's own ``diff_n=1`` partial, whose
  derivatives are ``i m ∂Y/∂θ`` in φ and Legendre's equation in θ:
  ``∂²Y/∂θ² = -cot θ ∂Y/∂θ + (m²/sin²θ - n(n+1)) Y`` (so any order; second derivatives are NaN at the poles).

``exact=True`` (integers), factorial's ``extend='complex'`` (complex results of negative ``n``) and
sph_harm_y's ``diff_n`` (derivatives as results) have no gradient: a tracked argument there is a clear
error.  The other ``scipy.special`` functions are ufuncs:
use them from ``scipy.special`` directly (``bernoulli`` gives integers' Bernoulli numbers: no gradient).
"""

# The mirrors (the API reference documents these); the rest of the module is their rules.
__all__ = ["logsumexp", "softmax", "log_softmax", "polygamma", "multigammaln", "factorial", "comb", "sph_harm_y"]

import numpy as np
import scipy.special

from ..errors import UnsupportedFunctionError
from ..pullbacks import as_array, plain
from ..registry import defvjp, holds_for_complex, nondifferentiable
from ..rules.reductions import expand
from ..tracked import primitive
from ._common import cotangent, times


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp``, differentiable in ``a`` and ``b``."""
    out = logsumexp_of(a, axis, b, keepdims, return_sign)
    return (out, logsumexp_sign(a, axis, b, keepdims)) if return_sign else out


def softmax(x, axis=None):
    """``scipy.special.softmax``, differentiable in ``x``."""
    return softmax_of(x, axis)


def log_softmax(x, axis=None):
    """``scipy.special.log_softmax``, differentiable in ``x``."""
    return log_softmax_of(x, axis)


def polygamma(n, x):
    """``scipy.special.polygamma``, differentiable in ``x``."""
    return polygamma_of(n, x)


def multigammaln(a, d):
    """``scipy.special.multigammaln``, differentiable in ``a``."""
    return multigammaln_of(a, d)


def factorial(n, exact=False, extend="zero"):
    """``scipy.special.factorial``, differentiable in ``n`` (``exact=False``, ``extend='zero'``)."""
    if exact or extend != "zero":
        return integer_valued(scipy.special.factorial, "n", f"exact={exact!r}, extend={extend!r}",
                              n, exact=exact, extend=extend)
    return factorial_of(n)


def comb(N, k, *, exact=False, repetition=False):
    """``scipy.special.comb``, differentiable in ``N`` and ``k`` (``exact=False``)."""
    if exact:
        return integer_valued(scipy.special.comb, "N, k", "exact=True", N, k, exact=exact, repetition=repetition)
    return comb_of(N, k, repetition)


def sph_harm_y(n, m, theta, phi, *, diff_n=0):
    """``scipy.special.sph_harm_y``, differentiable in ``theta`` and ``phi`` (``diff_n=0``)."""
    if diff_n != 0:
        return without_gradient(scipy.special.sph_harm_y, "theta, phi", f"diff_n={diff_n!r}", "derivatives",
                                "diff_n=0 (its gradient is the derivative)", n, m, theta, phi, diff_n=diff_n)
    return sph_harm_y_of(n, m, theta, phi)


def integer_valued(func, names, keywords, *args, **kwargs):
    return without_gradient(func, names, keywords, "integer or complex",
                            "the defaults (exact=False) for the float function, differentiable through Γ",
                            *args, **kwargs)


def without_gradient(func, names, keywords, results, instead, *args, **kwargs):
    """SciPy's ``func`` where its result has no gradient: on plain arrays SciPy's value, on tracked ones an error."""
    from ..tracked import Tracked

    if any(type(a) is Tracked for a in args):
        raise UnsupportedFunctionError(
            f"scipy.special.{func.__name__} with {keywords} has no gradient in {names} ({results} results); "
            f"call it with {instead}"
        )
    return func(*args, **kwargs)


@primitive
def sph_harm_y_of(n, m, theta, phi):
    return scipy.special.sph_harm_y(n, m, theta, phi)


@primitive
def sph_harm_y_dtheta(n, m, theta, phi):
    """∂Y_n^m/∂θ, SciPy's ``diff_n=1`` partial (exact at the poles too)."""
    return scipy.special.sph_harm_y(n, m, theta, phi, diff_n=1)[1][..., 0]


def sph_harm_y_theta(ans, n, m, theta, phi):
    """θ̄ = Re(ȳ · ∂Y/∂θ)."""
    d = sph_harm_y_dtheta(n, m, theta, phi)
    return lambda g: cotangent(theta, np.real(g * d))


def sph_harm_y_phi(ans, n, m, theta, phi):
    """φ̄ = Re(ȳ · i m Y) (Y is e^(imφ) times a function of θ)."""
    d = 1j * m * ans
    return lambda g: cotangent(phi, np.real(g * d))


def dtheta_theta(ans, n, m, theta, phi):
    """∂²Y/∂θ² = -cot θ ∂Y/∂θ + (m²/sin²θ - n(n+1)) Y, Legendre's equation (singular at the poles only)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d = -ans / np.tan(theta) + (m * m / np.sin(theta) ** 2 - n * (n + 1.0)) * sph_harm_y_of(n, m, theta, phi)
    return lambda g: cotangent(theta, np.real(g * d))


def dtheta_phi(ans, n, m, theta, phi):
    """∂²Y/∂θ∂φ = i m ∂Y/∂θ."""
    d = 1j * m * ans
    return lambda g: cotangent(phi, np.real(g * d))


@primitive
def polygamma_of(n, x):
    return scipy.special.polygamma(n, x)


@primitive
def multigammaln_of(a, d):
    return scipy.special.multigammaln(a, d)


@primitive
def factorial_of(n):
    return scipy.special.factorial(n)


@primitive
def comb_of(N, k, repetition):
    return scipy.special.comb(N, k, repetition=repetition)


def polygamma_x(ans, n, x):
    """x̄ = ȳ · ψ⁽ⁿ⁺¹⁾(x) (recorded: itself differentiable)."""
    return times(polygamma_of(np.add(n, 1), x), x)


def multigammaln_a(ans, a, d):
    """ā = ȳ · Σ_{j<d} ψ(a - j/2)."""
    halves = np.arange(d) / 2
    return times(np.sum(scipy.special.digamma(np.expand_dims(a, -1) - halves), axis=-1), a)


def factorial_n(ans, n):
    """n̄ = ȳ · n! · ψ(n + 1), 0 where n < 0 (SciPy's n! is 0 there)."""
    return times(np.where(plain(n) < 0, 0.0, ans * scipy.special.digamma(np.add(n, 1))), n)


def comb_partial(argnum):
    """The maker of ``N`` (0) or ``k`` (1): binom's partial where comb is binom (0 <= k <= N), 0 elsewhere;
    with repetition the partials of binom(N + k - 1, k) (k̄ gets both of its slots), 0 at k = 0."""
    def maker(ans, N, k, repetition):
        n, kk = as_array(N, np.float64), as_array(k, np.float64)
        top = n + kk - 1 if repetition else n
        inside = plain((kk <= top) & (top >= 0) & (kk >= 0) & ~(repetition & (kk == 0)))
        with np.errstate(invalid="ignore"):  # ψ at a pole outside: not selected
            d_top = ans * (scipy.special.digamma(top + 1) - scipy.special.digamma(top - kk + 1))
            d_k = ans * (scipy.special.digamma(top - kk + 1) - scipy.special.digamma(kk + 1))
        d = d_top if argnum == 0 else d_k + d_top * repetition
        return times(np.where(inside, d, 0.0), (N, k)[argnum])

    return maker


@primitive
def logsumexp_of(a, axis, b, keepdims, return_sign):
    """``log |Σ b·exp(a)|`` over ``axis``: SciPy's value (without ``return_sign``, nan where the sum is
    negative, as SciPy gives)."""
    if return_sign:
        return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)[0]
    return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims)


@primitive
def logsumexp_sign(a, axis, b, keepdims):
    """The sign of ``Σ b·exp(a)`` over ``axis`` (SciPy's second result with ``return_sign=True``)."""
    if type(axis) is list:  # a tuple of axes, which the tape passes on to a function without a rule as a list
        axis = tuple(axis)
    return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)[1]


@primitive
def softmax_of(x, axis):
    return scipy.special.softmax(x, axis=axis)


@primitive
def log_softmax_of(x, axis):
    return scipy.special.log_softmax(x, axis=axis)


def softmax_weights(ans, a, axis, b, keepdims, return_sign):
    """``sign(s) · exp(a - y)`` over the shape of ``a`` broadcast with ``b``, and that shape; ``sign(s)``
    is 1 where ``b`` is None, and ``y`` is nan where ``s < 0`` without ``return_sign`` (SciPy's value)."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b)) if b is not None else np.shape(a)
    weights = np.exp(a - expand_cotangent(ans, shape, axis, keepdims))
    if return_sign and b is not None:
        sign = logsumexp_sign(plain(a), axis, plain(b), keepdims)  # piecewise constant
        weights = weights * expand_cotangent(sign, shape, axis, keepdims)
    return weights, shape


def logsumexp_a(ans, a, axis, b, keepdims, return_sign):
    """ā = ȳ · sign(s) · b · exp(a - y)."""
    weights, shape = softmax_weights(ans, a, axis, b, keepdims, return_sign)
    if b is not None:
        weights = weights * b
    return lambda g: cotangent(a, expand_cotangent(g, shape, axis, keepdims) * weights)


def logsumexp_b(ans, a, axis, b, keepdims, return_sign):
    """b̄ = ȳ · sign(s) · exp(a - y)."""
    weights, shape = softmax_weights(ans, a, axis, b, keepdims, return_sign)
    return lambda g: cotangent(b, expand_cotangent(g, shape, axis, keepdims) * weights)


def expand_cotangent(g, shape, axis, keepdims):
    """`expand` for SciPy's reductions, which treat a 0-d input as 1-d (``axis=0`` or ``-1`` of a scalar)."""
    if shape == ():
        return g
    return expand(g, shape, axis, keepdims)


def softmax_x(ans, x, axis):
    """x̄ = p · (ȳ - Σ ȳ·p), p the softmax."""
    return lambda g: cotangent(x, ans * (g - np.sum(g * ans, axis=axis, keepdims=True)))


def log_softmax_x(ans, x, axis):
    """x̄ = ȳ - p · Σ ȳ, p = exp(y)."""
    return lambda g: cotangent(x, g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True))


defvjp(logsumexp_of, logsumexp_a, None, logsumexp_b, None, None)
defvjp(softmax_of, softmax_x, None)
defvjp(log_softmax_of, log_softmax_x, None)
defvjp(sph_harm_y_of, None, None, sph_harm_y_theta, sph_harm_y_phi)
defvjp(sph_harm_y_dtheta, None, None, dtheta_theta, dtheta_phi)
holds_for_complex(sph_harm_y_of, sph_harm_y_dtheta)  # complex results of real angles (SciPy takes no complex angle)
defvjp(polygamma_of, None, polygamma_x)
defvjp(multigammaln_of, multigammaln_a, None)
defvjp(factorial_of, factorial_n)
defvjp(comb_of, comb_partial(0), comb_partial(1), None)
nondifferentiable(logsumexp_sign, reason="piecewise constant: derivative 0 wherever it exists")

MIRRORS = {scipy.special.logsumexp: logsumexp, scipy.special.softmax: softmax,
           scipy.special.log_softmax: log_softmax, scipy.special.polygamma: polygamma,
           scipy.special.multigammaln: multigammaln, scipy.special.factorial: factorial, scipy.special.comb: comb,
           scipy.special.sph_harm_y: sph_harm_y}
