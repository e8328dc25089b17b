"""The forward part of a replayed program's source: `ForwardWriter` writes each recorded step as a `_Block` of lines
(values recomputed as recorded, guards checked where they were taken, elementwise steps as inline expressions);
`SourceWriter` names the program's values, constants and step calls for the forward and the backward writer."""


import math

import numpy as np

from .axis_sums import SHORT_AXIS
from .broadcast_pullbacks import unscaled_kernel
from .derivatives import DERIVATIVES, FLOAT_SAFE
from .expr import Src
from .kernel_source import infer_dtypes, output_dtypes
from .kernels import (
    value_kind,
)
from .numpy_facts import getitem
from .program import Guard, KernelStep, Pack, SecondOrderStep, unpacked
from .pullbacks import unbroadcast
from .region_runners import CHOSEN_MIN, axis_region_runner, blocked_runner, matmul_runner, region_runner
from .regions_epilogue import epilogue_runner
from .registry import OUTPUTS, PER_ARGUMENT, SEQUENCE


def _may_raise(func):
    """Whether ``func`` raises on some values (np.linalg: a singular matrix): its step is kept even where the
    gradient does not read its value, so that a replay raises where `db.gradient` does."""
    return getattr(func, "__module__", None) == "numpy.linalg"


class _Block:
    """Forward lines for one step, the local names they define and use; a guard (or a step that may raise,
    `_may_raise`) is always kept."""

    __slots__ = ("lines", "defines", "uses", "guard", "step")

    def __init__(self, lines, defines, uses, guard=False):
        self.lines, self.defines, self.uses, self.guard = lines, set(defines), set(uses), guard
        self.step = None  # the position of the step it computes (None: a conversion)


class SourceWriter:
    """How generated code names a program's values, constants and step calls: what the forward and
    the backward writer share."""

    def __init__(self, program, space):
        self.p = program
        self.space = space

    def ref(self, r):
        """The source of a step's reference: a value, a tuple or list of them built anew, or a constant."""
        if type(r) is int:
            return f"v{r}"
        if type(r) is Pack:
            items = "".join(f"{self.ref(m)}, " for m in r.refs)
            return f"({items})" if r.kind is tuple else f"[{items}]" if r.kind is list else f"slice({items})"
        return self.space.bind(r.value)

    def args(self, step):
        refs = [self.ref(r) for r in step.refs]
        if step.kind == SEQUENCE:
            return [f"[{', '.join(refs)}]"] + [self.space.bind(x) for x in step.rest]
        return refs

    def split_matmul(self, step, site, a_shape, b_shape):
        """The bound name of `region_runners.matmul_runner` for a product ``a @ b`` of these shapes in ``step`` (at
        ``site``: "forward", or the argument whose adjoint it is), made once for every plan of the program; None
        unless ``step`` is a product of `real_matrices` large enough to split."""
        runner = self.product(step, site, a_shape, b_shape)
        return None if runner is None else self.space.bind(runner, "k")

    def product(self, step, site, a_shape, b_shape):
        """`split_matmul`'s runner itself (None where it has none)."""
        if not self.real_matrices(step):
            return None
        key = (step, "matmul", site)
        if key not in self.p.runners:
            self.p.runners[key] = matmul_runner(a_shape, b_shape, self.p.meta[step.outs[0]][1])
        return self.p.runners[key]

    def real_matrices(self, step):
        """Whether ``step`` is ``@`` or np.dot of two matrices of one real float dtype, its result's."""
        if step.func not in (np.matmul, np.dot) or step.kwargs or len(step.refs) != 2 or step.outs[0] is None:
            return False
        dtype = self.p.meta[step.outs[0]][1]
        return dtype.kind == "f" and all(len(self.p.shape_of(r)) == 2 and self._dtype(r) == dtype for r in step.refs)

    def _dtype(self, r):
        return np.result_type(r.value) if type(r) is not int else self.p.meta[r][1]

    def call(self, step, args):
        kwargs = f", **{self.space.bind(step.kwargs)}" if step.kwargs else ""
        return f"{self.space.bind(step.impl, 's')}({', '.join(args)}{kwargs})"


