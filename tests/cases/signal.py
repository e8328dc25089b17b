"""Cases for differences, integrals, interpolation, convolution and ranges: every function, its
arguments tracked or constant, over drawn shapes, axes, orders, spacings and modes."""

import numpy as np
from hypothesis import strategies as st

from . import Arg, Case, X, Y, Z, array_shape, broadcast_shapes, call, uniform
from .shape import axis_of


def cast_to(fn):
    """``fn``, whose result NumPy computes in float64 whatever the input, cast back to its first argument's
    dtype (float64 when finite differences evaluate it in float64); a complex result (of a complex fp) as it is."""
    def cast(*args):
        out = fn(*args)
        return out if np.iscomplexobj(out) else out.astype(args[0].dtype)

    return cast


def coordinates(dtype):
    """The dtype of np.interp's x and xp in a case of ``dtype``: float64 for a complex one (only fp, left and
    right may be complex)."""
    return np.float64 if np.dtype(dtype).kind == "c" else dtype


def interp_case(dtype, interp, args, fp_index):
    """The case of ``interp`` at ``args``; in complex dtypes of fp alone (``args[fp_index]``), x and xp held constant
    (they are real: the complex sweep moves every argument in both directions; tests/rules/test_complex.py
    checks x's and xp's gradients of a complex interpolation against JAX)."""
    if np.dtype(dtype).kind != "c":
        return cast_to(interp), args
    return (lambda fp: interp(*args[:fp_index], fp, *args[fp_index + 1:])), [args[fp_index]]


def knots(draw, n, low=-2.0, gap=0.3):
    """``n`` increasing coordinates at least ``gap`` apart, from about ``low``."""
    return low + np.cumsum(uniform(draw, (n,), np.float64, gap, 3 * gap))


# --- differences ------------------------------------------------------------------------------------------
def build_diff(draw, dtype):
    s = array_shape(draw, 1, 3, min_side=0)
    n, axis = draw(st.integers(0, 5)), axis_of(draw, len(s))
    return call(draw, np.diff, X, n, axis=axis), [uniform(draw, s, dtype)]


def edge_part(draw, dtype, s, axis):
    """A prepend or append for an array of shape ``s``: absent, 0-d, or k slices along ``axis``."""
    kind = draw(st.sampled_from(["absent", "scalar", "array"]))
    if kind == "absent":
        return None
    shape = list(s)
    shape[axis] = draw(st.integers(1, 3))
    return uniform(draw, () if kind == "scalar" else tuple(shape), dtype)


def build_diff_prepend_append(draw, dtype):
    """prepend and append each absent, a constant (of the array's dtype) or tracked (Y, Z: `call` keeps
    a tracked one and every argument before it positional)."""
    s = array_shape(draw, 1, 3)
    n, axis = draw(st.integers(0, 4)), axis_of(draw, len(s))
    parts, values = {}, [uniform(draw, s, dtype)]
    for name, arg in (("prepend", Y), ("append", Z)):
        part = edge_part(draw, dtype, s, axis)
        tracked = part is not None and draw(st.booleans())
        values.append(part if tracked else uniform(draw, (), dtype))  # an unused value: gradient 0
        if part is not None:
            parts[name] = arg if tracked else part
    if parts.get("append") is Z and "prepend" not in parts:
        parts["prepend"] = dtype(0.25)  # np.diff(x, n, axis, prepend, append) written positionally
    diff = call(draw, np.diff, X, n, axis, **parts)
    return diff, values


def build_ediff1d(draw, dtype):
    s = array_shape(draw, 0, 3, min_side=0)
    ends = [draw(st.sampled_from([None, "scalar", "array"])) for _ in range(2)]
    values = [uniform(draw, s, dtype)]
    args = [X]
    for end, arg in zip(ends, (Y, Z)):
        if end is None:
            args.append(None)
            values.append(uniform(draw, (), dtype))  # unused: its gradient is None
        else:
            args.append(arg)
            values.append(uniform(draw, () if end == "scalar" else array_shape(draw, 1, 2), dtype))
    ediff1d = call(draw, np.ediff1d, *args)
    return ediff1d, values


def build_ediff1d_constant_ends(draw, dtype):
    to_end, to_begin = uniform(draw, (2,), dtype), dtype(0.5)
    return call(draw, np.ediff1d, X, to_end=to_end, to_begin=to_begin), [uniform(draw, array_shape(draw, 1, 2), dtype)]


# --- np.gradient ----------------------------------------------------------------------------------------------
def spacing_of(draw, n):
    """One axis's spacing: a scalar, uniform coordinates, non-uniform ones, or integer ones."""
    return draw(st.sampled_from([
        float(draw(st.floats(0.25, 2.0))),
        np.linspace(-1.0, 2.0, n),
        knots(draw, n),
        np.arange(n) * 2,
    ]))


