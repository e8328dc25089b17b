"""Reverse rules of differences, integrals, interpolation, convolution and ranges: diff, gradient,
trapezoid, interp, convolve, correlate, linspace, ...

Most of these functions are linear in the argument differentiated, so each pullback is the
transpose of a linear map, written with NumPy operations on the cotangent ``g``:

* a difference's transpose is a difference of ``g`` padded with zeros, negated: ``diffᵀ g =
  -diff(pad(g, 1))`` (so ``n`` differences: ``(-1)ⁿ diffⁿ(pad(g, n))``); ``prepend``/``append``
  and ``ediff1d``'s ``to_begin``/``to_end`` take their slices of it;
* ``np.gradient`` along an axis of length n is a banded n x n matrix D (at most two
  neighbours on each side, for every spacing and edge order).  Its diagonals are read off
  ``np.gradient`` itself applied to five probe vectors (element j of probe c is 1 where
  j ≡ c mod 5: no row meets two ones), so every spacing, coordinate array and edge order is
  NumPy's own computation, and ``Dᵀ g`` is five shifted products (`transpose_band`);
* a convolution's transpose is a convolution with the other argument reversed, of ``g``
  placed where the 'same' or 'valid' result sits in the 'full' one (`convolution_vjp`);
* ``np.interp`` is linear in ``fp`` with two weights per point, ``1 - t`` and ``t``;
  ``linspace`` is ``start (1 - t) + stop t`` with ``t = linspace(0, 1)``.

Conventions (each pinned by tests/rules/test_signal.py):

* ``np.interp`` at a knot ``xp[j]`` has the derivative in ``x`` of the interval to its right
  (the one NumPy evaluates there), at the last knot ``xp[-1]`` that of the last interval, and
  0 outside ``[xp[0], xp[-1]]`` (on ``left``/``right`` or the end values): the derivative of
  JAX's ``jnp.interp``.  ``xp`` may be differentiated too (∂f/∂xp_lo = -slope (1 - t),
  ∂f/∂xp_hi = -slope t); ``period`` wraps and sorts the knots (piecewise constant).
* Complex values (JAX's convention): ``np.interp`` of a complex ``fp`` (and ``left``/``right``) is linear
  in them with real weights, its real ``x`` and ``xp`` get the real parts of their cotangents;
  ``np.correlate(a, v)`` is ``convolve(a, conj(v) reversed)``: linear in ``a``, conjugate-linear in ``v``
  (v̄ the conjugate of the real rule's).  np.convolve is linear in both (rules/complex.py).
* ``np.unwrap`` has derivative 1: the multiples of ``period`` it adds are piecewise constant
  in ``p`` (at a jump, the derivative of the branch taken).
* ``np.linspace(..., retstep=True)`` and ``np.gradient`` with a tracked spacing are outputs
  rules differentiated in several arguments.  A scalar spacing h divides the unit-spacing
  result: h̄ = -Σ ḡ·ans / h.  Coordinates x enter each row of D through at most three
  neighbours (x_{i-1}, x_i, x_{i+1}; x_0..x_2 at an edge) by the two spacings h₁, h₂ between them:
  NumPy's stencils written as ``N / (h₁ h₂ (h₁ + h₂))`` (interior: ``N = h₁² Δ₊ + h₂² Δ₋``) and
  differentiated in h₁ and h₂ (`coordinates_transpose`), NumPy calls on the arrays, so differentiable
  again (a test compares them with the complex step ``Im(D(x + iεe) f) / ε`` through NumPy).

NumPy hands a function to the library only for its array arguments (``__array_function__``
dispatches np.interp on x, xp and fp, np.trapezoid on y and x, np.logspace on start and stop):
a tracked ``left``/``right`` of np.interp alone is NumPy's ``float()`` of it, a clear error; a
tracked ``dx`` or ``base`` alone goes through NumPy's own arithmetic, recorded operation by
operation.  Beside a tracked array argument they take these rules.
"""

import math

import numpy as np

