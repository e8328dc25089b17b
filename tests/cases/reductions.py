"""Cases for the reductions rules: every function over None / int (negative too) / tuple axes, with and
without keepdims; the order statistics, the nan functions (one element NaN), cov and corrcoef, and the
ufunc methods (``add.reduce`` ...) keyed by their bound methods."""

import math

import numpy as np
from hypothesis import strategies as st

from dualbroadcast.rules.reductions import reduced_axes

from . import Case, X, Y, array_shape, call, uniform

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


def build_bincount(draw, dtype):
    """Weights summed into the bins of drawn non-negative integers (repeats, empty bins, minlength), by position
    or by name; float64 out, as NumPy gives."""
    n = draw(st.integers(0, 6))
    x = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.intp)
    minlength = draw(st.integers(0, 7))
    if draw(st.booleans()):
        return (lambda w: np.bincount(x, weights=w, minlength=minlength)), [uniform(draw, (n,), dtype)]
    return (lambda w: np.bincount(x, w, minlength)), [uniform(draw, (n,), dtype)]


def build_unique(func):
    """np.unique and the array-API unique functions of x with its values repeated (x joined with a part of
    itself, so finite differences move the copies together), every result, NaNs never drawn."""

    def build(draw, dtype):
        s = array_shape(draw, 1, 2)
        k = draw(st.integers(0, int(np.prod(s))))
        of = call(draw, np.unique, X, *[draw(st.booleans()) for _ in range(3)]) if func is np.unique else func

        def unique(x):
            result = of(np.concatenate((np.ravel(x), np.ravel(x)[:k])))
            return tuple(result) if isinstance(result, tuple) else result

        return unique, [uniform(draw, s, dtype)]

    return build


def build_set_operation(func):
    """``func(a, b)`` of two arrays sharing values (parts of each other: finite differences move the copies
    together), or of x and a constant."""

    def build(draw, dtype):
        x, y = uniform(draw, (draw(st.integers(1, 4)),), dtype), uniform(draw, (draw(st.integers(0, 3)),), dtype)
        k = draw(st.integers(0, len(x)))
        extra = {"assume_unique": draw(st.booleans())} if func is not np.union1d else {}
        if func is np.intersect1d:
            extra["return_indices"] = draw(st.booleans())

        def operation(x, y):
            return func(np.concatenate((x, y)), np.concatenate((y, x[:k])), **extra)

        return operation, [x, y]

    return build


def build_sort_complex(draw, dtype):
    """Real values (cast to complex: its real part is the sorted values) along the last axis."""
    s = array_shape(draw, 1, 3)
    return (lambda x: np.real(np.sort_complex(x)) + np.imag(np.sort_complex(x)) * 0), [uniform(draw, s, dtype)]


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


# --- sort, partition and the order statistics ---------------------------------------------------
def sort_case(axis_kind, **options):
    """np.sort along an int axis (maybe negative, or the default -1) or flattened (None)."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims=0 if axis_kind == "none" else 1)
        arguments = {} if axis_kind == "default" else {"axis": draw_axis(draw, len(s), axis_kind)}
        return call(draw, np.sort, X, **arguments, **options), [uniform(draw, s, dtype)]

    return Case(np.sort, build, name=f"sort_axis_{axis_kind}" + "".join(f"_{k}_{v}" for k, v in options.items()))


def partition_case(kind):
    """np.partition with kth an int (maybe negative) or a sequence, along an int axis or flattened."""

    def build(draw, dtype):
        s = array_shape(draw)
        axis = None if kind == "none" else draw_axis(draw, len(s), "int")
        n = math.prod(s) if axis is None else s[axis]
        kth = draw(st.one_of(st.integers(-n, n - 1), st.lists(st.integers(0, n - 1), min_size=1, max_size=3)))
        return call(draw, np.partition, X, kth, axis), [uniform(draw, s, dtype)]

    return Case(np.partition, build, name=f"partition_axis_{kind}")


def with_nans(draw, x):
    """``x`` with one element NaN (the nan functions leave it out; every slice keeps others when each
    reduced axis has two elements or more)."""
    x = np.array(x)
    x.flat[draw(st.integers(0, x.size - 1))] = np.nan
    return x


def order_statistic_case(func, kind, keepdims, nan=False, **options):
    """median-like ``func(x, axis=..., keepdims=...)``; for nan functions one element is NaN."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims=0 if kind == "none" and not nan else 1, min_side=2 if nan else 1)
        axis = draw_axis(draw, len(s), kind)
        x = uniform(draw, s, dtype)
        return call(draw, func, X, axis=axis, keepdims=keepdims, **options), [with_nans(draw, x) if nan else x]

    name = f"{func.__name__}_axis_{kind}" + ("_keepdims" if keepdims else "")
    return Case(func, build, name=name + "".join(f"_{k}_{v}" for k, v in options.items()))