def build_gradient(draw, dtype):
    edge_order = draw(st.sampled_from([1, 2]))
    s = array_shape(draw, 1, 3, min_side=edge_order + 1, max_side=5)
    axis = draw(st.sampled_from([None, axis_of(draw, len(s)), tuple(draw(st.permutations(range(len(s)))))[:2],
                                 (axis_of(draw, len(s)),)]))
    axes = range(len(s)) if axis is None else [a % len(s) for a in (axis if isinstance(axis, tuple) else (axis,))]
    one = float(draw(st.floats(0.25, 2.0)))
    spacing = draw(st.sampled_from([(), (one,), tuple(spacing_of(draw, s[a]) for a in axes)]))
    gradient = call(draw, np.gradient, X, *spacing, axis=axis, edge_order=edge_order)
    return gradient, [uniform(draw, s, dtype)]


def build_gradient_1d(draw, dtype):
    """One axis: one array, whatever the spacing."""
    edge_order = draw(st.sampled_from([1, 2]))
    n = draw(st.integers(edge_order + 1, 7))
    spacing = draw(st.sampled_from([(), (spacing_of(draw, n),)]))
    return call(draw, np.gradient, X, *spacing, edge_order=edge_order), [uniform(draw, (n,), dtype)]


def build_gradient_tracked_spacing(draw, dtype):
    """np.gradient differentiated in its spacing too: one scalar for every axis, or one scalar or
    coordinate array per axis, each tracked or constant."""
    edge_order = draw(st.sampled_from([1, 2]))
    s = array_shape(draw, 1, 3, min_side=edge_order + 1, max_side=5)
    axis = draw(st.sampled_from([None, axis_of(draw, len(s)), tuple(draw(st.permutations(range(len(s)))))[:2]]))
    axes = range(len(s)) if axis is None else [a % len(s) for a in (axis if isinstance(axis, tuple) else (axis,))]
    arrays = [uniform(draw, s, dtype)]
    if draw(st.booleans()):
        spacing = [Y]
        arrays.append(dtype(draw(st.floats(0.25, 2.0))))
    else:
        spacing = []
        for a in axes:
            value = knots(draw, s[a]).astype(dtype) if draw(st.booleans()) else dtype(draw(st.floats(0.25, 2.0)))
            if len(arrays) < 3 and (draw(st.booleans()) or (a == axes[-1] and len(arrays) == 1)):  # X, Y, Z
                spacing.append(Arg(len(arrays)))
                arrays.append(value)
            else:
                spacing.append(value)
    return call(draw, np.gradient, X, *spacing, axis=axis, edge_order=edge_order), arrays


# --- np.trapezoid -----------------------------------------------------------------------------------------
def build_trapezoid(draw, dtype):
    """y tracked; x absent or constant coordinates, dx absent or a constant."""
    s = array_shape(draw, 1, 3, min_side=0)
    axis = axis_of(draw, len(s))
    spacing = draw(st.sampled_from([{}, {"dx": dtype(0.5)}, {"x": knots(draw, s[axis]).astype(dtype)}]))
    return call(draw, np.trapezoid, X, axis=axis, **spacing), [uniform(draw, s, dtype)]


def build_trapezoid_x(draw, dtype):
    """x tracked: 1-d coordinates along the axis, or increasing along it in y's shape."""
    s = array_shape(draw, 1, 3)
    axis = axis_of(draw, len(s))
    if draw(st.booleans()):
        x = knots(draw, s[axis]).astype(dtype)
    else:
        x = np.cumsum(uniform(draw, s, dtype, 0.2, 1.0), axis=axis)
    return call(draw, np.trapezoid, X, Y, axis=axis), [uniform(draw, s, dtype), x]


def build_trapezoid_dx(draw, dtype):
    """dx tracked: a scalar, or one width per position of the other axes."""
    s = array_shape(draw, 1, 3)
    axis = axis_of(draw, len(s))
    widths = list(s)
    widths[axis] = 1
    dx = uniform(draw, draw(st.sampled_from([(), tuple(widths)])), dtype, 0.2, 1.0)
    return call(draw, np.trapezoid, X, None, Y, axis), [uniform(draw, s, dtype), dx]


# --- np.interp ------------------------------------------------------------------------------------------------
def away_from(draw, points, shape, dtype, low=-3.0, high=3.0, margin=0.05):
    """Values of ``shape`` in (low, high), at least ``margin`` from every one of ``points`` (no kink hit)."""
    values = uniform(draw, shape, np.float64, low, high)
    near = np.abs(np.subtract.outer(values, points)).min(axis=-1, initial=np.inf) < margin
    values = np.where(near, values + 2 * margin, values)
    return np.asarray(values).astype(dtype)[()]