from ..pullbacks import as_array, unbroadcast, zero_padded
from ..registry import (
    RULES,
    defjvp,
    deflinear,
    defmultilinear,
    defvjp,
    defvjp_complex,
    defvjp_outputs,
    holds_for_complex,
)
from .shape import _along


def _cast(cotangent, x):
    """``cotangent`` in the dtype of the argument ``x`` (a float32 argument gets float32; a real argument of a
    complex result the real part, JAX's convention)."""
    cotangent, dtype = as_array(cotangent), np.result_type(x)
    if cotangent.dtype.kind == "c" and dtype.kind != "c":
        cotangent = np.real(cotangent)
    return as_array(cotangent, dtype)


# --- differences -------------------------------------------------------------------------------
def diff_transpose(g, n, axis, length):
    """The cotangent of ``c`` for ``g`` the cotangent of ``np.diff(c, n, axis)``, ``c`` ``length`` long
    along ``axis``: ``c̄ = (-1)ⁿ diffⁿ(g padded with n zeros on both sides)``."""
    if length < n:  # NumPy's result is empty
        return np.zeros(np.shape(g)[:axis] + (length,) + np.shape(g)[axis + 1:], np.result_type(g))
    c = np.diff(zero_padded(g, axis, n, n), n, axis)
    return -c if n % 2 else c


def _width(part, a, axis):
    """How long ``part`` (None: absent) is along ``axis`` in the concatenation np.diff makes: a 0-d
    prepend or append is broadcast to one slice of ``a``."""
    return 0 if part is None else 1 if np.ndim(part) == 0 else np.shape(part)[axis]


def diff_vjp(part):
    """The maker of ``np.diff``'s argument ``part`` (0: prepend, 1: a, 2: append): its slice of ``c̄``,
    ``c`` the concatenation ``[prepend, a, append]`` NumPy differences."""

    def maker(ans, a, n=1, axis=-1, prepend=None, append=None):
        prepend, append = (None if p is np._NoValue else p for p in (prepend, append))  # NumPy's "not given"
        x = (prepend, a, append)[part]
        if n == 0:  # NumPy returns a itself, prepend and append unused
            return lambda g: _cast(g if part == 1 else np.zeros(np.shape(x)), x)
        axis = axis % np.ndim(a)
        widths = [_width(p, a, axis) for p in (prepend, a, append)]
        start = sum(widths[:part])
        window = _along(axis, slice(start, start + widths[part]))
        shape, length = np.shape(x), sum(widths)
        return lambda g: _cast(unbroadcast(diff_transpose(g, n, axis, length)[window], shape), x)

    return maker


def ediff1d_vjp(part):
    """The maker of ``np.ediff1d``'s argument ``part`` (0: ary, 1: to_end, 2: to_begin): the result is
    ``[to_begin, diff(ary.ravel()), to_end]``, each part raveled."""

    def maker(ans, ary, to_end=None, to_begin=None):
        x = (ary, to_end, to_begin)[part]
        size = np.size(ary)
        begin, inner = np.size(to_begin) if to_begin is not None else 0, max(size - 1, 0)
        shape = np.shape(x)
        if part == 0:
            return lambda g: _cast(diff_transpose(g[begin:begin + inner], 1, 0, size).reshape(shape), x)
        start = begin + inner if part == 1 else 0
        return lambda g: _cast(g[start:start + np.size(x)].reshape(shape), x)

    return maker


# --- np.gradient: a banded linear map along each axis -------------------------------------------------
BAND = 2  # np.gradient's stencils reach two neighbours at most (edge_order=2 at the ends)
PROBES = 2 * BAND + 1  # probes whose ones are PROBES apart: no stencil meets two
MAX_DIMS = 64  # NumPy's: np.gradient takes at most one spacing per axis