QUANTILE_METHODS = ("linear", "inverted_cdf", "averaged_inverted_cdf", "closest_observation",
                    "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased", "normal_unbiased",
                    "lower", "higher", "nearest", "midpoint")


def quantile_case(func, q_kind, tracked_q=False, nan=False, scale=1.0):
    """``func(x, q, axis, method=..., keepdims)`` with q a scalar or an array (a differentiated argument
    with method 'linear'); every method otherwise.  The nan functions take a 1-d q (NumPy's own limit
    with NaN data; a 2-d q over several axes is an error, see test_reduction_methods)."""

    def build(draw, dtype):
        s = array_shape(draw, min_side=2 if nan else 1)
        axis = draw_axis(draw, len(s), draw(st.sampled_from(AXIS_KINDS)))
        q_shape = () if q_kind == "scalar" else array_shape(draw, max_dims=1 if nan else 2, max_side=3)
        q = uniform(draw, q_shape, dtype, 0.05 * scale, 0.95 * scale)
        method = "linear" if tracked_q else draw(st.sampled_from(QUANTILE_METHODS))
        keepdims = draw(st.booleans())
        x = uniform(draw, s, dtype)
        x = with_nans(draw, x) if nan else x
        if tracked_q:
            return call(draw, func, X, Y, axis, method=method, keepdims=keepdims), [x, q]
        return call(draw, func, X, q, axis, method=method, keepdims=keepdims), [x]

    name = f"{func.__name__}_q_{q_kind}" + ("_differentiated" if tracked_q else "_every_method")
    return Case(func, build, name=name)


# --- the nan reductions, ptp, average ---------------------------------------------------------------
def nan_reduction_case(func, kind, keepdims=False, min_side=2, low=-2.0, high=2.0, **options):
    """``func(x, axis=..., keepdims=...)`` with one element of ``x`` NaN."""

    def build(draw, dtype):
        s = array_shape(draw, min_side=min_side)
        axis = draw_axis(draw, len(s), kind)
        x = with_nans(draw, uniform(draw, s, dtype, low, high))
        return call(draw, func, X, axis=axis, keepdims=keepdims, **options), [x]

    return Case(func, build, name=f"{func.__name__}_axis_{kind}" + ("_keepdims" if keepdims else ""))


def nan_cumulative_case(func, kind, low=-2.0, high=2.0):
    def build(draw, dtype):
        s = array_shape(draw)
        axis = draw_axis(draw, len(s), kind)
        return call(draw, func, X, axis=axis), [with_nans(draw, uniform(draw, s, dtype, low, high))]

    return Case(func, build, name=f"{func.__name__}_axis_{kind}")


def build_average_weighted(draw, dtype):
    """np.average with differentiated weights of a's shape, or along the reduced axes (int or tuple)."""
    s = array_shape(draw)
    kind = draw(st.sampled_from(["full", "int", "tuple"]))
    axis = draw_axis(draw, len(s), "int" if kind == "full" else kind) if kind != "full" or draw(st.booleans()) \
        else None
    w_shape = s if kind == "full" else tuple(s[a] for a in reduced_axes(axis, len(s)))
    keepdims = draw(st.booleans())
    arrays = [uniform(draw, s, dtype), uniform(draw, w_shape, dtype, 0.5, 1.5)]
    return call(draw, np.average, X, axis, Y, keepdims=keepdims), arrays