def build_interp(draw, dtype):
    """fp and x tracked; left and right absent or given."""
    xp = knots(draw, draw(st.integers(1, 6)))
    x = away_from(draw, xp, array_shape(draw, 0, 2), coordinates(dtype))
    bounds = draw(st.sampled_from([{}, {"left": -0.5}, {"right": 1.5}, {"left": 2.0, "right": -1.0}]))
    interp = call(draw, np.interp, X, xp, Y, **bounds)
    return interp_case(dtype, interp, [x, uniform(draw, xp.shape, dtype)], 1)


def build_interp_knots(draw, dtype):
    """xp tracked too, with left and right tracked."""
    xp = knots(draw, draw(st.integers(2, 6)))
    x = away_from(draw, xp, array_shape(draw, 1, 2), np.float64)
    interp = call(draw, np.interp, X, Y, Z, -0.5, 1.5)
    return interp_case(dtype, interp, [x.astype(coordinates(dtype)), xp.astype(coordinates(dtype)),
                                             uniform(draw, xp.shape, dtype)], 2)


def build_interp_bounds(draw, dtype):
    """left and right tracked, with x (NumPy dispatches np.interp on x, xp and fp only)."""
    xp = knots(draw, draw(st.integers(1, 5)))
    x = away_from(draw, xp, array_shape(draw, 1, 2), coordinates(dtype))
    fp = uniform(draw, xp.shape, dtype)
    if np.dtype(dtype).kind == "c":  # fp tracked, complex left and right (tracked, they need a tracked x)
        return call(draw, np.interp, x, xp, X, -0.5 + 0.25j, 1.5 - 0.25j), [fp]
    interp = call(draw, np.interp, X, xp, fp, Y, Z)
    return cast_to(interp), [x, dtype(-0.5), dtype(1.5)]


def build_interp_period(draw, dtype):
    """Knots given unsorted, beyond one period; x anywhere."""
    period = float(draw(st.sampled_from([3.0, -4.0])))
    n = draw(st.integers(1, 5))
    base = knots(draw, n, 0.1, abs(period) / (3 * n + 3))
    xp = base + abs(period) * np.array(draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)))
    xp = xp[np.array(draw(st.permutations(range(n))))]
    wrapped = np.concatenate([base + k * abs(period) for k in range(-3, 4)])
    x = away_from(draw, wrapped, array_shape(draw, 0, 2), np.float64, -6.0, 6.0)
    interp = call(draw, np.interp, X, Y, Z, period=period)
    position = coordinates(dtype)
    return interp_case(dtype, interp, [np.asarray(x).astype(position)[()], xp.astype(position),
                                             uniform(draw, (n,), dtype)], 2)


# --- convolutions -------------------------------------------------------------------------------------------
def build_convolution(func, min_dims):
    """Both arguments tracked, or the second; either longer (np.convolve takes 0-d ones too)."""
    def build(draw, dtype):
        a, v = (uniform(draw, array_shape(draw, min_dims, 1, max_side=6), dtype) for _ in range(2))
        mode = draw(st.sampled_from(["full", "same", "valid"]))
        if draw(st.booleans()):
            return call(draw, func, X, Y, mode), [a, v]
        return call(draw, func, v, X, mode=mode), [a]

    return build


# --- ranges ------------------------------------------------------------------------------------------------------
def range_layout(draw):
    """Broadcastable endpoint shapes, num, endpoint and an axis of the result."""
    start, stop = broadcast_shapes(draw, 2, max_dims=2)
    ndim = len(np.broadcast_shapes(start, stop)) + 1
    return start, stop, draw(st.integers(0, 5)), draw(st.booleans()), axis_of(draw, ndim)


def build_linspace(draw, dtype):
    start, stop, num, endpoint, axis = range_layout(draw)
    output = draw(st.sampled_from([{}, {"dtype": dtype}])) if dtype == np.float64 else {}  # float32: FD noise
    linspace = call(draw, np.linspace, X, Y, num, endpoint, retstep=False, axis=axis, **output)
    return linspace, [uniform(draw, start, dtype), uniform(draw, stop, dtype)]


def build_linspace_retstep(draw, dtype):
    """Both results, samples and step, of tracked endpoints."""
    start, stop, num, endpoint, axis = range_layout(draw)
    num = max(num, 2)
    linspace = call(draw, np.linspace, X, Y, num, endpoint, True, axis=axis)
    return linspace, [uniform(draw, start, dtype), uniform(draw, stop, dtype)]


def build_linspace_one_end(draw, dtype):
    start, stop, num, endpoint, _ = range_layout(draw)
    return call(draw, np.linspace, uniform(draw, start, dtype), X, num, endpoint), [uniform(draw, stop, dtype)]


