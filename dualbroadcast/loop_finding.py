"""The loop of small steps in a prepared program's recorded steps: `find_loop` finds the longest run of
iterations of one block (the same functions on the same shapes and constants, each value read from the same
iteration, the one before (a carry) or from before the loop (an invariant); a constant that differs between
iterations read from an array of them), as a `Loop` that `loops` writes as scalar code."""


import re

import numpy as np

from .derivatives import DERIVATIVES
from .numpy_facts import qualified_name
from .program import Guard, Pack, Step, unpacked
from .registry import PER_ARGUMENT

PERIOD_MAX = 2048  # the longest block looked for


class Loop:
    """The repeated block: recorded steps ``start + k * period + j`` for ``k < trips``, ``j < period``; how the
    template's (iteration 0's) references read (``kinds``: per step, per reference, ``("inner", j, slot)``,
    ``("carry", j, slot, init index)``, ``("invariant", index)``, ``("literal",)`` or ``("row", values)``, a
    constant per iteration), and the status of its compiled code (`LoopTier`)."""

    __slots__ = ("start", "period", "trips", "kinds", "names", "tier", "__weakref__")

    def __init__(self, start, period, trips, kinds, names):
        self.start, self.period, self.trips, self.kinds = start, period, trips, kinds
        self.names = names  # the block's steps, as a user writes their functions
        self.tier = None

    @property
    def carried(self):
        return len({k[1:] for kinds in self.kinds for k in kinds if k[0] == "carry"})

    @property
    def rows(self):
        return sum(k[0] == "row" for kinds in self.kinds for k in kinds)

    def describe(self):
        """One line for `db.explain`: the loop and what runs it."""
        first, last = self.start + 1, self.start + self.period * self.trips
        status = self.tier.status() if self.tier is not None else "straight-line replay (not compiled)"
        return (f"loop: {self.trips} iterations of {self.period} steps (recorded steps {first}-{last}), "
                f"{self.carried} value(s) carried, {self.rows} constant(s) per iteration; runs: {status}")


def find_loop(steps, meta, out):
    """The longest run of at least two iterations of one block among ``steps`` (`Loop`), or None."""
    signatures = np.array([step.signature if type(step) is Step else -1 - k for k, step in enumerate(steps)])
    best = None  # (guards, kernels: never repeated)
    for period in _periods(signatures):
        same = signatures[:-period] == signatures[period:]
        start, length = _longest_run(same)
        trips = (length + period) // period
        if trips >= 2 and (best is None or trips * period > best[2] * best[1]):
            best = (start, period, trips)
    if best is None:
        return None
    return _checked(steps, meta, out, *best)