def build_average_returned(draw, dtype):
    """np.average(..., returned=True): the average and the sum of weights, weights tracked or not (or none)."""
    s = array_shape(draw)
    axis = draw_axis(draw, len(s), draw(st.sampled_from(["none", "int", "tuple"])))
    w_shape = s if axis is None else tuple(s[a] for a in reduced_axes(axis, len(s)))
    weights = draw(st.sampled_from(["tracked", "constant", "none"]))
    arrays = [uniform(draw, s, dtype)]
    w = Y if weights == "tracked" else uniform(draw, w_shape, dtype, 0.5, 1.5) if weights == "constant" else None
    if weights == "tracked":
        arrays.append(uniform(draw, w_shape, dtype, 0.5, 1.5))
    return call(draw, np.average, X, axis, w, True, keepdims=draw(st.booleans())), arrays


def build_average_constant_weights(draw, dtype):
    s = array_shape(draw, min_dims=0)
    axis = draw_axis(draw, len(s), "none") if not s else draw_axis(draw, len(s), draw(st.sampled_from(AXIS_KINDS)))
    weights = None if draw(st.booleans()) else uniform(draw, s, dtype, 0.5, 1.5)
    if weights is not None and axis is None and not s:
        weights = None
    return call(draw, np.average, X, axis, weights), [uniform(draw, s, dtype)]


# --- cov, corrcoef --------------------------------------------------------------------------------
def observations(draw, dtype, rowvar, variables, samples):
    """A data matrix of ``variables`` x ``samples`` (transposed when not rowvar; 1-d for one variable)."""
    x = uniform(draw, (variables, samples), dtype)
    if variables == 1 and draw(st.booleans()):
        return x[0]
    return x if rowvar else x.T


def build_cov(draw, dtype):
    rowvar, with_y = draw(st.booleans()), draw(st.booleans())
    samples = draw(st.integers(3, 6))
    arrays = [observations(draw, dtype, rowvar, draw(st.integers(1, 3)), samples)]
    options = {"rowvar": rowvar}
    if draw(st.booleans()):
        options["bias"] = True
    if draw(st.booleans()):
        options["ddof"] = draw(st.integers(0, 2))
    if draw(st.booleans()):
        options["fweights"] = draw(st.lists(st.integers(1, 3), min_size=samples, max_size=samples))
    if draw(st.booleans()):
        options["aweights"] = uniform(draw, (samples,), np.float64, 0.5, 1.5)
    if with_y:
        arrays.append(observations(draw, dtype, rowvar, draw(st.integers(1, 2)), samples))
        return in_dtype(call(draw, np.cov, X, Y, **options)), arrays
    return in_dtype(call(draw, np.cov, X, **options)), arrays


def in_dtype(fn):
    """``fn``'s result cast to its arguments' dtype: cov and corrcoef of float32 compute in float64 (a float32
    ``dtype=`` would make the finite differences, taken in float64, noise), and the cast's pullback gives the
    float64 cotangent the rule turns into float32."""
    return lambda *arrays: fn(*arrays).astype(np.result_type(*arrays))


def build_corrcoef(draw, dtype):
    rowvar, with_y = draw(st.booleans()), draw(st.booleans())
    samples = draw(st.integers(3, 6))
    arrays = [observations(draw, dtype, rowvar, draw(st.integers(1, 3)), samples)]
    if with_y:
        arrays.append(observations(draw, dtype, rowvar, draw(st.integers(1, 2)), samples))
        return in_dtype(call(draw, np.corrcoef, X, Y, rowvar, dtype=np.float64)), arrays
    return in_dtype(call(draw, np.corrcoef, X, rowvar=rowvar)), arrays


