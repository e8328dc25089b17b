"""``db.explain``: what one gradient evaluation recorded, in which mode, and what it kept.

Each recorded operation is listed with its mode (reverse, or forward over a
broadcast), its active inputs, its dual width and the bytes its pullbacks keep
alive for the backward pass; then the totals.  Plain text for terminals, an
HTML table for Jupyter.
"""

import functools
import html
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .api import _scalar_seed, _trace
from .broadcast import KernelCall
from .numpy_facts import qualified_name
from .pullbacks import IndexPullback


class Operation(NamedTuple):
    """One recorded operation of a gradient evaluation."""

    name: str
    mode: str  # "reverse", or "forward" for a broadcast/sum kernel
    active: int  # tracked inputs of the operation: one partial or cotangent each
    width: int  # dual width of a forward kernel (0 for reverse operations)
    kept_bytes: int  # array bytes its pullbacks keep for the backward pass


class Argument(NamedTuple):
    """One argument of the explained call: differentiated or cut, and its leaves."""

    position: int
    active_leaves: int
    cut_leaves: int


class Explanation:
    """The report `explain` returns; ``str()`` for text, ``_repr_html_`` for Jupyter."""

    def __init__(self, value, arguments, operations, total_kept_bytes):
        self.value = value
        self.arguments = arguments
        self.operations = operations
        self.total_kept_bytes = total_kept_bytes

    @property
    def forward_operations(self):
        return [op for op in self.operations if op.mode == "forward"]

    def _rows(self):
        return [
            (str(k), op.name, op.mode, str(op.active), str(op.width) if op.mode == "forward" else "-",
             _bytes(op.kept_bytes))
            for k, op in enumerate(self.operations, start=1)
        ]

    def _summary(self):
        n_forward = len(self.forward_operations)
        args = "; ".join(
            f"argument {a.position}: {a.active_leaves} active leaf(s), {a.cut_leaves} cut" for a in self.arguments
        )
        return (
            f"{len(self.operations)} operations ({n_forward} forward, {len(self.operations) - n_forward} reverse); "
            f"{_bytes(self.total_kept_bytes)} kept for the backward pass; {args}"
        )

    def __str__(self):
        header = ("#", "operation", "mode", "active", "width", "kept")
        rows = [header] + self._rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines + [self._summary()])

    def __repr__(self):
        return f"<Explanation: {self._summary()}>"

    def _repr_html_(self):
        head = "".join(f"<th>{h}</th>" for h in ("#", "operation", "mode", "active", "width", "kept"))
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in self._rows()
        )
        summary = html.escape(self._summary())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><p>{summary}</p>"


def explain(f: Callable[..., Any], *args: Any) -> Explanation:
    """Record one gradient evaluation of ``f(*args)`` and report every operation on its tape.

    >>> print(db.explain(lambda x: db.sum(np.exp, x) ** 2, np.zeros(3)))
    #  operation            mode     active  width  kept
    1  sum(exp) [numpy, 3]  forward  1       1      24 B
    2  np.power             reverse  1       -      8 B
    2 operations (1 forward, 1 reverse); 32 B kept for the backward pass; argument 0: 1 active leaf(s), 0 cut
    """
    tape, out, arguments = _trace(f, args)
    value, _ = _scalar_seed(out, tape)
    operations, everything = [], {}
    view_partials = tape.view_product_partials()
    for index in range(len(tape.records)):
        op = tape.operation(index)
        if op is None:
            continue
        backs = [back for _, back in tape.edges(index)] or view_partials.get(index, [])
        kept = _kept_arrays(backs)
        everything.update(kept)
        operations.append(_operation(op, len(backs), sum(a.nbytes for a in kept.values())))
    inputs = [
        Argument(k, sum(t is not None for t in a.inputs), sum(t is None for t in a.inputs))
        for k, a in enumerate(arguments)
    ]
    return Explanation(value, inputs, operations, sum(a.nbytes for a in everything.values()))


def _operation(op, active, kept):
    if isinstance(op, KernelCall):
        order = f", second order: {op.second} second partials" if op.second else ""
        name = f"{'sum' if op.reduce else 'broadcast'}({op.function}) [{op.backend}, {op.size}{order}]"
        return Operation(name, "forward", active, op.width, kept)
    return Operation(qualified_name(op), "reverse", active, 0, kept)


def _kept_arrays(backs):
    """Arrays and floats reachable from the pullbacks' closures (and tuples in them), by identity."""
    found = {}
    backs = [part for back in backs for part in (back if type(back) is tuple else (back,))]  # a view's edge is a pair
    stack = [x for back in backs for x in _captured(back)]
    stack += [back.index for back in backs if type(back) is IndexPullback]
    while stack:
        x = stack.pop()
        if isinstance(x, (np.ndarray, np.generic)):
            found[id(x)] = x
        elif type(x) is float:  # a Python float partial: 8 bytes, as a float64
            found[id(x)] = np.float64(x)
        elif isinstance(x, (tuple, list)):
            stack.extend(x)
    return found


def _captured(back):
    """What a pullback holds: a closure's cells, a functools.partial's arguments and function,
    an array's bound method's array, or a scalar partial (a number)."""
    if isinstance(back, (float, int, np.ndarray, np.generic)):  # a partial the sweep multiplies by
        return [back]
    if isinstance(back, functools.partial):
        return [*back.args, *back.keywords.values(), *_captured(back.func)]
    if isinstance(getattr(back, "__self__", None), np.ndarray):  # a bound method: partial.__imul__
        return [back.__self__]
    return [cell.cell_contents for cell in getattr(back, "__closure__", None) or ()]


def _bytes(n):
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
