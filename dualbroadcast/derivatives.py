"""Partial derivatives of the elementwise NumPy functions: the one source of truth.

``DERIVATIVES[f]`` holds one entry per argument: ``d(ans, *args)`` gives
∂f/∂argᵢ from the result ``ans`` and the arguments, or a number for a constant
partial.  The reverse rules (``rules/elementwise.py``) multiply it by the
cotangent; kernels (``expr.py``) by the tangents; prepared replay
(``replay.py``) writes it as code.  Formulas are written
with NumPy functions and operators only, so they also run on symbolic kernel
expressions, and with Python-float constants, so float32 stays float32.

Where a function has a kink or a tie, the comments next to its entry state the
value chosen; tests/test_conventions.py pins each in every mode.
"""

import math

import numpy as np

LN2 = math.log(2.0)
LN10 = math.log(10.0)


def fmax_takes_x(x, y):
    """Where ``fmax(x, y)`` is x: x ≥ y, or y is NaN (so x also where both are NaN)."""
    return (x >= y) | np.isnan(y)


def fmin_takes_x(x, y):
    """Where ``fmin(x, y)`` is x: x ≤ y, or y is NaN (so x also where both are NaN)."""
    return (x <= y) | np.isnan(y)


DERIVATIVES = {
    np.add: (1, 1),
    np.subtract: (1, -1),
    np.multiply: (lambda ans, x, y: y, lambda ans, x, y: x),
    np.divide: (lambda ans, x, y: 1 / y, lambda ans, x, y: -ans / y),
    # x ** y: at y = 0 the exponent stays 0, so ∂/∂x is 0 · x⁰ = 0 even at x = 0 (not 0 · 0⁻¹ = nan).
    # ∂/∂y is 0 at x = 0 for every y (exact for y > 0, where 0 ** y is 0), and nan at x < 0, where
    # x ** y is defined at integer y only and has no derivative in y.
    np.power: (
        lambda ans, x, y: y * x ** (y - (y != 0)),
        lambda ans, x, y: np.where(x == 0, 0, ans * np.log(np.where(x == 0, 1, x))),
    ),
    np.negative: (-1,),
    np.positive: (1,),
    np.reciprocal: (lambda ans, x: -ans * ans,),
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
    np.hypot: (lambda ans, x, y: x / ans, lambda ans, x, y: y / ans),
    np.logaddexp: (lambda ans, x, y: np.exp(x - ans), lambda ans, x, y: np.exp(y - ans)),
    np.logaddexp2: (lambda ans, x, y: np.exp2(x - ans), lambda ans, x, y: np.exp2(y - ans)),
    np.absolute: (lambda ans, x: np.sign(x),),  # 0 at x = 0
    np.fabs: (lambda ans, x: np.sign(x),),  # 0 at x = 0
    # |x| with y's sign: ∂/∂x is x's sign times y's (0 at x = 0); piecewise constant in y.
    np.copysign: (lambda ans, x, y: np.sign(x) * np.copysign(1, y), 0),
    np.deg2rad: (math.pi / 180,),
    np.rad2deg: (180 / math.pi,),
    np.radians: (math.pi / 180,),
    np.degrees: (180 / math.pi,),
    # x - ⌊x/y⌋ y and x - trunc(x/y) y: exact for every sign of x and y, except where x/y is an
    # integer (there the function jumps).
    np.remainder: (1, lambda ans, x, y: -np.floor(x / y)),
    np.fmod: (1, lambda ans, x, y: -np.trunc(x / y)),
    # Selections: the partial is 1 where the argument is the one selected, else 0.  Ties go to x
    # (maximum(x, x) and relu's maximum(x, 0) at 0 have partial 1 in x); a NaN argument of
    # maximum/minimum gives both partials 0 (every comparison with NaN is false); fmax/fmin select
    # the argument that is not NaN, and x when both are.
    np.maximum: (lambda ans, x, y: x >= y, lambda ans, x, y: x < y),
    np.minimum: (lambda ans, x, y: x <= y, lambda ans, x, y: x > y),
    np.fmax: (lambda ans, x, y: fmax_takes_x(x, y), lambda ans, x, y: np.logical_not(fmax_takes_x(x, y))),
    np.fmin: (lambda ans, x, y: fmin_takes_x(x, y), lambda ans, x, y: np.logical_not(fmin_takes_x(x, y))),
    np.where: (None, lambda ans, c, x, y: c, lambda ans, c, x, y: np.logical_not(c)),
    # clip exactly at a bound selects x (partial 1 in x, 0 in the bound), as maximum/minimum would.
    np.clip: (
        lambda ans, x, lo, hi: (x >= lo) & (x <= hi),
        lambda ans, x, lo, hi: x < lo,
        lambda ans, x, lo, hi: x > hi,
    ),
}

# Piecewise-constant functions: their derivative is zero, so their result is a constant.  The next float
# (spacing, nextafter) is a constant too, as in JAX.
ZERO_DERIVATIVE = (np.sign, np.floor, np.ceil, np.round, np.rint, np.trunc, np.floor_divide, np.heaviside,
                   np.spacing, np.nextafter)