# --- cumulative_sum, cumulative_prod ------------------------------------------------------------------
def array_api_cumulative_case(func, low=-2.0, high=2.0):
    """1-d (or 0-d) with axis None, else an int axis; include_initial either way."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims=0)
        axis = draw_axis(draw, len(s), "int") if len(s) > 1 or (s and draw(st.booleans())) else None
        initial = draw(st.booleans())
        return call(draw, func, X, axis=axis, include_initial=initial), [uniform(draw, s, dtype, low, high)]

    return Case(func, build, name=f"{func.__name__}")


# --- ufunc methods -----------------------------------------------------------------------------
def ufunc_reduce_case(method, kind, low=-2.0, high=2.0, **options):
    """``ufunc.reduce(x, axis)``: the axis left out (NumPy's default 0), an int, None or a tuple."""

    def build(draw, dtype):
        s = array_shape(draw, min_dims=0 if kind in ("none", "default") else 1)
        arguments = {} if kind == "default" else {"axis": draw_axis(draw, len(s), kind)}
        if draw(st.booleans()):
            arguments["keepdims"] = draw(st.booleans())
        return call(draw, method, X, **arguments, **options), [uniform(draw, s, dtype, low, high)]

    name = f"{method.__self__.__name__}.reduce_axis_{kind}" + "".join(f"_{k}" for k in options)
    return Case(method, build, name=name)


def ufunc_accumulate_case(method, low=-2.0, high=2.0):
    def build(draw, dtype):
        s = array_shape(draw)
        arguments = {} if draw(st.booleans()) else {"axis": draw_axis(draw, len(s), "int")}
        return call(draw, method, X, **arguments), [uniform(draw, s, dtype, low, high)]

    return Case(method, build, name=f"{method.__self__.__name__}.accumulate")


def build_add_reduceat(draw, dtype):
    """Any indices NumPy accepts: increasing (a sum per slice) or not (x[i] alone where the next is not larger)."""
    s = array_shape(draw)
    axis = draw_axis(draw, len(s), "int")
    indices = draw(st.lists(st.integers(0, s[axis] - 1), min_size=1, max_size=4))
    arguments = {} if axis == 0 and draw(st.booleans()) else {"axis": axis}
    return call(draw, np.add.reduceat, X, indices, **arguments), [uniform(draw, s, dtype)]


def build_bincount_weights(draw, dtype):
    """Weighted label counts (a sum per label): labels may repeat or be missing, minlength may pad."""
    n = draw(st.integers(0, 6))
    labels = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.intp)
    minlength = draw(st.sampled_from([0, 3, 7]))
    return (lambda w: np.bincount(labels, w, minlength)), [uniform(draw, (n,), dtype)]


def outer_case(ufunc, low=-2.0, high=2.0):
    """``ufunc.outer(x, y)``: recorded as ``ufunc(x reshaped, y)``, the derivative table's rule."""

    def build(draw, dtype):
        a, b = (array_shape(draw, min_dims=0, max_dims=2) for _ in range(2))
        arrays = [uniform(draw, a, dtype, low, high), uniform(draw, b, dtype, low, high)]
        return (lambda x, y: ufunc.outer(x, y)), arrays

    return Case(ufunc, build, name=f"{ufunc.__name__}.outer")


