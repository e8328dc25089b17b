"""Functions whose results carry no gradient: they run on plain values and return constants.

Each group states why (the function table, docs/functions.md, lists them by it).  Anything else without a
rule is an error, never a silent zero.
"""

import numpy as np

from ..derivatives import ZERO_DERIVATIVE
from ..registry import nondifferentiable

nondifferentiable(*ZERO_DERIVATIVE, reason="piecewise constant: derivative 0 wherever it exists")
nondifferentiable(
    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
    np.isfinite, np.isinf, np.isnan, np.signbit, np.isclose, np.allclose, np.array_equal,
    np.any, np.all, np.iscomplexobj, np.isrealobj,
    reason="comparisons and predicates: truth values",
)
nondifferentiable(
    np.argmax, np.argmin, np.argsort, np.nonzero, np.flatnonzero, np.count_nonzero,
    np.searchsorted, np.argwhere,
    reason="indices and counts: integers",
)
nondifferentiable(
    np.shape, np.ndim, np.size, np.result_type,
    np.zeros_like, np.ones_like, np.empty_like,
    reason="shapes, dtypes and new arrays of a given shape: they read no value",
)
nondifferentiable(np.linalg.matrix_rank, reason="a rank: an integer")
nondifferentiable(
    np.nanargmax, np.nanargmin, np.argpartition, np.lexsort, np.digitize,
    np.tril_indices_from, np.triu_indices_from, np.diag_indices_from,
    reason="indices and counts: integers",
)
nondifferentiable(
    np.isneginf, np.isposinf, np.iscomplex, np.isreal, np.isin, np.array_equiv,
    reason="comparisons and predicates: truth values",
)
nondifferentiable(
    np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.bitwise_count, np.invert, np.left_shift, np.right_shift,
    np.gcd, np.lcm, np.packbits, np.unpackbits,
    reason="integer and bit functions: integers (NumPy refuses floats)",
)
nondifferentiable(np.ix_, np.ravel_multi_index, np.unravel_index, reason="indices and counts: integers")
nondifferentiable(np.einsum_path, reason="an evaluation order for np.einsum: no values")
nondifferentiable(np.array_repr, np.array_str, np.save, np.savez, reason="printing and saving: text and files")
