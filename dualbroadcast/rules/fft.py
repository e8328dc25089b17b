"""Reverse rules of np.fft: every transform, fftshift and ifftshift.

A transform is linear, so its pullback is its transpose (JAX's convention: no
conjugation), the pairing of a cotangent ``ḡ`` with a tangent ``ẏ`` being
``Re Σ ḡ ẏ``.  Where ``n`` (or ``s``) padded the argument with zeros the
transpose cuts the cotangent back to the argument's length; where it cut the
argument, the cotangent is padded with zeros.

- The DFT matrix is symmetric, so fft and ifft are their own transposes, their
  norm factor included: x̄ = fft(ḡ), x̄ = ifft(ḡ), with the same ``norm``.
- The half-spectrum transforms pair up.  rfft keeps bins 0..n//2 of fft of a
  real x, whose transpose is ``Re fft(ḡ, n)``: a Hermitian spectrum in which
  each interior bin stands for itself and its mirror image, so
  ``x̄ = hfft(ḡ / c, n)`` with ``c`` each bin's multiplicity in the full spectrum
  (1 at bin 0 and at the Nyquist bin n/2, 2 elsewhere).  Conversely irfft's
  transpose is ``c · ihfft(ḡ)`` (every interior bin's real and imaginary parts
  appear twice in the result, bin 0's and Nyquist's imaginary parts not at all),
  hfft's is ``c · rfft(ḡ)``, and ihfft's is ``irfft(ḡ / c, n)``.
- A real argument of a transform with a complex result gets the real part of
  the transpose (its imaginary part pairs with no tangent).
- An n-d transform is NumPy's loop of 1-d transforms along its axes (rfftn: rfft
  along the last axis, then fft along the others); its pullback applies their
  transposes in the reverse order.  Repeated axes are repeated steps.

fftshift and ifftshift permute elements, each undoing the other: the pullback
of one is the other.  fftfreq and rfftfreq need no rule: NumPy computes them
with arithmetic on ``d``, which the tape records when ``d`` is tracked.
"""

import numpy as np

from ..pullbacks import zero_padded
from ..registry import deflinear, defvjp, holds_for_complex

fft = np.fft


