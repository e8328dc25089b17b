"""The kernels of `db.broadcast`/`db.sum` calls: built from a call's trace (`build_kernel`: its value and the
partials of its active leaves, a dual's tangent among them) and cached under the call's key (`cached_kernel`), and the
log of kernel calls (`KernelCall`, `kernel_log`)."""

import collections
import collections.abc
import contextvars
import threading
from typing import NamedTuple

import numpy as np

from . import pytree
from .errors import KernelError
from .expr import Sym, complex_kernel_message, derivatives, trace, without_cuts
from .expr import _cut as _cut_op
from .forward import Dual
from .kernel_source import needed_nodes
from .kernels import Kernel
from .registry import COMPLEX_RULES, SAME_RULE
from .tracked import Tracked

CACHE_SIZE = 512


KERNEL_CACHE = collections.OrderedDict()


CACHE_LOCK = threading.Lock()
CALL_LOG = contextvars.ContextVar("dualbroadcast_kernel_log", default=None)


class KernelCall(NamedTuple):
    """What one `broadcast`/`sum` call did: its dual width is the number of partials carried; ``second``, of a
    second-order kernel (a `sum` inside a gradient of a gradient), the number of second partials (of a
    reverse-over-forward one, `tangent_on_tape`: one per argument the gradient tracks, contracted with the
    tangents)."""

    function: str
    width: int
    backend: str
    size: int
    reduce: bool
    second: int = 0


class kernel_log:
    """Context manager collecting a `KernelCall` for every broadcast/sum call inside it.

    >>> f = lambda c: db.sum(lambda x, c: c * x**2, db.cut(np.ones(3)), c)
    >>> with db.kernel_log() as calls:
    ...     g = db.gradient(f, 1.0)
    >>> calls[0].width, g                  # one partial: c's (x is cut)
    (1, 3.0)
    """

    def __enter__(self) -> list[KernelCall]:
        self.calls = []
        self._token = CALL_LOG.set(self.calls)
        return self.calls

    def __exit__(self, *exc: object) -> None:
        CALL_LOG.reset(self._token)


def is_array_input(leaf):
    """Floats, arrays and NumPy scalars are kernel inputs; everything else is baked into the kernel (a
    Python complex too: a literal, weakly typed as NumPy types it)."""
    return type(leaf) is float or isinstance(leaf, np.ndarray) or (
        isinstance(leaf, np.generic) and leaf.dtype.kind in "fiubc"
    )


def cached_kernel(key, f, treedef, leaves, n_inputs, active, reduce, kinds, order=1, tangents=0, tracked=(),
                  unbounded=False):
    with CACHE_LOCK:
        kernel = KERNEL_CACHE.get(key)
        if kernel is not None:
            KERNEL_CACHE.move_to_end(key)
            return kernel
    kernel = build_kernel(f, treedef, leaves, n_inputs, active, reduce, kinds, order, tangents, tracked, unbounded)
    with CACHE_LOCK:
        KERNEL_CACHE[key] = kernel
        if len(KERNEL_CACHE) > CACHE_SIZE:
            KERNEL_CACHE.popitem(last=False)
    return kernel


def build_kernel(f, treedef, leaves, n_inputs, active, reduce, kinds, order=1, tangents=0, tracked=(),
                 unbounded=False):
    """Trace ``f`` on symbols (array leaves) and literals (baked leaves) into a kernel: its outputs are the
    value and one partial per active input; ``order=2`` adds the second partials ∂²f/∂aᵢ∂aⱼ (i ≤ j, row by
    row: forward mode over the first partials); with ``tangents`` (forward mode: that many more inputs, one
    tangent per active input) the value and the directional derivative Σ ∂f/∂aᵢ · tᵢ; ``tracked``, two lists
    of inputs (reverse over forward: what a gradient tracks), then adds the partials of the value with respect
    to the first's and those of that directional derivative with respect to the second's; ``unbounded``: those
    tangents may be infinite or NaN (`expr.derivatives`' strong products after them)."""

    def call(symbols):
        symbols = iter(symbols)
        mixed = [next(symbols) if type(x) is Tracked or type(x) is Dual or is_array_input(x) else x for x in leaves]
        if treedef is None:
            return f(*mixed)
        g, args = pytree.unflatten(treedef, mixed)
        return g(*args)

    name = getattr(f, "__name__", type(f).__name__)
    _check_kinds(name, kinds)
    graph, inputs, output = trace(call, n_inputs + tangents)
    has_complex = _has_complex(graph, output, kinds)
    seeds = inputs[n_inputs:] if tangents else [np.dtype(kinds[i]).type(1) for i in active]
    partials = derivatives(graph, output, [inputs[i] for i in active], seeds, unbounded)
    if order == 2:
        partials += [h for i, p in enumerate(partials)
                     for h in derivatives(graph, p, [inputs[j] for j in active], seeds)[i:]]
    if tangents:  # the terms ∂f/∂aᵢ · tᵢ (each slot seeded with its tangent), added
        total = 0
        for term in partials:
            total = term if _is_zero(total) else total if _is_zero(term) else graph.apply(np.add, (total, term))
        partials = [total]
        if tracked:  # (the inputs whose value partials are wanted, those whose tangent partials are too)
            for differentiated, wanted in zip(tracked, (output, total)):
                ones = [np.dtype(kinds[i]).type(1) for i in differentiated]
                partials += derivatives(graph, wanted, [inputs[i] for i in differentiated], ones)
    outputs = without_cuts(graph, [output] + partials)
    kernel = Kernel(graph, inputs, outputs, reduce, name, has_complex, dot_products=order == 2)
    if active and np.dtype(kernel.dtype_for(tuple(kinds))).kind not in "fc":
        return Kernel(graph, inputs, outputs[:1], reduce, name, has_complex)  # a truth value or a count: no gradient
    return kernel


def _is_zero(a):
    """Whether ``a`` is the literal 0 `derivatives` gives where the output does not depend on an input."""
    return type(a) is not Sym and not isinstance(a, np.ndarray) and a == 0


def _check_kinds(name, kinds):
    """Kernels compute in numbers: an argument of another kind would fail inside NumPy."""
    for kind in kinds:
        dtype = np.dtype(kind)
        if dtype.kind not in "biufc":
            raise KernelError(
                f"a {dtype} argument (not a number) reached db.sum/db.broadcast of {name}: kernels compute in "
                "floating point. Pass arrays or floats; compute other values outside f."
            )


def _has_complex(graph, output, kinds):
    """Whether complex numbers take part in the traced function (an input or a literal); if so, a clear
    error unless every operation of its value is holomorphic, whose forward partial is then the complex
    derivative and its pullback ``g · ∂f/∂a`` JAX's convention.  (The partials' own operations, the
    table's formulas, may compare: ``x == 0`` in x ** y's.)"""
    order = needed_nodes(graph, [output])
    literals = [a for node in order for a in node.args if type(a) is not Sym]
    literals += [] if type(output) is Sym else [output]
    if not any(np.dtype(k).kind == "c" for k in kinds if k is not float) \
            and not any(isinstance(a, (complex, np.complexfloating)) for a in literals):
        return False
    for node in order:
        if node.op is not _cut_op and COMPLEX_RULES.get(node.op) is not SAME_RULE:
            raise KernelError(complex_kernel_message(node.op))
    return True