class ForwardWriter(SourceWriter):
    """The forward code, a `_Block` per step: values recomputed as recorded, guards checked where they were
    taken.  ``floats``: the values still Python floats at the point written (the float-safe operators keep them)."""

    def __init__(self, program, space):
        super().__init__(program, space)
        self.floats = set(program.float_leaves)
        self.fresh = set()  # (kernel output, without its value): partials that are new arrays on every call
        self.epilogues = {s.region.product.step.outs[0]: s for s in program.steps  # product -> its epilogue's step
                          if type(s) is KernelStep and s.region is not None and s.region.product is not None}

    def fresh_partials(self, valueless):
        """The kernel outputs whose partials are arrays of their own on every call, when the regions of the
        outputs in ``valueless`` run without their values."""
        return {o for o, without in self.fresh if without == (o in valueless)}

    def without_values(self, blocks, dead):
        """``blocks`` with the kernels of the forward regions whose outputs are in ``dead`` computing their
        partials only."""
        changed = []
        for block in blocks:
            step = self.p.steps[block.step] if block.step is not None else None
            if type(step) is KernelStep and step.out in dead:
                position = block.step
                block = self.kernel(step, True)
                block.step = position
            changed.append(block)
        return changed

    def blocks(self):
        """The forward steps as `_Block` s, in order."""
        blocks = []
        for k, step in enumerate(self.p.steps):
            if type(step) is Guard:
                blocks += self.as_numpy([step.index])
                blocks.append(self.guard(step))
            elif type(step) is KernelStep:
                blocks += self.as_numpy(_indices(step.refs))
                blocks.append(self.kernel(step))
            elif type(step) is SecondOrderStep:
                blocks += self.as_numpy(_indices(step.refs))
                blocks.append(self.second_order(step))
            elif step.func == "cut":
                blocks.append(self.cut(step))
            elif step.outs and step.outs[0] in self.epilogues \
                    and self.epilogue_runner(self.epilogues[step.outs[0]]) is not None:
                continue  # computed by its epilogue's runner (`kernel`)
            else:
                if self.stays_float(step):
                    self.floats.add(step.outs[0])
                else:
                    blocks += self.as_numpy(_indices(step.refs))
                blocks.append(self.step(k, step))
            blocks[-1].step = k
        return blocks

    def guard(self, step):
        convert, expected = self.space.bind(step.convert), self.space.bind(step.expected)
        line = f"    if {convert}(v{step.index}) != {expected}: raise GuardFailed"
        return _Block([line], [], [f"v{step.index}"], True)

    def cut(self, step):
        """``cut(x)``: the same value under a new name (a Python float still)."""
        if step.refs[0] in self.floats:
            self.floats.add(step.outs[0])
        return _Block([f"    v{step.outs[0]} = {self.ref(step.refs[0])}"], [f"v{step.outs[0]}"], _uses(step))

    def kernel(self, step, valueless=False):
        runner = self.epilogue_runner(step) if step.region is not None and step.region.product is not None else None
        if runner is not None:  # the product and its epilogue in one call
            product = step.region.product
            refs = list(product.step.refs) + [r for k, r in enumerate(step.refs) if k != product.slot]
            args, uses = ", ".join(map(self.ref, refs)), [f"v{r}" for r in _indices(refs)]
            line = f"    p{step.out} = {runner}({args})[1]" if valueless \
                else f"    v{step.out}, p{step.out} = {runner}({args})"
            return _Block([line], [f"p{step.out}"] if valueless else [f"v{step.out}", f"p{step.out}"], uses)
        args = ", ".join(self.ref(r) for r in step.refs)
        if valueless:
            return _Block([f"    p{step.out} = {self.kernel_runner(step, True)}({args})[1]"], [f"p{step.out}"],
                          _uses(step))
        line = f"    v{step.out}, p{step.out} = {self.kernel_runner(step)}({args})"
        return _Block([line], [f"v{step.out}", f"p{step.out}"], _uses(step))

    def epilogue_runner(self, step):
        """The bound name of `regions_epilogue.epilogue_runner` for the region of ``step``, a matrix product's
        epilogue, beside the product's runner and the region's own (its candidate run separately), made once for every
        plan; None where it cannot run (the product's line, then the region's, are written)."""
        key = (step, "epilogue")
        if key not in self.p.runners:
            product = step.region.product
            a, b = (self.zeros_of(r) for r in product.step.refs)
            examples = [self.zeros_of(r) for r in step.refs]
            self.kernel_runner(step)
            region = self.p.runners[step, False][0]
            multiply = self.product(product.step, "forward", a.shape, b.shape) or np.matmul
            slot = product.slot

            def separate(left, right, *others):
                values = list(others)
                values.insert(slot, multiply(left, right))
                return region(*values)

            self.p.runners[key] = epilogue_runner(step.kernel, examples, step.region.axes, step.active, slot, a, b,
                                                  separate)
            if self.p.runners[key] is not None:
                step.region.choices["value"] = self.p.runners[key].choice
        runner = self.p.runners[key]
        return None if runner is None else self.space.bind(runner, "k")

    def zeros_of(self, r):
        """An array like reference ``r``'s value (zeros), or the constant itself."""
        return np.zeros(*self.p.meta[r]) if type(r) is int else r.value

    def second_order(self, step):
        """A second-order kernel: its value and its results (``p<out>``: partials, then second partials), the
        inner arguments' partials among them as values."""
        examples = [np.zeros(*self.p.meta[r]) if type(r) is int else r.value for r in step.refs]
        shape = np.broadcast_shapes(*[np.shape(v) for v in examples])
        kernel, backend, size, result_shapes = step.kernel, step.backend, int(np.prod(shape)), step.result_shapes
        whole = kernel.typed_whole(tuple(map(value_kind, examples))) \
            if backend == "numpy" and all(kernel.fresh) else None
        with np.errstate(all="ignore"):  # zeros for the example values: only the results' shapes are read
            fits = whole is not None and all(np.shape(r) == shape for r in whole(*examples))
        if fits and all(s == shape for s in result_shapes):  # as `Kernel.run` would, less its checks (~10 us)

            def run(*values):
                results = whole(*values)
                return np.add.reduce(results[0], None), results[1:]
        else:
            def run(*values):
                return kernel.run(backend, values, shape, size, result_shapes)

        args = ", ".join(self.ref(r) for r in step.refs)
        lines = [f"    v{step.out}, p{step.out} = {self.space.bind(run, 'k')}({args})"]
        lines += [f"    v{d} = p{step.out}[{step.slots[p]}]" for p, d in step.partials.items()]
        defines = [f"v{step.out}", f"p{step.out}"] + [f"v{d}" for d in step.partials.values()]
        return _Block(lines, defines, _uses(step))

    def step(self, k, step):
        """A recorded operation: an inline expression, ``x[index]``, or a call of its implementation;
        its plain results (a shape, a count) are guards."""
        uses = _uses(step)
        if step.kind == OUTPUTS:
            same = self.space.bind(same_result)
            lines = [f"    r{k} = {self.call(step, self.args(step))}"]
            lines += [f"    v{o} = r{k}[{j}]" for j, o in enumerate(step.outs) if o is not None]
            for j, a in step.expected.items():
                lines.append(f"    if not {same}(r{k}[{j}], {self.space.bind(a)}): raise GuardFailed")
            return _Block(lines, [f"r{k}"] + [f"v{o}" for o in step.outs if o is not None], uses,
                          bool(step.expected) or _may_raise(step.func))
        if tuple(step.outs) == (None,):  # (a list from the general path, a tuple from the fast one)
            same = self.space.bind(same_result)
            result, expected = self.call(step, self.args(step)), self.space.bind(step.expected)
            line = f"    if not {same}({result}, {expected}): raise GuardFailed"
            return _Block([line], [], uses, True)
        if inline_step(step):
            expression = Src("", self.space)._apply(step.func, [Src(self.ref(r), self.space) for r in step.refs])
            return _Block([f"    v{step.outs[0]} = {expression.text}"], [f"v{step.outs[0]}"], uses)
        if step.func is getitem and not step.kwargs:  # x[index] as written, no call of `getitem`
            line = f"    v{step.outs[0]} = {self.ref(step.refs[0])}[{self.ref(step.refs[1])}]"
            return _Block([line], [f"v{step.outs[0]}"], uses)
        keepdims = along_short_last_axis(step, self.p)
        if keepdims is not None:
            pick, run = self.space.bind(_EXTREMES[step.func], "s"), self.space.bind(_extreme_by_columns, "s")
            line = f"    v{step.outs[0]} = {run}({pick}, {self.ref(step.refs[0])}, {keepdims})"
            return _Block([line], [f"v{step.outs[0]}"], uses)
        product = self.real_matrices(step) and self.split_matmul(step, "forward", *map(self.p.shape_of, step.refs))
        call = f"{product}({', '.join(self.args(step))})" if product else self.call(step, self.args(step))
        return _Block([f"    v{step.outs[0]} = {call}"], [f"v{step.outs[0]}"], uses, _may_raise(step.func))

    def stays_float(self, step):
        """Whether an inline step on Python floats (and Python number literals) may run on them."""
        if not (step.func in FLOAT_SAFE and inline_step(step)):
            return False
        return all(r in self.floats if type(r) is int else _python_number(r.value) for r in step.refs)

    def as_numpy(self, refs):
        """Convert the Python floats among ``refs`` to np.float64 before a use they are not safe for."""
        blocks = []
        for r in refs:
            if r in self.floats:
                self.floats.discard(r)
                blocks.append(_Block([f"    v{r} = {self.space.bind(np.float64)}(v{r})"], [f"v{r}"], [f"v{r}"]))
        return blocks

    def kernel_runner(self, step, valueless=False):
        """The kernel on its recorded backend and shapes; blocked with buffers of its own when the
        shapes allow (no allocation per call; where it runs on several threads, on them or on one, whichever a
        `kernels.BackendChoice` finds faster, recycling buffers), else the recorded backend.  A forward region's
        (``backend`` None) runs blocked, or on the backend `kernels.set_backend` forced when it was compiled, or as
        ``db.sum`` chooses; ``valueless``: its variant without the value (`Kernel.without_value`).  A sum's partials
        without their literal factors (`broadcast_pullbacks.unscaled_kernel`; `kernel_adjoints` multiplies the
        cotangent)."""
        kernel, backend = unscaled_kernel(step.kernel)[0] if step.reduce else step.kernel, step.backend
        examples = [np.zeros(*self.p.meta[r]) if type(r) is int else r.value for r in step.refs]
        shape = np.broadcast_shapes(*[np.shape(v) for v in examples])
        size = int(np.prod(shape))
        active_shapes = [np.shape(examples[i]) for i in step.active]
        blockable = size and all(np.size(v) in (1, size) for v in examples) \
            and _partials_typed_as_value(kernel, examples)
        if step.region is not None and step.region.axes is not None:
            made = self.p.runners.get((step, False))  # made for another plan (`compile_plans`): its buffers
            if made is None:
                made = self.p.runners[step, False] = axis_region_runner(kernel, examples, step.region.axes,
                                                                         step.active, size)
            runner, used = made
            step.region.backends["value"] = used
            if hasattr(runner, "choice"):
                step.region.choices["value"] = runner.choice
            return self.space.bind(runner, "k")
        if step.region is not None:
            made = self.p.runners.get((step, valueless))  # made for another plan (`compile_plans`)
            if made is None:
                made = self.p.runners[step, valueless] = region_runner(kernel, valueless, examples, shape, size,
                                                                        active_shapes, blockable)
            runner, used, fresh = made
            variant = "gradient alone" if valueless else "value"
            step.region.backends[variant] = used
            if hasattr(runner, "choice"):
                step.region.choices[variant] = runner.choice
            if fresh:
                self.fresh.add((step.out, valueless))
            return self.space.bind(runner, "k")
        if blockable:
            runner = self.p.runners.get((step, valueless))  # made for another plan (`compile_plans`): its buffers
            if runner is None:
                runner = self.p.runners[step, valueless] = blocked_runner(kernel, examples, shape, size, active_shapes)
            return self.space.bind(runner, "k")

        def run(*values):
            return kernel.run(backend, values, shape, size, active_shapes)

        def run_full(*values):  # a broadcast's adjoints take each partial at the value's shape (see kernel_adjoints)
            value, partials = kernel.run(backend, values, shape, size, active_shapes)
            return value, [p if p.shape == shape else np.array(np.broadcast_to(p, shape)) for p in partials]

        return self.space.bind(run if step.reduce else run_full, "k")


