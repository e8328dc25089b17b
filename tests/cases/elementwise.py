"""Cases for the elementwise rules: every function over broadcastable shapes within its domain."""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, Y, Z, array_shape, broadcast_shapes, call, from_domain, uniform

DOMAINS = {
    np.log: [(0.5, 3)], np.log2: [(0.5, 3)], np.log10: [(0.5, 3)], np.sqrt: [(0.5, 3)],
    np.cbrt: [((-3, -0.5), (0.5, 3))], np.log1p: [(-0.5, 3)], np.reciprocal: [((-2, -0.5), (0.5, 2))],
    np.arcsin: [(-0.9, 0.9)], np.arccos: [(-0.9, 0.9)], np.arctanh: [(-0.9, 0.9)],
    np.arccosh: [(1.2, 3)], np.tan: [(-1.2, 1.2)],
    np.power: [(0.5, 2), (-2, 2)], np.divide: [(-2, 2), ((-2, -0.5), (0.5, 2))],
    np.remainder: [(0.1, 3), (0.7, 1.3)], np.fmod: [(0.1, 3), (0.7, 1.3)],
    np.float_power: [(0.5, 2), (-2, 2)],
}
ARITY = {
    np.add: 2, np.subtract: 2, np.multiply: 2, np.divide: 2, np.power: 2, np.arctan2: 2,
    np.hypot: 2, np.logaddexp: 2, np.logaddexp2: 2, np.maximum: 2, np.minimum: 2,
    np.fmax: 2, np.fmin: 2, np.remainder: 2, np.fmod: 2, np.copysign: 2, np.float_power: 2,
}
UNARY = [
    np.negative, np.positive, np.reciprocal, np.square, np.sqrt, np.cbrt, np.exp, np.exp2,
    np.expm1, np.log, np.log2, np.log10, np.log1p, np.sin, np.cos, np.tan, np.arcsin,
    np.arccos, np.arctan, np.sinh, np.cosh, np.tanh, np.arcsinh, np.arccosh, np.arctanh,
    np.absolute, np.fabs, np.deg2rad, np.rad2deg, np.radians, np.degrees, np.sinc, np.nan_to_num,
]
PROMOTES = {np.float_power: np.float64}  # float64 results whatever the arguments' float type
# NumPy 2's names for functions of the table under their older names: the very same objects.
ALIASES = {
    np.acos: np.arccos, np.asin: np.arcsin, np.atan: np.arctan, np.atan2: np.arctan2, np.acosh: np.arccosh,
    np.asinh: np.arcsinh, np.atanh: np.arctanh, np.pow: np.power, np.abs: np.absolute, np.true_divide: np.divide,
    np.mod: np.remainder,
}


# Functions with a kink where arguments tie (or x is 0): their arguments are drawn on
# interleaved grids, half a grid step apart.
KINKED = {np.maximum, np.minimum, np.fmax, np.fmin, np.absolute, np.fabs, np.copysign}
AWAY_FROM_ZERO = {np.absolute, np.fabs, np.copysign}  # every argument half a grid step off 0: a sign never flips


def ufunc_case(func):
    arity = ARITY.get(func, 1)
    domains = DOMAINS.get(func, [(-2, 2)] * arity)

    def build(draw, dtype):
        shapes = broadcast_shapes(draw, arity)
        args = [from_domain(draw, s, dtype, d) for s, d in zip(shapes, domains)]
        if func in KINKED:
            args = [on_grid(a, 1 / 128 if func in AWAY_FROM_ZERO else k / 128) for k, a in enumerate(args)]
        return func, args

    return Case(func, build, out_dtype=PROMOTES.get(func))


def alias_case(alias, func):
    """The case of ``func`` called by its NumPy 2 name (``np.acos`` is ``np.arccos``)."""
    assert alias is func, f"np.{alias.__name__} is not np.{func.__name__}: it needs a rule of its own"
    case = ufunc_case(func)
    return Case(func, case.build, name=f"{func.__name__} as np.{_alias_name(alias, func)}")


def _alias_name(alias, func):
    return next(name for name in dir(np) if getattr(np, name) is alias and name != func.__name__)


def build_ldexp(draw, dtype):
    """x · 2**i: the integer exponent is a constant of the function (kernels bake it in)."""
    xs, es = broadcast_shapes(draw, 2)
    exponent = np.asarray(uniform(draw, es, np.float64, -4, 4)).round().astype(np.int64)[()]
    if not es and draw(st.booleans()):
        exponent = int(exponent)  # a Python int: it must stay an integer wherever a formula receives it
    return (lambda x: np.ldexp(x, exponent)), [uniform(draw, xs, dtype)]


def build_nan_to_num_keywords(draw, dtype):
    """Finite elements pass through: any replacement values, passed by name or position."""
    replacements = dict(nan=draw(st.floats(-3, 3)), posinf=draw(st.sampled_from([None, 5.0])), neginf=-1.0)
    return call(draw, np.nan_to_num, X, draw(st.booleans()), **replacements), [uniform(draw, array_shape(draw), dtype)]