def band_of(apply, n, dtype):
    """The diagonals ``W[s, j] = D[j + s - BAND, j]`` (0 outside D) of the banded n x n matrix D that
    ``apply`` multiplies each row of a (PROBES, n) array by, read off D applied to the probes."""
    j = np.arange(n)
    probes = (j % PROBES == np.arange(PROBES)[:, None]).astype(dtype)
    responses = apply(probes)  # responses[c, i] = D[i, the j ≡ c mod PROBES next to i]
    rows = j + np.arange(-BAND, BAND + 1)[:, None]
    inside = (rows >= 0) & (rows < n)
    return np.where(inside, responses[j % PROBES, np.clip(rows, 0, n - 1)], 0).astype(dtype)


def transpose_band(band, g, axis):
    """``Dᵀ g`` along ``axis`` for D of diagonals ``band`` (`band_of`): ``f̄_j = Σ_s W[s, j] g_{j+s-BAND}``."""
    moved = np.moveaxis(g, axis, -1)
    padded = np.pad(moved, [(0, 0)] * (moved.ndim - 1) + [(BAND, BAND)])
    n = band.shape[1]
    total = sum(band[s] * padded[..., s:s + n] for s in range(PROBES))  # g_{j+s-BAND}: slices, so traceable in g
    return np.moveaxis(total, -1, axis)


def _spacing(varargs, k):
    """The spacing arguments np.gradient uses along its k-th axis: none, the one scalar, or the k-th."""
    if not varargs or (len(varargs) == 1 and np.ndim(varargs[0]) == 0):
        return varargs
    return (varargs[k],)


def gradient_vjp(k, ans, f, *varargs, axis=None, edge_order=1):
    """Output k, the derivative along the k-th axis: f̄ = Dᵀ g along that axis."""
    axes = _gradient_axes(f, axis)
    spacing = _spacing(varargs, k)

    def stencil(probes):
        return np.gradient(probes, *spacing, axis=1, edge_order=edge_order)

    band = band_of(stencil, np.shape(f)[axes[k]], np.result_type(f))
    return lambda g: _cast(transpose_band(band, g, axes[k]), f)


def _gradient_axes(f, axis):
    return tuple(range(np.ndim(f))) if axis is None else np.lib.array_utils.normalize_axis_tuple(axis, np.ndim(f))


def spacing_vjp(i):
    """The maker of np.gradient's spacing argument ``varargs[i]`` for output k (the axis it spaces, or every
    axis for one scalar): a scalar h gives h̄ = -Σ ḡ·ans_k / h, coordinates x give `coordinates_transpose`."""
    def maker(k, ans, f, *varargs, axis=None, edge_order=1):
        h = varargs[i]
        if i != k and not (len(varargs) == 1 and np.ndim(h) == 0):
            return None  # output k is spaced by another argument
        out = ans[k] if isinstance(ans, (tuple, list)) else ans
        if np.ndim(h) == 0:
            return lambda g: _cast(-np.sum(g * out) / h, h)
        along = _gradient_axes(f, axis)[k]
        return lambda g: _cast(coordinates_transpose(f, h, along, edge_order, g), h)

    return maker


