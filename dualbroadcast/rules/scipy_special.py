"""Partial derivatives of scipy.special's real ufuncs, entered in the derivative table when SciPy is importable.

A scipy.special ufunc called on a tracked value reaches the library through NumPy's
ufunc protocol, so ``from scipy.special import erf`` works on tracked values, inside
`db.sum`/`db.broadcast` kernels and in prepared replay: each entry below is read by
all three, as NumPy's own (``derivatives.py``).  Formulas are written with
scipy.special ufuncs and NumPy operators only, so kernels trace them.  An argument
whose partial is ``None`` is not differentiable: a tracked value there is an error
naming it.  Orders of Bessel functions and degrees of polynomials have derivatives SciPy has no
function for; they take constants.  Where JAX differentiates such a parameter (ζ(x, q) in x, P(a, x) in a)
a `computed_partial` computes the series JAX uses, on whole arrays, carried as truncated Taylor series so
that the n-th derivative is a computed partial too (`derivative_of_order`): each order's partials are the
next order's (and closed forms in the other argument), so these are differentiable to any order.  The
incomplete beta function I_x(a, b) in ``a`` and ``b``, which JAX refuses, is a `computed_partial` of
first order (`betainc_parameter_partial`: its series of positive terms differentiated term by term),
differentiable again in x only.  ``np.i0``'s
derivative is ``scipy.special.i1`` (NumPy has no I1), so it has a rule only with SciPy.

Deliberately not differentiable, and why:

- ``polygamma``, ``multigammaln``, ``factorial``, ``comb``: Python functions that convert their arguments
  with ``np.asarray``, so no NumPy protocol reaches the tape: ``dualbroadcast.scipy.special`` mirrors them;
- ``zeta(x)`` (Riemann's: SciPy calls another ufunc, ``zetac`` plus one) and ``zetac``: not done yet (JAX has
  neither); ``zeta(x, q)`` (Hurwitz's) is differentiable in both: in ``q``, ``-x ζ(x + 1, q)``; in ``x``
  there is no closed form, and `hurwitz_zeta_dx` differentiates the Euler-Maclaurin expansion as JAX does;
- ``gammaincinv``/``gammainccinv`` w.r.t. ``a`` (``gammainc``/``gammaincc`` are differentiable in ``a``:
  `gammainc_da`, JAX's algorithm), ``hyp0f1``/``hyp1f1``/``hyp2f1``/``hyperu``
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

Complex values (JAX's convention, ``rules/complex.py``): ``wofz`` and the Hankel functions ``hankel1``,
``hankel2``, ``hankel1e``, ``hankel2e``, complex for real arguments too, have reverse rules only (not in the
table: a `db.sum` kernel sums real values); they and the ufuncs whose row says ``holomorphic=True`` hold for
complex arguments: the Bessel functions ``jv``, ``yv``, ``iv``, ``kv``, ``kve`` of complex ``z`` (the same
recurrences), ``erf``/``erfc``/``erfcx``/``erfi``/``dawsn``, ``ndtr``/``log_ndtr``, ``gamma``/``rgamma``/
``loggamma`` (ψ has a complex loop), ``exp1``, ``expi``, ``expm1``, ``log1p``, ``spence``, ``hyp1f1``,
``hyp2f1`` in ``z``; ``digamma``, whose derivatives ψ⁽ⁿ⁾ SciPy has for real values only (ζ has no complex
loop), by `complex_polygamma` (the Hurwitz ζ summed and expanded, to any order), so gamma, rgamma and
loggamma of complex values have derivatives of every order.  ``jve``, ``yve``, ``ive`` (scaled by
``exp(-|Im z|)``, ``exp(-|Re z|)``), ``i0e`` and the others are an error on complex values.

``softplus`` and ``logsumexp`` are Python functions over NumPy's: they need no entry.
"""

import functools
import inspect
import math
import sys

import numpy as np

from ..derivatives import DERIVATIVES, Facts
from ..expr import Src
from ..registry import (
    ARGUMENT_REASONS,
    NONDIFFERENTIABLE,
    RULES,
    defvjp_complex,
    defvjp_outputs,
    holds_for_complex,
    nondifferentiable,
    register_lazily,
)
from ..tracked import primitive
from .elementwise import _register, one_output_vjp

sc = _ufuncs = None  # scipy.special and its private module of ufuncs, once `register` has imported them

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


def real(v):
    """An order or parameter (a Python number) the maker made a scalar of a complex result's dtype, real again
    for SciPy's loops, which take real orders (``jv(v, z)``: ``dD->D``)."""
    return v.real if isinstance(v, np.complexfloating) else v


def half_difference(f, v, z):
    """``(f(v - 1, z) - f(v + 1, z)) / 2``: ∂f/∂z of a Bessel function of order v (J, Y, H⁽¹⁾, H⁽²⁾)."""
    return (f(real(v) - 1, z) - f(real(v) + 1, z)) / 2


def computed_partial(f, name=None):
    """A partial derivative ``f`` computes on whole arrays (a series, a loop): a primitive that is one node of a
    `db.sum` kernel (run on its arrays or blocks) and one call in a replayed program.  Its own partials, if it
    has any, are entered by `derivative_of_order` (else a tracked value reaching it is an error naming it)."""
    @primitive
    @functools.wraps(f)
    def partial(*args):
        for a in args:  # a prepared gradient writes its partials as code (`expr.Src`): here, a call of ``partial``
            if type(a) is Src:
                return a._apply(partial, args)
        with np.errstate(all="ignore"):  # outside the domain: NaN, as SciPy's function gives there
            return f(*args)

    if name is not None:
        partial.__name__ = partial.__qualname__ = name
    partial.__module__ = __name__  # an internal derivative, not a function users call (docs/function_table.py)
    DERIVATIVES[partial] = (None,) * len(inspect.signature(f).parameters)
    return partial


# --- truncated Taylor series: coefficients of ε⁰..εⁿ along the last axis -----------------------------------
def series_product(u, v):
    """The coefficients of ``u(ε) v(ε)`` up to the order of ``u`` and ``v``."""
    return np.stack([np.sum(u[..., :i + 1] * v[..., i::-1], axis=-1) for i in range(u.shape[-1])], axis=-1)


