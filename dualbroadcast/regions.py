"""Forward regions of a prepared program: connected elementwise steps fused into one kernel.

A recorded program written in plain NumPy (``np.sum(np.exp(-3 * (x + 1)))``) is
a chain of elementwise steps, each a pass over memory forward and another
backward.  `forward_regions` finds each maximal connected group of elementwise
steps (ufuncs and ``np.where`` the kernels can differentiate, called without
keywords) whose only reader is a whole sum, and replaces group and sum by one
`KernelStep`: the kernel `kernel_cache.build_kernel` makes for ``db.sum`` of the same
function, traced from the steps themselves, so the replay runs it as a
``db.sum`` step — value and one partial per active input in one pass, the
backward pass its partials times the sum's cotangent.  Then each group read by
another step (a matrix product, a guard, ...) becomes a ``db.broadcast`` kernel
of its last step's value, if that has at least `BROADCAST_MIN` elements (on
fewer, the inline steps cost less than a kernel call).  A group read only by a sum or mean along axes
(``np.sum(np.exp(a - m), axis=1)``, ``np.mean(v, axis=0, keepdims=True)``) is fused with it into a broadcast kernel
summed along those axes (`axis_sums.AxisSum`), and so is a broadcast group whose inputs broadcast against each
other (``np.tanh(X @ W + b)``): both run on blocks of rows, on the cores, or on whole arrays, whichever is faster
(`region_runners.axis_region_runner`).  Where such a region's input is a matrix product only it reads, the region is
the product's epilogue (`EpilogueOf`), run with it in blocks of rows (`regions_epilogue`).

A step joins the region only if every reader of its value is in the region: a
value also read elsewhere (a later step, a guard, the result) is an input of
the region instead, so no value the rest of the program reads disappears.
"""

import contextvars
import math
from typing import NamedTuple

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from .axis_sums import AxisSum
from .expr import Sym, _has_forward_rule
from .kernel_cache import build_kernel
from .program import Const, Guard, KernelStep, Step, unpacked
from .registry import PER_ARGUMENT

BROADCAST_MIN = 16384  # elements from which a region not feeding a sum is fused: below, its steps inline cost less
FUSE_REGIONS = contextvars.ContextVar("dualbroadcast_fuse_regions", default=True)  # False: steps as recorded


class Region:
    """What one forward region fused: its steps (the last its sum, or the step whose value it gives), its
    inputs (value indices and constants), the positions of the active ones among them, the value index of its
    result, and the backends its kernel runs on (``"value"``, and ``"gradient alone"`` for its variant without
    the value, set when the program is compiled); what `explain` shows of a prepared program.  ``axes``: the
    `axis_sums.AxisSum` of a region summed along axes or of broadcast inputs, else None."""

    __slots__ = ("steps", "refs", "active", "out", "position", "backends", "choices", "axes", "product")

    def __init__(self, steps, refs, active, out, position, axes=None):
        self.steps = steps
        self.refs = refs
        self.active = active
        self.out = out
        self.position = position  # of its last step among those recorded
        self.axes = axes
        self.product = None  # `EpilogueOf` where the region is a matrix product's epilogue (`_epilogue_of`)
        self.backends = {}
        self.choices = {}  # as ``backends``: the `kernels.BackendChoice` choosing per call, where one does


def forward_regions(steps, meta, out):
    """``(steps, regions)``: the program's steps with each forward region replaced by its `KernelStep`
    (placed where its last step was), and the `Region` s in order.  ``out``: the result's value index (read by
    the caller)."""
    producer, readers = {}, {out: {-1}}
    for k, step in enumerate(steps):
        for i in _read(step):
            readers.setdefault(i, set()).add(k)
        if type(step) is Step:
            for o in step.outs:
                if o is not None:
                    producer[o] = k
    replaced, regions = {}, []
    taken = set()

    def fuse(k, reduce):
        """Fuse the region ending at step ``k`` (steps not taken yet), if it has two steps or more; ``reduce`` as
        `_fused` takes it."""
        region = _grow(k, steps, producer, readers, meta) - taken
        if len(region) < 2:
            return
        kernel_step, info = _fused(sorted(region), steps, meta, reduce)
        if kernel_step is not None:
            info.product = _epilogue_of(info, region, steps, producer, readers, meta)
            taken.update(region)
            replaced[k] = kernel_step
            regions.append(info)

    for k, step in enumerate(steps):
        if _is_whole_sum(step, meta) and k not in taken:
            fuse(k, True)
    for k, step in enumerate(steps):
        reduction = _axis_sum(step, meta)
        if reduction is not None and k not in taken and math.prod(reduction.shape) >= BROADCAST_MIN \
                and (step.outs[0] != out or reduction.out_shape == ()):  # (f's result: a scalar of its own)
            fuse(k, reduction)
    for k in range(len(steps) - 1, -1, -1):  # then the elementwise steps read by other steps, last first
        if k not in taken and _is_elementwise(steps[k], meta) and meta[steps[k].outs[0]][1].kind == "f" \
                and math.prod(meta[steps[k].outs[0]][0]) >= BROADCAST_MIN:
            fuse(k, False)
    regions.sort(key=lambda r: r.position)
    if not regions:
        return steps, []
    return [replaced.get(k, s) for k, s in enumerate(steps) if k in replaced or k not in taken], regions


