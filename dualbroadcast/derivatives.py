"""Partial derivatives of the elementwise NumPy functions: the one source of truth.

``DERIVATIVES[f]`` holds one entry per argument: ``d(ans, *args)`` gives
∂f/∂argᵢ from the result ``ans`` and the arguments, or a number for a constant
partial.  The reverse rules (``rules/elementwise.py``) multiply it by the
cotangent; kernels (``expr.py``) by the tangents; prepared replay
(``replay.py``) writes it as code.  Formulas are written
with NumPy functions and operators only, so they also run on symbolic kernel
expressions, and with Python-float constants, so float32 stays float32.

Where a function has a kink or a tie, the comments next to its entry state the
value chosen; tests/rules/test_conventions.py pins each in every mode.

The chain rule's product of a derivative and a partial is IEEE's, except at the functions that select
(`SELECTIONS`) and the singular ones (every function not in `SMOOTH`, where the partial is infinite or NaN):
there it is `selected` and `strong_product`, 0 where one factor is 0 (0 · ∞ = 0 · NaN = 0).  So a branch that
`np.where` (or `maximum`, `clip`, ...) does not choose contributes an exact 0 in every mode, whether the
singular function comes before the selection or after it (docs/design.md, Conventions at kinks).
"""

import math

import numpy as np

LN2 = math.log(2.0)
LN10 = math.log(10.0)


def strong_product(g, d):
    """``g · d`` with 0 where one factor is 0 and the other infinite or NaN (0 · ∞ = 0 · NaN = 0, where IEEE
    gives NaN): the chain rule's product at a singular point.  Elsewhere it is ``g · d`` itself, so its
    derivative in either factor is the other (a Hessian differentiates it); where it is the selected 0, its
    derivative is 0 in every mode (`_product_of_selected`)."""
    with np.errstate(invalid="ignore"):  # 0 · ∞ is the point here, not a user's invalid operation
        p = g * d
    zero = (p != p) & ((g == 0) | (d == 0))
    if _is_plain(p):
        return np.where(zero, 0, p)
    return _product_of_selected(zero, g, d)


def selected(g, d):
    """``g · d`` for a selection's partial ``d``: ``g`` where it is chosen (``d`` true or nonzero), an exact 0
    where it is not, even where ``g`` is infinite or NaN (np.where's cotangent is selected, not multiplied)."""
    if isinstance(d, bool) or getattr(d, "dtype", None) == np.bool_:
        return np.where(d, g, 0)
    if _is_plain(g) and _is_plain(d):
        return np.where(d == 0, 0, g * d)
    return _product_of_selected(d == 0, g, d)


def _product_of_selected(zero, g, d):
    """``g · d`` with an exact 0 where ``zero``, for factors an outer derivative tracks: each factor is
    selected first, so the product's derivative there is a selection's 0 in reverse mode as in forward mode
    (``where(zero, 0, g · d)`` would give its cotangent 0 · ∞ = NaN in a Hessian: issue 30)."""
    return np.where(zero, 0, g) * np.where(zero, 0, d)


def _is_plain(x):
    """Whether ``x`` is a NumPy array or number or a Python number: no outer derivative tracks it."""
    return isinstance(x, (np.ndarray, np.generic, int, float, complex))


def is_finite(d):
    """Whether the partial ``d`` (a number or an array) holds finite numbers only.  A value an outer gradient
    tracks (`tape.Tracked`) whose value is an array is inspected too (a Hessian-vector product: the strong
    product's five recorded steps and their pullbacks were a fifth of Rosenbrock's `db.hvp`, two fifths of its
    `prepare_hvp` replay); where that gradient is recorded for replay, a finite one is a guard (`all_finite`: a
    replay where it is not records anew).  Else False (the strong product is exact for finite partials too)."""
    kind = type(d)
    if kind is np.float64 or kind is float:  # a scalar model's partial: first
        return abs(d) < math.inf
    if kind is np.ndarray:
        return d.dtype.kind not in "fc" or bool(np.isfinite(d).all())
    if kind is bool or kind is np.bool_:
        return True
    if kind in (float, int, complex) or isinstance(d, np.number):
        return bool(abs(d) < math.inf)  # False for NaN too; no warning, a fraction of np.isfinite's cost
    value, tape = getattr(d, "value", None), getattr(d, "tape", None)
    if type(value) is not np.ndarray or tape is None:
        return False
    if tape.recorder is not None and getattr(d, "slice_index", None) is not None:
        return False  # a view a recording traces by its base's index: no guard reads it
    finite = all_finite(value)
    if finite and tape.recorder is not None:
        tape.recorder.guard(d, all_finite)
    return finite