def build_outputs(func, low=-3.0, high=3.0, divisor=False):
    """Every output of a ufunc with two (np.frexp, np.modf, np.divmod by a constant), away from their jumps."""
    def build(draw, dtype):
        shapes = broadcast_shapes(draw, 2)
        x = uniform(draw, shapes[0], dtype, low, high)
        if func is np.modf:
            x = on_grid(x, 1 / 128)  # half a grid step off the integers: trunc never jumps
        if divisor:
            y = on_grid(uniform(draw, shapes[1], dtype, 0.5, 1.5), 1 / 128)
            x = on_grid(x, 1 / 256)  # x / y is never within a step of an integer for these grids
            return (lambda x: func(x, y)), [x]
        return func, [x]

    return build


def build_divmod_in_both(draw, dtype):
    """np.divmod differentiated in the divisor too: the remainder x - y floor(x / y), away from its jumps."""
    xs, ys = broadcast_shapes(draw, 2)
    y = on_grid(uniform(draw, ys, dtype, 0.5, 1.5), 1 / 128)
    x = on_grid(uniform(draw, xs, dtype, -3.0, 3.0), 1 / 256)
    return np.divmod, [x, y]


def build_where(draw, dtype):
    cs, xs, ys = broadcast_shapes(draw, 3)
    cond = uniform(draw, cs, np.float64) > 0
    return (lambda x, y: np.where(cond, x, y)), [uniform(draw, xs, dtype), uniform(draw, ys, dtype)]


def on_grid(x, offset=0.0):
    """Values rounded to multiples of 1/64, plus ``offset``: a value on the grid and one half a step
    off it are never within the finite-difference step of each other (no kink is straddled)."""
    return (np.round(np.asarray(x) * 64) / 64 + offset).astype(x.dtype)[()]


def clip_bounds(draw, dtype, lower_shape, upper_shape):
    """A lower bound in (-1, -0.2) and an upper one in (0.2, 1), half a grid step off the grid."""
    lower = on_grid(uniform(draw, lower_shape, dtype, -1, -0.2), 1 / 128)
    return lower, on_grid(uniform(draw, upper_shape, dtype, 0.2, 1), 1 / 128)


def build_clip(draw, dtype):
    xs, ls, hs = broadcast_shapes(draw, 3)
    return call(draw, np.clip, X, Y, Z), [on_grid(uniform(draw, xs, dtype)), *clip_bounds(draw, dtype, ls, hs)]


def build_clip_constant_bounds(draw, dtype):
    """Constant bounds in every form: positional, ``a_min=``/``a_max=``, NumPy 2's ``min=``/``max=``."""
    xs, ls, hs = broadcast_shapes(draw, 3)
    lower, upper = clip_bounds(draw, dtype, ls, hs)
    if draw(st.booleans()):
        clip = call(draw, np.clip, X, lower, upper)
    else:
        clip = call(draw, np.clip, X, min=lower, max=upper)
    return clip, [on_grid(uniform(draw, xs, dtype))]


def build_clip_one_bound(draw, dtype):
    """One bound, tracked (the other None) or constant (the other None or left out)."""
    xs, bs = broadcast_shapes(draw, 2)
    x, bound = on_grid(uniform(draw, xs, dtype)), on_grid(uniform(draw, bs, dtype, -1, 1), 1 / 128)
    form = draw(st.sampled_from(["tracked lower", "tracked upper", "None", "min=", "max="]))
    if form == "tracked lower":
        return call(draw, np.clip, X, Y, None), [x, bound]
    if form == "tracked upper":
        return call(draw, np.clip, X, None, Y), [x, bound]
    if form == "None":
        return call(draw, np.clip, X, *draw(st.permutations([bound, None]))), [x]
    return call(draw, np.clip, X, **{form[:-1]: bound}), [x]


# Cases a kernel runs too (tests/kernels/test_kernel_rules.py): one value per element, arguments by position.
KERNEL_CASES = [ufunc_case(f) for f in UNARY + list(ARITY)] + [alias_case(a, f) for a, f in ALIASES.items()] + [
    Case(np.where, build_where),
    Case(np.clip, build_clip),
    Case(np.clip, build_clip_constant_bounds, name="clip_constant_bounds"),
    Case(np.clip, build_clip_one_bound, name="clip_one_bound"),
    Case(np.ldexp, build_ldexp),
]
CASES = KERNEL_CASES + [
    Case(np.nan_to_num, build_nan_to_num_keywords, name="nan_to_num_keywords"),
    Case(np.frexp, build_outputs(np.frexp)),
    Case(np.modf, build_outputs(np.modf)),
    Case(np.divmod, build_outputs(np.divmod, divisor=True)),
    Case(np.divmod, build_divmod_in_both, name="divmod_in_both"),
]