def _partials_typed_as_value(kernel, examples):
    """Whether the blocked kernel computes every partial in the value's dtype: a selection's partial
    (a comparison) is computed as a boolean or integer, which `Kernel.run` casts and it does not."""
    dtypes = output_dtypes(kernel, infer_dtypes(kernel, tuple(map(value_kind, examples))))
    return all(np.dtype(d) == np.dtype(dtypes[0]) for d in dtypes[1:])


def along_short_last_axis(step, program):
    """Whether ``step`` is np.max or np.min of one real array of ``CHOSEN_MIN`` elements or more along its last axis
    alone, shorter than `kernels.SHORT_AXIS`: its ``keepdims`` (a bool), else None.  NumPy's reduction runs a loop
    per row there (a mixture's (20000, 4) log densities: np.max 790 us, by columns `_extreme_by_columns` 71 us; the
    tie shares of its pullback 1.5 ms, by columns `extreme_pullback_by_columns` a fraction)."""
    if step.func not in _EXTREMES or len(step.refs) != 1 or type(step.refs[0]) is not int \
            or not set(step.kwargs) <= {"axis", "keepdims"} or type(step.kwargs.get("keepdims", False)) is not bool:
        return None
    shape, dtype = program.meta[step.refs[0]]
    axis = step.kwargs.get("axis")
    axis = axis[0] if type(axis) is tuple and len(axis) == 1 else axis
    if type(axis) is not int or len(shape) < 2 or axis % len(shape) != len(shape) - 1 or dtype.kind != "f" \
            or not 1 < shape[-1] < SHORT_AXIS or math.prod(shape) < CHOSEN_MIN:
        return None
    return step.kwargs.get("keepdims", False)