def all_finite(value):
    """Whether the array ``value`` holds finite numbers only (a guard's check in a prepared program's replay)."""
    return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())


def chain_product(func, g, d):
    """``g · d``, the chain rule's product of a derivative ``g`` and ``func``'s partial ``d`` (each mode's one
    product for the table's partials): strong (`strong_product`) for a selection, and for a singular function
    where ``d`` is not finite; IEEE's otherwise."""
    if func in SELECTIONS:
        return selected(g, d)
    return g * d if func in SMOOTH or is_finite(d) else strong_product(g, d)


def share(alone, tie, ans):
    """A selection's partial: 1 where the argument alone is selected, ½ where it ties with the other (the
    cotangent is split equally, JAX's and autograd's convention), 0 elsewhere; ``alone`` and ``tie`` are
    truth values.  The ½ has the result's dtype (`one_like`), so float32 stays float32.  An array without a
    tie takes ``alone`` itself (the cotangent times a truth value has the cotangent's dtype): the one-sided
    partial's cost where ties are rare.
    """
    if type(tie) is np.ndarray and not tie.any():
        return alone
    return np.where(tie, 0.5 * one_like(ans), alone)


def one_like(a):
    """``a ** 0``: a one of ``a``'s dtype (1 also where ``a`` is inf or NaN), as a NumPy scalar for an array
    (no pass over it).  On a kernel's symbol or replay's source it stays ``a ** 0``, which kernels write as a
    0-d one (`kernel_source._is_unit_power`); a Python number stays weakly typed."""
    return a.dtype.type(1) ** 0 if isinstance(a, (np.ndarray, np.generic)) else a ** 0


def power_base(ans, x, y):
    """∂(x ** y)/∂x = y · x^(y-1), the exponent 0 where y is 0 (see `DERIVATIVES`).  A real number y = 2 gives
    y · x: the same numbers (x¹ is x), without a power of every element (float32 x ** 1.0 is no fast power)."""
    if isinstance(y, (int, float, np.integer, np.floating)) and y == 2:
        return y * x
    return y * x ** (y - (y != 0))


def over_norm(x, n):
    """``x / n``, the partial of a Euclidean norm ``n`` in its element ``x``, and 0 where ``n`` is 0 (every
    element is 0 there: the subgradient of least norm, as |x|'s sign(0) = 0)."""
    return np.where(n == 0, 0, x / np.where(n == 0, 1, n))


def fmax_alone(x, y):
    """Where ``fmax(x, y)`` selects x alone: x > y, or y is NaN (so x also where both are NaN)."""
    return (x > y) | np.isnan(y)


def fmin_alone(x, y):
    """Where ``fmin(x, y)`` selects x alone: x < y, or y is NaN (so x also where both are NaN)."""
    return (x < y) | np.isnan(y)


def clip_upper(ans, x, lo, hi):
    """∂clip/∂maximum(x, lo): ``clip(x, lo, hi)`` is ``minimum(maximum(x, lo), hi)`` (NumPy's definition, and
    how a kernel traces it), so its partials are those of the composition, ties split at each step."""
    m = np.maximum(x, lo)
    return share(m < hi, m == hi, ans)