def build_geomspace(draw, dtype):
    start, stop, num, endpoint, axis = range_layout(draw)
    sign = draw(st.sampled_from([1.0, -1.0]))
    geomspace = call(draw, np.geomspace, X, Y, num, endpoint, axis=axis)
    values = [sign * uniform(draw, s, dtype, 0.5, 2.0) for s in (start, stop)]
    return cast_to(geomspace), [np.asarray(v).astype(dtype)[()] for v in values]


def build_logspace(draw, dtype):
    start, stop, num, endpoint, axis = range_layout(draw)
    base = draw(st.sampled_from([None, 2.0, "tracked"]))
    if base == "tracked":
        logspace = call(draw, np.logspace, X, Y, num, endpoint, Z, axis=axis)
        base_value = uniform(draw, draw(st.sampled_from([(), stop])), dtype, 1.5, 3.0)
        return logspace, [uniform(draw, start, dtype, -1, 1), uniform(draw, stop, dtype, -1, 1), base_value]
    bases = {} if base is None else {"base": base}
    logspace = call(draw, np.logspace, X, Y, num, endpoint, axis=axis, **bases)
    return logspace, [uniform(draw, start, dtype, -1, 1), uniform(draw, stop, dtype, -1, 1)]


# --- polynomials ------------------------------------------------------------------------------------------------
def build_polyval(draw, dtype):
    degree = draw(st.integers(0, 4))
    trailing, x_shape = broadcast_shapes(draw, 2, max_dims=2)
    p, x = uniform(draw, (degree + 1,) + trailing, dtype), uniform(draw, x_shape, dtype, -1.5, 1.5)
    which = draw(st.sampled_from(["both", "p", "x"]))
    if which == "both":
        return call(draw, np.polyval, X, Y), [p, x]
    if which == "p":
        return call(draw, np.polyval, X, x), [p]
    return call(draw, np.polyval, p, X), [x]


def build_vander(draw, dtype):
    n = draw(st.integers(1, 5))
    N = draw(st.sampled_from([None, 0, 1, draw(st.integers(2, 6))]))
    vander = call(draw, np.vander, X, N, increasing=draw(st.booleans()))
    return cast_to(vander), [uniform(draw, (n,), dtype)]


def build_unwrap(draw, dtype):
    """Phases with jumps of whole periods, the smooth steps far from half a period (no correction flips)."""
    s = array_shape(draw, 1, 2, max_side=6)
    period = draw(st.sampled_from([None, 4.0]))
    full = 2 * np.pi if period is None else period
    jumps = np.array(draw(st.lists(st.integers(-2, 2), min_size=int(np.prod(s)), max_size=int(np.prod(s))))).reshape(s)
    p = (uniform(draw, s, np.float64, -full / 8, full / 8) + full * jumps).astype(dtype)
    axis = axis_of(draw, len(s))
    discont = draw(st.sampled_from([None, full * 0.75]))
    keywords = {} if period is None else {"period": period}
    return call(draw, np.unwrap, X, discont, axis, **keywords), [p]


CASES = [
    Case(np.diff, build_diff, name="diff"),
    Case(np.diff, build_diff_prepend_append, name="diff_prepend_append"),
    Case(np.ediff1d, build_ediff1d, name="ediff1d"),
    Case(np.ediff1d, build_ediff1d_constant_ends, name="ediff1d_constant_ends"),
    Case(np.gradient, build_gradient, name="gradient"),
    Case(np.gradient, build_gradient_1d, name="gradient_1d"),
    Case(np.gradient, build_gradient_tracked_spacing, name="gradient_tracked_spacing"),
    Case(np.trapezoid, build_trapezoid, name="trapezoid"),
    Case(np.trapezoid, build_trapezoid_x, name="trapezoid_x"),
    Case(np.trapezoid, build_trapezoid_dx, name="trapezoid_dx"),
    Case(np.interp, build_interp, name="interp"),
    Case(np.interp, build_interp_knots, name="interp_xp"),
    Case(np.interp, build_interp_bounds, name="interp_left_right"),
    Case(np.interp, build_interp_period, name="interp_period"),
    Case(np.convolve, build_convolution(np.convolve, 0), name="convolve"),
    Case(np.correlate, build_convolution(np.correlate, 1), name="correlate"),
    Case(np.linspace, build_linspace, name="linspace"),
    Case(np.linspace, build_linspace_one_end, name="linspace_stop"),
    Case(np.linspace, build_linspace_retstep, name="linspace_retstep"),
    Case(np.geomspace, build_geomspace, name="geomspace"),
    Case(np.logspace, build_logspace, name="logspace"),
    Case(np.polyval, build_polyval, name="polyval"),
    Case(np.vander, build_vander, name="vander"),
    Case(np.unwrap, build_unwrap, name="unwrap"),
]
