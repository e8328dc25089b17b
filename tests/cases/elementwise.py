"""Cases for the elementwise rules: every function over broadcastable shapes within its domain."""

import numpy as np

from . import Case, broadcast_shapes, uniform

DOMAINS = {
    np.log: [(0.5, 3)], np.log2: [(0.5, 3)], np.log10: [(0.5, 3)], np.sqrt: [(0.5, 3)],
    np.cbrt: [(0.5, 3)], np.log1p: [(-0.5, 3)], np.reciprocal: [(0.5, 2)],
    np.arcsin: [(-0.9, 0.9)], np.arccos: [(-0.9, 0.9)], np.arctanh: [(-0.9, 0.9)],
    np.arccosh: [(1.2, 3)], np.tan: [(-1.2, 1.2)],
    np.power: [(0.5, 2), (-2, 2)], np.divide: [(-2, 2), (0.5, 2)],
    np.remainder: [(0.1, 3), (0.7, 1.3)], np.fmod: [(0.1, 3), (0.7, 1.3)],
}
ARITY = {
    np.add: 2, np.subtract: 2, np.multiply: 2, np.divide: 2, np.power: 2, np.arctan2: 2,
    np.hypot: 2, np.logaddexp: 2, np.logaddexp2: 2, np.maximum: 2, np.minimum: 2,
    np.fmax: 2, np.fmin: 2, np.remainder: 2, np.fmod: 2,
}
UNARY = [
    np.negative, np.positive, np.reciprocal, np.square, np.sqrt, np.cbrt, np.exp, np.exp2,
    np.expm1, np.log, np.log2, np.log10, np.log1p, np.sin, np.cos, np.tan, np.arcsin,
    np.arccos, np.arctan, np.sinh, np.cosh, np.tanh, np.arcsinh, np.arccosh, np.arctanh,
    np.absolute, np.deg2rad, np.rad2deg,
]


# Functions with a kink where arguments tie (or x is 0): their arguments are drawn on
# interleaved grids, half a grid step apart.
KINKED = {np.maximum, np.minimum, np.fmax, np.fmin, np.absolute}


def ufunc_case(func):
    arity = ARITY.get(func, 1)
    domains = DOMAINS.get(func, [(-2, 2)] * arity)

    def build(draw, dtype):
        shapes = broadcast_shapes(draw, arity)
        args = [uniform(draw, s, dtype, *d) for s, d in zip(shapes, domains)]
        if func in KINKED:
            args = [on_grid(a, (k + 1) % 2 / 128 if func is np.absolute else k / 128) for k, a in enumerate(args)]
        return func, args

    return Case(func, build)


def build_where(draw, dtype):
    cs, xs, ys = broadcast_shapes(draw, 3)
    cond = uniform(draw, cs, np.float64) > 0
    return (lambda x, y: np.where(cond, x, y)), [uniform(draw, xs, dtype), uniform(draw, ys, dtype)]


def on_grid(x, offset=0.0):
    """Values rounded to multiples of 1/64, plus ``offset``: a value on the grid and one half a step
    off it are never within the finite-difference step of each other (no kink is straddled)."""
    return (np.round(np.asarray(x) * 64) / 64 + offset).astype(x.dtype)[()]


def build_clip(draw, dtype):
    xs, ls, hs = broadcast_shapes(draw, 3)
    bounds = [on_grid(uniform(draw, ls, dtype, -1, -0.2), 1 / 128), on_grid(uniform(draw, hs, dtype, 0.2, 1), 1 / 128)]
    return np.clip, [on_grid(uniform(draw, xs, dtype)), *bounds]


def build_clip_one_bound(draw, dtype):
    xs, hs = broadcast_shapes(draw, 2)
    x, hi = on_grid(uniform(draw, xs, dtype)), on_grid(uniform(draw, hs, dtype, -1, 1), 1 / 128)
    return (lambda x, hi: np.clip(x, None, hi)), [x, hi]


CASES = [ufunc_case(f) for f in UNARY + list(ARITY)] + [
    Case(np.where, build_where),
    Case(np.clip, build_clip),
    Case(np.clip, build_clip_one_bound, name="clip_upper_bound_only"),
]