def coordinates_transpose(f, x, axis, edge_order, g):
    """x̄_m = Σ ḡ_i ∂(D f)_i/∂x_m for np.gradient along ``axis`` at coordinates ``x``.  Each row of D reads
    three coordinates a < b < c (two at a first-order edge) through h₁ = x_b - x_a and h₂ = x_c - x_b, so
    x̄_a -= P₁, x̄_b += P₁ - P₂, x̄_c += P₂ with P_k = Σ ḡ_i ∂(D f)_i/∂h_k (`stencil_partials`); written with
    NumPy calls on the arrays, so it is differentiable again."""
    n = len(x)
    other = tuple(a for a in range(np.ndim(f)) if a != axis)
    f, g = np.moveaxis(f, axis, -1), np.moveaxis(g, axis, -1)
    x = as_array(x)

    h = np.diff(x)
    df = np.diff(f, axis=-1)
    x_bar = 0.0
    if n > 2:  # interior rows 1..n-2: D f = (h₁² Δ₊ + h₂² Δ₋) / (h₁ h₂ (h₁ + h₂))
        h1, h2, down, up = h[:-1], h[1:], df[..., :-1], df[..., 1:]
        out = (h1 * h1 * up + h2 * h2 * down) / (h1 * h2 * (h1 + h2))
        p1, p2 = stencil_partials(h1, h2, out, 2 * h1 * up, 2 * h2 * down)
        inner, summed = g[..., 1:-1], tuple(range(len(other)))  # Σ over the other axes, by row
        x_bar = x_bar + spread(np.sum(inner * p1, axis=summed), np.sum(inner * p2, axis=summed), 0, n)
    if edge_order == 1:  # (f₁ - f₀) / h at each end: ∂/∂h = -out / h
        first, last = df[..., :1] / h[:1], df[..., -1:] / h[-1:]
        p_first = np.sum(g[..., :1] * (-first / h[:1]), axis=tuple(range(len(other))))
        p_last = np.sum(g[..., -1:] * (-last / h[-1:]), axis=tuple(range(len(other))))
        return x_bar + zero_padded(np.concatenate([-p_first, p_first]), 0, 0, n - 2) \
            + zero_padded(np.concatenate([-p_last, p_last]), 0, n - 2, 0)
    # second-order ends: rows 0 and n-1 read x₀..x₂ and x_{n-3}..x_{n-1}
    h1, h2, d1, d2 = h[0], h[1], df[..., 0], df[..., 1]
    first = ((2 * h1 + h2) * h2 * d1 - h1 * h1 * d2) / (h1 * h2 * (h1 + h2))
    q1, q2 = stencil_partials(h1, h2, first, 2 * h2 * d1 - 2 * h1 * d2, 2 * (h1 + h2) * d1)
    g0 = g[..., 0]
    x_bar = x_bar + spread(np.sum(g0 * q1)[None], np.sum(g0 * q2)[None], 0, n)
    h1, h2, d1, d2 = h[-2], h[-1], df[..., -2], df[..., -1]
    last = ((2 * h2 + h1) * h1 * d2 - h2 * h2 * d1) / (h1 * h2 * (h1 + h2))
    q1, q2 = stencil_partials(h1, h2, last, 2 * (h1 + h2) * d2, 2 * h1 * d2 - 2 * h2 * d1)
    g1 = g[..., -1]
    return x_bar + spread(np.sum(g1 * q1)[None], np.sum(g1 * q2)[None], n - 3, n)


def stencil_partials(h1, h2, out, n1, n2):
    """∂out/∂h₁ and ∂out/∂h₂ of a stencil ``out = N / (h₁ h₂ (h₁ + h₂))`` with ∂N/∂h₁ = ``n1``, ∂N/∂h₂ = ``n2``."""
    denominator = h1 * h2 * (h1 + h2)
    return (n1 - out * h2 * (2 * h1 + h2)) / denominator, (n2 - out * h1 * (h1 + 2 * h2)) / denominator


def spread(p1, p2, start, n):
    """x̄ of rows reading x_a, x_b, x_c (a = start + row): -P₁ at a, P₁ - P₂ at b, P₂ at c, zeros elsewhere."""
    rows = np.shape(p1)[0]
    before, after = start, n - start - rows - 2
    return zero_padded(-p1, 0, before, after + 2) + zero_padded(p1 - p2, 0, before + 1, after + 1) \
        + zero_padded(p2, 0, before + 2, after)


# --- np.trapezoid: Σ d_i (y_i + y_{i+1}) / 2 ------------------------------------------------------------
def _widths(y, x, dx, axis):
    """The widths d NumPy multiplies the mean heights by: dx, or np.diff(x) along ``axis`` (a 1-d x laid
    along y's axis)."""
    if x is None:
        return dx
    if np.ndim(x) == 1:
        shape = [1] * np.ndim(y)
        shape[axis] = np.size(x) - 1
        return np.diff(x).reshape(shape)
    return np.diff(x, axis=axis)