def series_quotient(u, v):
    """The coefficients of ``u(ε) / v(ε)`` (``v₀ ≠ 0``)."""
    r = []
    for i in range(u.shape[-1]):
        known = sum((v[..., j] * r[i - j] for j in range(1, i + 1)), np.zeros_like(u[..., 0]))
        r.append((u[..., i] - known) / v[..., 0])
    return np.stack(r, axis=-1)


def series_exp(e):
    """The coefficients of ``exp(e(ε))`` for ``e₀ = 0``: E₀ = 1, E_m = Σ_{i=1..m} (i/m) eᵢ E_{m-i}."""
    out = [np.ones_like(e[..., 0])]
    for m in range(1, e.shape[-1]):
        out.append(sum(i / m * e[..., i] * out[m - i] for i in range(1, m + 1)))
    return np.stack(out, axis=-1)


def shifted(u):
    """ε u(ε), truncated to u's order."""
    return np.concatenate([np.zeros_like(u[..., :1]), u[..., :-1]], axis=-1)


def log_gamma_shift(a, order):
    """The coefficients of ``log Γ(a + ε) - log Γ(a)``: ψ⁽ⁱ⁻¹⁾(a) / i! for i = 1..order (0 for ε⁰)."""
    return np.stack([np.zeros_like(a)] + [sc.polygamma(i - 1, a) / math.factorial(i) for i in range(1, order + 1)],
                    axis=-1)


def derivative_of_order(family, name, order, partials):
    """The ``order``-th derivative of ``family`` as a `computed_partial` (computed once per order, so each
    order's partials name the next): ``partials(order)`` gives its table entry, each formula free to call
    ``derivative_of_order`` of another order."""
    key = family, order
    partial = ORDERS.get(key)
    if partial is None:
        partial = ORDERS[key] = computed_partial(functools.partial(family, order=order), f"{name}{order}")
        DERIVATIVES[partial] = partials(order)
        _register(partial, DERIVATIVES[partial])
    return partial


ORDERS = {}  # (family, order) -> its computed partial


EULER_MACLAURIN_TERMS = 16  # N = M: Johansson's expansion (JAX's choice for float64, its zeta's derivative in x)


def hurwitz_zeta_dx_series(x, q, order):
    """∂ⁿζ(x, q)/∂xⁿ (n = ``order``), the Euler-Maclaurin expansion of ζ (Johansson 2015, arXiv:1309.2877,
    formula (5)) with N = M = 16 differentiated in x term by term, as JAX does for n = 1 (there is no closed
    form): the coefficient of εⁿ of each term at x + ε, times n!::

        ζ = Σ_{k<N} (q+k)^-x + A^(1-x)/(x-1) + A^-x (1/2 + Σ_{j=1..M} T_j),   A = q + N,
        T_j = B_2j/(2j)! · x(x+1)…(x+2j-2) / A^(2j-1)   (a product of factors (x + m + ε)/A).

    For x > 1 and q > 0 (where SciPy's ζ(x, q) is finite and positive terms make the sum converge)."""
    x, q = np.asarray(x), np.asarray(q)
    n, m = EULER_MACLAURIN_TERMS, 2 * EULER_MACLAURIN_TERMS - 1
    powers = np.arange(order + 1)
    decay = lambda log_base: (-np.expand_dims(log_base, -1)) ** powers / factorials(order)  # noqa: E731 - b^-ε
    shifted_q = np.expand_dims(q, -1) + np.arange(n, dtype=q.dtype)
    log_shifted = np.log(shifted_q)
    head = np.sum((-log_shifted) ** order * shifted_q ** -np.expand_dims(x, -1), axis=-1)
    a = q + n
    log_a = np.log(a)
    u = np.expand_dims(x - 1, -1)
    inverse = (-1.0) ** powers / u ** (powers + 1)  # 1/(u + ε)
    integral = a ** (1 - x) * series_product(decay(log_a), inverse)[..., order]
    factor_series = np.zeros(np.shape(x) + (order + 1,), dtype=np.result_type(x, q))
    running = factor_series.copy()
    running[..., 0] = 1.0
    tail = factor_series.copy()
    tail[..., 0] = 0.5
    for k in range(m):  # running: x(x+1)…(x+k) / A^(k+1) at x + ε
        running = (np.expand_dims((x + k) / a, -1) * running + shifted(running) / np.expand_dims(a, -1))
        if k % 2 == 0:
            tail = tail + BERNOULLI_OVER_FACTORIAL[k // 2].astype(tail.dtype) * running
    tail = a ** -x * series_product(decay(log_a), tail)[..., order]
    return np.asarray(head + (integral + tail) * math.factorial(order), np.result_type(x, q))[()]


def factorials(order):
    """0!, 1!, …, order!."""
    return np.array([math.factorial(i) for i in range(order + 1)], dtype=float)


def hurwitz_zeta_derivative(order):
    """∂ⁿζ(x, q)/∂xⁿ, whose partials are ∂ⁿ⁺¹ζ/∂xⁿ⁺¹ in x and -x ∂ⁿζ(x+1, q) - n ∂ⁿ⁻¹ζ(x+1, q) in q
    (∂ζ/∂q = -x ζ(x + 1, q), differentiated n times in x)."""
    def lower(n):
        return _ufuncs._zeta if n == 0 else hurwitz_zeta_derivative(n)

    return derivative_of_order(hurwitz_zeta_dx_series, "hurwitz_zeta_dx", order, lambda n: (
        lambda ans, x, q: hurwitz_zeta_derivative(n + 1)(x, q),
        lambda ans, x, q: -x * lower(n)(x + 1, q) - n * lower(n - 1)(x + 1, q)))


ITERATIONS = 2000  # at most, of the series and the continued fraction (Cephes' and XLA's bound)
EPS = 4 * np.finfo(np.float64).eps  # a convergent's last bits may flicker: 2⁻⁵² is never reached by some


def gammainc_da_series(a, x, order):
    """∂ⁿP(a, x)/∂aⁿ (n = ``order`` >= 1) of the regularised lower incomplete gamma function, as XLA's
    ``igamma_grad_a`` (JAX's ``jax.grad(gammainc)``) computes it for n = 1: Cephes' series of P (x <= 1 or
    x <= a) or continued fraction of Q = 1 - P (x > 1 and x > a), each carried as Taylor series in a (the
    coefficient of εⁿ at a + ε, times n!; ∂ⁿP/∂aⁿ = -∂ⁿQ/∂aⁿ), in float64::

        P = e^(a log x - x) / Γ(a + 1) · Σ_n c_n,  c_0 = 1, c_n = c_{n-1} x / (a + n);
        Q = e^(a log x - x) / Γ(a) · p_k / q_k,  Cephes' recurrences of p_k and q_k (``igamc``).

    0 at x = 0 (P = 0 for every a) and x = inf (P = 1); NaN where SciPy's P is NaN (a <= 0, x < 0)."""
    dtype = np.result_type(np.asarray(a), np.asarray(x), np.float32)  # of Python floats: float64
    a, x = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64))
    inside = (x > 0) & (x < np.inf) & (a > 0) & (a < np.inf)
    constant = (a > 0) & ((x == 0) | (x == np.inf))
    d = np.where(constant, 0.0, np.nan)
    series = inside & ((x <= 1) | (x <= a))
    fraction = inside & ~series
    d[series] = lower_series_da(a[series], x[series], order)
    d[fraction] = -upper_fraction_da(a[fraction], x[fraction], order)
    return d.astype(dtype)[()]


