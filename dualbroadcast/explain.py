"""``db.explain``: what one gradient evaluation recorded, in which mode, and what it kept.

Each recorded operation is listed with its mode (reverse, or forward over a
broadcast), its active inputs, its dual width and the bytes its pullbacks keep
alive for the backward pass; then the totals.  Plain text for terminals, an
HTML table for Jupyter.
"""

import functools
import html
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import pytree
from .api import hessian, hessian_recording, hvp, hvp_arguments, hvp_compositions
from .kernel_cache import KernelCall
from .numpy_facts import qualified_name
from .pullbacks import IndexPullback, plain
from .reverse import scalar_seed, trace_call


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

    def __init__(self, value, arguments, operations, total_kept_bytes, composition=None):
        self.value = value  # f's value (`db.hessian`'s: the gradient its recording computes)
        self.arguments = arguments
        self.operations = operations
        self.total_kept_bytes = total_kept_bytes
        self.composition = composition  # `db.hvp`'s or `db.hessian`'s composition of modes that ran, else None

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
            (f"{self.composition}; " if self.composition else "")
            + f"{len(self.operations)} operations ({n_forward} forward, {len(self.operations) - n_forward} reverse); "
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


def explain(f: Callable[..., Any], *args: Any, **kwargs: Any) -> "Explanation | ProgramExplanation":
    """Record one gradient evaluation of ``f(*args)`` and report every operation on its tape.

    ``f`` a prepared gradient (`db.prepare_gradient`): the program it replays for ``args``
    (a `ProgramExplanation`), its forward regions and the steps the gradient alone leaves out.
    ``f`` `db.hvp` or `db.hessian` (``db.explain(db.hvp, g, x, v)``, ``vectors=`` as `db.hvp` takes it): the
    composition of modes that call runs (``.composition``) and what it records.

    >>> print(db.explain(lambda x: db.sum(np.exp, x) ** 2, np.zeros(3)))
    #  operation            mode     active  width  kept
    1  sum(exp) [numpy, 3]  forward  1       1      24 B
    2  np.power             reverse  1       -      8 B
    2 operations (1 forward, 1 reverse); 32 B kept for the backward pass; argument 0: 1 active leaf(s), 0 cut
    """
    from .prepared import PreparedGradient  # (prepared imports reverse, as this module does)

    if isinstance(f, PreparedGradient):
        return _explain_program(f, args)
    if f is hvp:
        return _explain_hvp(*args, **kwargs)
    if kwargs:
        raise TypeError("explain(f, *args) takes keyword arguments only for db.hvp (vectors=)")
    if f is hessian:
        g, x = args
        return _explanation(hessian_recording(g, x), (x,), "db.hessian: reverse over reverse (the gradient recorded "
                            "once, its tape swept once per block of rows)", scalar=False)
    return _explanation(f, args)


def _explain_hvp(f, *args, vectors=None):
    """`explain` of ``db.hvp(f, *args, vectors=vectors)``: the first composition that does not refuse, as `hvp`."""
    args, vectors = hvp_arguments(args, vectors)
    refused = ""
    for name, scalar, refusals in hvp_compositions(f, args, vectors):
        try:
            return _explanation(scalar, args, f"db.hvp: {name}{refused}")
        except refusals as error:
            refused = f" (forward mode refused: {re.split(r' [(]|: |; ', str(error))[0]})"  # what, not the remedy


def _explanation(f, args, composition=None, scalar=True):
    """The `Explanation` of one recording of ``f(*args)``, of a real scalar result unless not ``scalar`` (`db.hessian`'s
    recording: the gradient)."""
    tape, out, arguments = trace_call(f, args)
    if scalar:
        value, _ = scalar_seed(out, tape)
    else:
        leaves, treedef = pytree.flatten(out)
        value = pytree.unflatten(treedef, [plain(leaf) for leaf in leaves])
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
    return Explanation(value, inputs, operations, sum(a.nbytes for a in everything.values()), composition)


def _operation(op, active, kept):
    if isinstance(op, KernelCall):
        order = f", second order: {op.second} second partials" if op.second else ""
        name = f"{'sum' if op.reduce else 'broadcast'}({op.function}) [{op.backend}, {op.size}{order}]"
        return Operation(name, "forward", active, op.width, kept)
    return Operation(qualified_name(op), "reverse", active, 0, kept)


class ProgramStep(NamedTuple):
    """One step of a prepared program as replayed."""

    name: str
    mode: str  # "forward region" (steps fused when compiled), "forward" (a db.sum/db.broadcast), "reverse", "guard"
    active: int  # its active inputs: one partial or cotangent each
    width: int  # dual width of a forward kernel (0 otherwise)
    fused: tuple  # a forward region's steps, its sum (or the step whose value it gives) last
    backend: str  # a forward region's backend ("" otherwise)
    gradient_alone: str  # "runs", "removed" (nothing the gradient needs reads it) or "without value"