DERIVATIVES = {
    np.add: (1, 1),
    np.subtract: (1, -1),
    np.multiply: (lambda ans, x, y: y, lambda ans, x, y: x),
    np.divide: (lambda ans, x, y: 1 / y, lambda ans, x, y: -ans / y),
    # x ** y: at y = 0 the exponent stays 0, so ∂/∂x is 0 · x⁰ = 0 even at x = 0 (not 0 · 0⁻¹ = nan).
    # ∂/∂y is 0 at x = 0 for every y (exact for y > 0, where 0 ** y is 0), and nan at x < 0, where
    # x ** y is defined at integer y only and has no derivative in y.
    np.power: (
        power_base,
        lambda ans, x, y: np.where(x == 0, 0, ans * np.log(np.where(x == 0, 1, x))),
    ),
    np.negative: (-1,),
    np.positive: (1,),
    # -1/x², a quotient (singular: a strong product), not -ans · ans, whose product of two infinities at x = 0 a
    # second derivative behind a guard would meet as 0 · ∞ in a smooth multiplication.
    np.reciprocal: (lambda ans, x: -1 / (x * x),),
    np.square: (lambda ans, x: 2 * x,),
    np.sqrt: (lambda ans, x: 0.5 / ans,),
    np.cbrt: (lambda ans, x: 1 / (3 * ans * ans),),
    np.exp: (lambda ans, x: ans,),
    np.exp2: (lambda ans, x: ans * LN2,),
    np.expm1: (lambda ans, x: ans + 1,),
    np.log: (lambda ans, x: 1 / x,),
    np.log2: (lambda ans, x: 1 / (x * LN2),),
    np.log10: (lambda ans, x: 1 / (x * LN10),),
    np.log1p: (lambda ans, x: 1 / (1 + x),),
    np.sin: (lambda ans, x: np.cos(x),),
    np.cos: (lambda ans, x: -np.sin(x),),
    np.tan: (lambda ans, x: 1 + ans * ans,),
    np.arcsin: (lambda ans, x: 1 / np.sqrt(1 - x * x),),
    np.arccos: (lambda ans, x: -1 / np.sqrt(1 - x * x),),
    np.arctan: (lambda ans, x: 1 / (1 + x * x),),
    np.arctan2: (lambda ans, y, x: x / (x * x + y * y), lambda ans, y, x: -y / (x * x + y * y)),
    np.sinh: (lambda ans, x: np.cosh(x),),
    np.cosh: (lambda ans, x: np.sinh(x),),
    np.tanh: (lambda ans, x: 1 - ans * ans,),
    np.arcsinh: (lambda ans, x: 1 / np.sqrt(x * x + 1),),
    # 1/(√(x-1) √(x+1)), not 1/√(x²-1): the same for real x > 1, and right on every side of complex arccosh's cut.
    np.arccosh: (lambda ans, x: 1 / (np.sqrt(x - 1) * np.sqrt(x + 1)),),
    np.arctanh: (lambda ans, x: 1 / (1 - x * x),),
    # x / hypot(x, y): 0 at x = y = 0 (not 0/0), as |x|'s partial sign(0) = 0 (hypot(x, 0) is |x|), and
    # selected so, its own derivative there is 0 too.
    np.hypot: (lambda ans, x, y: over_norm(x, ans), lambda ans, x, y: over_norm(y, ans)),
    np.logaddexp: (lambda ans, x, y: np.exp(x - ans), lambda ans, x, y: np.exp(y - ans)),
    np.logaddexp2: (lambda ans, x, y: np.exp2(x - ans), lambda ans, x, y: np.exp2(y - ans)),
    np.absolute: (lambda ans, x: np.sign(x),),  # 0 at x = 0
    np.fabs: (lambda ans, x: np.sign(x),),  # 0 at x = 0
    # |x| with y's sign: ∂/∂x is x's sign times y's (0 at x = 0); piecewise constant in y.
    np.copysign: (lambda ans, x, y: np.sign(x) * np.copysign(1, y), 0),
    # sinc(x) = sin(πx)/(πx): (cos(πx) - sinc(x))/x, 0 at x = 0 (sinc is even and smooth there).
    np.sinc: (lambda ans, x: np.where(x == 0, 0, (np.cos(math.pi * x) - ans) / np.where(x == 0, 1, x)),),
    # Finite elements pass through (1), the replaced ones are the replacement values (nan, posinf, neginf).
    np.nan_to_num: (
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: np.isfinite(x),
        None,
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: np.isnan(x),
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: x == math.inf,
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: x == -math.inf,
    ),
    # x · 2**i: the integer exponent i is not differentiable.  2 * ans ** 0 is a two of the result's dtype
    # (its powers are exact), and i may reach the formula as a float (a Python int made a typed number).
    np.ldexp: (lambda ans, x, i: (2 * ans ** 0) ** i, None),
    # x ** y computed in float64 (a float32 argument gives a float64 result): power's formulas and
    # conventions, in float64 (np.float_power(x, 1) is x as a float64).
    np.float_power: (
        lambda ans, x, y: y * np.float_power(x, y - (y != 0)),
        lambda ans, x, y: np.where(x == 0, 0, ans * np.log(np.float_power(np.where(x == 0, 1, x), 1))),
    ),
    np.deg2rad: (math.pi / 180,),
    np.rad2deg: (180 / math.pi,),
    np.radians: (math.pi / 180,),
    np.degrees: (180 / math.pi,),
    # x - ⌊x/y⌋ y and x - trunc(x/y) y: exact for every sign of x and y, except where x/y is an
    # integer (there the function jumps).
    np.remainder: (1, lambda ans, x, y: -np.floor(x / y)),
    np.fmod: (1, lambda ans, x, y: -np.trunc(x / y)),
    # Selections: the partial is 1 where the argument is the one selected, else 0.  Where x and y tie the
    # cotangent is split equally, as JAX and autograd do: maximum(x, y) at x == y has partials ½ and ½,
    # relu's maximum(x, 0) at 0 has ½ (and maximum(x, x) has ½ + ½ = 1); so does fmax/fmin's tie (JAX
    # gives fmax's tie to y) and clip exactly at a bound (½ to x, ½ to the bound, as JAX's clip).  A NaN
    # argument of maximum/minimum gives both partials 0 (every comparison with NaN is false); fmax/fmin
    # select the argument that is not NaN, and x when both are.
    np.maximum: (lambda ans, x, y: share(x > y, x == y, ans), lambda ans, x, y: share(y > x, x == y, ans)),
    np.minimum: (lambda ans, x, y: share(x < y, x == y, ans), lambda ans, x, y: share(y < x, x == y, ans)),
    np.fmax: (lambda ans, x, y: share(fmax_alone(x, y), x == y, ans),
              lambda ans, x, y: share(fmax_alone(y, x) & np.logical_not(np.isnan(y)), x == y, ans)),
    np.fmin: (lambda ans, x, y: share(fmin_alone(x, y), x == y, ans),
              lambda ans, x, y: share(fmin_alone(y, x) & np.logical_not(np.isnan(y)), x == y, ans)),
    np.where: (None, lambda ans, c, x, y: c, lambda ans, c, x, y: np.logical_not(c)),
    np.clip: (
        lambda ans, x, lo, hi: share(x > lo, x == lo, ans) * clip_upper(ans, x, lo, hi),
        lambda ans, x, lo, hi: share(lo > x, x == lo, ans) * clip_upper(ans, x, lo, hi),
        lambda ans, x, lo, hi: share(hi < np.maximum(x, lo), np.maximum(x, lo) == hi, ans),
    ),
}

# Piecewise-constant functions: their derivative is zero, so their result is a constant.  The next float
# (spacing, nextafter) is a constant too, as in JAX.
ZERO_DERIVATIVE = (np.sign, np.floor, np.ceil, np.round, np.around, np.rint, np.trunc, np.fix, np.floor_divide,
                   np.heaviside, np.spacing, np.nextafter)

# The functions that select: a partial is 0 where an argument is not chosen (np.where's other branch, the
# smaller argument of maximum, a clipped element, |x| and copysign at 0 through sign(0) = 0).
SELECTIONS = frozenset((np.where, np.maximum, np.minimum, np.fmax, np.fmin, np.clip, np.absolute, np.fabs,
                        np.copysign, np.nan_to_num))
# The functions whose partials are finite wherever their arguments are; every other function of the table
# (sqrt, log, divide, power, arcsin, exp's overflow, scipy.special's, a user's) is singular somewhere.
SMOOTH = frozenset((np.add, np.subtract, np.multiply, np.negative, np.positive, np.square, np.sin, np.cos,
                    np.tanh, np.arctan, np.arcsinh, np.hypot, np.sinc, np.logaddexp, np.logaddexp2, np.deg2rad,
                    np.rad2deg, np.radians, np.degrees))