def prefix_series(a, x, order, gamma_of):
    """The coefficients of ``e^((a+ε) log x - x) / Γ(gamma_of + ε)`` over its value at ε = 0, and that value."""
    e = -log_gamma_shift(gamma_of, order)
    e[..., 1] += np.log(x)
    return series_exp(e), np.exp(a * np.log(x) - x - sc.gammaln(gamma_of))


def lower_series_da(a, x, order=1):
    """∂ⁿP/∂aⁿ from the series of P (`gammainc_da_series`): c_n = c_{n-1} · x/(a + n + ε) as Taylor series."""
    term = np.zeros(a.shape + (order + 1,))
    term[..., 0] = 1.0
    total = term.copy()
    powers = np.arange(order + 1)
    for n in range(1, ITERATIONS + 1):
        r = np.expand_dims(1 / (a + n), -1)
        term = series_product(term, np.expand_dims(x, -1) * r * (-r) ** powers)  # x / (a + n + ε)
        total = total + term
        if np.all(np.abs(term) <= EPS * np.max(np.abs(total), axis=-1, keepdims=True)):
            break
    prefix, value = prefix_series(a, x, order, a + 1)
    return value * series_product(prefix, total)[..., order] * math.factorial(order)


def upper_fraction_da(a, x, order=1):
    """∂ⁿQ/∂aⁿ from Cephes' continued fraction of Q (`gammainc_da_series`), its recurrences carried as Taylor
    series in a; an element stops once its convergent's coefficients change by less than 4 · 2⁻⁵² (relative to
    the largest).  The recurrences are rescaled together (their ratios unchanged) before they overflow."""
    def linear(value):  # value - ε: y and z move against a
        out = np.zeros(a.shape + (order + 1,))
        out[..., 0] = value
        if order:
            out[..., 1] = -1.0
        return out

    def constant(value):
        out = np.zeros(a.shape + (order + 1,))
        out[..., 0] = value
        return out

    def times_linear(u, v):  # u · v for v = v₀ + v₁ ε
        return u * v[..., :1] + shifted(u) * v[..., 1:2]

    y, z, c = linear(1 - a), linear(x + 2 - a), 0.0
    p = [constant(1.0), constant(x + 1)]
    q = [constant(x), times_linear(constant(x), z)]
    ans = series_quotient(p[1], q[1])
    running = np.ones(a.shape, dtype=bool)
    for _ in range(ITERATIONS):
        c = c + 1
        y[..., 0] += 1
        z[..., 0] += 2
        yc = y * c
        pk = times_linear(p[1], z) - times_linear(p[0], yc)
        qk = times_linear(q[1], z) - times_linear(q[0], yc)
        zero = np.expand_dims(qk[..., 0] == 0, -1)
        new = np.where(zero, ans, series_quotient(pk, np.where(zero, 1.0, qk)))
        scale_of = np.max(np.abs(new), axis=-1)
        running &= np.any(np.abs(new - ans) > EPS * np.expand_dims(scale_of, -1), axis=-1)
        ans = np.where(np.expand_dims(running, -1), new, ans)
        scale = np.expand_dims(np.where(np.abs(pk[..., 0]) > 2.0 ** 500, 2.0 ** -500, 1.0), -1)
        p, q = [p[1] * scale, pk * scale], [q[1] * scale, qk * scale]
        if not running.any():
            break
    prefix, value = prefix_series(a, x, order, a)
    return value * series_product(prefix, ans)[..., order] * math.factorial(order)


def density_derivative(order, a, x):
    """∂ⁿ/∂aⁿ of the density x^(a-1) e^-x / Γ(a) = e^h: e^h times the complete Bell polynomial Bₙ of h's
    derivatives (h' = log x - ψ(a), h⁽ⁱ⁾ = -ψ⁽ⁱ⁻¹⁾(a) = (-1)^(i+1) (i-1)! ζ(i, a)), B₀ = 1 and
    B_{m+1} = Σ_{i<=m} C(m, i) B_{m-i} h⁽ⁱ⁺¹⁾: recorded ufuncs, so differentiable again."""
    hs = [None, np.log(x) - sc.digamma(a)]
    hs += [(-1.0) ** (i + 1) * math.factorial(i - 1) * _ufuncs._zeta(float(i), a) for i in range(2, order + 1)]
    bell = [1.0]
    for m in range(order):
        bell.append(sum(math.comb(m, i) * bell[m - i] * hs[i + 1] for i in range(m + 1)))
    return gamma_density(a, x) * bell[order]


def gammainc_derivative(order):
    """∂ⁿP(a, x)/∂aⁿ, whose partials are ∂ⁿ⁺¹P/∂aⁿ⁺¹ in a and ∂ⁿ/∂aⁿ of the density in x."""
    return derivative_of_order(gammainc_da_series, "gammainc_da", order, lambda n: (
        lambda ans, a, x: gammainc_derivative(n + 1)(a, x),
        lambda ans, a, x: density_derivative(n, a, x)))


def gammainc_da(a, x):
    """∂P(a, x)/∂a (`gammainc_da_series`), differentiable again."""
    return gammainc_derivative(1)(a, x)