def _mean_heights(y, axis):
    """(y_i + y_{i+1}) / 2 along ``axis``."""
    axis = axis % np.ndim(y)
    return (y[_along(axis, slice(1, None))] + y[_along(axis, slice(None, -1))]) / 2.0


def _spread(g, factor, axis, terms):
    """``g`` (a sum over ``axis``) spread back over the summed terms (of shape ``terms``), times their
    partial ``factor``."""
    return np.broadcast_to(np.expand_dims(g, axis) * factor, terms)


def _terms(y, d, axis):
    """The shape of the terms ``d (y_i + y_{i+1}) / 2`` np.trapezoid sums over ``axis``."""
    heights = list(np.shape(y))
    heights[axis] = max(heights[axis] - 1, 0)
    return np.broadcast_shapes(np.shape(d), tuple(heights))


def trapezoid_y(ans, y, x=None, dx=1.0, axis=-1):
    """ȳ_i = (h_{i-1} + h_i) / 2 with h = g d (h zero outside)."""
    d, n = _widths(y, x, dx, axis), np.shape(y)[axis]
    terms = _terms(y, d, axis)

    def back(g):
        h = _spread(g, d, axis, terms) / 2.0
        at = axis % h.ndim
        summed = zero_padded(h, at, 1, 0) + zero_padded(h, at, 0, 1)
        return _cast(unbroadcast(summed[_along(at, slice(0, n))], np.shape(y)), y)

    return back


def trapezoid_x(ans, y, x=None, dx=1.0, axis=-1):
    """x̄ = diffᵀ (g m), m the mean heights (summed over the other axes for a 1-d x)."""
    m, d = _mean_heights(y, axis), _widths(y, x, dx, axis)
    terms, d_shape = _terms(y, d, axis), np.shape(d)
    if np.ndim(x) == 1:
        return lambda g: _cast(diff_transpose(unbroadcast(_spread(g, m, axis, terms), d_shape).ravel(), 1, 0,
                                              np.size(x)), x)
    at = axis % np.ndim(x)
    return lambda g: _cast(diff_transpose(unbroadcast(_spread(g, m, axis, terms), d_shape), 1, at, np.shape(x)[at]), x)


def trapezoid_dx(ans, y, x=None, dx=1.0, axis=-1):
    """d̄x = Σ g m, over the terms dx multiplies (0 when x is given: dx is unused)."""
    if x is not None:
        return lambda g: _cast(np.zeros(np.shape(dx)), dx)
    m, terms = _mean_heights(y, axis), _terms(y, dx, axis)
    return lambda g: _cast(unbroadcast(_spread(g, m, axis, terms), np.shape(dx)), dx)


# --- np.interp: f(x) = fp_lo (1 - t) + fp_hi t ------------------------------------------------------------
def _interpolation(x, xp, fp, period):
    """How np.interp evaluates each x: the knots ``lo``, ``hi`` of its interval (indices into xp and fp as
    given), its position t in it (clipped to [0, 1] beyond the knots), the slope of fp there (0 beyond
    the knots), and whether x lies below or above them.  ``period`` wraps and sorts the knots as NumPy does."""
    x, xp = (as_array(a, np.float64) for a in (x, xp))
    fp = as_array(fp, np.complex128 if np.iscomplexobj(fp) else np.float64)
    source = np.arange(len(xp))
    if period is not None:
        period = abs(period)
        x, xp = x % period, xp % period
        order = np.argsort(xp)
        source = np.concatenate((order[-1:], order, order[:1]))
        xp = np.concatenate((xp[order[-1:]] - period, xp[order], xp[order[:1]] + period))
    fp, m = fp[source], len(xp)
    widths = np.diff(xp) if m > 1 else np.zeros(1)  # of the intervals (one empty interval for one knot)
    wide = widths > 0
    widths = np.where(wide, widths, 1.0)
    slopes = np.where(wide, (np.diff(fp) if m > 1 else 0.0) / widths, 0.0)
    lo = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, max(m - 2, 0))
    hi = np.minimum(lo + 1, m - 1)
    t = np.where(wide[lo], np.clip((x - xp[lo]) / widths[lo], 0.0, 1.0), x >= xp[lo])  # a double knot: the later
    below, above = x < xp[0], x > xp[-1]
    slope = np.where(below | above, 0.0, slopes[lo])
    return source[lo], source[hi], t, slope, below, above


