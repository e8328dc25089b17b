"""Test inputs for every rule in the rule tables, one module per family.

A `Case` names the registered function it exercises and builds, from
hypothesis's ``draw`` and a dtype, a function of float arrays and the arrays to
differentiate it at.  ``tests/test_rules.py`` sweeps every case against finite
differences in float64 and float32, and fails if a registered rule has no case.
A case calls its function through `call`, which draws the calling form too.
"""

import inspect
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


class Arg:
    """Where the ``index``-th differentiated array goes in a `call`."""

    def __init__(self, index):
        self.index = index


X, Y, Z = Arg(0), Arg(1), Arg(2)
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def call(draw, func, *args, **kwargs):
    """``func(*args, **kwargs)`` as a function of the differentiated arrays (`X`, `Y`, `Z` in ``args``),
    in a calling form NumPy accepts drawn by hypothesis.

    Each positional-or-keyword argument is passed positionally or by name, and parameters left out
    may be passed their defaults explicitly (positionally or by name).  An argument holding a
    differentiated array stays positional, as the library asks, and so does every one before it.
    """
    signature = inspect.signature(func)
    given = signature.bind(*args, **kwargs).arguments
    chosen = {}
    for p in signature.parameters.values():
        if p.name in given:
            chosen[p.name] = given[p.name]
        elif p.kind in NAMED and _has_default(p) and draw(st.booleans()):
            chosen[p.name] = p.default
    lowest, highest, var_args, var_kwargs = 0, 0, (), {}
    positional = [p for p in signature.parameters.values() if p.kind in POSITIONAL]
    for i, p in enumerate(positional):
        if p.name not in chosen:
            break
        highest = i + 1
        if p.kind is inspect.Parameter.POSITIONAL_ONLY or _holds_arg(chosen[p.name]):
            lowest = i + 1
    for p in signature.parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL and chosen.get(p.name):
            var_args, lowest = chosen.pop(p.name), len(positional)
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kwargs = chosen.pop(p.name, {})
    cut = draw(st.integers(lowest, highest))
    front = [chosen.pop(p.name) for p in positional[:cut]] + list(var_args)
    named = {**chosen, **var_kwargs}
    return lambda *arrays: func(*_filled(front, arrays), **dict(zip(named, _filled(named.values(), arrays))))


def _has_default(p):
    return p.default is not inspect.Parameter.empty and p.default is not np._NoValue


def _holds_arg(value):
    return type(value) is Arg or (type(value) in (list, tuple) and any(type(v) is Arg for v in value))


def _filled(values, arrays):
    """``values`` with each `Arg` (also inside a list or tuple) replaced by its array."""
    return [
        arrays[v.index] if type(v) is Arg else type(v)(_filled(v, arrays)) if type(v) in (list, tuple) else v
        for v in values
    ]