COMPLEX_SHIFT = 16.0  # Re(z + N) and |z + N| at least this before the asymptotic expansion


def complex_polygamma_series(z, order):
    """ψ⁽ⁿ⁾(z) (n = ``order`` >= 1) of complex ``z``, which SciPy computes for real z only (its ζ(x, q) has no
    complex loop): ``(-1)ⁿ⁺¹ n! ζ(n+1, z)`` with the Hurwitz ζ summed up to ``w = z + N`` and expanded
    there (Euler-Maclaurin, the terms of `hurwitz_zeta_dx_series` with s = n + 1)::

        ζ(s, z) = Σ_{k<N} (z+k)^-s + w^(1-s)/(s-1) + w^-s/2 + Σ_{j=1..16} B_2j/(2j)! · s(s+1)…(s+2j-2) w^(1-s-2j).

    Infinite at the poles 0, -1, -2, ...; holomorphic elsewhere, its derivative ψ⁽ⁿ⁺¹⁾."""
    z = np.asarray(z, dtype=np.complex128)
    s = order + 1
    shifts = np.ceil(np.maximum(COMPLEX_SHIFT - z.real, 0.0))
    head = np.zeros_like(z)
    for k in range(int(np.max(shifts, initial=0.0))):
        head = head + np.where(k < shifts, (z + k) ** -s, 0.0)
    w = z + shifts
    tail = w ** (1 - s) / (s - 1) + 0.5 * w ** -s
    rising = float(s)  # s(s+1)…(s+2j-2)
    for j, coefficient in enumerate(BERNOULLI_OVER_FACTORIAL, start=1):
        tail = tail + coefficient * rising * w ** (1 - s - 2 * j)
        rising *= (s + 2 * j - 1) * (s + 2 * j)
    return (-1.0) ** s * math.factorial(order) * (head + tail)


def complex_polygamma(order):
    """ψ⁽ⁿ⁾ of complex values (`complex_polygamma_series`), holomorphic to any order: ψ's derivative on complex
    values (`sc.digamma`'s complex rule), so gamma, rgamma and loggamma of complex z have second derivatives."""
    partial = derivative_of_order(complex_polygamma_series, "complex_polygamma", order, lambda n: (
        lambda ans, z: complex_polygamma(n + 1)(z),))
    holds_for_complex(partial)
    return partial


def digamma_of_complex(ans, z):
    """ψ's vjp on complex values (holomorphic: ``g ψ'(z)``)."""
    return lambda g: g * complex_polygamma(1)(z)


BETA_SERIES_TERMS = 100_000  # at most: near the switch between I and 1 - I, with a and b in the thousands


def incomplete_beta_series(a, b, x):
    """``(I, ∂I/∂a, ∂I/∂b)`` of the regularised incomplete beta function ``I = I_x(a, b)`` (1-d arrays with
    0 < x < 1, a, b > 0), from its series of positive terms (no cancellation) differentiated term by term::

        I = x^a (1-x)^b / (a B(a, b)) · Σₖ tₖ,   t₀ = 1,  tₖ₊₁ = tₖ · x (a+b+k) / (a+1+k),
        ∂ log I/∂a = log x - 1/a - ψ(a) + ψ(a+b) + Σₖ tₖ Aₖ / Σₖ tₖ,   Aₖ = Σ_{j<k} 1/(a+b+j) - 1/(a+1+j),
        ∂ log I/∂b = log(1-x) - ψ(b) + ψ(a+b) + Σₖ tₖ Bₖ / Σₖ tₖ,      Bₖ = Σ_{j<k} 1/(a+b+j).

    An element stops once its terms no longer change the sums' last bits; one that has not after
    `BETA_SERIES_TERMS` terms is NaN."""
    term, total = np.ones_like(x), np.ones_like(x)
    shift_a, shift_b = np.zeros_like(x), np.zeros_like(x)  # Aₖ, Bₖ
    weighted_a, weighted_b = np.zeros_like(x), np.zeros_like(x)  # Σ tₖ Aₖ, Σ tₖ Bₖ
    running = np.ones(x.shape, dtype=bool)
    for k in range(BETA_SERIES_TERMS):
        term = np.where(running, term * x * (a + b + k) / (a + 1 + k), 0.0)
        shift_b = shift_b + 1 / (a + b + k)
        shift_a = shift_a + 1 / (a + b + k) - 1 / (a + 1 + k)
        total, weighted_a, weighted_b = total + term, weighted_a + term * shift_a, weighted_b + term * shift_b
        running &= term * (1 + shift_b + np.abs(shift_a)) > EPS / 4 * total
        if not running.any():
            break
    total = np.where(running, np.nan, total)  # not converged (a and b in the millions near the switch): NaN
    value = sc.betainc(a, b, x)
    digamma_sum = sc.digamma(a + b)
    return (value, value * (np.log(x) - 1 / a - sc.digamma(a) + digamma_sum + weighted_a / total),
            value * (np.log1p(-x) - sc.digamma(b) + digamma_sum + weighted_b / total))


def series_length(a, b, x):
    """About how many terms `incomplete_beta_series` takes: the terms grow until x (a+b+k) = a+1+k, then
    fall by about x per term."""
    return np.maximum((x * (a + b) - a - 1) / (1 - x), 0) + 40 / -np.log(x)


def betainc_parameter_partial(a, b, x, wrt):
    """∂I_x(a, b)/∂a (``wrt`` 0) or ∂b (1): `incomplete_beta_series` of I, or of ``I = 1 - I_{1-x}(b, a)`` where
    that takes fewer terms.  0 at x = 0 and x = 1 (I is 0 and 1 for every a, b); NaN outside the domain."""
    dtype = np.result_type(np.asarray(a), np.asarray(b), np.asarray(x), np.float32)
    a, b, x = (np.asarray(v, dtype=np.float64) for v in np.broadcast_arrays(a, b, x))
    inside = (x > 0) & (x < 1) & (a > 0) & (b > 0) & (a < np.inf) & (b < np.inf)
    d = np.where((a > 0) & (b > 0) & ((x == 0) | (x == 1)), 0.0, np.nan)
    ai, bi, xi = a[inside], b[inside], x[inside]
    flip = series_length(bi, ai, 1 - xi) < series_length(ai, bi, xi)
    direct = incomplete_beta_series(ai[~flip], bi[~flip], xi[~flip])[1 + wrt]
    flipped = -incomplete_beta_series(bi[flip], ai[flip], 1 - xi[flip])[2 - wrt]
    inner = np.empty(xi.shape)
    inner[~flip], inner[flip] = direct, flipped
    d[inside] = inner
    return d.astype(dtype)[()]


