"""The elementwise functions and what the library knows of each: the one source of truth.

`ELEMENTWISE` holds one row per function (`Facts`): its partial derivatives and every other fact a layer
reads about it (holomorphic, smooth, a selection, its numexpr spelling, ...), each written once there; the
sets the layers read (`DERIVATIVES`, `SELECTIONS`, `NUMEXPR_COMPLEX`, ...) are made from the rows.

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
singular function comes before the selection or after it (docs/design.md, Conventions at kinks).  A data zero
after a singular function (``sqrt(x) * c`` at x = c = 0) is the same 0: reverse mode meets it at the singular
partial, forward mode (`tangent_product`) where the infinite tangent meets the 0 partial of a smooth one.
"""

import math
from typing import NamedTuple

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
        return all_finite(d)
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
    """Whether the array ``value`` holds finite numbers only (a guard's check in a prepared program's replay): for
    a small array, the sum of its squared magnitudes is finite only then, one pass that makes no array (1000
    float64: 0.6 us, 2 us np.isfinite(value).all()); where that sum is not finite, an overflow or not, and for a
    large array (whose dot product BLAS may split across threads, slower on a busy machine), each element."""
    if value.dtype.kind not in "fc":
        return True
    if value.size <= DOT_CHECK_MAX and math.isfinite(np.vdot(value, value).real):
        return True
    return bool(np.isfinite(value).all())


DOT_CHECK_MAX = 8192  # elements: OpenBLAS computes a dot product of up to 10,000 on one thread


def chain_product(func, g, d):
    """``g · d``, the chain rule's product of a derivative ``g`` and ``func``'s partial ``d`` (each mode's one
    product for the table's partials): strong (`strong_product`) for a selection, and for a singular function
    where ``d`` is not finite; IEEE's otherwise."""
    if func in SELECTIONS:
        return selected(g, d)
    return g * d if func in SMOOTH or is_finite(d) else strong_product(g, d)


def tangent_product(func, t, d):
    """``d · t``, forward mode's product of ``func``'s partial ``d`` and an incoming tangent ``t``: `chain_product`'s,
    strong where it is not finite, and so for a smooth function too once a singular one's was not (since the
    outermost `jvp` began: `UNBOUNDED`): a tangent a singular partial made infinite, times a smooth partial that is 0
    (``sqrt(x) * c`` at x = c = 0), is 0 as reverse mode's cotangent 0 reaching the singular partial makes it.  One
    check of the finished product (none for a smooth function before); a recomputation only where it is not finite."""
    if func in SELECTIONS:
        return selected(t, d)
    p = t * d
    if (func in SMOOTH and not UNBOUNDED.seen) or is_finite(p):
        return p
    UNBOUNDED.seen = UNBOUNDED.seen or func not in SMOOTH
    return strong_product(t, d)


class _Unbounded:
    """Whether a singular function's tangent product was not finite since the outermost `jvp` call began
    (`forward.new_level` forgets it): a smooth function's product is then checked too (`tangent_product`).  Shared
    by threads: another's only makes more checks."""

    seen = False


UNBOUNDED = _Unbounded()


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


