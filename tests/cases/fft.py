"""Cases for the np.fft rules: every transform over drawn shapes (empty batch axes included), axes,
lengths ``n``/``s`` that cut or pad, and the three norms; a complex argument is built from two real
ones (``x + 1j * y``), and a complex result is seen through its real and imaginary parts."""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, call, uniform

NORMS = [None, "backward", "ortho", "forward"]
HALF_SPECTRUM_IN = {np.fft.irfft, np.fft.hfft, np.fft.irfftn, np.fft.irfft2}  # default n: 2 (m - 1)
REAL_ONLY = {np.fft.rfft, np.fft.ihfft, np.fft.rfftn, np.fft.rfft2}  # NumPy rejects a complex argument
TWO_D = {np.fft.fft2, np.fft.ifft2, np.fft.rfft2, np.fft.irfft2}


def parts(y):
    """A complex result as its real and imaginary parts (real outputs of the argument's precision)."""
    return (np.real(y), np.imag(y)) if np.iscomplexobj(y) else y


def shape_of(draw, ndim, transformed):
    """A shape of ``ndim`` axes: 1 to 4 along the ``transformed`` ones (2 to 4 where a half spectrum's default
    length needs two bins), 0 to 3 along the others."""
    return tuple(draw(st.integers(1, 4)) if i in transformed else draw(st.integers(0, 3)) for i in range(ndim))


def arguments(draw, dtype, func, shape):
    """One real argument, or two (real and imaginary parts) where the transform takes complex values."""
    count = 1 if func in REAL_ONLY else draw(st.sampled_from([1, 2]))
    return [uniform(draw, shape, dtype) for _ in range(count)]


def as_function(transform, count):
    """``parts(transform(x))``, of ``x`` or of ``x + 1j * y``."""
    if count == 1:
        return lambda x: parts(transform(x))
    return lambda x, y: parts(transform(x + 1j * y))


def build_1d(func):
    def build(draw, dtype):
        ndim = draw(st.integers(1, 3))
        axis = draw(st.integers(-ndim, ndim - 1))
        n = draw(st.one_of(st.none(), st.integers(1, 6)))
        shape = list(shape_of(draw, ndim, {axis % ndim}))
        if n is None and func in HALF_SPECTRUM_IN:
            shape[axis] = max(shape[axis], 2)
        kwargs = {"axis": axis, "norm": draw(st.sampled_from(NORMS))} | ({} if n is None else {"n": n})
        args = arguments(draw, dtype, func, tuple(shape))
        return as_function(call(draw, func, X, **kwargs), len(args)), args

    return build


def build_nd(func):
    """axes: the default (every axis; the last two for the 2-d ones), or distinct drawn axes in any order,
    negative ones included; s: None, or lengths that cut or pad (-1: the argument's own)."""

    def build(draw, dtype):
        two_d = func in TWO_D
        ndim = draw(st.integers(2 if two_d else 1, 3))
        kwargs = {"norm": draw(st.sampled_from(NORMS))}
        if draw(st.booleans()):
            axes = (-2, -1) if two_d else tuple(range(ndim))  # the default, written out or not
            if two_d and draw(st.booleans()):
                kwargs["axes"] = axes
        else:
            k = 2 if two_d else draw(st.integers(1, ndim))
            axes = kwargs["axes"] = tuple(a - ndim * draw(st.booleans())
                                          for a in draw(st.permutations(range(ndim)))[:k])
        lengths = None
        if (two_d or "axes" in kwargs) and draw(st.booleans()):  # s without axes: deprecated
            lengths = kwargs["s"] = draw(st.lists(st.sampled_from([-1, 1, 2, 3, 5]), min_size=len(axes),
                                                  max_size=len(axes)))
        shape = list(shape_of(draw, ndim, {a % ndim for a in axes}))
        if func in HALF_SPECTRUM_IN and (lengths is None or lengths[-1] == -1):
            shape[axes[-1]] = max(shape[axes[-1]], 2)
        args = arguments(draw, dtype, func, tuple(shape))
        return as_function(call(draw, func, X, **kwargs), len(args)), args

    return build


def build_shift(func):
    def build(draw, dtype):
        ndim = draw(st.integers(1, 3))
        axes = draw(st.sampled_from([None, -1, 0, tuple(range(ndim))[::-1]]))
        shape = shape_of(draw, ndim, set(range(ndim)))
        args = [uniform(draw, shape, dtype) for _ in range(draw(st.sampled_from([1, 2])))]
        shift = call(draw, func, X) if axes is None else call(draw, func, X, axes)
        return as_function(shift, len(args)), args

    return build


# --- real losses through transforms, as users write them ------------------------------------------------
def build_power_spectrum(draw, dtype):
    """Σ |rfft(x)|²: Parseval with the half spectrum's interior bins counted once."""
    x = uniform(draw, (draw(st.integers(1, 3)), draw(st.integers(1, 9))), dtype)
    norm = draw(st.sampled_from(NORMS))
    return (lambda x: np.sum(np.abs(np.fft.rfft(x, norm=norm)) ** 2)), [x]


def build_filter(draw, dtype):
    """Re ifft(fft(x) · h): a circular convolution, differentiated in the signal and the filter's parts."""
    n = draw(st.integers(1, 8))
    x, hr, hi = (uniform(draw, (n,), dtype) for _ in range(3))
    return (lambda x, hr, hi: np.real(np.fft.ifft(np.fft.fft(x) * (hr + 1j * hi)))), [x, hr, hi]


def build_round_trip(draw, dtype):
    """irfft(rfft(x) · w, n) with a length n that cuts or pads between the two."""
    m = draw(st.integers(2, 8))
    n = draw(st.integers(1, 10))
    x, w = uniform(draw, (2, m), dtype), uniform(draw, (n // 2 + 1,), dtype)
    return (lambda x, w: np.fft.irfft(np.fft.rfft(x, n) * w, m)), [x, w]


CASES = [
    *[Case(f, build_1d(f)) for f in (np.fft.fft, np.fft.ifft, np.fft.rfft, np.fft.irfft, np.fft.hfft, np.fft.ihfft)],
    *[Case(f, build_nd(f)) for f in (np.fft.fftn, np.fft.ifftn, np.fft.rfftn, np.fft.irfftn,
                                     np.fft.fft2, np.fft.ifft2, np.fft.rfft2, np.fft.irfft2)],
    *[Case(f, build_shift(f)) for f in (np.fft.fftshift, np.fft.ifftshift)],
    Case(np.fft.rfft, build_power_spectrum, "power spectrum"),
    Case(np.fft.fft, build_filter, "fft filter"),
    Case(np.fft.irfft, build_round_trip, "rfft-irfft round trip"),
]