def beta_density(a, b, x):
    """∂I_x(a, b)/∂x = x^(a-1) (1-x)^(b-1) / B(a, b)."""
    return np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - sc.betaln(a, b))


def betainc_partials_of(wrt):
    """∂I_x(a, b)/∂a (``wrt`` 0) or ∂b (1) as a `computed_partial`, with its partial in x (the density's
    derivative in the parameter: density times ``log x - ψ(a) + ψ(a+b)``, or ``log(1-x) - ψ(b) + ψ(a+b)``);
    its second derivatives in a and b are not computed (an error naming them)."""
    key = betainc_parameter_partial, wrt
    partial = ORDERS.get(key)
    if partial is None:
        name = "betainc_d" + "ab"[wrt]
        partial = ORDERS[key] = computed_partial(functools.partial(betainc_parameter_partial, wrt=wrt), name)
        log_of = (lambda x: np.log(x)) if wrt == 0 else (lambda x: np.log1p(-x))
        DERIVATIVES[partial] = (None, None, lambda ans, a, b, x: beta_density(a, b, x) * (
            log_of(x) - sc.digamma((a, b)[wrt]) + sc.digamma(a + b)))
        _register(partial, DERIVATIVES[partial])
        for i, parameter in enumerate("ab"):
            ARGUMENT_REASONS[partial, i] = (
                f"{parameter}: second derivatives of the incomplete beta function in its parameters are not computed")
    return partial


def betainc_da(a, b, x):
    """∂I_x(a, b)/∂a (`betainc_parameter_partial`), differentiable in x."""
    return betainc_partials_of(0)(a, b, x)


def betainc_db(a, b, x):
    """∂I_x(a, b)/∂b (`betainc_parameter_partial`), differentiable in x."""
    return betainc_partials_of(1)(a, b, x)


def hurwitz_zeta_dx(x, q):
    """∂ζ(x, q)/∂x (`hurwitz_zeta_dx_series`), differentiable again."""
    return hurwitz_zeta_derivative(1)(x, q)


def gamma_density(a, x):
    """∂P(a, x)/∂x = x^(a-1) e^-x / Γ(a)."""
    return np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))


def special_facts():
    """The rows of the scipy.special ufuncs, by function (`derivatives.Facts`: their partials, and whether they
    are holomorphic), family by family."""
    return {**error_function_facts(), **logistic_facts(), **gamma_facts(), **incomplete_gamma_facts(),
            **integral_facts(), **information_facts(), **boxcox_facts(), **elementary_facts(), **bessel_facts(),
            **hypergeometric_facts(), **orthogonal_polynomial_facts()}


def error_function_facts():
    """Error functions and the normal distribution."""
    return {
        sc.erf: Facts((lambda ans, x: TWO_OVER_SQRT_PI * np.exp(-x * x),), holomorphic=True),
        sc.erfc: Facts((lambda ans, x: -TWO_OVER_SQRT_PI * np.exp(-x * x),), holomorphic=True),
        sc.erfinv: Facts((lambda ans, x: SQRT_PI / 2 * np.exp(ans * ans),)),
        sc.erfcinv: Facts((lambda ans, x: -SQRT_PI / 2 * np.exp(ans * ans),)),
        sc.erfcx: Facts((lambda ans, x: 2 * x * ans - TWO_OVER_SQRT_PI,), holomorphic=True),
        sc.erfi: Facts((lambda ans, x: TWO_OVER_SQRT_PI * np.exp(x * x),), holomorphic=True),
        sc.dawsn: Facts((lambda ans, x: 1 - 2 * x * ans,), holomorphic=True),
        sc.ndtr: Facts((lambda ans, x: np.exp(-0.5 * x * x) / SQRT_2PI,), holomorphic=True),
        # φ(x)/Φ(x) without underflow
        sc.log_ndtr: Facts((lambda ans, x: np.exp(-0.5 * x * x - ans) / SQRT_2PI,), holomorphic=True),
        sc.ndtri: Facts((lambda ans, x: SQRT_2PI * np.exp(0.5 * ans * ans),)),
        sc.ndtri_exp: Facts((lambda ans, x: SQRT_2PI * np.exp(x + 0.5 * ans * ans),)),
        sc.owens_t: Facts((
            lambda ans, h, a: -np.exp(-0.5 * h * h) * sc.erf(a * h / SQRT2) / (2 * SQRT_2PI),
            lambda ans, h, a: np.exp(-0.5 * h * h * (1 + a * a)) / (2 * math.pi * (1 + a * a)),
        )),
    }


def logistic_facts():
    """Logistic."""
    return {
        sc.expit: Facts((lambda ans, x: ans * (1 - ans),)),
        sc.logit: Facts((lambda ans, x: 1 / (x * (1 - x)),)),
        sc.log_expit: Facts((lambda ans, x: sc.expit(-x),)),
    }


def gamma_facts():
    """Gamma and beta functions."""
    hurwitz_zeta = _ufuncs._zeta  # what scipy.special.zeta(x, q) calls: the ufunc a tracked value reaches
    trigamma = lambda x: hurwitz_zeta(2.0, x)  # noqa: E731 - polygamma(1, x), as a ufunc
    return {
        sc.gamma: Facts((lambda ans, x: ans * sc.digamma(x),), holomorphic=True),
        sc.rgamma: Facts((lambda ans, x: -ans * sc.digamma(x),), holomorphic=True),
        sc.gammaln: Facts((lambda ans, x: sc.digamma(x),)),
        sc.loggamma: Facts((lambda ans, x: sc.digamma(x),), holomorphic=True),
        sc.digamma: Facts((lambda ans, x: trigamma(x),)),
        sc.beta: Facts((lambda ans, a, b: ans * (sc.digamma(a) - sc.digamma(a + b)),
                  lambda ans, a, b: ans * (sc.digamma(b) - sc.digamma(a + b)))),
        sc.betaln: Facts((lambda ans, a, b: sc.digamma(a) - sc.digamma(a + b),
                    lambda ans, a, b: sc.digamma(b) - sc.digamma(a + b))),
        sc.poch: Facts((lambda ans, z, m: ans * (sc.digamma(z + m) - sc.digamma(z)),
                  lambda ans, z, m: ans * sc.digamma(z + m))),
        sc.binom: Facts((lambda ans, n, k: ans * (sc.digamma(n + 1) - sc.digamma(n - k + 1)),
                   lambda ans, n, k: ans * (sc.digamma(n - k + 1) - sc.digamma(k + 1)))),
        hurwitz_zeta: Facts((lambda ans, x, q: hurwitz_zeta_dx(x, q), lambda ans, x, q: -x * hurwitz_zeta(x + 1, q))),
    }