# --- the transposes of the 1-d transforms -------------------------------------------
def multiplicity(n, axis, ndim, dtype):
    """How often each bin 0..n//2 of a real signal's spectrum of length n appears in the full spectrum:
    1 at bin 0 and at the Nyquist bin n/2 (n even), 2 elsewhere; shaped to scale ``axis``."""
    c = np.full(n // 2 + 1, 2.0, dtype)
    c[0] = 1.0
    if n % 2 == 0:
        c[-1] = 1.0
    return c.reshape((-1,) + (1,) * (ndim - 1 - axis))


def halved(g, n, axis):
    """``g / c``: a half spectrum's interior bins halved (``c``: `multiplicity`)."""
    return g / multiplicity(n, axis, g.ndim, g.real.dtype)


def doubled(g, n, axis):
    """``c · g``: a half spectrum's interior bins doubled (``c``: `multiplicity`)."""
    return g * multiplicity(n, axis, g.ndim, g.real.dtype)


# The transpose of each 1-d transform, ``(g, n, axis, norm) -> cotangent of its input after n resized it``.
def fft_transpose(g, n, axis, norm):
    """x̄ = fft(ḡ): the DFT matrix is symmetric."""
    return fft.fft(g, axis=axis, norm=norm)


def ifft_transpose(g, n, axis, norm):
    """x̄ = ifft(ḡ): the inverse DFT matrix is symmetric."""
    return fft.ifft(g, axis=axis, norm=norm)


def rfft_transpose(g, n, axis, norm):
    """x̄ = Re fft(ḡ, n) = hfft(ḡ / c, n): the half spectrum read as a Hermitian one."""
    return fft.hfft(halved(g, n, axis), n, axis, norm)


def ihfft_transpose(g, n, axis, norm):
    """x̄ = Re ifft(ḡ, n) = irfft(ḡ / c, n)."""
    return fft.irfft(halved(g, n, axis), n, axis, norm)


def irfft_transpose(g, n, axis, norm):
    """z̄ = c · ihfft(ḡ) = c · ifft(ḡ)[:n//2 + 1] (ḡ real)."""
    return doubled(fft.ihfft(g, axis=axis, norm=norm), n, axis)


def hfft_transpose(g, n, axis, norm):
    """z̄ = c · rfft(ḡ) (hfft(z) = irfft(conj z) with the norm's direction swapped)."""
    return doubled(fft.rfft(g, axis=axis, norm=norm), n, axis)


TRANSPOSES = {
    fft.fft: fft_transpose, fft.ifft: ifft_transpose, fft.rfft: rfft_transpose,
    fft.ihfft: ihfft_transpose, fft.irfft: irfft_transpose, fft.hfft: hfft_transpose,
}
HALF_SPECTRUM_OUT = {fft.rfft, fft.ihfft}  # length n in, n//2 + 1 out
HALF_SPECTRUM_IN = {fft.irfft, fft.hfft}  # n//2 + 1 in (default n: 2 (m - 1)), n out


def resized(g, length, axis):
    """``g`` cut to ``length`` along ``axis``, or padded with zeros to it (the transpose of either)."""
    have = g.shape[axis]
    if have >= length:
        return g[(slice(None),) * axis + (slice(0, length),)]
    return zero_padded(g, axis, 0, length - have)


def steps_of(shape, transforms):
    """``(func, n_in, n, axis)`` for each 1-d transform ``(func, n, axis)`` in the order NumPy applies them,
    ``n_in`` being the length along ``axis`` before ``n`` resized it (``n`` None: the 1-d default)."""
    shape, steps = list(shape), []
    for func, n, axis in transforms:
        axis = axis % len(shape)
        n_in = shape[axis]
        if n is None:
            n = 2 * (n_in - 1) if func in HALF_SPECTRUM_IN else n_in
        steps.append((func, n_in, n, axis))
        shape[axis] = n // 2 + 1 if func in HALF_SPECTRUM_OUT else n
    return steps


def transposed(x, transforms, norm):
    """The pullback of ``transforms`` (NumPy's 1-d steps) applied to x: their transposes in reverse
    order, each cotangent cut or padded back to its step's input; real for a real x."""
    steps, dtype = steps_of(np.shape(x), transforms), np.result_type(x)
    real = dtype.kind != "c"

    def back(g):
        for func, n_in, n, axis in reversed(steps):
            g = resized(TRANSPOSES[func](g, n, axis, norm), n_in, axis)
        return (g.real if real else g).astype(dtype, copy=False)

    return back


# --- the makers: the 1-d transforms NumPy applies for each function ----------------
def one_dimensional(func):
    """vjp maker of the 1-d transform ``func``."""

    def vjp(ans, a, n=None, axis=-1, norm=None, out=None):
        return transposed(a, [(func, n, axis)], norm)

    return vjp


def nd_lengths(shape, s, axes, inverse_real=False):
    """``(s, axes)`` as NumPy's n-d transforms resolve them: every axis by default (or the last
    ``len(s)``), ``s`` the lengths along them (-1: the argument's), irfftn's last 2 (m - 1)."""
    if axes is None:
        axes = range(-len(shape if s is None else s), 0)
    axes = list(axes)
    if s is None:
        s = [shape[a] for a in axes]
        if inverse_real:
            s[-1] = 2 * (shape[axes[-1]] - 1)
    return [shape[a] if n == -1 else n for n, a in zip(s, axes)], axes


def along_each_axis(func):
    """The 1-d transforms of fftn/ifftn (``func``: fft or ifft): ``func`` along each axis, the last first."""

    def transforms(shape, s, axes):
        s, axes = nd_lengths(shape, s, axes)
        return [(func, n, axis) for n, axis in zip(s[::-1], axes[::-1])]

    return transforms


def rfftn_transforms(shape, s, axes):
    """rfftn: rfft along the last axis, then fft along the others, from last to first."""
    s, axes = nd_lengths(shape, s, axes)
    return [(fft.rfft, s[-1], axes[-1])] + [(fft.fft, n, axis) for n, axis in zip(s[-2::-1], axes[-2::-1])]


def irfftn_transforms(shape, s, axes):
    """irfftn: ifft along every axis but the last, first to last, then irfft along the last."""
    s, axes = nd_lengths(shape, s, axes, inverse_real=True)
    return [(fft.ifft, n, axis) for n, axis in zip(s[:-1], axes[:-1])] + [(fft.irfft, s[-1], axes[-1])]


def n_dimensional(transforms):
    """vjp maker of fftn, ifftn, rfftn or irfftn, whose 1-d transforms are ``transforms(shape, s, axes)``."""

    def vjp(ans, a, s=None, axes=None, norm=None, out=None):
        return transposed(a, transforms(np.shape(a), s, axes), norm)

    return vjp


def two_dimensional(transforms):
    """vjp maker of fft2, ifft2, rfft2 or irfft2: the n-d transform over the last two axes by default."""

    def vjp(ans, a, s=None, axes=(-2, -1), norm=None, out=None):
        return transposed(a, transforms(np.shape(a), s, axes), norm)

    return vjp


# --- shifts ------------------------------------------------------------------------
def fftshift_vjp(ans, x, axes=None):
    """x̄ = ifftshift(ḡ): the inverse permutation."""
    return lambda g: fft.ifftshift(g, axes)


def ifftshift_vjp(ans, x, axes=None):
    """x̄ = fftshift(ḡ): the inverse permutation."""
    return lambda g: fft.fftshift(g, axes)


for _func in TRANSPOSES:
    defvjp(_func, one_dimensional(_func))
for _nd, _2d, _transforms in [
    (fft.fftn, fft.fft2, along_each_axis(fft.fft)),
    (fft.ifftn, fft.ifft2, along_each_axis(fft.ifft)),
    (fft.rfftn, fft.rfft2, rfftn_transforms),
    (fft.irfftn, fft.irfft2, irfftn_transforms),
]:
    defvjp(_nd, n_dimensional(_transforms))
    defvjp(_2d, two_dimensional(_transforms))
defvjp(fft.fftshift, fftshift_vjp)
defvjp(fft.ifftshift, ifftshift_vjp)
# Linear maps written as their plain transposes: the rules hold for complex values as they are.
holds_for_complex(*TRANSPOSES, fft.fftn, fft.fft2, fft.ifftn, fft.ifft2, fft.rfftn, fft.rfft2, fft.irfftn,
                  fft.irfft2, fft.fftshift, fft.ifftshift)

# Forward mode: every transform and shift is linear.
deflinear(*TRANSPOSES, fft.fftn, fft.fft2, fft.ifftn, fft.ifft2, fft.rfftn, fft.rfft2, fft.irfftn, fft.irfft2,
          fft.fftshift, fft.ifftshift)