class Facts(NamedTuple):
    """What the library knows of one elementwise function: its row of `ELEMENTWISE`, where each fact about it is
    written once.  The sets the layers read (`DERIVATIVES`, `SELECTIONS`, `NUMEXPR_COMPLEX`, ...) are made from
    the rows; a field left out is False (None)."""

    # ∂f/∂argᵢ per argument: a formula d(ans, *args), a number (a constant partial), or None (an argument that is
    # not differentiable).  None: the function has no partials (a predicate, or piecewise constant).
    partials: tuple | None
    # Its derivative is 0 wherever it exists: its result is a constant (`ZERO_DERIVATIVE`).
    piecewise_constant: bool = False
    # Holomorphic (or linear): its partials hold for complex values as written, JAX's convention
    # (`registry.holds_for_complex`, `rules/complex.py`).  A function without it is an error on complex values.
    holomorphic: bool = False
    # Its partials are finite wherever its arguments are (`SMOOTH`); every other function of the table is
    # singular somewhere (sqrt, log, divide, power, arcsin, exp's overflow, scipy.special's, a user's), and the
    # chain rule's product with its partial is `strong_product` where the partial is not finite.
    smooth: bool = False
    # A singular function whose partial is infinite only where its value is too (exp's overflow): in a kernel's
    # forward chain a 0 meeting that infinity meets the infinite value as well (IEEE's NaN in the value), so the
    # products after it stay IEEE's (`expr._chain_term`: no strong `where` in EAM's Hessian-vector kernels).
    overflows_only: bool = False
    # It selects: a partial is 0 where an argument is not chosen (np.where's other branch, the smaller argument of
    # maximum, a clipped element, |x| and copysign at 0 through sign(0) = 0): the product is `selected`.
    selection: bool = False
    # numexpr's name for it (`kernel_source.numexpr_sources`; "-" and "~" are prefixes).  None: numexpr lacks it,
    # or writes it as Python's operator (`numpy_facts.INFIX`, `COMPARISONS`).
    numexpr: str | None = None
    # numexpr computes it on complex numbers as NumPy does, to rounding.  numexpr lacks complex forms of arctan2,
    # fmod, hypot, floor, the orders (<), ...; its complex arcsin, arctan, arcsinh and arctanh lose digits near 0
    # (a relative error of 1e-4 measured at |z| = 1e-12, 6e-8 at 1e-10).  A kernel where complex values take part
    # with a function without it is no numexpr candidate.
    numexpr_complex: bool = False
    # A binary ufunc whose loops NumPy vectorises only over two contiguous arrays: a blocked kernel fills a block
    # with its literal operand (`kernel_source._splatted`).  With a 0-d operand, float32 arctan2 of 65536
    # elements took 76 us, 38 us against a block of that constant (power 74/43 us, maximum and minimum 26/9;
    # float64 174/152, 167/144, 30/20).  The same loops' results, bit for bit.
    splatted: bool = False
    # One cheap pass: a cotangent kernel recomputes it from what it reads (`broadcast_pullbacks._build_deferred`);
    # a full-size node of another function (exp, log, a division, a user's primitive) that the forward pass
    # computes anyway is kept.
    recomputed: bool = False
    # The same on Python floats as on float64: prepared replay may run it on Python floats
    # (`replay_forward.SourceWriter.stays_float`).
    float_safe: bool = False


# What add, subtract, multiply and negative share: every fact but a numexpr name and a selection's.
ARITHMETIC = {"holomorphic": True, "smooth": True, "numexpr_complex": True, "recomputed": True, "float_safe": True}