def incomplete_gamma_facts():
    """Incomplete gamma and beta functions, in x (their densities) and their inverses in y."""
    return {
        sc.gammainc: Facts((lambda ans, a, x: gammainc_da(a, x), lambda ans, a, x: gamma_density(a, x))),
        sc.gammaincc: Facts((lambda ans, a, x: -gammainc_da(a, x), lambda ans, a, x: -gamma_density(a, x))),
        sc.gammaincinv: Facts((None, lambda ans, a, y: np.exp(ans - (a - 1) * np.log(ans) + sc.gammaln(a)))),
        sc.gammainccinv: Facts((None, lambda ans, a, y: -np.exp(ans - (a - 1) * np.log(ans) + sc.gammaln(a)))),
        sc.betainc: Facts((lambda ans, a, b, x: betainc_da(a, b, x), lambda ans, a, b, x: betainc_db(a, b, x),
                           lambda ans, a, b, x: beta_density(a, b, x))),
        sc.betaincc: Facts((lambda ans, a, b, x: -betainc_da(a, b, x), lambda ans, a, b, x: -betainc_db(a, b, x),
                            lambda ans, a, b, x: -beta_density(a, b, x))),
        # the inverses x(a, b, y) from I_x(a, b) = y (or 1 - y): ∂x/∂a = -∂I/∂a / ∂I/∂x at x, ∂x/∂y = ±1 / ∂I/∂x
        sc.betaincinv: Facts((lambda ans, a, b, y: -betainc_da(a, b, ans) / beta_density(a, b, ans),
                              lambda ans, a, b, y: -betainc_db(a, b, ans) / beta_density(a, b, ans),
                              lambda ans, a, b, y: 1 / beta_density(a, b, ans))),
        sc.betainccinv: Facts((lambda ans, a, b, y: -betainc_da(a, b, ans) / beta_density(a, b, ans),
                               lambda ans, a, b, y: -betainc_db(a, b, ans) / beta_density(a, b, ans),
                               lambda ans, a, b, y: -1 / beta_density(a, b, ans))),
    }


def integral_facts():
    """Exponential integrals, Spence's function, elliptic integrals."""
    return {
        sc.exp1: Facts((lambda ans, x: -np.exp(-x) / x,), holomorphic=True),
        sc.expi: Facts((lambda ans, x: np.exp(x) / x,), holomorphic=True),
        sc.expn: Facts((None, lambda ans, n, x: np.where(n == 0, -ans * (1 + 1 / x), -sc.expn(n - 1, x)))),
        sc.spence: Facts((lambda ans, z: dividing(-np.log(z), z - 1, -1.0),), holomorphic=True),
        sc.ellipk: Facts((lambda ans, m: dividing(sc.ellipe(m) - (1 - m) * ans, 2 * m * (1 - m), math.pi / 8),)),
        sc.ellipe: Facts((lambda ans, m: dividing(ans - sc.ellipk(m), 2 * m, -math.pi / 8),)),
        sc.ellipkm1: Facts((lambda ans, p: -(sc.ellipe(1 - p) - p * ans) / (2 * p * (1 - p)),)),
    }


def information_facts():
    """Information theory."""
    return {
        sc.entr: Facts((lambda ans, x: -(np.log(x) + 1),)),
        sc.rel_entr: Facts((lambda ans, x, y: np.log(x / y) + 1, lambda ans, x, y: -x / y)),
        sc.kl_div: Facts((lambda ans, x, y: np.log(x / y), lambda ans, x, y: 1 - x / y)),
        sc.xlogy: Facts((lambda ans, x, y: np.log(y), lambda ans, x, y: dividing(x, y, 0.0))),
        sc.xlog1py: Facts((lambda ans, x, y: np.log1p(y), lambda ans, x, y: dividing(x, 1 + y, 0.0))),
        sc.huber: Facts((lambda ans, delta, r: np.where(np.abs(r) <= delta, 0, np.abs(r) - delta),
                   lambda ans, delta, r: np.clip(r, -delta, delta))),
        sc.pseudo_huber: Facts((
            lambda ans, delta, r: 2 * ans / delta - r * r / (delta * np.sqrt(1 + (r / delta) ** 2)),
            lambda ans, delta, r: r / np.sqrt(1 + (r / delta) ** 2),
        )),
    }


def boxcox_facts():
    """Box-Cox transforms and their inverses (∂x/∂λ of the inverse: -∂boxcox/∂λ over ∂boxcox/∂x)."""
    return {
        sc.boxcox: Facts((lambda ans, x, lmbda: np.power(x, lmbda - 1),
                    lambda ans, x, lmbda: boxcox_dlambda(x, ans, lmbda, np.log(x)))),
        sc.boxcox1p: Facts((lambda ans, x, lmbda: np.power(1 + x, lmbda - 1),
                      lambda ans, x, lmbda: boxcox_dlambda(1 + x, ans, lmbda, np.log1p(x)))),
        sc.inv_boxcox: Facts((lambda ans, y, lmbda: np.power(ans, 1 - lmbda),
                        lambda ans, y, lmbda: -np.power(ans, 1 - lmbda) * boxcox_dlambda(ans, y, lmbda, np.log(ans)))),
        sc.inv_boxcox1p: Facts((lambda ans, y, lmbda: np.power(1 + ans, 1 - lmbda),
                          lambda ans, y, lmbda: -np.power(1 + ans, 1 - lmbda) * boxcox_dlambda(
                              1 + ans, y, lmbda, np.log1p(ans)))),
    }


