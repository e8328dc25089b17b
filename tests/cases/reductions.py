"""Cases for the reductions rules: every function over None / int (negative too) / tuple axes, with and
without keepdims."""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, array_shape, call, uniform

AXIS_KINDS = ("none", "int", "tuple")


def draw_axis(draw, ndim, kind):
    """``axis`` of the given kind for an ``ndim``-d array: None, one axis (maybe negative) or a tuple."""
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(a - ndim * draw(st.booleans()) for a in axes)  # some written as negative


def reduction_case(func, kind, keepdims, low=-2.0, high=2.0, min_side=1, **options):
    """``func(x, axis=..., keepdims=...)`` on a drawn array; axis None also draws 0-d arrays."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims=0 if kind == "none" else 1, min_side=min_side)
        axis = draw_axis(draw, len(s), kind)
        return call(draw, func, X, axis=axis, keepdims=keepdims, **options), [uniform(draw, s, dtype, low, high)]

    name = f"{func.__name__}_axis_{kind}" + ("_keepdims" if keepdims else "")
    name += "".join(f"_{k}{v}" for k, v in options.items())
    return Case(func, build, name=name)


def standard_cases(func, low=-2.0, high=2.0):
    """axis None, an int with keepdims, a tuple without."""
    return [
        reduction_case(func, "none", False, low, high),
        reduction_case(func, "int", True, low, high),
        reduction_case(func, "tuple", False, low, high),
    ]


def mask(draw, s, at_least=1):
    """A random boolean mask of shape ``s`` with at least ``at_least`` True elements."""
    m = uniform(draw, s, np.float64) > 0
    m.flat[:at_least] = True
    return m


def masked_case(func, kind, at_least=1, **options):
    """``func(x, axis=..., where=mask)``; axis None reductions keep ``at_least`` elements."""

    def build(draw, dtype):
        s = array_shape(draw, min_side=2 if at_least > 1 else 1)
        axis = draw_axis(draw, len(s), kind)
        where = mask(draw, s, at_least)
        return call(draw, func, X, axis=axis, where=where, **options), [uniform(draw, s, dtype, 0.5, 1.5)]

    return Case(func, build, name=f"{func.__name__}_where_axis_{kind}")


def build_prod_with_zeros(draw, dtype):
    s = array_shape(draw)
    x = uniform(draw, s, dtype, 0.5, 1.5)
    x.flat[draw(st.lists(st.integers(0, x.size - 1), max_size=2))] = 0
    axis = draw_axis(draw, len(s), draw(st.sampled_from(AXIS_KINDS)))
    return call(draw, np.prod, X, axis=axis), [x]


def two_way_tie_case(func):
    """``func`` over the whole array with its extreme value at exactly two elements.

    Central differences at a two-way tie give each tied element 1/2: the equal split.
    """

    def build(draw, dtype):
        s = array_shape(draw, min_side=2)
        ranks = np.argsort(np.argsort(uniform(draw, s, dtype), axis=None)).reshape(s)
        x = (0.25 * ranks - 1).astype(dtype)  # distinct values, 0.25 apart
        extreme = func(x)
        others = [i for i in range(x.size) if x.flat[i] != extreme]
        x.flat[others[draw(st.integers(0, len(others) - 1))]] = extreme
        return func, [x]

    return Case(func, build, name=f"{func.__name__}_two_way_tie")


def cumulative_case(func, kind, low=-2.0, high=2.0):
    """cumsum / cumprod along one (maybe negative) axis, or flattened with axis None."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims=0 if kind == "none" else 1)
        axis = draw_axis(draw, len(s), kind)
        return call(draw, func, X, axis=axis), [uniform(draw, s, dtype, low, high)]

    return Case(func, build, name=f"{func.__name__}_axis_{kind}")


def vector_norm_case(ord):
    def build(draw, dtype):
        s = array_shape(draw)
        axis = draw(st.integers(-len(s), len(s) - 1))
        keepdims = draw(st.booleans())
        built = call(draw, np.linalg.norm, X, ord, axis, keepdims)
        return built, [uniform(draw, s, dtype, 0.2, 2) * np.sign(uniform(draw, s, dtype))]

    return Case(np.linalg.norm, build, name=f"norm_vector_ord_{ord}")


def matrix_norm_case(ord):
    def build(draw, dtype):
        s = array_shape(draw, min_dims=2)
        axes = st.lists(st.integers(-len(s), len(s) - 1), min_size=2, max_size=2, unique_by=lambda a: a % len(s))
        axis = tuple(draw(axes))
        keepdims = draw(st.booleans())
        return call(draw, np.linalg.norm, X, ord, axis, keepdims), [uniform(draw, s, dtype)]

    return Case(np.linalg.norm, build, name=f"norm_matrix_ord_{ord}")


def build_norm_default(draw, dtype):
    s = array_shape(draw, min_dims=0)
    keepdims = draw(st.booleans())
    return call(draw, np.linalg.norm, X, keepdims=keepdims), [uniform(draw, s, dtype, 0.2, 2)]


def build_norm_no_axis(draw, dtype):
    """axis=None with an ord: a 1-d array is a vector, a 2-d array a matrix."""
    ndim = draw(st.sampled_from([1, 2]))
    ord = draw(st.sampled_from([1, np.inf, 3] if ndim == 1 else ["fro", "nuc", 1, np.inf, 2]))
    return call(draw, np.linalg.norm, X, ord), [uniform(draw, array_shape(draw, ndim, ndim), dtype, 0.2, 2)]


CASES = [
    *standard_cases(np.sum),
    reduction_case(np.sum, "none", True),
    masked_case(np.sum, "tuple"),
    *standard_cases(np.mean),
    reduction_case(np.mean, "tuple", True),
    masked_case(np.mean, "none"),
    *standard_cases(np.prod, 0.7, 1.4),
    reduction_case(np.prod, "int", False, -1.4, -0.7),
    reduction_case(np.prod, "tuple", False, 0.7, 1.4, initial=2.0),
    Case(np.prod, build_prod_with_zeros, name="prod_with_zeros"),
    masked_case(np.prod, "int"),
    *standard_cases(np.max),
    reduction_case(np.max, "tuple", True),
    masked_case(np.max, "int", initial=-10.0),
    two_way_tie_case(np.max),
    *standard_cases(np.min),
    two_way_tie_case(np.min),
    reduction_case(np.amax, "int", False),
    reduction_case(np.amin, "tuple", True),
    *standard_cases(np.var),
    reduction_case(np.var, "int", False, min_side=2, ddof=1),
    masked_case(np.var, "none", at_least=2, ddof=1),
    *standard_cases(np.std),
    reduction_case(np.std, "tuple", True, min_side=2, ddof=1),
    cumulative_case(np.cumsum, "none"),
    cumulative_case(np.cumsum, "int"),
    cumulative_case(np.cumprod, "none", 0.5, 1.5),
    cumulative_case(np.cumprod, "int", -1.5, -0.5),
    Case(np.linalg.norm, build_norm_default, name="norm_default"),
    Case(np.linalg.norm, build_norm_no_axis, name="norm_no_axis_with_ord"),
    *[vector_norm_case(ord) for ord in (1, 3, -1.5, np.inf, -np.inf, 0)],
    *[matrix_norm_case(ord) for ord in ("fro", "nuc", 2, -2, 1, -np.inf)],
]