class EpilogueOf(NamedTuple):
    """A broadcast region's input ``slot`` (among its refs) is the product ``step`` (``a @ b`` of two matrices),
    which only the region reads: the region is its epilogue (``tanh(X @ W + b)``), run with the product in the
    same blocks of rows (`regions_epilogue`)."""

    slot: int
    step: Step


def _epilogue_of(region, positions, steps, producer, readers, meta):
    """`EpilogueOf` for a region of broadcast inputs (not summed) with an active input of the call's shape made by a
    real matrix product of the region's dtype that nothing else reads (the recorded program's steps at
    ``positions`` are the region's); else None."""
    if region.axes is None or region.axes.axes or len(region.axes.shape) != 2:
        return None
    dtype = meta[region.out][1]
    for slot in region.active:
        r = region.refs[slot]
        step = steps[producer[r]] if type(r) is int and r in producer else None
        if step is not None and step.func in (np.matmul, np.dot) and not step.kwargs and not step.complex \
                and len(step.refs) == 2 and meta[r][0] == region.axes.shape and readers.get(r, set()) <= positions \
                and all(_matrix_of(x, dtype, meta) for x in step.refs):
            return EpilogueOf(slot, step)
    return None


def _matrix_of(ref, dtype, meta):
    """Whether a step's reference is a matrix (2-d) of ``dtype``: a value of the program, or an array constant."""
    if type(ref) is int:
        return len(meta[ref][0]) == 2 and meta[ref][1] == dtype
    return type(ref) is Const and type(ref.value) is np.ndarray and ref.value.ndim == 2 and ref.value.dtype == dtype


def _read(step):
    """The value indices a step reads (a guard its value; a Pack's items)."""
    if type(step) is Guard:
        return [step.index]
    return [r for r in unpacked(step.refs) if type(r) is int]


def _is_whole_sum(step, meta):
    """``np.sum(v)`` (or ``v.sum()``) of a traced value over every axis, to a real floating value."""
    return type(step) is Step and step.func is np.sum and not step.kwargs and len(step.refs) == 1 \
        and type(step.refs[0]) is int and not step.complex and step.outs[0] is not None \
        and meta[step.outs[0]][1].kind == "f"


def _axis_sum(step, meta):
    """``np.sum(v, axis)`` or ``np.mean(v[, axis])`` (``axis`` by position or keyword, ``keepdims=``) of a traced
    float32 or float64 value, of its dtype, as an `AxisSum`; None for another step (a whole sum is `_is_whole_sum`)."""
    if type(step) is not Step or step.func not in (np.sum, np.mean) or step.complex or step.outs[0] is None \
            or not step.refs or type(step.refs[0]) is not int or len(step.refs) > 2 \
            or (len(step.refs) == 2 and (type(step.refs[1]) is not Const or "axis" in step.kwargs)) \
            or not set(step.kwargs) <= {"axis", "keepdims"}:
        return None
    axis = step.refs[1].value if len(step.refs) == 2 else step.kwargs.get("axis")
    shape, dtype = meta[step.refs[0]]
    if (axis is None and step.func is np.sum) or meta[step.outs[0]][1] != dtype \
            or dtype not in (np.float32, np.float64):  # (np.mean of float16 adds in float32)
        return None
    try:
        axes = tuple(sorted(normalize_axis_tuple(tuple(range(len(shape))) if axis is None else axis, len(shape))))
    except (TypeError, ValueError):  # (an AxisError is a ValueError)
        return None
    divisor = math.prod(shape[d] for d in axes) if step.func is np.mean else 1
    return AxisSum(tuple(shape), axes, divisor, tuple(meta[step.outs[0]][0]))


def _is_elementwise(step, meta):
    """A step a kernel can run: a ufunc of one result (or ``np.where(c, x, y)``) with a forward rule,
    called without keywords on real numbers."""
    if type(step) is not Step or step.kwargs or step.complex or step.kind not in (PER_ARGUMENT, None):
        return False
    func = step.func
    if func is np.where:
        if len(step.refs) != 3:
            return False
    elif not (isinstance(func, np.ufunc) and func.nout == 1 and func.nin == len(step.refs)):
        return False
    if not _has_forward_rule(func) or len(step.outs) != 1 or step.outs[0] is None:
        return False
    if meta[step.outs[0]][1].kind not in "biuf":
        return False
    for r in step.refs:
        if type(r) is int:
            if meta[r][1].kind not in "biuf":
                return False
        elif type(r) is not Const or not _is_real_constant(r.value):
            return False
    return True