def elementary_facts():
    """Elementary functions scipy.special has under its own names."""
    return {
        sc.exprel: Facts((lambda ans, x: dividing(np.exp(x) - ans, x, 0.5),)),
        sc.powm1: Facts((lambda ans, x, y: y * np.power(x, y - 1), lambda ans, x, y: (ans + 1) * np.log(x))),
        sc.cosm1: Facts((lambda ans, x: -np.sin(x),)),
        sc.exp10: Facts((lambda ans, x: LN10 * ans,)),
        sc.exp2: Facts((lambda ans, x: LN2 * ans,)),
        sc.expm1: Facts((lambda ans, x: ans + 1,), holomorphic=True),
        sc.log1p: Facts((lambda ans, x: 1 / (1 + x),), holomorphic=True),
        sc.cbrt: Facts((lambda ans, x: 1 / (3 * ans * ans),)),
        sc.sindg: Facts((lambda ans, x: RAD * sc.cosdg(x),)),
        sc.cosdg: Facts((lambda ans, x: -RAD * sc.sindg(x),)),
        sc.tandg: Facts((lambda ans, x: RAD * (1 + ans * ans),)),
        sc.cotdg: Facts((lambda ans, x: -RAD * (1 + ans * ans),)),
        sc.radian: Facts((RAD, RAD / 60, RAD / 3600)),
    }


def bessel_facts():
    """Bessel functions: recurrences in the order (∂/∂x of order v from orders v - 1 and v + 1)."""
    return {
        sc.j0: Facts((lambda ans, x: -sc.j1(x),)),
        sc.j1: Facts((lambda ans, x: (sc.j0(x) - sc.jv(2.0, x)) / 2,)),
        sc.y0: Facts((lambda ans, x: -sc.y1(x),)),
        sc.y1: Facts((lambda ans, x: (sc.y0(x) - sc.yv(2.0, x)) / 2,)),
        sc.i0: Facts((lambda ans, x: sc.i1(x),)),
        sc.i0e: Facts((lambda ans, x: sc.i1e(x) - np.sign(x) * ans,)),
        sc.i1: Facts((lambda ans, x: (sc.i0(x) + sc.iv(2.0, x)) / 2,)),
        sc.i1e: Facts((lambda ans, x: (sc.i0e(x) + sc.ive(2.0, x)) / 2 - np.sign(x) * ans,)),
        sc.k0: Facts((lambda ans, x: -sc.k1(x),)),
        sc.k1: Facts((lambda ans, x: -(sc.k0(x) + sc.kv(2.0, x)) / 2,)),
        sc.k0e: Facts((lambda ans, x: ans - sc.k1e(x),)),
        sc.k1e: Facts((lambda ans, x: ans - (sc.k0e(x) + sc.kve(2.0, x)) / 2,)),
        sc.jv: Facts((None, lambda ans, v, x: (sc.jv(real(v) - 1, x) - sc.jv(real(v) + 1, x)) / 2),  # also jn
                     holomorphic=True),
        sc.jve: Facts((None, lambda ans, v, x: (sc.jve(v - 1, x) - sc.jve(v + 1, x)) / 2)),  # jv for real x
        sc.yv: Facts((None, lambda ans, v, x: (sc.yv(real(v) - 1, x) - sc.yv(real(v) + 1, x)) / 2), holomorphic=True),
        sc.yve: Facts((None, lambda ans, v, x: (sc.yve(v - 1, x) - sc.yve(v + 1, x)) / 2)),
        sc.yn: Facts((None, lambda ans, n, x: (sc.yn(n - 1, x) - sc.yn(n + 1, x)) / 2)),
        sc.iv: Facts((None, lambda ans, v, x: (sc.iv(real(v) - 1, x) + sc.iv(real(v) + 1, x)) / 2), holomorphic=True),
        sc.ive: Facts((None, lambda ans, v, x: (sc.ive(v - 1, x) + sc.ive(v + 1, x)) / 2 - np.sign(x) * ans)),
        sc.kv: Facts((None, lambda ans, v, x: -(sc.kv(real(v) - 1, x) + sc.kv(real(v) + 1, x)) / 2), holomorphic=True),
        sc.kve: Facts((None, lambda ans, v, x: ans - (sc.kve(real(v) - 1, x) + sc.kve(real(v) + 1, x)) / 2),
                      holomorphic=True),
        sc.kn: Facts((None, lambda ans, n, x: -(sc.kn(n - 1, x) + sc.kn(n + 1, x)) / 2)),
        sc.struve: Facts((None, lambda ans, v, x: sc.struve(v - 1, x) - v / x * ans)),
        sc.modstruve: Facts((None, lambda ans, v, x: sc.modstruve(v - 1, x) - v / x * ans)),
    }


def hypergeometric_facts():
    """Hypergeometric functions, in their argument."""
    return {
        sc.hyp0f1: Facts((None, lambda ans, v, z: sc.hyp0f1(v + 1, z) / v)),
        sc.hyp1f1: Facts((None, None, lambda ans, a, b, x: a / b * sc.hyp1f1(real(a) + 1, real(b) + 1, x)),
                         holomorphic=True),
        sc.hyp2f1: Facts((None, None, None, lambda ans, a, b, c, z: a * b / c * sc.hyp2f1(
            real(a) + 1, real(b) + 1, real(c) + 1, z)), holomorphic=True),
        sc.hyperu: Facts((None, None, lambda ans, a, b, x: -a * sc.hyperu(a + 1, b + 1, x))),
    }


