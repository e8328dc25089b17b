"""Mirrors of ``scipy.signal.convolve`` and ``correlate`` (see the package docstring), N-d, every
``mode`` and ``method``.

Both are linear in each input.  With ``G`` the cotangent placed where its values sit in the full
output (zeros around it: ``'same'`` and ``'valid'`` keep the centre of the full result, as SciPy's
``_centered`` does), and ``flip`` reversing every axis:

* convolve: ``in1̄ = correlate(G, in2, 'valid')``, ``in2̄ = correlate(G, in1, 'valid')``;
* correlate, which is ``convolve(in1, flip(in2))``: ``in1̄ = convolve(G, in2, 'valid')``,
  ``in2̄ = flip(correlate(G, in1, 'valid'))``.

The pullbacks use the same ``method`` as the call (``'auto'`` lets SciPy choose again).
"""

# The mirrors (the API reference documents these); the rest of the module is their rules.
__all__ = ["convolve", "correlate"]

import numpy as np
import scipy.signal

from ..pullbacks import as_array
from ..registry import defmultilinear, defvjp
from ..tracked import primitive
from ._common import cotangent


def convolve(in1, in2, mode="full", method="auto"):
    """``scipy.signal.convolve``, differentiable in ``in1`` and ``in2``."""
    return convolve_of(in1, in2, mode, method)


def correlate(in1, in2, mode="full", method="auto"):
    """``scipy.signal.correlate``, differentiable in ``in1`` and ``in2``."""
    return correlate_of(in1, in2, mode, method)


@primitive
def convolve_of(in1, in2, mode, method):
    return scipy.signal.convolve(in1, in2, mode=mode, method=method)


@primitive
def correlate_of(in1, in2, mode, method):
    return scipy.signal.correlate(in1, in2, mode=mode, method=method)


# The pullbacks call the mirrors' primitives, not scipy's functions: on a cotangent tracked by an outer
# gradient (a second derivative) they are recorded.
def in_full(g, in1, in2):
    """The cotangent ``g`` of a convolution of ``in1`` and ``in2`` placed in the full output's shape."""
    full = tuple(n1 + n2 - 1 for n1, n2 in zip(np.shape(in1), np.shape(in2)))
    g = as_array(g)
    if g.shape == full:
        return g
    return np.pad(g, [((f - n) // 2, f - n - (f - n) // 2) for f, n in zip(full, g.shape)])


def convolve_in1(ans, in1, in2, mode, method):
    """in1̄ = correlate(G, in2, 'valid')."""
    return lambda g: cotangent(in1, correlate_of(in_full(g, in1, in2), in2, "valid", method))


def convolve_in2(ans, in1, in2, mode, method):
    """in2̄ = correlate(G, in1, 'valid')."""
    return lambda g: cotangent(in2, correlate_of(in_full(g, in1, in2), in1, "valid", method))


def correlate_in1(ans, in1, in2, mode, method):
    """in1̄ = convolve(G, in2, 'valid')."""
    return lambda g: cotangent(in1, convolve_of(in_full(g, in1, in2), in2, "valid", method))


def correlate_in2(ans, in1, in2, mode, method):
    """in2̄ = flip(correlate(G, in1, 'valid'))."""
    return lambda g: cotangent(in2, np.flip(correlate_of(in_full(g, in1, in2), in1, "valid", method)))


defvjp(convolve_of, convolve_in1, convolve_in2, None, None)
defvjp(correlate_of, correlate_in1, correlate_in2, None, None)

MIRRORS = {scipy.signal.convolve: convolve, scipy.signal.correlate: correlate}
defmultilinear(convolve_of, correlate_of)  # forward mode: linear in each signal