def _to_knots(lo, hi, t, h, n):
    """Σ over the points of h (1 - t) into knot lo and h t into knot hi: n knot cotangents (a complex h by
    its real and imaginary parts: np.bincount adds real weights)."""
    if np.iscomplexobj(h):
        return _to_knots(lo, hi, t, np.real(h), n) + 1j * _to_knots(lo, hi, t, np.imag(h), n)
    return np.bincount(lo.ravel(), (h * (1 - t)).ravel(), n) + np.bincount(hi.ravel(), (h * t).ravel(), n)


def interp_vjp(argnum):
    """The maker of np.interp's argument ``argnum`` (x, xp, fp, left, right)."""

    def maker(ans, x, xp, fp, left=None, right=None, period=None):
        lo, hi, t, slope, below, above = _interpolation(x, xp, fp, period)
        arg = (x, xp, fp, left, right)[argnum]
        if argnum == 0:  # x̄ = g slope
            return lambda g: _cast(g * slope, x)
        if argnum == 1:  # x̄p_lo = -g slope (1 - t), x̄p_hi = -g slope t
            return lambda g: _cast(_to_knots(lo, hi, t, -g * slope, len(fp)), xp)
        if argnum == 2:  # f̄p_lo = g (1 - t), f̄p_hi = g t, but where left or right is the value
            given = period is None
            kept = ~((below & (left is not None) & given) | (above & (right is not None) & given))
            return lambda g: _cast(_to_knots(lo, hi, t, g * kept, len(fp)), fp)
        beyond = (below, above)[argnum - 3] & (period is None)  # period: left and right unused
        return lambda g: _cast(np.sum(g * beyond), arg)

    return maker


# --- convolutions ----------------------------------------------------------------------------------------
def convolution_vjp(argnum, correlated):
    """The maker of np.convolve's (np.correlate's, ``correlated``) argument ``argnum`` (a, v).

    ``convolve(a, v, 'full')`` has transposes ``ā = convolve(g, v reversed, 'valid')`` and
    ``v̄ = convolve(g, a reversed, 'valid')``; ``correlate(a, v)`` is ``convolve(a, v reversed)``.  The
    'same' and 'valid' results are a slice of the full one, centred (the larger half of the
    surplus first for correlate of a shorter a, which NumPy computes swapped and reversed).
    """

    def maker(ans, a, v, mode="valid" if correlated else "full"):
        kernel = np.ravel(v)[::-1] if correlated else np.ravel(v)
        full, length = np.size(a) + np.size(kernel) - 1, np.size(ans)
        start = (full - length) // 2
        if correlated and np.size(a) < np.size(v):
            start = full - length - start
        other = (kernel, np.ravel(a))[argnum][::-1]
        x = (a, v)[argnum]
        reverse = correlated and argnum == 1

        def back(g):
            c = np.convolve(np.pad(np.ravel(g), (start, full - length - start)), other, "valid")
            return _cast((c[::-1] if reverse else c).reshape(np.shape(x)), x)

        return back

    return maker


def conjugated_correlation_vjp(argnum):
    """Complex values: ``correlate(a, v) = convolve(a, conj(v) reversed)``, linear in a with the kernel
    conj(v) (ā as for real values with conj(v)), conjugate-linear in v (v̄ = conj of the real rule's)."""
    real = convolution_vjp(argnum, True)

    def maker(ans, a, v, mode="valid"):
        if argnum == 0:
            return real(ans, a, np.conjugate(v), mode)
        back = real(ans, a, v, mode)
        return lambda g: np.conjugate(back(g))

    return maker


# --- ranges -------------------------------------------------------------------------------------------------
def _fractions(num, endpoint):
    """t_k = k / (num - 1) (k / num without the endpoint): sample k is start (1 - t_k) + stop t_k."""
    return np.linspace(0.0, 1.0, num, endpoint)


