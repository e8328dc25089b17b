"""Test inputs for every rule in the rule tables, one module per family.

A `Case` names the registered function it exercises and builds, from
hypothesis's ``draw`` and a dtype, a function of float arrays and the arrays to
differentiate it at.  ``tests/test_rules.py`` sweeps every case against finite
differences in float64 and float32, and fails if a registered rule has no case.
"""

import itertools
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes


@dataclass
class Case:
    func: object  # the key of the rule table this case exercises
    build: object  # build(draw, dtype) -> (fn, args): fn(*args) is the computation to check
    name: str = ""
    tolerance: dict = field(default_factory=dict)  # rtol/atol overrides for check_gradient

    def __str__(self):
        return self.name or getattr(self.func, "__name__", repr(self.func))


_STREAMS = itertools.count()


def reset_streams():
    """Start each example's arrays from stream 0, so a replayed example gives the same arrays."""
    global _STREAMS
    _STREAMS = itertools.count()


def uniform(draw, shape, dtype, low=-2.0, high=2.0):
    """A random array of ``shape`` in (low, high): smooth values, no ties, no kinks hit."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng([seed, next(_STREAMS)])  # equal seeds still give distinct arrays
    value = rng.uniform(low, high, size=shape).astype(dtype)
    return value if shape else dtype(value)


def broadcast_shapes(draw, n, max_dims=3, max_side=4):
    """``n`` mutually broadcastable shapes, 0-d and size-1 axes included."""
    return draw(mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=max_dims, max_side=max_side)).input_shapes


def array_shape(draw, min_dims=1, max_dims=3, min_side=1, max_side=4):
    """One array shape."""
    return draw(array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side))