# The elementwise functions the library knows, one row each.  Adding one is adding its row (and its test cases,
# tests/cases): the reverse rule, forward mode, the kernels and prepared replay all read it.
ELEMENTWISE = {
    np.add: Facts((1, 1), **ARITHMETIC),
    np.subtract: Facts((1, -1), **ARITHMETIC),
    np.multiply: Facts((lambda ans, x, y: y, lambda ans, x, y: x), **ARITHMETIC),
    np.divide: Facts((lambda ans, x, y: 1 / y, lambda ans, x, y: -ans / y), holomorphic=True, numexpr_complex=True),
    # x ** y: at y = 0 the exponent stays 0, so ∂/∂x is 0 · x⁰ = 0 even at x = 0 (not 0 · 0⁻¹ = nan).
    # ∂/∂y is 0 at x = 0 for every y (exact for y > 0, where 0 ** y is 0), and nan at x < 0, where
    # x ** y is defined at integer y only and has no derivative in y.
    np.power: Facts((
        power_base,
        lambda ans, x, y: np.where(x == 0, 0, ans * np.log(np.where(x == 0, 1, x))),
    ), holomorphic=True, numexpr_complex=True, splatted=True),
    np.negative: Facts((-1,), **ARITHMETIC, numexpr="-"),
    np.positive: Facts((1,), holomorphic=True, smooth=True, recomputed=True),
    # -1/x², a quotient (singular: a strong product), not -ans · ans, whose product of two infinities at x = 0 a
    # second derivative behind a guard would meet as 0 · ∞ in a smooth multiplication.
    np.reciprocal: Facts((lambda ans, x: -1 / (x * x),), holomorphic=True),
    np.square: Facts((lambda ans, x: 2 * x,), holomorphic=True, smooth=True, recomputed=True),
    np.sqrt: Facts((lambda ans, x: 0.5 / ans,), holomorphic=True, numexpr="sqrt", numexpr_complex=True),
    np.cbrt: Facts((lambda ans, x: 1 / (3 * ans * ans),)),
    np.exp: Facts((lambda ans, x: ans,), holomorphic=True, overflows_only=True, numexpr="exp", numexpr_complex=True),
    np.exp2: Facts((lambda ans, x: ans * LN2,), holomorphic=True, overflows_only=True),
    np.expm1: Facts((lambda ans, x: ans + 1,), holomorphic=True, overflows_only=True, numexpr="expm1",
                    numexpr_complex=True),
    np.log: Facts((lambda ans, x: 1 / x,), holomorphic=True, numexpr="log", numexpr_complex=True),
    np.log2: Facts((lambda ans, x: 1 / (x * LN2),), holomorphic=True, numexpr="log2", numexpr_complex=True),
    np.log10: Facts((lambda ans, x: 1 / (x * LN10),), holomorphic=True, numexpr="log10", numexpr_complex=True),
    np.log1p: Facts((lambda ans, x: 1 / (1 + x),), holomorphic=True, numexpr="log1p", numexpr_complex=True),
    np.sin: Facts((lambda ans, x: np.cos(x),), holomorphic=True, smooth=True, numexpr="sin", numexpr_complex=True),
    np.cos: Facts((lambda ans, x: -np.sin(x),), holomorphic=True, smooth=True, numexpr="cos", numexpr_complex=True),
    np.tan: Facts((lambda ans, x: 1 + ans * ans,), holomorphic=True, numexpr="tan", numexpr_complex=True),
    np.arcsin: Facts((lambda ans, x: 1 / np.sqrt(1 - x * x),), holomorphic=True, numexpr="arcsin"),
    np.arccos: Facts((lambda ans, x: -1 / np.sqrt(1 - x * x),), holomorphic=True, numexpr="arccos",
                     numexpr_complex=True),
    np.arctan: Facts((lambda ans, x: 1 / (1 + x * x),), holomorphic=True, smooth=True, numexpr="arctan"),
    np.arctan2: Facts((lambda ans, y, x: x / (x * x + y * y), lambda ans, y, x: -y / (x * x + y * y)),
                      numexpr="arctan2", splatted=True),
    np.sinh: Facts((lambda ans, x: np.cosh(x),), holomorphic=True, overflows_only=True, numexpr="sinh",
                   numexpr_complex=True),
    np.cosh: Facts((lambda ans, x: np.sinh(x),), holomorphic=True, overflows_only=True, numexpr="cosh",
                   numexpr_complex=True),
    np.tanh: Facts((lambda ans, x: 1 - ans * ans,), holomorphic=True, smooth=True, numexpr="tanh",
                   numexpr_complex=True),
    np.arcsinh: Facts((lambda ans, x: 1 / np.sqrt(x * x + 1),), holomorphic=True, smooth=True, numexpr="arcsinh"),
    # 1/(√(x-1) √(x+1)), not 1/√(x²-1): the same for real x > 1, and right on every side of complex arccosh's cut.
    np.arccosh: Facts((lambda ans, x: 1 / (np.sqrt(x - 1) * np.sqrt(x + 1)),), holomorphic=True,
                      numexpr="arccosh", numexpr_complex=True),
    np.arctanh: Facts((lambda ans, x: 1 / (1 - x * x),), holomorphic=True, numexpr="arctanh"),
    # x / hypot(x, y): 0 at x = y = 0 (not 0/0), as |x|'s partial sign(0) = 0 (hypot(x, 0) is |x|), and
    # selected so, its own derivative there is 0 too.
    np.hypot: Facts((lambda ans, x, y: over_norm(x, ans), lambda ans, x, y: over_norm(y, ans)), smooth=True,
                    numexpr="hypot"),
    np.logaddexp: Facts((lambda ans, x, y: np.exp(x - ans), lambda ans, x, y: np.exp(y - ans)), smooth=True),
    np.logaddexp2: Facts((lambda ans, x, y: np.exp2(x - ans), lambda ans, x, y: np.exp2(y - ans)), smooth=True),
    np.absolute: Facts((lambda ans, x: np.sign(x),), selection=True, numexpr="abs", recomputed=True),  # 0 at x = 0
    np.fabs: Facts((lambda ans, x: np.sign(x),), selection=True),  # 0 at x = 0
    # |x| with y's sign: ∂/∂x is x's sign times y's (0 at x = 0); piecewise constant in y.
    np.copysign: Facts((lambda ans, x, y: np.sign(x) * np.copysign(1, y), 0), selection=True, recomputed=True),
    # sinc(x) = sin(πx)/(πx): (cos(πx) - sinc(x))/x, 0 at x = 0 (sinc is even and smooth there).
    np.sinc: Facts((lambda ans, x: np.where(x == 0, 0, (np.cos(math.pi * x) - ans) / np.where(x == 0, 1, x)),),
                   smooth=True),
    # Finite elements pass through (1), the replaced ones are the replacement values (nan, posinf, neginf).
    np.nan_to_num: Facts((
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: np.isfinite(x),
        None,
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: np.isnan(x),
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: x == math.inf,
        lambda ans, x, copy=True, nan=0.0, posinf=None, neginf=None: x == -math.inf,
    ), selection=True),
    # x · 2**i: the integer exponent i is not differentiable.  2 * ans ** 0 is a two of the result's dtype
    # (its powers are exact), and i may reach the formula as a float (a Python int made a typed number).
    np.ldexp: Facts((lambda ans, x, i: (2 * ans ** 0) ** i, None)),
    # x ** y computed in float64 (a float32 argument gives a float64 result): power's formulas and
    # conventions, in float64 (np.float_power(x, 1) is x as a float64).
    np.float_power: Facts((
        lambda ans, x, y: y * np.float_power(x, y - (y != 0)),
        lambda ans, x, y: np.where(x == 0, 0, ans * np.log(np.float_power(np.where(x == 0, 1, x), 1))),
    )),
    np.deg2rad: Facts((math.pi / 180,), smooth=True),
    np.rad2deg: Facts((180 / math.pi,), smooth=True),
    np.radians: Facts((math.pi / 180,), smooth=True),
    np.degrees: Facts((180 / math.pi,), smooth=True),
    # x - ⌊x/y⌋ y and x - trunc(x/y) y: exact for every sign of x and y, except where x/y is an
    # integer (there the function jumps).
    np.remainder: Facts((1, lambda ans, x, y: -np.floor(x / y))),
    np.fmod: Facts((1, lambda ans, x, y: -np.trunc(x / y)), numexpr="fmod"),
    # Selections: the partial is 1 where the argument is the one selected, else 0.  Where x and y tie the
    # cotangent is split equally, as JAX and autograd do: maximum(x, y) at x == y has partials ½ and ½,
    # relu's maximum(x, 0) at 0 has ½ (and maximum(x, x) has ½ + ½ = 1); so does fmax/fmin's tie (JAX
    # gives fmax's tie to y) and clip exactly at a bound (½ to x, ½ to the bound, as JAX's clip).  A NaN
    # argument of maximum/minimum gives both partials 0 (every comparison with NaN is false); fmax/fmin
    # select the argument that is not NaN, and x when both are.
    np.maximum: Facts((lambda ans, x, y: share(x > y, x == y, ans), lambda ans, x, y: share(y > x, x == y, ans)),
                      selection=True, numexpr="maximum", splatted=True, recomputed=True),
    np.minimum: Facts((lambda ans, x, y: share(x < y, x == y, ans), lambda ans, x, y: share(y < x, x == y, ans)),
                      selection=True, numexpr="minimum", splatted=True, recomputed=True),
    np.fmax: Facts((lambda ans, x, y: share(fmax_alone(x, y), x == y, ans),
                    lambda ans, x, y: share(fmax_alone(y, x) & np.logical_not(np.isnan(y)), x == y, ans)),
                   selection=True),
    np.fmin: Facts((lambda ans, x, y: share(fmin_alone(x, y), x == y, ans),
                    lambda ans, x, y: share(fmin_alone(y, x) & np.logical_not(np.isnan(y)), x == y, ans)),
                   selection=True),
    np.where: Facts((None, lambda ans, c, x, y: c, lambda ans, c, x, y: np.logical_not(c)), holomorphic=True,
                    selection=True, numexpr="where", numexpr_complex=True, recomputed=True),
    np.clip: Facts((
        lambda ans, x, lo, hi: share(x > lo, x == lo, ans) * clip_upper(ans, x, lo, hi),
        lambda ans, x, lo, hi: share(lo > x, x == lo, ans) * clip_upper(ans, x, lo, hi),
        lambda ans, x, lo, hi: share(hi < np.maximum(x, lo), np.maximum(x, lo) == hi, ans),
    ), selection=True),
    # Piecewise constant: the result is a constant.  The next float (spacing, nextafter) is a constant too, as in JAX.
    np.sign: Facts(None, piecewise_constant=True, numexpr="sign", recomputed=True),
    np.floor: Facts(None, piecewise_constant=True, numexpr="floor"),
    np.ceil: Facts(None, piecewise_constant=True, numexpr="ceil"),
    np.round: Facts(None, piecewise_constant=True),
    np.around: Facts(None, piecewise_constant=True),
    np.rint: Facts(None, piecewise_constant=True),
    np.trunc: Facts(None, piecewise_constant=True, numexpr="trunc"),
    np.fix: Facts(None, piecewise_constant=True),
    np.floor_divide: Facts(None, piecewise_constant=True),
    np.heaviside: Facts(None, piecewise_constant=True),
    np.spacing: Facts(None, piecewise_constant=True),
    np.nextafter: Facts(None, piecewise_constant=True),
    # Predicates (`numpy_facts.PREDICATES`) numexpr computes.
    np.equal: Facts(None, numexpr_complex=True),
    np.not_equal: Facts(None, numexpr_complex=True),
    np.logical_and: Facts(None, numexpr_complex=True),
    np.logical_or: Facts(None, numexpr_complex=True),
    np.logical_not: Facts(None, numexpr="~", numexpr_complex=True),
    np.isnan: Facts(None, numexpr="isnan"),
    np.isfinite: Facts(None, numexpr="isfinite"),
    np.isinf: Facts(None, numexpr="isinf"),
}


def functions_with(fact):
    """The functions of `ELEMENTWISE` whose row has ``fact`` (a field of `Facts`) true."""
    return frozenset(f for f, facts in ELEMENTWISE.items() if getattr(facts, fact))


# The partials of every elementwise function: the table's, then those `db.defderivative` and the SciPy family add.
DERIVATIVES = {f: facts.partials for f, facts in ELEMENTWISE.items() if facts.partials is not None}
ZERO_DERIVATIVE = tuple(f for f, facts in ELEMENTWISE.items() if facts.piecewise_constant)
SELECTIONS = functions_with("selection")
SMOOTH = functions_with("smooth")
OVERFLOWS_ONLY = functions_with("overflows_only")
HOLOMORPHIC = functions_with("holomorphic")
NUMEXPR_FUNCTIONS = {f: facts.numexpr for f, facts in ELEMENTWISE.items() if facts.numexpr}
NUMEXPR_COMPLEX = functions_with("numexpr_complex")
SPLATTED = functions_with("splatted")
RECOMPUTED = functions_with("recomputed")
FLOAT_SAFE = functions_with("float_safe")