def _periods(signatures, rarest=4):
    """The periods a block may have: the distances from each step to the next ``rarest`` steps of its signature (a
    block holding some step at most that many times has one of them), at most `PERIOD_MAX` and half the steps."""
    order = np.argsort(signatures, kind="stable")
    ordered = signatures[order]
    periods = set()
    for j in range(1, rarest + 1):
        same = ordered[j:] == ordered[:-j]
        periods.update((order[j:][same] - order[:-j][same]).tolist())
    return sorted(p for p in periods if 0 < p <= min(len(signatures) // 2, PERIOD_MAX))


def step_key(step, meta):
    """What is compared of two `Step` s that may be the same step of two iterations: the same function, keywords,
    kinds and shapes of references, number of results.  The recorder numbers each step's key as it records it
    (``Step.signature``, `prepared.Recorder.signature`), so that `find_loop` compares integers."""
    return (id(step.func), step.kind, repr(step.kwargs) if step.kwargs else "",
            tuple([meta[r] if type(r) is int else ref_key(r, meta) for r in step.refs]),
            tuple([constant_key(r) for r in step.rest]) if step.rest else (),
            tuple([None if o is None else meta[o] for o in step.outs]))


def ref_key(r, meta):
    """`step_key` of a reference: a value's (shape, dtype); unlike the other keys, which a word begins."""
    if type(r) is int:
        return meta[r]
    if type(r) is Pack:
        return ("pack", id(r))
    return constant_key(r.value)


def constant_key(value):
    """`step_key` of a constant: an array's shape and dtype, a number's type, anything else's text."""
    if isinstance(value, (np.ndarray, np.generic)):
        return ("array", value.shape, value.dtype.str)
    if type(value) in (int, float):
        return ("number", type(value).__name__)
    return ("other", type(value).__name__, repr(value))


def _longest_run(same):
    """``(start, length)`` of the longest run of True in ``same``."""
    padded = np.concatenate(([False], same, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    if not len(edges):
        return 0, 0
    starts, ends = edges[::2], edges[1::2]
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k] - starts[k])


def _checked(steps, meta, out, start, period, trips):
    """The `Loop` of ``trips`` iterations from ``start`` (fewer where an iteration reads its values otherwise than
    the template), or None: no two iterations agree, or a value of an iteration but the last is read after it."""
    producer = {o: (k, slot) for k, step in enumerate(steps) if type(step) is Step
                for slot, o in enumerate(step.outs) if o is not None}  # value index -> (step, its output)
    template = steps[start:start + period]
    kinds = [[_kind(r, start, period, 0, producer) for r in flat_refs(step.refs)] for step in template]
    second = [[_kind(r, start, period, 1, producer) for r in flat_refs(step.refs)] for step in steps[start + period:]
              [:period]]
    for first, other in zip(kinds, second):  # a value before the loop in iteration 0: which?
        for slot, (a, b) in enumerate(zip(first, other)):
            if a[0] == "before" and b[0] == "previous":
                first[slot] = ("carry", b[1], b[2], a[1])
            elif a[0] == "before" and b == a:
                first[slot] = ("invariant", a[1])
            elif a[0] == "before":
                return _shorter(steps, meta, out, start, period, 1)
    rows = set()
    template_refs = [flat_refs(step.refs) for step in template]
    for k in range(1, trips):
        for j, step in enumerate(steps[start + k * period:start + (k + 1) * period]):
            if not _agrees(step, template[j], template_refs[j], kinds[j], start, period, k, producer, rows, j):
                return _shorter(steps, meta, out, start, period, k)
    end = start + period * trips
    last = start + period * (trips - 1)
    reads_after = [r for step in steps[end:] for r in _read(step)] + ([out] if out is not None else [])
    if any(r in producer and start <= producer[r][0] < last for r in reads_after):
        return None
    for j, slot in rows:
        kinds[j][slot] = ("row", [list(unpacked(steps[start + k * period + j].refs))[slot] for k in range(trips)])
    return Loop(start, period, trips, kinds, [_name(s.func) for s in template])


def _name(func):
    return func if type(func) is str else qualified_name(func)


def _shorter(steps, meta, out, start, period, trips):
    return _checked(steps, meta, out, start, period, trips) if trips >= 2 else None


def _read(step):
    if type(step) is Guard:
        return [step.index]
    return [r for r in unpacked(step.refs) if type(r) is int]


def _kind(r, start, period, k, producer):
    """How reference ``r`` of a step of iteration ``k`` reads: from this iteration (``inner``), from the one before
    (``previous``), from before the loop (``before``, its index), or a constant (``literal``)."""
    if type(r) is not int:
        return ("literal",)
    if r not in producer or producer[r][0] < start:
        return ("before", r)
    position, slot = producer[r]
    iteration, j = divmod(position - start, period)
    if iteration == k:
        return ("inner", j, slot)
    if iteration == k - 1:
        return ("previous", j, slot)
    return ("other",)


def _agrees(step, template, template_refs, kinds, start, period, k, producer, rows, j):
    """Whether ``step`` of iteration ``k`` reads as ``template`` (its references ``template_refs``) does (``kinds``);
    a constant that differs from the template's (or an array not the template's) is added to ``rows`` (read one row
    per iteration), where it is a float an elementwise step reads.  (The signatures agree: the same function,
    keywords and shapes.)"""
    if (step.rest or template.rest) \
            and (len(step.rest) != len(template.rest) or not all(map(_same_constant, step.rest, template.rest))):
        return False
    refs = flat_refs(step.refs)
    base = start + k * period  # where iteration k begins: a value read is `_kind`'s kind if made where it says
    for slot, (r, t, kind) in enumerate(zip(refs, template_refs, kinds)):
        tag = kind[0]
        if tag == "literal":
            if r.value is not t.value and (type(t.value) is np.ndarray or not _same_constant(r.value, t.value)):
                if not (scalar_step(template) and np.result_type(t.value).kind == "f"):
                    return False
                rows.add((j, slot))  # (an array equal but not the same: read per iteration too, as replay does)
        elif tag == "inner":  # made by step j of this iteration
            if type(r) is not int or producer.get(r) != (base + kind[1], kind[2]):
                return False
        elif tag == "carry":  # ... of the iteration before
            if type(r) is not int or producer.get(r) != (base - period + kind[1], kind[2]):
                return False
        elif tag != "invariant" or r != kind[1]:  # the same value from before the loop
            return False
    return True


def flat_refs(refs):
    """`unpacked` ``refs`` as a sequence: ``refs`` themselves where they hold no `Pack` (most steps)."""
    return list(unpacked(refs)) if Pack in map(type, refs) else refs


def _same_constant(a, b):
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (np.ndarray, np.generic)):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable constants are different constants
        return False


def scalar_step(step):
    """An elementwise step written as scalar code: a ufunc of the derivative table, called without keywords."""
    return step.kind == PER_ARGUMENT and not step.kwargs and isinstance(step.func, np.ufunc) \
        and step.func.nout == 1 and step.func in DERIVATIVES and step.func is not np.clip


def renamed(lines, names):
    """``lines`` with each of ``names`` read or written as ``<name>_``: the backward loop's copy of the forward
    loop's values, so that no name is assigned in both loops (Numba's SSA pass is slow on those)."""
    return [_NAME.sub(lambda m: m.group(0) + "_" if m.group(0) in names else m.group(0), line) for line in lines]


_NAME = re.compile(r"\b[thq]\d+\b")