def orthogonal_polynomial_facts():
    """Orthogonal polynomials, in x: derivatives are polynomials of one degree less."""
    return {
        sc.eval_legendre: Facts((None, lambda ans, n, x: lowered(sc.eval_gegenbauer, n, 1.5, x))),
        sc.eval_sh_legendre: Facts((None, lambda ans, n, x: 2 * lowered(sc.eval_gegenbauer, n, 1.5, 2 * x - 1))),
        sc.eval_chebyt: Facts((None, lambda ans, n, x: n * lowered(sc.eval_chebyu, n, x))),
        sc.eval_sh_chebyt: Facts((None, lambda ans, n, x: 2 * n * lowered(sc.eval_chebyu, n, 2 * x - 1))),
        sc.eval_chebyu: Facts((None, lambda ans, n, x: 2 * lowered(sc.eval_gegenbauer, n, 2.0, x))),
        sc.eval_sh_chebyu: Facts((None, lambda ans, n, x: 4 * lowered(sc.eval_gegenbauer, n, 2.0, 2 * x - 1))),
        sc.eval_chebyc: Facts((None, lambda ans, n, x: n * lowered(sc.eval_chebys, n, x))),
        sc.eval_chebys: Facts((None, lambda ans, n, x: lowered(sc.eval_gegenbauer, n, 2.0, 0.5 * x))),
        sc.eval_gegenbauer: Facts((None, None, lambda ans, n, alpha, x: 2 * alpha * lowered(
            sc.eval_gegenbauer, n, alpha + 1, x))),
        sc.eval_jacobi: Facts((None, None, None, lambda ans, n, alpha, beta, x: (n + alpha + beta + 1) / 2 * lowered(
            sc.eval_jacobi, n, alpha + 1, beta + 1, x))),
        sc.eval_laguerre: Facts((None, lambda ans, n, x: -lowered(sc.eval_genlaguerre, n, 1.0, x))),
        sc.eval_genlaguerre: Facts((None, None, lambda ans, n, alpha, x: -lowered(
            sc.eval_genlaguerre, n, alpha + 1, x))),
    }


def complex_valued_facts():
    """The rows of the ufuncs whose results are complex for real arguments too: reverse rules only (a kernel sums
    real values), holding for complex arguments (holomorphic: w' = g · derivative, JAX's convention)."""
    return {
        # Faddeeva function w(z) = exp(-z²) erfc(-iz): w'(z) = -2z w(z) + 2i/√π
        sc.wofz: Facts((lambda ans, z: 2j / SQRT_PI - 2 * z * ans,), holomorphic=True),
        # Hankel functions H = J ± iY: the Bessel recurrence in the order; the scaled ones
        # H⁽¹⁾e = H⁽¹⁾ exp(-iz) and H⁽²⁾e = H⁽²⁾ exp(iz) add ∓i times themselves
        sc.hankel1: Facts((None, lambda ans, v, z: half_difference(sc.hankel1, v, z)), holomorphic=True),
        sc.hankel2: Facts((None, lambda ans, v, z: half_difference(sc.hankel2, v, z)), holomorphic=True),
        sc.hankel1e: Facts((None, lambda ans, v, z: half_difference(sc.hankel1e, v, z) - 1j * ans), holomorphic=True),
        sc.hankel2e: Facts((None, lambda ans, v, z: half_difference(sc.hankel2e, v, z) + 1j * ans), holomorphic=True),
    }


# Ufuncs with several outputs, w.r.t. their one argument: one partial per output.
def special_outputs():
    return {
        sc.sici: (lambda ans, x: dividing(np.sin(x), x, 1.0), lambda ans, x: np.cos(x) / x),
        sc.shichi: (lambda ans, x: dividing(np.sinh(x), x, 1.0), lambda ans, x: np.cosh(x) / x),
        sc.fresnel: (lambda ans, x: np.sin(0.5 * math.pi * x * x), lambda ans, x: np.cos(0.5 * math.pi * x * x)),
        sc.airy: (lambda ans, x: ans[1], lambda ans, x: x * ans[0], lambda ans, x: ans[3], lambda ans, x: x * ans[2]),
    }


# The functions `register` gave a rule, or declared without a gradient.
REGISTERED = set()
BERNOULLI_OVER_FACTORIAL = None  # B_2j / (2j)!, j = 1 .. M: set by `register` (it needs SciPy)


def wanted(func):
    """Whether ``func``, met without a rule, may be one of this family's: any function once scipy.special is
    imported (its ufuncs cannot be met before), and ``np.i0``, whose rule needs SciPy."""
    return func is np.i0 or "scipy.special" in sys.modules


def register():
    """Enter the partials in the derivative table and register their rules; nothing without SciPy.

    Not done at ``import dualbroadcast`` (importing scipy.special takes 0.2 s) unless SciPy is imported
    already: `registry.register_lazy_rules` calls it when a function it may cover is met without a rule.
    A rule registered before (a user's `db.defderivative` of a scipy.special function) stays."""
    global sc, _ufuncs, BERNOULLI_OVER_FACTORIAL
    try:
        import scipy.special as sc
        from scipy.special import _ufuncs
    except ImportError:  # SciPy is optional: without it there is nothing to register
        return
    BERNOULLI_OVER_FACTORIAL = sc.bernoulli(2 * EULER_MACLAURIN_TERMS)[2::2] / sc.factorial(
        np.arange(2, 2 * EULER_MACLAURIN_TERMS + 1, 2))
    rows = {np.i0: Facts((lambda ans, x: sc.i1(x),)), **special_facts()}
    for func, facts in rows.items():
        DERIVATIVES.setdefault(func, facts.partials)
        if func not in RULES:
            _register(func, facts.partials)
            REGISTERED.add(func)
    complex_valued = complex_valued_facts()
    for func, facts in complex_valued.items():
        if func not in RULES:
            _register(func, facts.partials)
            REGISTERED.add(func)
    holds_for_complex(*[f for f, facts in {**rows, **complex_valued}.items() if facts.holomorphic and f in REGISTERED])
    if sc.digamma in REGISTERED:
        defvjp_complex(sc.digamma, digamma_of_complex)
    for func, entry in special_outputs().items():
        if func not in RULES:
            defvjp_outputs(func, one_output_vjp(entry))
            REGISTERED.add(func)
    constants = [f for f in (sc.round, sc.gammasgn, sc.bernoulli) if f not in RULES and f not in NONDIFFERENTIABLE]
    nondifferentiable(*[f for f in constants if f is not sc.bernoulli],
                      reason="piecewise constant: derivative 0 wherever it exists")
    if sc.bernoulli in constants:
        nondifferentiable(sc.bernoulli, reason="constants: the Bernoulli numbers B₀…Bₙ of an integer n")
    REGISTERED.update(constants)
    for func in (sc.gammaincinv, sc.gammainccinv):
        ARGUMENT_REASONS[func, 0] = "a: the inverse's derivative in a needs ∂P/∂a at the result; not done yet"


if "scipy.special" in sys.modules:  # imported already: registering costs nothing more
    register()
else:
    register_lazily(wanted, register)
