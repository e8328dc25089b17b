"""Complex numbers: JAX's and autograd's convention, and the rules of the functions that are not holomorphic.

The convention: for a real-valued ``f`` of ``z = x + iy`` the gradient is ``∂f/∂x - i ∂f/∂y``, and the
pullback of a holomorphic ``w = h(z)`` is ``z̄ = w̄ · h'(z)``, with no conjugation.  So every rule written
as ``g`` times a derivative, with plain transposes (``G Bᵀ``, einsum, sums, reshapes, indexing), holds
for complex values as it is: each family's module declares them beside their rules (`holds_for_complex`), an
elementwise function in its row of the derivative table (`derivatives.Facts.holomorphic`).  A real argument of a
complex result gets the real part of its cotangent (`pullbacks.RealPart`, applied by the tape).

A function that is not holomorphic needs a rule of its own (`defvjp_complex`, in `registry.COMPLEX_RULES`):

* ``real(z)``: z̄ = g;  ``imag(z)``: z̄ = -i g;  ``conj(z)``: z̄ = conj(g);
* ``abs(z)``: z̄ = g · conj(z) / |z| (0 at z = 0, as sign(0) is for reals);
* ``angle(z)``: z̄ = -i g / z (* 180/π with ``deg=True``; 0 at z = 0, where JAX gives NaN);
* ``vdot(a, b) = Σ conj(a) b``: ā = conj(g b), b̄ = g conj(a);
* ``var``, ``std``, ``norm`` (every ``ord``): real functions of ``|z - mean|`` or of ``|z|`` (and the
  singular values): their real formulas evaluated at complex ``z`` give the conjugate of JAX's
  gradient, so their complex rule is that conjugated (`conjugated`).

The maximum and minimum of an array (``max``, ``min``, ``ptp``, ``nanmax``, ...) select elements by NumPy's
order of complex numbers (real part, then imaginary part; JAX's too): the derivative is the selected element's,
shared at a tie, as for real values, so their real rules hold.  A function without a rule (the elementwise
orders ``maximum``, ``sort``, ``clip``; ``sign``; a function NumPy defines for reals only) is an error on complex
values, never a wrong gradient.  Prepared gradients replay complex computations with these same rules
(`prepared.Recorder`).
"""

import functools
import math

import numpy as np

from ..pullbacks import apply
from ..registry import RULES, deflinear, defvjp, defvjp_complex, holds_for_complex
from . import elementwise, linalg, reductions, shape, signal  # noqa: F401  (the rules read below)


def is_complex(x):
    return np.iscomplexobj(x)


# --- real, imag, conj, angle, real_if_close: their rules for real and complex arguments alike ---------
def real_vjp(ans, val):
    """real(z): z̄ = g (as a complex number); real(x) = x: x̄ = g."""
    return (lambda g: g + 0j) if is_complex(val) else (lambda g: g)


def imag_vjp(ans, val):
    """imag(z) = y: z̄ = ∂/∂x - i ∂/∂y = -i g; imag(x) = 0: x̄ = 0."""
    return (lambda g: -1j * g) if is_complex(val) else (lambda g: 0 * g)


def conjugate_vjp(ans, x, /, *, casting="same_kind", order="K", subok=True):
    """conj(z): z̄ = conj(g); conj(x) = x: x̄ = g.  (The ufunc keywords the tape lets through change nothing.)"""
    return np.conjugate if is_complex(x) else (lambda g: g)


def angle_vjp(ans, z, deg=False):
    """angle(z) = atan2(y, x): z̄ = -i g / z = -i g conj(z) / |z|² (* 180/π for degrees; 0 at z = 0);
    the angle of a real x is 0 or π, piecewise constant: x̄ = 0."""
    if not is_complex(z):
        return lambda g: 0 * g
    scale = 180 / math.pi if deg else 1.0
    squared = np.real(z * np.conjugate(z))
    partial = -1j * scale * np.conjugate(z) / np.where(squared == 0, 1, squared)
    return lambda g: g * partial


def real_if_close_vjp(ans, a, tol=100):
    """real_if_close(z): real(z) when it dropped the imaginary parts (z̄ = g), else z itself (z̄ = g)."""
    return real_vjp(ans, a) if is_complex(a) and not is_complex(ans) else (lambda g: g)


# --- vdot, which conjugates its first argument ------------------------------------------------
def vdot_a(ans, a, b):
    """c = Σ conj(a) b: ā = conj(g b)."""
    b = np.reshape(b, np.shape(a))
    return lambda g: np.conjugate(g * b)


def vdot_b(ans, a, b):
    """c = Σ conj(a) b: b̄ = g conj(a)."""
    a = np.conjugate(np.reshape(a, np.shape(b)))
    return lambda g: g * a


# --- real functions of |z|: their real rule, conjugated -----------------------------------------
def conjugated(maker):
    """The complex rule of a real-valued function of ``|z|`` (or ``|z - mean|``) whose real rule ``maker``,
    evaluated at complex ``z``, gives ``g · ∂f/∂z`` (``z / |z|`` for |x|'s sign): JAX's ``∂f/∂x - i ∂f/∂y``
    is its conjugate (for a real ``g``)."""
    @functools.wraps(maker)
    def complex_maker(ans, *args, **kwargs):
        back = maker(ans, *args, **kwargs)
        return lambda g: np.conjugate(apply(back, g))

    return complex_maker


defvjp(np.real, real_vjp)
defvjp(np.imag, imag_vjp)
defvjp(np.conjugate, conjugate_vjp)
defvjp(np.angle, angle_vjp)
defvjp(np.real_if_close, real_if_close_vjp)
holds_for_complex(np.real, np.imag, np.conjugate, np.angle, np.real_if_close)

def absolute_vjp(ans, x, /):
    """|z|: z̄ = g · conj(z) / |z|, 0 at z = 0 (as sign(0) is for reals).  Written out, not as the real rule's
    np.sign(z) conjugated: z / |z| is no constant, and a second derivative must see it."""
    nonzero = ans != 0
    unit = np.where(nonzero, np.conjugate(x) / np.where(nonzero, ans, 1), 0)
    return lambda g: g * unit


defvjp_complex(np.vdot, vdot_a, vdot_b)
defvjp_complex(np.absolute, absolute_vjp)
for _func in (np.var, np.std, np.linalg.norm):
    defvjp_complex(_func, *map(conjugated, RULES[_func].makers))

# Forward mode: real, imag and conj are linear (over the reals): their tangents are real(t), imag(t), conj(t).
deflinear(np.real, np.imag, np.conjugate)