_EXTREMES = {np.max: np.maximum, np.amax: np.maximum, np.min: np.minimum, np.amin: np.minimum}


def _extreme_by_columns(pick, a, keepdims):
    """np.max (``pick`` np.maximum) or np.min of ``a`` along its short last axis, its columns compared in turn
    (NaN propagates as in the reduction)."""
    m = pick(a[..., 0], a[..., 1])
    for k in range(2, a.shape[-1]):
        pick(m, a[..., k], out=m)
    return m[..., None] if keepdims else m


def extreme_pullback_by_columns(ans, a, keepdims, g):
    """The cotangent of ``a`` from ``g``, that of ``ans``, np.max or np.min of ``a`` along its short last axis: the
    tape's `rules.reductions.extreme_vjp` (tied extremes share ``g`` equally), a column at a time with the same
    operations on each element, so the same bits."""
    m = ans[..., 0] if keepdims else ans
    g = np.broadcast_to(g, np.shape(ans))
    g = g[..., 0] if keepdims else g
    hits = [np.equal(a[..., k], m) for k in range(a.shape[-1])]
    count = hits[0].astype(a.dtype)
    for h in hits[1:]:
        count += h
    np.maximum(count, 1, out=count)
    out = np.empty(a.shape, np.result_type(g, a.dtype))
    for k, h in enumerate(hits):
        np.multiply(g, np.divide(h, count), out=out[..., k])
    return out


