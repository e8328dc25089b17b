"""Test inputs for every rule in the rule tables, one module per family.

A `Case` names the registered function it exercises and builds, from
hypothesis's ``draw`` and a dtype, a function of float arrays and the arrays to
differentiate it at.  ``tests/rules/test_rules.py`` sweeps every case against finite
differences in float64 and float32, and fails if a registered rule has no case.
A case calls its function through `call`, which draws the calling form too.
"""

import importlib
import inspect
import itertools
import pkgutil
import re
from dataclasses import dataclass, field

import numpy as np
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes


def stable_id(value):
    """A parametrized value's test id as ``str`` writes it, without the memory address of a function: the
    worker processes of pytest-xdist must collect the same ids."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", str(value))

@dataclass
class Case:
    func: object  # the key of the rule table this case exercises
    build: object  # build(draw, dtype) -> (fn, args): fn(*args) is the computation to check
    name: str = ""
    tolerance: dict = field(default_factory=dict)  # rtol/atol overrides for check_gradient
    out_dtype: object = None  # the result's dtype where the function promotes (np.float_power: float64)

    def __str__(self):
        return self.name or getattr(self.func, "__name__", repr(self.func))


def all_cases():
    """Every case of every family module in this package (a new family is a new module here)."""
    modules = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]
    return [case for module in modules for case in module.CASES]


# Cases of functions with a rule for complex values that cannot take complex arguments (case: why).
REAL_ONLY_CASES = {
    "concatenate_dtype": "it casts to a real dtype, which NumPy refuses for complex values",
    "sph_harm_y": "a complex function of real angles: SciPy refuses complex ones",
    **dict.fromkeys(["rfft", "ihfft", "rfftn", "rfft2", "power spectrum", "rfft-irfft round trip"],
                    "a transform of real signals: NumPy refuses complex values"),
}


def complex_cases(cases):
    """The ``cases`` of functions with a rule for complex values: the sweeps run them in complex128 too."""
    from dualbroadcast.registry import complex_rule

    return [case for case in cases if complex_rule(case.func) is not None and str(case) not in REAL_ONLY_CASES]


_STREAMS = itertools.count()


def reset_streams():
    """Start each example's arrays from stream 0, so a replayed example gives the same arrays."""
    global _STREAMS
    _STREAMS = itertools.count()


def uniform(draw, shape, dtype, low=-2.0, high=2.0):
    """A random array of ``shape`` in (low, high): smooth values, no ties, no kinks hit.  For a complex
    ``dtype``, real and imaginary parts both in (low, high)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng([seed, next(_STREAMS)])  # equal seeds still give distinct arrays
    value = rng.uniform(low, high, size=shape)
    if np.dtype(dtype).kind == "c":
        value = value + 1j * rng.uniform(low, high, size=shape)
    value = value.astype(dtype)
    return value if shape else dtype(value)


def from_domain(draw, shape, dtype, domain):
    """A random array of ``shape`` from ``domain``: an interval ``(low, high)``, or a tuple of intervals (the
    pieces of a domain a pole or a kink splits), each element drawn from one of them."""
    if type(domain[0]) is not tuple:
        return uniform(draw, shape, dtype, *domain)
    pieces = [np.asarray(uniform(draw, shape, dtype, *piece)) for piece in domain]
    which = np.asarray(uniform(draw, shape, np.float64, 0, len(pieces))).astype(int)
    value = np.choose(which, pieces)
    return value if shape else dtype(value[()])


def broadcast_shapes(draw, n, max_dims=3, max_side=4):
    """``n`` mutually broadcastable shapes, 0-d and size-1 axes included."""
    shapes = mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=max_dims, max_side=max_side)
    return draw(shapes).input_shapes


def array_shape(draw, min_dims=1, max_dims=3, min_side=1, max_side=4):
    """One array shape."""
    return draw(array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side))


class Arg:
    """Where the ``index``-th differentiated array goes in a `call`."""

    def __init__(self, index):
        self.index = index

    def __repr__(self):
        return "XYZ"[self.index]


X, Y, Z = Arg(0), Arg(1), Arg(2)
P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
NAMED = (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)


def call(draw, func, *args, **kwargs):
    """``func(*args, **kwargs)`` as a function of the differentiated arrays (`X`, `Y`, `Z` in ``args``),
    in a calling form NumPy accepts drawn by hypothesis (which shrinks to the form as written).

    Each positional-or-keyword argument is passed positionally or by name, and parameters left out
    may be passed their defaults explicitly.  A differentiated array may be passed by name too
    (``np.average(x, weights=w)``), but for one inside a sequence (``np.stack([x, y])``) or a
    function's ``*args``, which stay positional, and every argument before them.
    """
    signature = inspect.signature(func)
    arguments = signature.bind(*args, **kwargs).arguments
    for p in signature.parameters.values():
        if p.name not in arguments and p.kind in NAMED and _has_default(p) and draw(st.booleans()):
            arguments[p.name] = p.default
    positional = draw(st.sampled_from(_positional_counts(signature, arguments, len(args))))
    front, named = _form(signature, arguments, positional)
    written = [*map(repr, front), *(f"{k}={v!r}" for k, v in named.items())]
    note(f"{getattr(func, '__name__', func)}({', '.join(written)})")
    def called(*arrays):
        return func(*filled(front, arrays), **dict(zip(named, filled(named.values(), arrays))))

    called.form = (func, front, named)  # the call as drawn, for an oracle to make on another library
    return called


def _positional_counts(signature, arguments, written):
    """How many leading parameters may be passed positionally: the count as written first, then the others."""
    lowest = highest = 0
    for i, p in enumerate(p for p in signature.parameters.values() if p.kind in POSITIONAL):
        if p.name not in arguments:
            break
        highest = i + 1
        if p.kind is P.POSITIONAL_ONLY or _holds_args(arguments[p.name]):
            lowest = i + 1
    if any(p.kind is P.VAR_POSITIONAL and arguments.get(p.name) for p in signature.parameters.values()):
        lowest = highest
    written = min(max(written, lowest), highest)
    return [written] + [n for n in range(lowest, highest + 1) if n != written]


def _form(signature, arguments, count):
    """The positional and keyword arguments of the call passing the first ``count`` parameters positionally."""
    front, named = [], {}
    for i, p in enumerate(signature.parameters.values()):  # positional parameters come first
        if p.name not in arguments:
            continue
        value = arguments[p.name]
        if p.kind is P.VAR_POSITIONAL:
            front.extend(value)
        elif p.kind is P.VAR_KEYWORD:
            named.update(value)
        elif i < count:
            front.append(value)
        else:
            named[p.name] = value
    return front, named


def _has_default(p):
    return p.default is not P.empty and p.default is not np._NoValue


def _holds_args(value):
    """Whether ``value`` is a sequence holding a differentiated array."""
    return type(value) in (list, tuple) and any(type(v) is Arg for v in value)


def filled(values, arrays):
    """``values`` with each `Arg` (also inside a list or tuple) replaced by its array."""
    return [
        arrays[v.index] if type(v) is Arg else type(v)(filled(v, arrays)) if type(v) in (list, tuple) else v
        for v in values
    ]
