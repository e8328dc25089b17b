"""Cases for the polynomial functions: coefficient vectors of drawn lengths, tracked or constant, every
keyword; roots and fits away from where they have no derivative (repeated roots, rank-deficient fits)."""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, Y, Z, call, uniform


def coefficients(draw, dtype, low=1, high=5):
    return uniform(draw, (draw(st.integers(low, high)),), dtype)


def build_binary(func):
    """``func(a1, a2)``: both tracked, or one beside constants of another length (a scalar among them)."""

    def build(draw, dtype):
        a1, a2 = coefficients(draw, dtype), coefficients(draw, dtype)
        which = draw(st.sampled_from(["both", "first", "second"]))
        if which == "both":
            return call(draw, func, X, Y), [a1, a2]
        constant = np.array(draw(st.sampled_from([[0.5, -1.0, 2.0], 1.5, [0.0, 2.0, 1.0]])), dtype)
        return (call(draw, func, X, constant) if which == "first" else call(draw, func, constant, X)), [a1]

    return build


def build_polymul_leading_zeros(draw, dtype):
    """np.polymul strips leading zeros (as np.poly1d does): the tracked coefficients after them still count."""
    a1, a2 = coefficients(draw, dtype), coefficients(draw, dtype)
    zeros = draw(st.integers(1, 2))
    return (lambda a, b: np.polymul(np.concatenate((np.zeros(zeros, dtype), a)), b)), [a1, a2]


def build_polyder(draw, dtype):
    m = draw(st.integers(1, 3))
    return call(draw, np.polyder, X, m), [coefficients(draw, dtype)]


def build_polyint(draw, dtype):
    """Integration constants none or one (for every integral): NumPy's are float64."""
    m = draw(st.integers(1, 3))
    p = coefficients(draw, dtype)
    if draw(st.booleans()):
        return call(draw, np.polyint, X, m), [p]
    return call(draw, np.polyint, X, m, 0.5), [p]


def build_polyint_tracked_constants(draw, dtype):
    """Integration constants tracked, one per integral."""
    m = draw(st.integers(1, 3))
    return call(draw, np.polyint, X, m, Y), [coefficients(draw, dtype), uniform(draw, (max(m, 1),), dtype)]


def build_polydiv(draw, dtype):
    """Quotient and remainder, the divisor's leading coefficient away from 0, both tracked or one.  The
    remainder is seen through its values at two points: NumPy drops its leading coefficients within 1e-8 of 0
    (rounding decides which, in float32), which leaves its values unchanged."""
    u = coefficients(draw, dtype, 1, 6)
    v = coefficients(draw, dtype, 1, 3)
    v[0] = np.abs(v[0]) + 0.5
    points = np.array([0.3, -0.7], dtype)
    both = draw(st.booleans())
    divide = call(draw, np.polydiv, X, Y) if both else call(draw, np.polydiv, X, v)

    def quotient_and_remainder_values(*args):
        q, r = divide(*args)
        return q, np.polyval(r, points)

    return quotient_and_remainder_values, [u, v] if both else [u]


def build_poly(draw, dtype):
    """Coefficients of Π (x - rₖ) for zeros, or of a symmetric matrix's characteristic polynomial (its
    eigenvalues are real; distinct for drawn values)."""
    if draw(st.booleans()):
        return call(draw, np.poly, X), [coefficients(draw, dtype, 1, 4)]
    n = draw(st.integers(1, 3))

    def of_symmetric(a):
        return np.poly((a + np.swapaxes(a, 0, 1)) / 2)

    return of_symmetric, [uniform(draw, (n, n), dtype)]


def build_roots(draw, dtype):
    """The roots of a polynomial with drawn distinct real roots (real results), or of one with a pair of
    complex roots (complex results, seen through their real and imaginary parts); a trailing zero (a root
    at 0) at times."""
    count = draw(st.integers(1, 3))
    real_roots = np.sort(uniform(draw, (count,), np.float64, -2, 2))
    real_roots = real_roots + 0.5 * np.arange(count)  # at least 0.5 apart
    factors = [np.poly(real_roots) * draw(st.floats(0.5, 2.0))]
    if draw(st.booleans()):
        factors.append([1.0, draw(st.floats(-1.0, 1.0)), draw(st.floats(1.5, 3.0))])  # discriminant < 0
    if draw(st.booleans()) and np.all(np.abs(real_roots) > 0.3):
        factors.append([1.0, 0.0])
    p = factors[0]
    for f in factors[1:]:
        p = np.polymul(p, f)
    p = p.astype(dtype)

    def roots_seen_as_real(p):
        s = np.sum(np.sin(np.roots(p)))  # each root's own cotangent cos(rᵢ), whatever order eigvals gives them
        return np.real(s), np.imag(s)

    return roots_seen_as_real, [p]


def build_polyfit(draw, dtype):
    """A fit of degree below the number of distinct points, in x, y (one or several columns) and w."""
    n = draw(st.integers(2, 6))
    deg = draw(st.integers(0, min(n - 1, 3)))
    x = np.linspace(-1.0, 1.0, n) + uniform(draw, (n,), np.float64, -0.1, 0.1)
    y = uniform(draw, draw(st.sampled_from([(n,), (n, 2)])), dtype)
    w = uniform(draw, (n,), dtype, 0.5, 1.5)
    tracked = draw(st.sampled_from(["y", "xy", "yw", "xyw"]))
    if tracked == "y":
        return call(draw, np.polyfit, x.astype(dtype), X, deg, w=w if draw(st.booleans()) else None), [y]
    if tracked == "xy":
        return call(draw, np.polyfit, X, Y, deg), [x.astype(dtype), y]
    if tracked == "yw":
        return call(draw, np.polyfit, x.astype(dtype), X, deg, None, False, Y), [y, w]
    return call(draw, np.polyfit, X, Y, deg, None, False, Z), [x.astype(dtype), y, w]


FLOAT64 = {"out_dtype": np.float64}  # NumPy's result is float64 whatever the input (float32 times an int64 arange)
CASES = [
    Case(np.polyadd, build_binary(np.polyadd), name="polyadd"),
    Case(np.polysub, build_binary(np.polysub), name="polysub"),
    Case(np.polymul, build_binary(np.polymul), name="polymul"),
    Case(np.polymul, build_polymul_leading_zeros, name="polymul_leading_zeros"),
    Case(np.polyder, build_polyder, name="polyder", **FLOAT64),
    Case(np.polyint, build_polyint, name="polyint", **FLOAT64),
    Case(np.polyint, build_polyint_tracked_constants, name="polyint_tracked_constants", **FLOAT64),
    Case(np.polydiv, build_polydiv, name="polydiv"),
    Case(np.poly, build_poly, name="poly"),
    Case(np.roots, build_roots, name="roots"),
    Case(np.polyfit, build_polyfit, name="polyfit", **FLOAT64),
]
