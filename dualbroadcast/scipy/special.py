"""Mirrors of ``scipy.special.logsumexp``, ``softmax`` and ``log_softmax`` (see the package docstring).

With ``s = Σ b·exp(a)`` over ``axis`` and ``y = log|s|``:

* logsumexp: ``ā = ȳ · sign(s) · b · exp(a - y)``, ``b̄ = ȳ · sign(s) · exp(a - y)``
  (the softmax weights; ``sign(s)`` is 1 unless ``b`` has negative elements);
* softmax ``p``: ``x̄ = p · (ȳ - Σ ȳ·p)``;
* log_softmax: ``x̄ = ȳ - p · Σ ȳ`` with ``p = exp(y)``.

``return_sign=True`` returns the sign as a constant (it is piecewise constant).  The other
``scipy.special`` functions are ufuncs: use them from ``scipy.special`` directly.
"""

import numpy as np
import scipy.special

from ..registry import defvjp, nondifferentiable
from ..rules.reductions import expand
from ..tape import primitive
from ._common import cotangent


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp``, differentiable in ``a`` and ``b``."""
    out = logsumexp_of(a, axis, b, keepdims, return_sign)
    return (out, logsumexp_sign(a, axis, b, keepdims)) if return_sign else out


def softmax(x, axis=None):
    """``scipy.special.softmax``, differentiable in ``x``."""
    return softmax_of(x, axis)


def log_softmax(x, axis=None):
    """``scipy.special.log_softmax``, differentiable in ``x``."""
    return log_softmax_of(x, axis)


@primitive
def logsumexp_of(a, axis, b, keepdims, return_sign):
    """``log |Σ b·exp(a)|`` over ``axis``: SciPy's value (without ``return_sign``, nan where the sum is
    negative, as SciPy gives)."""
    if return_sign:
        return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)[0]
    return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims)


@primitive
def logsumexp_sign(a, axis, b, keepdims):
    """The sign of ``Σ b·exp(a)`` over ``axis`` (SciPy's second result with ``return_sign=True``)."""
    if type(axis) is list:  # a tuple of axes, which the tape passes on to a function without a rule as a list
        axis = tuple(axis)
    return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)[1]


@primitive
def softmax_of(x, axis):
    return scipy.special.softmax(x, axis=axis)


@primitive
def log_softmax_of(x, axis):
    return scipy.special.log_softmax(x, axis=axis)


def softmax_weights(ans, a, axis, b, keepdims, return_sign):
    """``sign(s) · exp(a - y)`` over the shape of ``a`` broadcast with ``b``, and that shape; ``sign(s)``
    is 1 where ``b`` is None, and ``y`` is nan where ``s < 0`` without ``return_sign`` (SciPy's value)."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b)) if b is not None else np.shape(a)
    weights = np.exp(a - expand_cotangent(ans, shape, axis, keepdims))
    if return_sign and b is not None:
        sign = scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)[1]
        weights = weights * expand_cotangent(sign, shape, axis, keepdims)
    return weights, shape


def logsumexp_a(ans, a, axis, b, keepdims, return_sign):
    """ā = ȳ · sign(s) · b · exp(a - y)."""
    weights, shape = softmax_weights(ans, a, axis, b, keepdims, return_sign)
    if b is not None:
        weights = weights * b
    return lambda g: cotangent(a, expand_cotangent(g, shape, axis, keepdims) * weights)


def logsumexp_b(ans, a, axis, b, keepdims, return_sign):
    """b̄ = ȳ · sign(s) · exp(a - y)."""
    weights, shape = softmax_weights(ans, a, axis, b, keepdims, return_sign)
    return lambda g: cotangent(b, expand_cotangent(g, shape, axis, keepdims) * weights)


def expand_cotangent(g, shape, axis, keepdims):
    """`expand` for SciPy's reductions, which treat a 0-d input as 1-d (``axis=0`` or ``-1`` of a scalar)."""
    if shape == ():
        return g
    return expand(g, shape, axis, keepdims)


def softmax_x(ans, x, axis):
    """x̄ = p · (ȳ - Σ ȳ·p), p the softmax."""
    return lambda g: cotangent(x, ans * (g - np.sum(g * ans, axis=axis, keepdims=True)))


def log_softmax_x(ans, x, axis):
    """x̄ = ȳ - p · Σ ȳ, p = exp(y)."""
    return lambda g: cotangent(x, g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True))


defvjp(logsumexp_of, logsumexp_a, None, logsumexp_b, None, None)
defvjp(softmax_of, softmax_x, None)
defvjp(log_softmax_of, log_softmax_x, None)
nondifferentiable(logsumexp_sign, reason="piecewise constant: derivative 0 wherever it exists")

MIRRORS = {scipy.special.logsumexp: logsumexp, scipy.special.softmax: softmax,
           scipy.special.log_softmax: log_softmax}