CASES += [
    Case(np.bincount, build_bincount_weights, "bincount_weights", out_dtype=np.float64),
    sort_case("default"),
    sort_case("int"),
    sort_case("none"),
    sort_case("int", kind="stable"),
    sort_case("int", stable=True),
    partition_case("int"),
    partition_case("none"),
    order_statistic_case(np.median, "none", False),
    order_statistic_case(np.median, "int", True),
    order_statistic_case(np.median, "tuple", False),
    order_statistic_case(np.nanmedian, "none", False, nan=True),
    order_statistic_case(np.nanmedian, "tuple", True, nan=True),
    quantile_case(np.quantile, "scalar"),
    quantile_case(np.quantile, "array"),
    quantile_case(np.quantile, "scalar", tracked_q=True),
    quantile_case(np.quantile, "array", tracked_q=True),
    quantile_case(np.percentile, "array", scale=100.0),
    quantile_case(np.percentile, "scalar", tracked_q=True, scale=100.0),
    quantile_case(np.nanquantile, "array", nan=True),
    quantile_case(np.nanquantile, "array", tracked_q=True, nan=True),
    quantile_case(np.nanpercentile, "scalar", nan=True, scale=100.0),
    quantile_case(np.nanpercentile, "array", tracked_q=True, nan=True, scale=100.0),
    nan_reduction_case(np.nansum, "none"),
    nan_reduction_case(np.nansum, "tuple", True),
    nan_reduction_case(np.nanmean, "int", True),
    nan_reduction_case(np.nanmean, "none"),
    nan_reduction_case(np.nanprod, "tuple", low=0.7, high=1.4),
    nan_reduction_case(np.nanmax, "int"),
    nan_reduction_case(np.nanmin, "tuple", True),
    nan_reduction_case(np.nanvar, "int", True, min_side=3),
    nan_reduction_case(np.nanvar, "none", min_side=3, ddof=1),
    nan_reduction_case(np.nanstd, "tuple", min_side=3),
    nan_cumulative_case(np.nancumsum, "none"),
    nan_cumulative_case(np.nancumsum, "int"),
    nan_cumulative_case(np.nancumprod, "int", 0.5, 1.5),
    nan_cumulative_case(np.nancumprod, "none", -1.5, -0.5),
    *standard_cases(np.ptp),
    Case(np.average, build_average_weighted, name="average_weighted"),
    Case(np.average, build_average_constant_weights, name="average_constant_or_no_weights"),
    Case(np.average, build_average_returned, name="average_returned"),
    Case(np.cov, build_cov, name="cov"),
    Case(np.corrcoef, build_corrcoef, name="corrcoef"),
    array_api_cumulative_case(np.cumulative_sum),
    array_api_cumulative_case(np.cumulative_prod, 0.5, 1.5),
    ufunc_reduce_case(np.add.reduce, "default"),
    ufunc_reduce_case(np.add.reduce, "tuple", initial=1.5),
    ufunc_reduce_case(np.multiply.reduce, "default", 0.7, 1.4),
    ufunc_reduce_case(np.multiply.reduce, "none", 0.7, 1.4),
    ufunc_reduce_case(np.maximum.reduce, "int"),
    ufunc_reduce_case(np.maximum.reduce, "default"),
    ufunc_reduce_case(np.minimum.reduce, "tuple"),
    ufunc_reduce_case(np.fmax.reduce, "none"),
    ufunc_reduce_case(np.fmin.reduce, "default"),
    ufunc_reduce_case(np.logaddexp.reduce, "default"),
    ufunc_reduce_case(np.logaddexp.reduce, "tuple"),
    ufunc_reduce_case(np.logaddexp2.reduce, "int"),
    ufunc_accumulate_case(np.add.accumulate),
    ufunc_accumulate_case(np.multiply.accumulate, 0.5, 1.5),
    ufunc_accumulate_case(np.maximum.accumulate),
    ufunc_accumulate_case(np.minimum.accumulate),
    ufunc_accumulate_case(np.fmax.accumulate),
    ufunc_accumulate_case(np.fmin.accumulate),
    Case(np.add.reduceat, build_add_reduceat, name="add.reduceat"),
    outer_case(np.add),
    outer_case(np.multiply),
    outer_case(np.arctan2),
    outer_case(np.power, 0.5, 1.5),
    Case(np.sort_complex, build_sort_complex, name="sort_complex", out_dtype=np.float64),
    Case(np.bincount, build_bincount, name="bincount_weights", out_dtype=np.float64),
    *[Case(f, build_unique(f), name=f.__name__)
      for f in (np.unique, np.unique_values, np.unique_counts, np.unique_inverse, np.unique_all)],
    *[Case(f, build_set_operation(f), name=f.__name__)
      for f in (np.union1d, np.setdiff1d, np.setxor1d, np.intersect1d)],
]