def _over_samples(weights, h, x):
    """Σ_k weights_k h_k over the leading (sample) axis of ``h``, summed back to the shape of the endpoint ``x``."""
    return unbroadcast(np.tensordot(weights, h, axes=1), np.shape(x))


def linspace_vjp(argnum):
    """start̄ = Σ_k (1 - t_k) g_k, stop̄ = Σ_k t_k g_k; with ``retstep=True`` the step (stop - start) / d
    (d = num - 1, or num without the endpoint) adds start̄ = -ḡ / d, stop̄ = ḡ / d."""

    def maker(j, ans, start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
        x = (start, stop)[argnum]
        if j == 1:
            div = (num - 1 if endpoint else num) if num > 0 else 0
            slope = (-1.0, 1.0)[argnum] / div if div > 0 else np.nan  # NumPy's step is NaN then
            return lambda g: _cast(unbroadcast(g * slope, np.shape(x)), x)
        t = _fractions(num, endpoint)
        weights = (1 - t, t)[argnum]
        return lambda g: _cast(_over_samples(weights, np.moveaxis(g, axis, 0), x), x)

    return maker


def geomspace_vjp(argnum):
    """y_k = start^(1 - t_k) stop^t_k: start̄ = Σ_k g_k y_k (1 - t_k) / start, stop̄ = Σ_k g_k y_k t_k / stop."""

    def maker(ans, start, stop, num=50, endpoint=True, dtype=None, axis=0):
        t = _fractions(num, endpoint)
        weights, x = ((1 - t, start), (t, stop))[argnum]
        samples = np.moveaxis(ans, axis, 0)
        return lambda g: _cast(_over_samples(weights, np.moveaxis(g, axis, 0) * samples, x) / x, x)

    return maker


def logspace_vjp(argnum):
    """y_k = base^u_k, u = linspace(start, stop): start̄ = Σ_k g_k y_k ln(base) (1 - t_k), stop̄ likewise
    with t_k, basē = Σ_k g_k y_k u_k / base."""

    def maker(ans, start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
        samples = np.moveaxis(ans, axis, 0)  # the sample axis first: base and the endpoints broadcast against one
        if argnum == 4:
            exponents = np.linspace(start, stop, num, endpoint)
            return lambda g: _cast(unbroadcast(np.sum(np.moveaxis(g, axis, 0) * samples * exponents, axis=0),
                                               np.shape(base)) / base, base)
        t = _fractions(num, endpoint)
        weights, x = ((1 - t, start), (t, stop))[argnum]
        return lambda g: _cast(_over_samples(weights, np.moveaxis(g, axis, 0) * samples * np.log(base), x), x)

    return maker


# --- polynomials ------------------------------------------------------------------------------------------
def polyval_p(ans, p, x):
    """p̄_k = Σ g x^(N-1-k), over x's elements (summed back to p's trailing shape)."""
    p = as_array(p)
    exponents, each = range(len(p) - 1, -1, -1), p.shape[1:]
    return lambda g: _cast(np.stack([unbroadcast(g * x**e, each) for e in exponents]) if len(p) else p, p)


def polyval_x(ans, p, x):
    """x̄ = g p'(x), p' = np.polyder(p) (its coefficients (N-1-k) p_k for each trailing position)."""
    p = as_array(p)
    powers = np.arange(len(p) - 1, 0, -1).reshape((-1,) + (1,) * (p.ndim - 1))
    derivative = np.polyval(p[:-1] * powers, x)
    return lambda g: _cast(unbroadcast(g * derivative, np.shape(x)), x)


def vander_vjp(ans, x, N=None, increasing=False):
    """x̄_i = Σ_e g_ie e x_i^(e-1) over the exponents e of the columns."""
    n = len(x) if N is None else N
    lower = np.vander(x, max(n - 1, 0), increasing=True)  # x^0 .. x^(n-2)
    exponents = np.arange(1, n)

    def back(g):
        rising = g if increasing else g[:, ::-1]  # column e holds x^e
        return _cast(np.sum(rising[:, 1:] * exponents * lower, axis=1), x)

    return back


def unwrap_vjp(ans, p, discont=None, axis=-1, *, period=2 * math.pi):
    """p̄ = g: the multiples of period added are piecewise constant in p."""
    return lambda g: _cast(g, p)


def _register():
    defvjp(np.diff, diff_vjp(1), None, None, diff_vjp(0), diff_vjp(2))
    defvjp(np.ediff1d, ediff1d_vjp(0), ediff1d_vjp(1), ediff1d_vjp(2))
    defvjp_outputs(np.gradient, gradient_vjp, *map(spacing_vjp, range(MAX_DIMS)))
    for func in (np.diff, np.ediff1d, np.gradient):  # their pullbacks keep no constant argument (only shapes,
        RULES[func].keeps_arguments = False  # and the band read off the spacing when recorded)
    defvjp(np.trapezoid, trapezoid_y, trapezoid_x, trapezoid_dx)
    defvjp(np.interp, *map(interp_vjp, range(5)))
    defvjp(np.convolve, convolution_vjp(0, False), convolution_vjp(1, False))
    defvjp(np.correlate, convolution_vjp(0, True), convolution_vjp(1, True))
    defvjp_complex(np.correlate, conjugated_correlation_vjp(0), conjugated_correlation_vjp(1))
    holds_for_complex(np.interp)  # linear in a complex fp; x and xp are real (NumPy refuses complex ones)
    defvjp_outputs(np.linspace, linspace_vjp(0), linspace_vjp(1))
    defvjp(np.geomspace, geomspace_vjp(0), geomspace_vjp(1))
    defvjp(np.logspace, logspace_vjp(0), logspace_vjp(1), None, None, logspace_vjp(4))
    defvjp(np.polyval, polyval_p, polyval_x)
    defvjp(np.vander, vander_vjp)
    defvjp(np.unwrap, unwrap_vjp)


_register()


def gradient_jvp(k, t, ans, f, *varargs, axis=None, edge_order=1):
    """Output k's tangent: np.gradient is linear in f (its spacing constant), so ṫ's gradient."""
    out = np.gradient(t, *varargs, axis=axis, edge_order=edge_order)
    return out[k] if isinstance(out, (tuple, list)) else out


def polyval_jvp(tangents, ans, p, x):
    """Σ ṗ_k x^(N-1-k) + p'(x) ẋ: linear in the coefficients, p' the derivative's coefficients in x."""
    tp, tx = (*tangents, None)[:2]  # x may come by name: a constant
    terms = [] if tp is None else [np.polyval(tp, x)]
    if tx is not None:
        p = as_array(p)
        powers = np.arange(len(p) - 1, 0, -1).reshape((-1,) + (1,) * (p.ndim - 1))
        terms.append(np.polyval(p[:-1] * powers.astype(p.dtype), x) * tx)  # p' (each column's)
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def unwrap_jvp(tangents, ans, p, discont=None, axis=-1, *, period=2 * math.pi):
    """ṫ itself: the multiples of period added are piecewise constant."""
    return tangents[0]


# Forward mode: differences, np.gradient and linspace are linear; convolutions and the trapezoid rule
# (Σ Δx · mean of y) linear in each factor.
deflinear(np.diff, np.ediff1d, np.linspace)
defmultilinear(np.convolve, np.correlate, np.trapezoid)
defjvp(np.gradient, gradient_jvp)
defjvp(np.polyval, polyval_jvp)
defjvp(np.unwrap, unwrap_jvp)
# Complex values (JAX's convention, rules/complex.py): differences, the trapezoid rule, convolution and polynomials
# are linear or holomorphic with plain transposes (np.correlate conjugates an argument: it does not hold).
holds_for_complex(np.diff, np.ediff1d, np.trapezoid, np.convolve, np.polyval, np.vander)
