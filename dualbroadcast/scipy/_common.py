"""What the mirrors share: the cotangent of an argument from its partial or from a function of ``g``."""

import numpy as np

from ..pullbacks import unbroadcast


def cotangent(x, gx):
    """``gx`` summed back to the shape of the argument ``x`` (where broadcasting stretched it), in its dtype
    (a float32 argument of a function that computes in float64 gets a float32 cotangent)."""
    g = unbroadcast(gx, np.shape(x))
    dtype = np.result_type(x)
    if getattr(g, "dtype", None) == dtype:
        return g
    return g.astype(dtype) if hasattr(g, "astype") else np.asarray(g, dtype)  # astype: traceable (forward.py)


def times(d, x):
    """The pullback ``g -> g · d`` of an elementwise function whose partial in ``x`` is ``d``."""
    return lambda g: cotangent(x, g * d)
