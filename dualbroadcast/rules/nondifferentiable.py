"""Functions whose results carry no gradient: they run on plain values and return constants.

Piecewise-constant functions (floor, sign, ...), comparisons and predicates,
indices (argmax, nonzero, ...) and shapes.  Anything else without a rule is an
error, never a silent zero.
"""

import numpy as np

from ..derivatives import ZERO_DERIVATIVE
from ..registry import nondifferentiable

nondifferentiable(*ZERO_DERIVATIVE)
nondifferentiable(
    # comparisons and predicates
    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
    np.isfinite, np.isinf, np.isnan, np.signbit, np.isclose, np.allclose, np.array_equal,
    np.any, np.all, np.iscomplexobj, np.isrealobj,
    # indices and counts
    np.argmax, np.argmin, np.argsort, np.nonzero, np.flatnonzero, np.count_nonzero,
    np.searchsorted, np.argwhere,
    # shapes, dtypes and new arrays of a given shape
    np.shape, np.ndim, np.size, np.result_type,
    np.zeros_like, np.ones_like, np.empty_like,
    # ranks
    np.linalg.matrix_rank,
)