def _is_real_constant(value):
    if type(value) in (bool, int, float):
        return True
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf"


def _grow(k, steps, producer, readers, meta):
    """The steps of the region ending at the sum ``steps[k]``: the producers of its values added while
    every reader of what they make is already in it."""
    region = {k}
    changed = True
    while changed:
        changed = False
        for j in sorted(region, reverse=True):
            for r in steps[j].refs:
                p = producer.get(r) if type(r) is int else None
                if p is None or p in region or not _is_elementwise(steps[p], meta):
                    continue
                if readers.get(steps[p].outs[0], set()) <= region:
                    region.add(p)
                    changed = True
    return region


def _fused(order, steps, meta, reduce):
    """The `KernelStep` of the region ``order`` (step positions) and its `Region`; (None, None) if the kernel cannot
    be built.  ``reduce``: True, the last is their whole sum; an `AxisSum`, the last sums them along axes; False,
    none sums them."""
    last = order[-1]
    elementwise = order[:-1] if reduce is not False else order
    made = {steps[j].outs[0] for j in elementwise}
    refs, keys = [], {}  # kernel inputs: value indices and array constants, each once
    for j in elementwise:
        for r in steps[j].refs:
            if type(r) is int and r not in made and r not in keys:
                keys[r] = len(refs)
                refs.append(r)
            elif type(r) is Const and type(r.value) not in (bool, int, float) and id(r) not in keys:
                keys[id(r)] = len(refs)
                refs.append(r)
    active = sorted({keys[steps[j].refs[i]] for j in elementwise for i in steps[j].active
                     if type(steps[j].refs[i]) is int and steps[j].refs[i] in keys})
    summed = steps[last].refs[0] if reduce is not False else steps[last].outs[0]
    body = [steps[j] for j in elementwise]

    def f(*symbols):
        values = {}
        for r, s in zip(refs, symbols):
            values[r if type(r) is int else id(r)] = s

        def arg(r):
            if type(r) is int:
                return values[r]
            return values.get(id(r), r.value)

        for step in body:
            values[step.outs[0]] = step.func(*map(arg, step.refs))
        return values[summed]

    f.__name__ = "region"
    examples = [np.zeros(*meta[r]) if type(r) is int else r.value for r in refs]
    kinds = [meta[r][1] if type(r) is int else np.result_type(r.value) for r in refs]
    if any(k.kind == "f" and k != meta[steps[last].outs[0]][1] for k in kinds):
        return None, None  # a kernel sums a partial that is an input in the input's precision, the tape in the value's
    try:
        kernel = build_kernel(f, None, examples, len(refs), active, reduce is True, kinds)
    except Exception:  # noqa: BLE001 - a region the kernels cannot run stays as recorded
        return None, None
    if active and len(kernel.outputs) == 1:
        return None, None  # its value is not a real number
    out = steps[last].outs[0]
    axes = reduce if type(reduce) is AxisSum else _broadcast_inputs(meta[summed][0], examples) if not reduce else None
    if axes is not None and _full_operations(kernel, examples, math.prod(axes.shape)) > 1 + 2 * sum(
            math.prod(meta[steps[j].outs[0]][0]) == math.prod(axes.shape) for j in elementwise):
        return None, None  # its partials cost more passes than the steps' adjoints (`_full_operations`)
    region = Region([steps[j] for j in order], refs, active, out, last, axes)
    return KernelStep(kernel, refs, active, None, out, reduce is True, region), region


def _full_operations(kernel, examples, size):
    """The operations of ``kernel`` on inputs like ``examples`` whose results have ``size`` elements: its passes over
    the call's shape.  A kernel computes one partial per active input in forward mode, so a chain where several
    small inputs take part (a mixture's ``-0.5 ((x - mu) / sigma)² - log sigma``, four parameters of shape (k,))
    makes more passes than its steps make with their adjoints, about two each: it is fused where it makes at most
    one more (the mixture's 7 steps: 16 passes, measured 1.3x slower fused; ``tanh(z + b)``: 4, its value and
    ``1 - t²`` shared by z and b, 0.6-0.75x the steps' time; ``3 sin(z - b)``: 7 against 3 steps)."""
    shapes = {x.index: np.shape(v) for x, v in zip(kernel.inputs, examples)}
    count = 0
    for node in kernel.order:
        args = [shapes[a.index] if type(a) is Sym else np.shape(a) for a in node.args]
        shapes[node.index] = np.broadcast_shapes(*args)
        count += math.prod(shapes[node.index]) == size
    return count


def _broadcast_inputs(shape, examples):
    """The `AxisSum` summing no axis of a broadcast region some of whose array inputs have fewer elements than
    its value (``X @ W + b``), else None."""
    if all(np.ndim(v) == 0 or np.shape(v) == shape for v in examples):
        return None
    return AxisSum(tuple(shape), (), 1, tuple(shape))
