"""What the mirrors share: the cotangent of an argument from its partial or from a function of ``g``."""

import numpy as np

from ..pullbacks import as_array, unbroadcast


def cotangent(x, gx):
    """``gx`` summed back to the shape of the argument ``x`` (where broadcasting stretched it), in its dtype
    (a float32 argument of a function that computes in float64 gets a float32 cotangent)."""
    return as_array(unbroadcast(gx, np.shape(x)), np.result_type(x))


def times(d, x):
    """The pullback ``g -> g · d`` of an elementwise function whose partial in ``x`` is ``d``."""
    return lambda g: cotangent(x, g * d)