class ProgramExplanation:
    """`explain` of a prepared gradient: the steps its program replays for the arguments given, with its forward
    regions, and what its gradient alone (``prog(*args)``) leaves out; ``str()`` for text, ``_repr_html_`` for
    Jupyter."""

    def __init__(self, value, recorded, steps, loop=None, plan=None):
        self.value = value
        self.recorded = recorded  # how many steps were recorded
        self.steps = steps
        self.loop = loop  # the recorded steps' `loop_finding.Loop`, or None
        self.plan = plan  # the plan ``prog(*args)`` runs now, where one is chosen per call (`replay.compile_plans`)

    @property
    def regions(self):
        return [s for s in self.steps if s.mode == "forward region"]

    @property
    def removed(self):
        """The steps ``prog(*args)`` does not run (their values only the result needs)."""
        return [s for s in self.steps if s.gradient_alone == "removed"]

    def _rows(self):
        return [(str(k), s.name, s.mode, str(s.active), str(s.width) if s.width else "-", s.backend or "-",
                 s.gradient_alone) for k, s in enumerate(self.steps, start=1)]

    _HEADER = ("#", "step", "mode", "active", "width", "backend", "gradient alone")

    def _summary(self):
        fused = sum(len(s.fused) for s in self.regions)
        return (f"{self.recorded} steps recorded, {len(self.steps)} replayed: {len(self.regions)} forward region(s) "
                f"fusing {fused} steps; the gradient alone leaves out {len(self.removed)} step(s)"
                + "".join(f" and computes {len(without)} region(s) without their value"
                          for without in [[s for s in self.steps if s.gradient_alone == "without value"]] if without)
                + (f"; plans chosen per call, the gradient alone's now {self.plan}" if self.plan else ""))

    def __str__(self):
        rows = [self._HEADER] + self._rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._HEADER))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines + [self._summary()] + ([self._loop()] if self.loop is not None else []))

    def _loop(self):
        """The loop, its block of steps and what runs it."""
        return f"{self.loop.describe()}\n  its block: {', '.join(self.loop.names)}"

    def __repr__(self):
        return f"<ProgramExplanation: {self._summary()}>"

    def _repr_html_(self):
        head = "".join(f"<th>{h}</th>" for h in self._HEADER)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in self._rows()
        )
        summary = html.escape(self._summary())
        loop = f"<p>{html.escape(self._loop())}</p>" if self.loop is not None else ""
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><p>{summary}</p>{loop}"


def _explain_program(prog, args):
    """The program ``prog`` replays for ``args`` (recorded first if none fits), step by step."""
    from .prepared import GuardFailed, _signature, call_on_leaves

    value, _ = prog.value_and_gradient(*args)
    flat = [pytree.flatten(arg) for arg in args]
    for program in prog.variants.get(_signature(flat), ()):
        try:
            call_on_leaves(program.gradient, program, flat, None)
        except GuardFailed:
            continue
        steps = _program_steps(program)  # (waits for a straight-line replay compiled in the background)
        plan = program.plans["gradient alone"].chosen(1) if program.plans else None
        return ProgramExplanation(value, len(program.recorded_steps), steps, program.loop, plan)
    raise ValueError("these arguments are not replayed by a recorded program (f is evaluated by db.gradient for "
                     "them; db.explain(f, *args) shows that evaluation)")


def _program_steps(program):
    from .loops import wait
    from .program import Guard, KernelStep, SecondOrderStep

    wait(program)  # (its straight-line replay, compiled in the background: what it removes)

    removed = set(program.removed["gradient"])
    epilogues = [s for s in program.steps if type(s) is KernelStep and program.runners.get((s, "epilogue"))]
    products = [s.region.product.step for s in epilogues]  # run by their epilogues' runners, shown in their rows
    steps = []
    for k, step in enumerate(program.steps):
        alone = "removed" if k in removed else "runs"
        if any(step is p for p in products):
            continue
        if type(step) is Guard:
            steps.append(ProgramStep(f"guard {_name(step.convert)}", "guard", 0, 0, (), "", alone))
        elif type(step) is KernelStep and step.region is not None:
            region = step.region
            if "gradient alone" in region.backends and alone == "runs":
                alone = "without value"
            backend = region.backends.get("value", "")
            fused = tuple(_name(s.func) for s in ([region.product.step] if step in epilogues else []) + region.steps)
            along = f" along axes {region.axes.axes}" if region.axes is not None and region.axes.axes else ""
            active = len(region.active) + (len(region.product.step.active) - 1 if step in epilogues else 0)
            steps.append(ProgramStep(f"region({', '.join(fused)}){along}", "forward region", active, active, fused,
                                     backend, alone))
        elif type(step) in (KernelStep, SecondOrderStep):
            kind = "sum" if type(step) is SecondOrderStep or step.reduce else "broadcast"
            width = len(step.active) if type(step) is KernelStep else len(step.slots)
            steps.append(ProgramStep(f"{kind}({step.kernel.name})", "forward", width, width, (), step.backend, alone))
        else:
            steps.append(ProgramStep(_name(step.func), "reverse", len(step.active), 0, (), "", alone))
    return steps


def _name(func):
    return func if type(func) is str else qualified_name(func) if hasattr(func, "__name__") else repr(func)


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