def unbroadcast_short_axes(g, shape):
    """`pullbacks.unbroadcast` as generated code calls it; where it sums the leading axes of a C-contiguous array of
    ``CHOSEN_MIN`` elements or more whose kept trailing axes hold fewer than `kernels.SHORT_AXIS` elements, one
    column at a time (a (20000, 4) cotangent summed to (4,): NumPy's reduction adds row after row, 370 us; by columns
    80 us; pairwise summation, so the same up to rounding)."""
    gshape = np.shape(g)
    lead = len(gshape) - len(shape)
    kept = len(shape) - next((k for k, n in enumerate(shape) if n != 1), len(shape))  # trailing axes not summed
    if gshape == shape or type(g) is not np.ndarray or not g.flags.c_contiguous or g.size < CHOSEN_MIN \
            or not kept or gshape[lead + len(shape) - kept:] != shape[len(shape) - kept:] \
            or math.prod(shape) >= SHORT_AXIS or g.dtype.kind not in "fc":
        return unbroadcast(g, shape)
    columns = g.reshape(-1, math.prod(shape))
    return np.array([np.add.reduce(columns[:, k]) for k in range(columns.shape[1])], g.dtype).reshape(shape)


def _indices(refs):
    """The value indices that references read: their own, and those inside a `Pack`."""
    return [r for r in unpacked(refs) if type(r) is int]


def _uses(step):
    """The local names of the values a step reads."""
    return [f"v{r}" for r in _indices(step.refs)]


def inline_step(step):
    """Whether a step is written as an expression and differentiated by its partials in the derivative
    table: an elementwise function called without keywords (np.clip's rule fills in bounds None or left out)."""
    return step.kind == PER_ARGUMENT and not step.kwargs and step.func in DERIVATIVES and step.func is not np.clip


def same_result(a, b):
    """Whether a replayed plain result equals the recorded one: arrays by value, tuples and lists
    (``np.nonzero``'s arrays) element by element."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_result, a, b))
    try:
        return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) else bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable results are different results
        return False


def _python_number(value):
    """A literal that keeps Python-float arithmetic exact to float64's: a float, or an int a float
    holds exactly (a bool or a huge int is left to NumPy)."""
    return type(value) is float or (type(value) is int and abs(value) <= 2**53)
