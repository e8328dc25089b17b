"""Straight-line Python for a recorded prepared program: forward steps, guards, then the adjoints.

Elementwise steps become inline expressions (operators on NumPy scalars cost
no ufunc dispatch) and their adjoints are rendered from the `DERIVATIVES`
table through `Src`, an algebra that writes code instead of computing.  Other
steps call their implementation, and their vjp maker in the backward part.

Three units write it: `_Forward` the forward steps and guards; `_Backward`
walks the steps last first and writes each argument's cotangent term; and
`_Cotangents` decides, once, from the recorded order, how each term lands
(assigned, added, added in place, added now to a number known while writing,
or a leaf's one kernel product written last, straight into ``out=``) — the
generated code has no bookkeeping left.

Arguments that were Python floats enter as Python floats: ``+``, ``-``, ``*`` and
negation on them give what NumPy's float64 gives (IEEE, no exception), and cost
less.  Any other use first converts the value to ``np.float64``.
"""

import copy
import math
import re
import time

import numpy as np

from .broadcast import _unscaled
from .derivatives import DERIVATIVES, SELECTIONS, SMOOTH, chain_product
from .expr import Src
from .kernel_source import _infer_dtypes, _out_dtypes
from .kernels import (
    FORCED_BACKEND,
    ONE_THREAD,
    SHORT_AXIS,
    BackendChoice,
    Bucket,
    _chunks,
    _fresh_partials,
    _kind,
    axis_sum_moved,
    axis_sum_rows,
    axis_sum_whole,
    moved,
    moved_value,
    short_axes_first,
)
from .numpy_facts import as_dtype, getitem
from .program import Const, Guard, KernelStep, Pack, SecondOrderStep, Step, unpacked
from .pullbacks import (
    IndexPullback,
    RealPart,
    apply,
    kernel_pullback_source,
    table_pullback,
    table_pullback_source,
    unbroadcast,
)
from .registry import COMPLEX_RULES, OUTPUTS, PER_ARGUMENT, SAME_RULE, SEQUENCE, output_pullback
from .rules.linalg import DOT_PULLBACKS


class Namespace:
    """The names generated code refers to; every one made by the library."""

    def __init__(self):
        self.names = {"np": np, "unbroadcast": _unbroadcast, "IndexPullback": IndexPullback}
        self._ids = {}

    def bind(self, value, prefix="c"):
        key = id(value)
        if key not in self._ids:
            name = f"{prefix}{len(self.names)}"
            self.names[name] = value
            self._ids[key] = (name, value)  # keep value alive so its id stays unique
        return self._ids[key][0]


def compile_program(program, guard_failed):
    """Generate two functions of the leaf values for ``program`` (three for one leaf):

    ``run(leaf_values, out=None) -> (value, gradients of the active leaves)``, and
    ``gradient(...)``, the same without the value: forward steps only the value needed
    are left out, and a forward region's kernel whose value nothing else reads runs
    without it (`Kernel.without_value`).  With ``out`` (one array per active leaf) the gradients
    are written there instead and ``out`` is returned in their place.

    A program of one leaf, a Python float or an array, differentiated, also gets ``one(x)``: the call
    ``prepared(x)`` whole (`_one`), or `MISS` for another case.

    Returns ``(run, gradient, one, source, removed)`` (``one`` None for other programs), ``removed`` per
    function name the positions in ``program.steps`` of the steps it leaves out (shown by `db.explain`).
    """
    space = Namespace()
    space.names["GuardFailed"] = guard_failed
    forward = _Forward(program, space)
    blocks = forward.blocks()
    if program.out is None:
        value = space.bind(program.constant)
    elif program.out in forward.floats:
        value = f"{space.bind(np.float64)}(v{program.out})"
    else:
        value = f"v{program.out}"
    leaves = f"    {''.join(f'v{i}, ' for _, i in program.leaves)}= leaves"
    for i in sorted(program.complex_leaves):  # a Python complex is weak in NumPy; its tape value is np.complex128
        leaves += f"\n    v{i} = {space.bind(np.complex128)}(v{i})"
    functions, removed = [], {}
    large = _large_names(program)
    for name, returned in (("run", value), ("gradient", "None")):
        writer = _Backward(program, space, forward.fresh_partials(()), forward.floats)
        backward = _tidied(writer.lines(returned))
        needed = set(_LOCAL.findall("\n".join(backward)))
        dropped = []
        lines = _live(blocks, needed, dropped)
        dead = _dead_region_values(program, lines + backward)
        if dead:  # their kernels again, without the value
            dropped = []
            lines = _live(forward.without_values(blocks, dead), needed, dropped)
            writer = _Backward(program, space, forward.fresh_partials(dead), forward.floats)
            backward = _tidied(writer.lines(returned))
        removed[name] = dropped
        body = _without_needless_conversions(lines + backward, space.names)
        read = set(_LOCAL.findall("\n".join(body)))
        unpacked = [leaves] if any(f"v{i}" in read for _, i in program.leaves) else []  # (a fold's known gradient)
        functions += [f"def {name}(leaves, out=None):"] + _freed(unpacked + body, large)
        if name == "gradient":
            functions += _freed(_one(program, space, lines, writer), large)
    source = "\n".join(functions)
    exec(compile(source, "<dualbroadcast prepared program>", "exec"), space.names)
    return space.names["run"], space.names["gradient"], space.names.get("one"), source, removed


def _large_names(program):
    """The local names of the generated code (values ``v<i>``, cotangents ``g<i>``, a kernel's partials ``p<i>``)
    that hold arrays of ``FREED_BYTES`` or more."""
    names = set()
    for i, (shape, dtype) in program.meta.items():
        if math.prod(shape) * dtype.itemsize >= FREED_BYTES:
            names.update((f"v{i}", f"g{i}"))
    for step in program.steps:
        if type(step) in (KernelStep, SecondOrderStep) \
                and max(math.prod(program.shape_of(r)) for r in step.refs) * 8 >= FREED_BYTES:
            names.add(f"p{step.out}")
    return names


def _freed(lines, large):
    """A function's ``lines`` with ``del`` of each name in ``large`` after the statement that reads it last, where that
    is a statement of the function's body (not inside a block), before its end (``if out is None``).  A replay keeps
    no array longer than `db.gradient`'s tape does: the MLP's layers held to the end took 44 MB at the peak where the
    tape takes 24, and the allocator gave the difference back to the system on every call (2,500 page faults more)."""
    last = {}
    for k, line in enumerate(lines):
        for name in _LOCAL_OR_COTANGENT.findall(line):
            last[name] = k
    ending = next((k for k, line in enumerate(lines) if line.startswith("    if out is None")), len(lines))
    freed = []
    for k, line in enumerate(lines):
        freed.append(line)
        if k < ending and _STATEMENT.match(line):
            dead = sorted({n for n in _LOCAL_OR_COTANGENT.findall(line) if n in large and last[n] == k})
            if dead:
                freed.append(f"    del {', '.join(dead)}")
    return freed


FREED_BYTES = 1 << 17  # arrays from 128 KiB (glibc's first mmap threshold) are deleted after their last use
_LOCAL_OR_COTANGENT = re.compile(r"\b[vpg]\d+\b")
_STATEMENT = re.compile(r"    (?!if |else|return|def |for |with |try)\S.*[^:]$")  # a simple statement of the body


def compile_plans(program, guard_failed):
    """`compile_program`'s ``(run, gradient, one, source, removed)`` for ``program``, and its plans' choices.

    Fusing a forward region is a bet that its kernel beats the steps it replaces; it can lose (the MLP's
    ``tanh(h @ W + b)``: a partial per input where the steps pass one cotangent through ``+``).  So where a region
    has ``CHOSEN_MIN`` elements or more, the program is also compiled as recorded (such regions left unfused), and,
    with two to ``PLAN_REGIONS`` of them, once without each: ``run`` and ``gradient`` then run the plan a
    `kernels.BackendChoice` holds for each (the fused one first; every call timed, the others re-timed now and
    then, one taking over when faster by ``PLAN_MARGIN``: `_plan_choice`), ``one`` is None, and the last item
    maps "value" and "gradient alone" to those choices (else it is None).  Every plan computes the same gradient:
    the fused kernels differentiate the steps they replace (up to rounding).  ``source`` and ``removed`` are the
    fused plan's; the plans share each region's runner (`_Forward.kernel_runner`)."""
    fused = compile_program(program, guard_failed)
    large = [s for s in program.steps if type(s) is KernelStep and s.region is not None
             and math.prod(np.broadcast_shapes(*map(program.shape_of, s.refs))) >= CHOSEN_MIN]
    if not large:
        return fused + (None,)
    plans = {"fused": fused, "as recorded": compile_program(_without_regions(program, large), guard_failed)}
    if 2 <= len(large) <= PLAN_REGIONS:
        for k, step in enumerate(large, start=1):
            plans[f"region {k} as recorded"] = compile_program(_without_regions(program, [step]), guard_failed)
    run = _plan_choice({name: compiled[0] for name, compiled in plans.items()})
    gradient = _plan_choice({name: compiled[1] for name, compiled in plans.items()})
    return run, gradient, None, fused[3], fused[4], {"value": run.choice, "gradient alone": gradient.choice}


PLAN_REGIONS = 4  # regions from which a program is compiled as recorded and fused, not once without each region
PLAN_MARGIN = 1.05  # a plan takes over when the chosen one is slower than it by this factor: whole calls are timed,
# of which a region is a part (the MLP's fused regions cost 10% of its call more than its steps)


def _without_regions(program, kernel_steps):
    """A view of ``program`` whose steps have the regions of ``kernel_steps`` as recorded: each region's steps in
    their order where its kernel was (its last step's place; what they read is made before, and only the region
    reads what they make)."""
    view = copy.copy(program)
    view.steps = [t for s in program.steps for t in (s.region.steps if s in kernel_steps else [s])]
    return view


def _plan_choice(functions):
    """A function ``(leaves, out=None)`` calling one of ``functions`` (plan name -> compiled function, "fused"
    first) under a `kernels.BackendChoice` whose first choice is "fused" (timing every plan on the first call
    would run the whole program several times) and whose margin is ``PLAN_MARGIN``; ``.choice`` the choice."""
    names = list(functions)
    choice = BackendChoice(_Runners([(f, name) for name, f in functions.items()]), PLAN_MARGIN)
    choice.buckets[1] = Bucket(names[0], names[1:])  # one size: the bucket of size 1
    run = choice.run

    def chosen(leaves, out=None):
        return run((leaves, out), (), 1, ())[:2]

    chosen.choice = choice
    return chosen


def _one(program, space, forward, writer):
    """The lines of ``one(x)``: the call ``prepared(x)`` whole, of a program of one argument that is one Python float,
    one array or a flat tuple or list of Python floats (no lines for other programs).  It returns `MISS` unless
    ``x`` is such an argument of the recorded kind (an array's shape, its dtype by identity; a sequence's type and
    length, floats only) and the globals f read are bound as when it was recorded (a KeyError if one was deleted);
    then the ``forward`` lines and ``writer``'s backward ones (`_Backward.single` or ``every``), the gradient
    returned as `db.gradient` gives it (a Python float; an array of x's dtype; Python floats in x's type).
    `prepared.PreparedGradient.__call__` keeps the thread's last ``one`` and calls it first: ~300 ns less than
    finding the program and checking each."""
    kind = _sequence_of_floats(program)
    if kind is None and (len(program.leaves) != 1 or program.complex_leaves or writer.single is None):
        return []
    if kind is not None:
        x, n = "xs", len(program.leaves)
        test = f"type(xs) is not {kind.__name__} or len(xs) != {n} or list(map(type, xs)).count(float) != {n}"
    else:
        (_, leaf), = program.leaves
        x = f"v{leaf}"
        if leaf in program.float_leaves:
            test = f"type({x}) is not float"
        else:
            shape, dtype = program.meta[leaf]
            test = f"type({x}) is not {space.bind(np.ndarray)} or {x}.dtype is not {space.bind(dtype)} " \
                   f"or {x}.shape != {shape!r}"
    if program.globals_read:
        test += f" or not ({_globals_test(program.globals_read, space)})"
    lines = _without_needless_conversions(forward + _tidied(writer.single if kind is None else writer.every),
                                          space.names)
    gradient = lines.pop()
    if not gradient.startswith("    return "):
        raise AssertionError(gradient)  # (the backward lines end with the gradient returned)
    gradient = gradient[len("    return "):]
    if kind is not None:
        read = set(_LOCAL.findall("\n".join(lines + [gradient])))
        unpacked = [f"    {''.join(f'v{i}, ' for _, i in program.leaves)}= xs"] \
            if any(f"v{i}" in read for _, i in program.leaves) else []
        lines = unpacked + lines
        if type(space.names.get(gradient)) is tuple:  # known numbers: Python floats already
            end = [f"    return {gradient if kind is tuple else f'list({gradient})'}"]
        else:
            end = [f"    grads = {gradient}",
                   f"    if list(map(type, grads)).count(float) == {n}:",
                   f"        return {'grads' if kind is tuple else 'list(grads)'}",
                   f"    return {kind.__name__}(map(float, grads))"]
    elif leaf in program.float_leaves:
        end = [f"    return float({gradient})"]
    else:
        dtype = space.bind(program.meta[leaf][1])
        end = [f"    result = {gradient}",
               f"    if type(result) is {space.bind(np.ndarray)} and result.dtype is {dtype}:",
               "        return result",
               f"    return {space.bind(np.asarray)}(result, dtype={dtype})"]
    return [f"def one({x}):", f"    if {test}:", f"        return {space.bind(MISS)}"] + lines + end


def _sequence_of_floats(program):
    """``tuple`` or ``list`` when the program's one argument is a flat tuple or list of Python floats, each
    differentiated; else None."""
    if len(getattr(program, "arguments", ())) != 1:
        return None
    argument = program.arguments[0]
    treedef, n = argument.treedef, len(program.leaves)
    if type(treedef) is not tuple or len(treedef) != 3 or treedef[0] not in ("tuple", "list") or treedef[1] is not None:
        return None
    if len(treedef[2]) != n or any(c is not None for c in treedef[2]) or len(program.active_leaves) != n \
            or any(i not in program.float_leaves for _, i in program.leaves):
        return None
    return tuple if treedef[0] == "tuple" else list


class _Miss:
    """`MISS`: what a program's ``one`` returns for a call it is not for (cheaper than an exception)."""

    def __repr__(self):
        return "MISS"


MISS = _Miss()


def _globals_test(globals_read, space):
    """Source testing that every global of ``globals_read`` (``(namespace, name, value)``, see
    `prepared._globals_read`) is still bound to its value, the namespaces and values bound in ``space``:
    ``n3['rho'] is c4 and ...`` (a KeyError if one was deleted)."""
    return " and ".join(f"{space.bind(namespace, 'n')}[{name!r}] is {space.bind(value)}"
                        for namespace, name, value in globals_read)


def globals_check(globals_read):
    """A function telling whether every global of ``globals_read`` (`_globals_test`) is still bound to its value,
    written out (~60 ns where a loop of ``dict.get`` took ~130); None if there are none."""
    if not globals_read:
        return None
    space = Namespace()
    lines = ["def unchanged():", "    try:", f"        return {_globals_test(globals_read, space)}",
             "    except KeyError:", "        return False"]
    exec(compile("\n".join(lines), "<dualbroadcast globals check>", "exec"), space.names)
    return space.names["unchanged"]


def _dead_region_values(program, lines):
    """The outputs of the forward regions feeding a sum whose value no line but their kernel's own reads."""
    counts = {}
    for name in _LOCAL.findall("\n".join(lines)):
        counts[name] = counts.get(name, 0) + 1
    return {s.out for s in program.steps
            if type(s) is KernelStep and s.region is not None and s.reduce and counts.get(f"v{s.out}", 0) == 1}


_LOCAL = re.compile(r"\b[vpr]\d+\b")  # the generated code's values, kernel partials and multiple results
_COTANGENT = re.compile(r"\bg\d+\b")
_STORE = re.compile(r"    (g\d+) = [A-Za-z_]\w*$")  # a cotangent given a name's value: no side effect


def _without_needless_conversions(lines, names):
    """``lines`` less each conversion of a Python float to np.float64 whose value every later line reads only as
    the one argument of a ufunc of one input and one output (``np.sin(v0)``: the same float64 loop on the
    same double, ~80 ns less a call)."""
    kept = list(lines)
    for k, line in enumerate(lines):
        conversion = _CONVERSION.match(line)
        if conversion is None or names.get(conversion.group(2)) is not np.float64:
            continue
        value = conversion.group(1)
        later = "\n".join(lines[k + 1:])
        calls = re.findall(rf"\b(\w+)\({value}\)", later)
        if len(calls) == len(re.findall(rf"\b{value}\b", later)) and all(
                isinstance(names.get(f), np.ufunc) and names[f].nin == 1 and names[f].nout == 1 for f in calls):
            kept[k] = None
    return [line for line in kept if line is not None]


_CONVERSION = re.compile(r"    (v\d+) = (\w+)\(\1\)$")


def _tidied(backward):
    """The backward lines less the stores they need not make (`_without_dead_stores`, `_propagated`)."""
    return _propagated(_without_dead_stores(backward))


def _propagated(lines):
    """``lines`` with each store of a value or constant into a cotangent that one later line reads once, as a
    plain read (not a target), left out and the name read there instead: no line assigns a value or constant
    in the backward code (a dot of two slices: ``g1 = v2`` then ``w = g3[c4]; w += g1``, 65536 times)."""
    uses = {}
    for k, line in enumerate(lines):
        for name in _COTANGENT.findall(line):
            uses.setdefault(name, []).append(k)
    lines = list(lines)
    for k, line in enumerate(lines):
        store = _NAME_STORE.match(line)
        if store is None:
            continue
        g, name = store.groups()
        at = uses[g]
        if len(at) != 2 or at[0] != k or at[1] == k:
            continue
        reader = lines[at[1]]
        pattern = rf"\b{g}\b"
        if len(re.findall(pattern, reader)) == 1 and re.search(rf"\b{g}\s*[-+*/@%&|^]?=(?!=)", reader) is None:
            lines[at[1]] = re.sub(pattern, name, reader)
            lines[k] = None
    return [line for line in lines if line is not None]


_NAME_STORE = re.compile(r"    (g\d+) = ([vc]\d+)$")


def _without_dead_stores(lines):
    """The backward ``lines`` less the stores of a name (a number bound here, another cotangent) into a
    cotangent no later line reads: the numbers of a gradient known here are returned as such (a fold of
    Python floats stored 32 cotangents it never read, ~15 ns each)."""
    kept, read = [], set()
    for line in reversed(lines):
        store = _STORE.match(line)
        if store is not None:
            if store.group(1) not in read:
                continue
            read.discard(store.group(1))  # read later from this store: earlier ones are dead until read
        read.update(_COTANGENT.findall(line.partition("=")[2] if store is not None else line))
        kept.append(line)
    kept.reverse()
    return kept


def _gives_view(index):
    """Whether ``x[index]`` is a view of x for every array x it indexes (a slice, or a tuple of slices and
    integers with a slice among them): adding into it adds into x."""
    items = index if type(index) is tuple else (index,)
    return slice in map(type, items) and all(type(i) in (slice, int) for i in items)


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


def _live(blocks, needed, dropped=None):
    """The lines of the blocks that guards or the ``needed`` names depend on, in order; the positions of
    the steps left out appended to ``dropped``."""
    kept, live = [], set(needed)
    for block in reversed(blocks):
        if block.guard or block.defines & live:
            kept.append(block.lines)
            live -= block.defines  # in place: a new set per block made long programs quadratic
            live |= block.uses
        elif dropped is not None and block.step is not None:
            dropped.append(block.step)
    if dropped is not None:
        dropped.reverse()
    return [line for lines in reversed(kept) for line in lines]


_FLOAT_SAFE = {np.add, np.subtract, np.multiply, np.negative}  # same on Python floats as on float64


class _Writer:
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

    def call(self, step, args):
        kwargs = f", **{self.space.bind(step.kwargs)}" if step.kwargs else ""
        return f"{self.space.bind(step.impl, 's')}({', '.join(args)}{kwargs})"


class _Forward(_Writer):
    """The forward code, a `_Block` per step: values recomputed as recorded, guards checked where they were
    taken.  ``floats``: the values still Python floats at the point written (the float-safe operators keep them)."""

    def __init__(self, program, space):
        super().__init__(program, space)
        self.floats = set(program.float_leaves)
        self.fresh = set()  # (kernel output, without its value): partials that are new arrays on every call

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
        args = ", ".join(self.ref(r) for r in step.refs)
        if valueless:
            return _Block([f"    p{step.out} = {self.kernel_runner(step, True)}({args})[1]"], [f"p{step.out}"],
                          _uses(step))
        line = f"    v{step.out}, p{step.out} = {self.kernel_runner(step)}({args})"
        return _Block([line], [f"v{step.out}", f"p{step.out}"], _uses(step))

    def second_order(self, step):
        """A second-order kernel: its value and its results (``p<out>``: partials, then second partials), the
        inner arguments' partials among them as values."""
        examples = [np.zeros(*self.p.meta[r]) if type(r) is int else r.value for r in step.refs]
        shape = np.broadcast_shapes(*[np.shape(v) for v in examples])
        kernel, backend, size, result_shapes = step.kernel, step.backend, int(np.prod(shape)), step.result_shapes
        whole = kernel.typed_whole(tuple(map(_kind, examples))) if backend == "numpy" and all(kernel.fresh) else None
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
            same = self.space.bind(_same)
            lines = [f"    r{k} = {self.call(step, self.args(step))}"]
            lines += [f"    v{o} = r{k}[{j}]" for j, o in enumerate(step.outs) if o is not None]
            for j, a in step.expected.items():
                lines.append(f"    if not {same}(r{k}[{j}], {self.space.bind(a)}): raise GuardFailed")
            return _Block(lines, [f"r{k}"] + [f"v{o}" for o in step.outs if o is not None], uses,
                          bool(step.expected) or _may_raise(step.func))
        if step.outs == [None]:
            same = self.space.bind(_same)
            result, expected = self.call(step, self.args(step)), self.space.bind(step.expected)
            line = f"    if not {same}({result}, {expected}): raise GuardFailed"
            return _Block([line], [], uses, True)
        if _inline(step):
            expression = Src("", self.space)._apply(step.func, [Src(self.ref(r), self.space) for r in step.refs])
            return _Block([f"    v{step.outs[0]} = {expression.text}"], [f"v{step.outs[0]}"], uses)
        if step.func is getitem and not step.kwargs:  # x[index] as written, no call of `getitem`
            line = f"    v{step.outs[0]} = {self.ref(step.refs[0])}[{self.ref(step.refs[1])}]"
            return _Block([line], [f"v{step.outs[0]}"], uses)
        keepdims = _along_short_last_axis(step, self.p)
        if keepdims is not None:
            pick, run = self.space.bind(_EXTREMES[step.func], "s"), self.space.bind(_extreme_by_columns, "s")
            line = f"    v{step.outs[0]} = {run}({pick}, {self.ref(step.refs[0])}, {keepdims})"
            return _Block([line], [f"v{step.outs[0]}"], uses)
        return _Block([f"    v{step.outs[0]} = {self.call(step, self.args(step))}"], [f"v{step.outs[0]}"], uses,
                      _may_raise(step.func))

    def stays_float(self, step):
        """Whether an inline step on Python floats (and Python number literals) may run on them."""
        if not (step.func in _FLOAT_SAFE and _inline(step)):
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
        without their literal factors (`broadcast._unscaled`; `kernel_adjoints` multiplies the cotangent)."""
        kernel, backend = _unscaled(step.kernel)[0] if step.reduce else step.kernel, step.backend
        examples = [np.zeros(*self.p.meta[r]) if type(r) is int else r.value for r in step.refs]
        shape = np.broadcast_shapes(*[np.shape(v) for v in examples])
        size = int(np.prod(shape))
        active_shapes = [np.shape(examples[i]) for i in step.active]
        blockable = size and all(np.size(v) in (1, size) for v in examples) \
            and _partials_typed_as_value(kernel, examples)
        if step.region is not None and step.region.axes is not None:
            made = self.p.runners.get((step, False))  # made for another plan (`compile_plans`): its buffers
            if made is None:
                made = self.p.runners[step, False] = _axis_region_runner(kernel, examples, step.region.axes,
                                                                         step.active, size)
            runner, used = made
            step.region.backends["value"] = used
            if hasattr(runner, "choice"):
                step.region.choices["value"] = runner.choice
            return self.space.bind(runner, "k")
        if step.region is not None:
            made = self.p.runners.get((step, valueless))  # made for another plan (`compile_plans`)
            if made is None:
                made = self.p.runners[step, valueless] = _region_runner(kernel, valueless, examples, shape, size,
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
                runner = self.p.runners[step, valueless] = _blocked_runner(kernel, examples, shape, size, active_shapes)
            return self.space.bind(runner, "k")

        def run(*values):
            return kernel.run(backend, values, shape, size, active_shapes)

        def run_full(*values):  # a broadcast's adjoints take each partial at the value's shape (see kernel_adjoints)
            value, partials = kernel.run(backend, values, shape, size, active_shapes)
            return value, [p if p.shape == shape else np.array(np.broadcast_to(p, shape)) for p in partials]

        return self.space.bind(run if step.reduce else run_full, "k")


class _Backward(_Writer):
    """The backward code: per step, last first, the terms of its arguments' cotangents, each handed to
    `_Cotangents` (which decides how it is added); then the gradients returned or written into ``out``."""

    def __init__(self, program, space, fresh=(), floats=()):
        super().__init__(program, space)
        self.cotangents = _Cotangents(program, space, fresh)
        self.single = None  # after `lines`: the lines of `_one` for a program of one leaf (None: several)
        self.every = None  # ... and of a program of several, ending in ``return (<gradients>)``
        self.floats = floats  # the values that are Python floats in the backward code (`_Forward.floats`)
        self.scalars = {s.outs[0] for s in program.steps  # ... and NumPy scalars (an expression's 0-d result)
                        if type(s) is Step and _inline(s) and s.outs[0] is not None  # (None: a result not kept)
                        and program.meta[s.outs[0]][0] == ()}

    def lines(self, value):
        """The adjoints, then the gradients returned (or written into ``out``) with ``value``."""
        p, cotangents = self.p, self.cotangents
        lines = []
        if p.out is not None:  # else f's result is a constant: every gradient is zero
            lines += cotangents.accumulate(p.out, Folded(p.meta[p.out][1].type(1)))
        for k in range(len(p.steps) - 1, -1, -1):
            step = p.steps[k]
            if type(step) is KernelStep:
                if step.out in cotangents and step.active:
                    lines += self.kernel_adjoints(step)
            elif type(step) is SecondOrderStep:
                lines += self.second_order_adjoints(step)
            elif type(step) is Step:
                for j, o in enumerate(step.outs):
                    if o is not None and o in cotangents and p.tape.edges(o):  # recorded with edges: it has parents
                        lines += self.adjoints(k, step, j, o)
        ending = cotangents.gradients(value)
        self.single = None if cotangents.single is None else lines + cotangents.single
        self.every = lines + cotangents.every
        return lines + ending

    def adjoints(self, k, step, j, o):
        """The contributions of output ``j`` (value ``o``) of step ``k`` to its active arguments."""
        lines = []
        backs = [back for _, back in self.p.tape.edges(o)]
        dot = self.dot_formulas(step)
        for slot, i in enumerate(step.active):
            parent, recorded = step.refs[i], backs[slot]
            real = step.complex and self.p.meta[parent][1].kind != "c"  # its cotangent is the real part
            if _inline(step) and (not step.complex or COMPLEX_RULES.get(step.func) is SAME_RULE):
                lines += self.cotangents.accumulate(parent, _real_part(self.inline_adjoint(step, i, o), real))
            elif dot is not None:
                other = Src(self.ref(step.refs[1 - i]), self.space)
                term = other.text if self.times_one(step, i, o) else dot[i](other, Src(f"g{o}", self.space)).text
                lines += self.cotangents.accumulate(parent, _real_part(term, real))
            elif type(recorded) is IndexPullback and step.func is getitem and type(step.refs[1]) is Const:
                index = self.ref(step.refs[1])
                add = f"np.add.at(g{parent}, {index}, g{o})" if recorded.repeats \
                    else f"w = g{parent}[{index}]; w += g{o}" if _gives_view(step.refs[1].value) \
                    else f"g{parent}[{index}] += g{o}"  # (into a view: no copy of it back into itself)
                lines += self.cotangents.owned(parent) + [f"    {add}"]
            elif type(recorded) is IndexPullback:
                lines.append(f"    b = {self.maker(step, i, j, k, o)}")
                lines += self.cotangents.owned(parent) + [f"    b.add(g{parent}, g{o})"]
            elif _along_short_last_axis(step, self.p) is not None:
                run, keepdims = self.space.bind(_extreme_pullback_by_columns, "a"), step.kwargs.get("keepdims", False)
                lines += self.cotangents.accumulate(parent, f"{run}(v{o}, {self.ref(parent)}, {keepdims}, g{o})")
            elif real:  # as the tape applies it: `pullbacks.RealPart`
                maker = self.maker(step, i, j, k, o)
                lines += self.cotangents.accumulate(parent, f"{self.space.bind(RealPart, 'a')}({maker})(g{o})")
            else:
                maker = self.maker(step, i, j, k, o)
                lines += self.cotangents.accumulate(parent, f"{self.space.bind(apply, 'a')}({maker}, g{o})")
        return lines

    def times_one(self, step, i, o):
        """Whether argument ``i``'s term of the dot of two vectors ``step`` is the other vector itself: its
        cotangent ``g<o>`` is a number known to be 1 that leaves the vector's dtype as it is (a sum of dots in a
        loop), so ``g · b`` is ``b`` (shared, never changed in place: `_Cotangents`)."""
        number, other = self.cotangents.number(o), step.refs[1 - i]
        if number is None or type(other) is not int or len(self.p.shape_of(step.refs[i])) != 1:
            return False
        dtype = self.p.meta[other][1]
        return number == 1 and np.result_type(number, dtype) == dtype and dtype.kind == "f"

    def inline_adjoint(self, step, i, o):
        """The term of argument ``i`` of an inline step: ``g<o>`` times its partial in the derivative table,
        summed back to its shape; a `Folded` number when the cotangent and the partial are numbers (the
        product the code would compute)."""
        partial = DERIVATIVES[step.func][i]
        dtype = self.p.meta[o][1]
        args = as_dtype([r.value if _is_number(r) else Src(self.ref(r), self.space) for r in step.refs], dtype)
        shape, out_shape = self.p.shape_of(step.refs[i]), self.p.meta[o][0]
        number = self.cotangents.number(o) if shape == out_shape else None
        # a singular function's strong product is IEEE's for a known finite nonzero cotangent (EAM's p**2 + p**3)
        strong = step.func in SELECTIONS or (step.func not in SMOOTH and not _finite_nonzero(number))
        if callable(partial):
            value = Src(f"v{o}", self.space)
            d = partial(value, *args)
            if type(d) is not Src and number is not None:
                return Folded(self.folded_product(step, number, d, shape, out_shape, strong))
            if type(d) is Src and self.unit_cotangent(step, i, o, number) and not strong:
                return d.text
            d = d.text if type(d) is Src else value._of(d)
        elif number is not None:
            return Folded(self.folded_product(step, number, partial, shape, out_shape, strong))
        else:
            d = partial
        if strong:  # the chain rule's product at a selection or a singular point (`derivatives.chain_product`)
            g = f"{self.space.bind(chain_product)}({self.space.bind(step.func)}, g{o}, {d})"
            return table_pullback_source(g, 1, shape, out_shape)
        return table_pullback_source(f"g{o}", d, shape, out_shape)

    @staticmethod
    def folded_product(step, number, d, shape, out_shape, strong):
        """The term of a known cotangent ``number`` and a partial ``d`` known while generating: the product
        `chain_product` or the tape's pullback gives."""
        return chain_product(step.func, number, d) if strong else apply(table_pullback(d, shape, out_shape), number)

    def unit_cotangent(self, step, i, o, number):
        """Whether argument ``i``'s term of the inline step ``step`` (output ``o``) is its partial itself: the
        cotangent ``g<o>`` is a one of its dtype known here (f's result's, or a sum's term: ``p**3`` in
        ``p**2 + p**3``), of a scalar, and the partial is a NumPy scalar of that dtype (tried on example values typed
        as the replay's, Python floats where it has them): ``1 · d`` is ``d`` for every d, NaN and -0 too, and
        the multiplication costs ~60 ns a scalar."""
        dtype = self.p.meta[o][1]
        if type(number) is not dtype.type or number != 1 or self.p.meta[o][0] != ():
            return False
        examples = [self.example(r) for r in step.refs]
        try:
            with np.errstate(all="ignore"):
                d = DERIVATIVES[step.func][i](self.example(o), *as_dtype(examples, dtype))
        except Exception:  # noqa: BLE001 - a partial these values do not fit: the product as written
            return False
        return type(d) is dtype.type

    def example(self, r):
        """A value typed as reference ``r`` is in the backward code (a half: no special value): a Python float where
        the replay keeps one, a NumPy scalar for an inline step's scalar result, else an array (a 0-d leaf may be
        a 0-d array on some calls and a NumPy scalar on others)."""
        if type(r) is not int:
            return r.value
        if r in self.floats:
            return 0.5
        shape, dtype = self.p.meta[r]
        value = np.full(shape, 0.5, dtype) if dtype.kind in "fc" else np.ones(shape, dtype)
        return value[()] if r in self.scalars else value

    def dot_formulas(self, step):
        """`DOT_PULLBACKS` for an np.dot of vectors and matrices (as recorded), or a real ``@`` of them (the same
        product: its maker's pullback keeps the other operand, but the maker's call keeps its result alive, a
        layer's activations in an MLP, until the backward pass reaches it), else None."""
        matmul = step.func is np.matmul and not step.complex and step.outs[0] is not None \
            and all(np.result_type(r.value if type(r) is Const else self.p.meta[r][1]) == self.p.meta[step.outs[0]][1]
                    for r in step.refs)  # (a float32 operand's cotangent stays float32 as the maker's does)
        if (step.func is not np.dot and not matmul) or step.kwargs or len(step.refs) != 2:
            return None
        return DOT_PULLBACKS.get(tuple(len(self.p.shape_of(r)) for r in step.refs))

    def maker(self, step, i, j, k, o):
        """A call of the step's recorded vjp maker for argument ``i``: the pullback of this replay."""
        args = self.args(step)
        kwargs = f", **{self.space.bind(step.kwargs)}" if step.kwargs else ""
        if step.kind == OUTPUTS:
            kwargs = self.space.bind(step.kwargs)
            return f"{self.space.bind(output_pullback)}({self.space.bind(step.makers, 'm')}, {i}, {j}, r{k}, " \
                   f"({', '.join(args)},), {kwargs})"
        if step.kind == PER_ARGUMENT:
            return f"{self.space.bind(step.makers[i], 'm')}(v{o}, {', '.join(args)}{kwargs})"
        return f"{self.space.bind(step.makers, 'm')}({i}, v{o}, {', '.join(args)}{kwargs})"

    def second_order_adjoints(self, step):
        """The contributions of a second-order kernel to the recorded tape's arguments: the value's cotangent
        times their partials, each inner partial's times their second partials (`broadcast._second_order`)."""
        lines, results = [], f"p{step.out}"
        terms = [(step.out, step.slots)] + [(d, {q: step.pairs[p, q] for q in step.outer})
                                             for p, d in step.partials.items()]
        for o, slots in terms:
            if o not in self.cotangents:
                continue
            for q in step.outer:
                parent, k = step.refs[q], slots[q]
                product_shape = np.broadcast_shapes(self.p.meta[o][0], step.result_shapes[k])
                term = table_pullback_source(f"g{o}", f"{results}[{k}]", self.p.shape_of(parent), product_shape)
                lines += self.cotangents.accumulate(parent, term)
        return lines

    def kernel_adjoints(self, step):
        """The contributions of a kernel's partials ``p<out>``; an active leaf's first one is deferred
        (`_Cotangents.defer`) when the partial has the leaf's shape."""
        if step.region is not None and step.region.axes is not None:
            return self.axis_sum_adjoints(step, step.region.axes)
        lines = []
        out_shape = () if step.reduce else self.p.meta[step.out][0]
        complex_value = self.p.meta[step.out][1].kind == "c"
        scales = (_unscaled(step.kernel)[1] if step.reduce else None) or [1] * len(step.active)
        for slot, i in enumerate(step.active):
            parent = step.refs[i]
            shape = self.p.shape_of(parent)
            partial = f"p{step.out}[{slot}]"
            real = complex_value and self.p.meta[parent][1].kind != "c"  # a real parent's: the real part
            if shape and (shape == out_shape or step.reduce) and not real \
                    and self.cotangents.defer(parent, partial, step.out, scales[slot]):
                continue
            term = kernel_pullback_source(f"g{step.out}", partial, shape, out_shape, scales[slot])
            lines += self.cotangents.accumulate(parent, _real_part(term, real))
        return lines


    def axis_sum_adjoints(self, step, reduction):
        """The contributions of a region summed along axes (`kernels.AxisSum`): its cotangent broadcast back along
        the summed axes (divided by a mean's count) times each partial, summed back to its input's shape."""
        lines = []
        g = f"g{step.out}"
        if reduction.kept != self.p.meta[step.out][0]:
            g = f"np.reshape({g}, {reduction.kept!r})"
        scale = 1 / reduction.divisor if reduction.divisor != 1 else 1
        shapes = [self.p.shape_of(step.refs[i]) for i in step.active]
        sharing = reduction.sharing(step.kernel.outputs[1:], shapes)
        firsts = [first for first, _ in sharing]
        numbers = reduction.numbers(step.kernel.outputs[1:], shapes)
        for slot, (i, shape, (first, sign), number) in enumerate(zip(step.active, shapes, sharing, numbers)):
            partial = f"p{step.out}[{first}]"
            product = np.broadcast_shapes(reduction.kept, reduction.partial_shape(shape))
            if number is not None:  # the cotangent times a number, summed back as the inline step's adjoint is
                term = table_pullback_source(g, number * scale, shape, product)
            elif firsts.count(first) > 1:  # a partial several inputs share: its product once, as their cotangent
                shared = reduction.partial_shape(shapes[first])
                if first == slot:
                    source = kernel_pullback_source(g, partial, shared, shared, scale)
                    lines.append(f"    q{step.out}_{first} = {source}")
                term = table_pullback_source(f"q{step.out}_{first}", 1, shape, np.broadcast_shapes(product, shared))
                term = term if sign > 0 else f"(-{term})"  # (negated once summed: the input's shape)
            else:
                term = kernel_pullback_source(g, partial, shape, product, scale)
            lines += self.cotangents.accumulate(step.refs[i], term)
        return lines


class Folded:
    """A cotangent term computed while generating the code: the same operation on the same numbers."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _Cotangents:
    """The cotangent ``g<i>`` of each value while the backward code is written, so that the generated code
    keeps no books.  Per value: none yet, "shared" (maybe another value's array, or a number: never changed
    in place), "owned" (an array of its own: added to in place) or "last" (an active leaf's one product,
    deferred to be written straight into ``out=``); and in ``known`` the cotangents that are numbers here,
    which a `Folded` term is added to now instead of by the generated code."""

    def __init__(self, program, space, fresh=()):
        self.p = program
        self.space = space
        self.state = {}
        self.known = {}
        self.last = {}  # active leaf -> (partial, kernel value): its one product, written last
        self.fresh = fresh  # kernel values whose partials are new arrays on every call
        self.single = None  # after `gradients`: the end returning one active leaf's gradient alone
        self.every = None  # ... and the end returning every active leaf's, a tuple

    def __contains__(self, i):
        """Whether value ``i`` has a cotangent: its adjoints are needed."""
        return i in self.state

    def number(self, i):
        """The cotangent of ``i`` when it is a number known here, else None."""
        return self.known.get(i)

    def accumulate(self, i, term):
        """Lines adding ``term`` (source text or `Folded`) to ``g<i>``: assigned, added into a new array,
        added in place, or added now."""
        lines = self.materialize(i)
        current = self.state.get(i)
        if type(term) is Folded:
            if current is None or i in self.known:  # the first cotangent, or a number plus a number
                value = term.value if current is None else self.known[i] + term.value
                self.known[i] = value
                self.state[i] = "shared"
                return lines + [f"    g{i} = {self.space.bind(value)}"]
            term = self.space.bind(term.value)
        self.known.pop(i, None)
        if current is None:
            self.state[i] = "shared"
            return lines + [f"    g{i} = {term}"]
        if current == "owned":
            return lines + [f"    g{i} += {term}"]
        self.state[i] = "owned" if self.p.meta[i][0] else "shared"
        return lines + [f"    g{i} = g{i} + {term}"]

    def owned(self, i):
        """Lines making ``g<i>`` an array of its own (zeros if it has no cotangent yet), which the next
        line may add to in place (at an index)."""
        shape, dtype = self.p.meta[i]
        lines = self.materialize(i)
        current = self.state.get(i)
        if current is None:
            lines.append(f"    g{i} = {self.space.bind(np.zeros)}({shape!r}, {self.space.bind(dtype)})")
        elif current == "shared":
            lines.append(f"    g{i} = {self.space.bind(np.array)}(g{i}, dtype={self.space.bind(dtype)})")
        self.state[i] = "owned"
        return lines

    def defer(self, leaf, partial, o, scale=1):
        """Hold back ``partial · g<o>`` (times ``scale``) when it is the first contribution to the active leaf
        ``leaf``: written last, into ``out=`` when given, it costs no array; False (nothing held) otherwise."""
        if leaf not in self.p.active_leaves or leaf in self.state:
            return False
        self.last[leaf] = (partial, o, scale)
        self.state[leaf] = "last"
        return True

    def materialize(self, i):
        """A leaf's deferred product, written now: another contribution follows."""
        if self.state.get(i) != "last":
            return []
        partial, o, scale = self.last.pop(i)
        self.state[i] = "shared"
        return self.product(partial, o, partial, f"g{i} = ", scale)

    def gradients(self, value):
        """The function's end: the active leaves' cotangents (zeros for those without one, the deferred
        products) returned with ``value``, or written into ``out``; for one active leaf, ``single`` the end returning
        its gradient alone (else None).  Returned gradients are arrays nothing else
        holds (the caller keeps them as they are): a deferred product into its partial if that is new on every
        call, else into a new array; any other cotangent copied."""
        lines = []
        new = set()
        for i in self.p.active_leaves:
            if i not in self.state:
                shape, dtype = self.p.meta[i]
                lines.append(f"    g{i} = {self.space.bind(np.zeros)}({shape!r}, {self.space.bind(dtype)})")
                new.add(i)
        returned, written = [], []
        for k, i in enumerate(self.p.active_leaves):
            if i in self.last:
                partial, o, scale = self.last[i]
                target = partial if o in self.fresh else None
                returned += self.product(partial, o, target, f"g{i} = ", scale, self.p.meta[i][1])
                written += self.product(partial, o, f"out[{k}]", "", scale)
                new.add(i)
            else:
                known = self.known.get(i)
                written.append(f"    np.copyto(out[{k}], {f'g{i}' if known is None else self.space.bind(known)})")
        self.single = None
        if len(self.p.active_leaves) == 1:  # ``one``'s end: the gradient alone
            self.single = lines + returned + [f"    return {self.returned(self.p.active_leaves[0], new)}"]
        numbers = self.float_numbers()
        gradients = f"({''.join(f'{self.returned(i, new)}, ' for i in self.p.active_leaves)})" if numbers is None \
            else self.space.bind(numbers)
        self.every = lines + returned + [f"    return {gradients}"]
        lines.append("    if out is None:")
        lines += ["    " + line for line in returned]
        lines.append(f"        return {value}, {gradients}")
        return lines + written + [f"    return {value}, out"]

    def float_numbers(self):
        """The gradients as one tuple of Python floats when every active leaf is a Python float whose gradient is a
        number known here (a fold of floats: one constant, not a tuple of 16 built on every call); else None."""
        known = [self.known.get(i) for i in self.p.active_leaves]
        if all(i in self.p.float_leaves for i in self.p.active_leaves) \
                and all(isinstance(k, (int, float, np.floating)) for k in known):
            return tuple(map(float, known))
        return None

    def returned(self, i, new):
        """The returned cotangent of active leaf ``i``: a number known here, of a leaf passed as a Python float, as
        a Python float (the gradient `db.gradient` gives it: the call returns it as it is); an array ``new`` on
        this call, or a float leaf's (the call makes it a float), as it is; any other copied."""
        if i in self.p.float_leaves and isinstance(self.known.get(i), (int, float, np.floating)):
            return self.space.bind(float(self.known[i]))
        return f"g{i}" if i in new or i in self.p.float_leaves else f"{self.space.bind(np.array)}(g{i})"

    def product(self, partial, o, target, assign, scale=1, leaf_dtype=None):
        """``partial · g<o>`` (times ``scale``, a literal factor the partial was computed without) written into
        ``target`` (None: a new array like the partial).  A scalar cotangent of the dtype it was recorded with goes
        through a 0-d buffer of the program's: a ufunc takes that ~150 ns faster than a NumPy scalar, and computes
        the same (both are strong, same dtype); any other type as it is.  A new array for a leaf of ``leaf_dtype``
        that the product keeps (its dtype times the cotangent's is its dtype) is the ufunc's own result: ~250 ns
        less than ``np.empty_like`` and an ``out=`` at 100 elements."""
        multiply = self.space.bind(np.multiply, "f")
        shape, dtype = self.p.meta[o]
        one = self.known.get(o)
        g = f"g{o}" if scale == 1 else f"(g{o} * {self.space.bind(scale)})"
        if scale == 1 and type(one) is dtype.type and one == 1:  # f's result's cotangent: the partial is the product
            if target is None:
                return [f"    {assign}{self.space.bind(np.array)}({partial})"]
            return [f"    {assign}{partial}"] if target == partial else [f"    np.copyto({target}, {partial})"]
        allocated = target is None and leaf_dtype is not None and np.result_type(leaf_dtype, dtype) == leaf_dtype
        if target is None:
            target = f"{self.space.bind(np.empty_like)}({partial})"
        if shape:
            return [f"    {assign}{multiply}({partial}, {g}, {target})"]
        scalar, buffer = self.space.bind(dtype.type), self.space.bind(np.empty((), dtype), "z")
        return [
            f"    if type(g{o}) is {scalar}:",
            f"        {buffer}[()] = {g}",
            f"        {assign}{multiply}({partial}, {buffer}{'' if allocated else ', ' + target})",
            "    else:",
            f"        {assign}{multiply}({partial}, {g}, {target})",
        ]


def _real_part(term, real):
    """A cotangent term (source or `Folded`), its real part if ``real``: a real argument's where complex values
    take part (`pullbacks.RealPart`)."""
    if not real:
        return term
    return Folded(np.real(term.value)) if type(term) is Folded else f"np.real({term})"


def _region_runner(kernel, valueless, examples, shape, size, active_shapes, blockable):
    """A forward region's kernel (``valueless``: its variant without the value) as a function of its inputs
    returning ``(value, partials)``, the backend's name, and whether its partials are new arrays on every call.
    On the backend `kernels.set_backend` forced when the program was compiled; else blocked where it runs on
    several threads, or on one (`kernels.ONE_THREAD`) if that is faster (a loaded machine); where it would run on
    one, whole arrays if they time faster here (NumPy's passes over
    arrays that stay in cache can beat the blocked loop's calls per block: ``sum(x**2)`` of 1e5 float32 took
    0.29x the primal so, 2.4x blocked; EAM's four operations on 1e5 float64 took 6x blocked's time): from
    ``CHOSEN_MIN`` elements under a `kernels.BackendChoice` that corrects a bad first timing (`_chosen`), on
    fewer timed once here (`_fastest`: a choice's ~1 us a call would cost more than a wrong pick); else as
    ``db.sum`` chooses."""
    if valueless:  # what the gradient alone needs when nothing else reads the sum (`Kernel.without_value`)
        kernel = kernel.without_value(examples)
    forced = FORCED_BACKEND.get()
    candidates = []
    one_chunk = len(_chunks(size, np.dtype(kernel.value_dtype(examples)).itemsize)) == 2
    if blockable and forced in (None, "blocked"):
        candidates.append((kernel.blocked_runner(examples, shape, size, active_shapes), "blocked"))
        if forced is None and not one_chunk:  # (several chunks: more than ``CHOSEN_MIN`` elements)
            candidates.append((None, ONE_THREAD))
    if forced is None and one_chunk:
        whole = _whole_runner(kernel, valueless, examples, shape, active_shapes)
        if whole is not None:
            candidates.append((whole, "numpy"))
    if len(candidates) == 2 and size >= CHOSEN_MIN:
        candidates = [(kernel.blocked_runner(examples, shape, size, active_shapes, False, name), name)
                      if name != "numpy" else (runner, name) for runner, name in candidates]
        return _chosen(candidates, examples, shape, size, active_shapes), "chosen per call", True  # partials:
        # arrays of their own on each backend (a recycled blocked kernel's once nothing holds them)
    if candidates:
        runner, name = _fastest(candidates, examples)
        return runner, name, name == "numpy"
    if forced is None:
        def run(*values):
            return kernel(values, active_shapes)[:2]
        name = "chosen per call"
    else:
        backend = name = forced if forced in kernel._candidates(examples, size) else "numpy"

        def run(*values):
            return kernel.run(backend, values, shape, size, active_shapes)
    if kernel.reduce:
        return run, name, False

    def run_full(*values):  # a broadcast's adjoints take each partial at the value's shape (see kernel_adjoints)
        value, partials = run(*values)
        return value, [p if p.shape == shape else np.array(np.broadcast_to(p, shape)) for p in partials]

    return run_full, name, False


def _blocked_runner(kernel, examples, shape, size, active_shapes):
    """A recorded kernel's blocked runner, with buffers of its own; where it runs on several threads (and no backend
    is forced), on them or on one, whichever a `kernels.BackendChoice` finds faster, recycling buffers (`_chosen`)."""
    if FORCED_BACKEND.get() is None and len(_chunks(size, np.dtype(kernel.value_dtype(examples)).itemsize)) > 2:
        candidates = [(kernel.blocked_runner(examples, shape, size, active_shapes, False, name), name)
                      for name in ("blocked", ONE_THREAD)]
        return _chosen(candidates, examples, shape, size, active_shapes)
    return kernel.blocked_runner(examples, shape, size, active_shapes)


def _axis_region_runner(kernel, examples, reduction, active, size):
    """A forward region summed along axes, or of inputs broadcast against each other (`kernels.AxisSum`), as a
    function of its inputs returning ``(value, partials)`` (each partial of `AxisSum.partial_shape`), and the
    backend's name: on blocks of rows on the cores (`kernels.axis_sum_rows`, "blocked"), or on the calling thread
    alone (`ONE_THREAD`, where blocked splits the call), or on whole arrays (`kernels.axis_sum_whole`, "numpy"), or
    on whole arrays with the call's short trailing axes moved first (`kernels.axis_sum_moved`,
    ``SHORT_AXES_FIRST``), the fastest under a `kernels.BackendChoice` (every call timed, a runner-up re-timed now
    and then) as `_region_runner` chooses; or the one `kernels.set_backend` forced when the program was compiled
    (numexpr: its whole arrays, where it has every operation).  Every plan of a program runs the same runner
    (`_Forward.kernel_runner`)."""
    shape, forced = reduction.shape, FORCED_BACKEND.get()
    dtype = np.dtype(kernel.value_dtype(examples))
    active_shapes = [np.shape(examples[i]) for i in active]
    whole = kernel.typed_whole(tuple(map(_kind, examples)))
    fresh = _fresh_partials(kernel.outputs, True) if reduction.axes else kernel.fresh
    numbers = reduction.numbers(kernel.outputs[1:], active_shapes)
    sharing = [-1 if n is not None or sign < 0 else first  # (a negated twin's partial: not computed)
               for (first, sign), n in zip(reduction.sharing(kernel.outputs[1:], active_shapes), numbers)]
    candidates = []
    if forced in (None, "blocked") and shape:
        candidates.append((axis_sum_rows(whole, reduction, examples, active, sharing, dtype), "blocked"))
        if forced is None and len(_chunks(size, dtype.itemsize)) > 2:
            candidates.append((axis_sum_rows(whole, reduction, examples, active, sharing, dtype, 1), ONE_THREAD))
    if forced == "numexpr" and kernel.backends["numexpr"].eligible(examples, size):

        def numexpr(*values):
            value, partials = kernel.run("numexpr", values, shape, size, [shape] * len(active))
            return (value, *partials)  # arrays of their own

        candidates.append((axis_sum_whole(numexpr, reduction, active_shapes, [True] * len(active), sharing, dtype),
                           "numexpr"))
    elif forced in (None, "numpy") or not candidates:
        candidates.append((axis_sum_whole(whole, reduction, active_shapes, fresh, sharing, dtype), "numpy"))
    order = short_axes_first(shape) if forced is None else None
    if order is not None:
        candidates += _moved_candidates(whole, reduction, examples, active, fresh, sharing, dtype, order)
    if len(candidates) == 1 or size < CHOSEN_MIN:  # (fewer than `regions.BROADCAST_MIN`: where a test lowers it)
        return _fastest(candidates, examples)
    return _chosen(candidates, examples, shape, size, active_shapes), "chosen per call"


def _moved_candidates(whole, reduction, examples, active, fresh, sharing, dtype, order):
    """`_axis_region_runner`'s candidates on whole arrays and on blocks of rows with the call's axes in ``order``
    (`kernels.axis_sum_moved`)."""
    inputs = [moved_value(v, len(reduction.shape), order) for v in examples]
    on_moved = moved(reduction, order)
    active_shapes = [np.shape(examples[i]) for i in active]
    runners = [(axis_sum_whole(whole, on_moved, [np.shape(inputs[i]) for i in active], fresh, sharing, dtype),
                SHORT_AXES_FIRST)]
    if on_moved.shape[0] > 1:
        runners.append((axis_sum_rows(whole, on_moved, inputs, active, sharing, dtype), SHORT_AXES_FIRST_BLOCKED))
    return [(axis_sum_moved(run, reduction, active_shapes, order), name) for run, name in runners]


SHORT_AXES_FIRST = "numpy, short axes first"  # `kernels.axis_sum_moved`: candidates where the call ends in short axes
SHORT_AXES_FIRST_BLOCKED = "blocked, short axes first"
CHOSEN_MIN = 16384  # elements from which a region's backend is chosen per call (below, once when compiled: `_fastest`)


class _Runners:
    """A forward region's candidate runners as `kernels.BackendChoice` sees a kernel's backends: by name, each
    eligible for every call (they were made for the call's shapes)."""

    eligible = staticmethod(lambda values, size: True)

    def __init__(self, candidates):
        self.runners = {name: runner for runner, name in candidates}
        self.backends = dict.fromkeys(self.runners, self)

    def _candidates(self, values, size):
        return list(self.runners)

    def run(self, backend, values, shape, size, active_shapes):
        return self.runners[backend](*values)  # a tuple (value, partials), as the kernels return it


def _chosen(candidates, examples, shape, size, active_shapes):
    """A runner of the candidates ``(runner, name)`` under a `kernels.BackendChoice` (each call of the chosen
    one timed, a runner-up re-timed now and then: a wrong first timing is corrected), its first choice made on
    ``examples`` (halves: no special values) when the program is compiled; ``runner.choice`` the choice."""
    choice = BackendChoice(_Runners(candidates))
    values = [np.full(np.shape(v), 0.5, v.dtype) if np.result_type(v).kind == "f" and type(v) is np.ndarray else v
              for v in examples]
    with np.errstate(all="ignore"):
        choice.run(values, shape, size, active_shapes)
    run = choice.run

    def chosen(*values):
        value, partials, _, _ = run(values, shape, size, active_shapes)
        return value, partials

    chosen.choice = choice
    return chosen


def _fastest(candidates, examples, rounds=5):
    """The candidate ``(runner, name)`` that runs fastest on ``examples`` (a half in each element: no special
    values), best of ``rounds`` timed in turns so that a moment of load hits each alike."""
    if len(candidates) == 1:
        return candidates[0]
    values = [np.full(np.shape(v), 0.5, v.dtype) if np.result_type(v).kind == "f" and type(v) is np.ndarray else v
              for v in examples]
    best = [math.inf] * len(candidates)
    with np.errstate(all="ignore"):
        for _ in range(rounds):
            for k, (runner, _) in enumerate(candidates):
                start = time.perf_counter()
                runner(*values)
                best[k] = min(best[k], time.perf_counter() - start)
    return candidates[best.index(min(best))]


def _whole_runner(kernel, valueless, examples, shape, active_shapes):
    """The whole-array kernel of a region whose inputs and partials all have the call's shape, each partial
    an array of its own of the value's dtype (a partial that is an input would be multiplied in place), with
    its value summed; None if these do not hold."""
    if not all(kernel.fresh) or any(s != shape for s in active_shapes) \
            or any(type(v) is not np.ndarray or v.shape != shape for v in examples):
        return None
    whole = kernel.typed_whole(tuple(map(_kind, examples)))
    dtype = np.dtype(kernel.value_dtype(examples))
    with np.errstate(all="ignore"):  # zeros for the example values: only the results' shapes and dtypes are read
        results = whole(*examples)
    if any(type(r) is not np.ndarray or r.shape != shape or r.dtype != dtype for r in results[valueless:]):
        return None
    if not kernel.reduce:
        def split(*values):  # ``(value, partials)`` as every runner returns it, not the flat tuple of results
            results = whole(*values)
            return results[0], results[1:]

        return split
    if valueless:
        zero = dtype.type(0)
        return lambda *values: (zero, whole(*values)[1:])

    def run(*values):
        results = whole(*values)
        return np.add.reduce(results[0], None), results[1:]

    return run


def _partials_typed_as_value(kernel, examples):
    """Whether the blocked kernel computes every partial in the value's dtype: a selection's partial
    (a comparison) is computed as a boolean or integer, which `Kernel.run` casts and it does not."""
    dtypes = _out_dtypes(kernel, _infer_dtypes(kernel, tuple(map(_kind, examples))))
    return all(np.dtype(d) == np.dtype(dtypes[0]) for d in dtypes[1:])


def _along_short_last_axis(step, program):
    """Whether ``step`` is np.max or np.min of one real array of ``CHOSEN_MIN`` elements or more along its last axis
    alone, shorter than `kernels.SHORT_AXIS`: its ``keepdims`` (a bool), else None.  NumPy's reduction runs a loop
    per row there (a mixture's (20000, 4) log densities: np.max 790 us, by columns `_extreme_by_columns` 71 us; the
    tie shares of its pullback 1.5 ms, by columns `_extreme_pullback_by_columns` a fraction)."""
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


def _extreme_pullback_by_columns(ans, a, keepdims, g):
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


def _unbroadcast(g, shape):
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


def _inline(step):
    """Whether a step is written as an expression and differentiated by its partials in the derivative
    table: an elementwise function called without keywords (np.clip's rule fills in bounds None or left out)."""
    return step.kind == PER_ARGUMENT and not step.kwargs and step.func in DERIVATIVES and step.func is not np.clip


def _finite_nonzero(number):
    """Whether a cotangent known while generating is a finite nonzero number: its product with any partial is
    then `derivatives.strong_product`'s (which differs from IEEE's only for a zero factor)."""
    return number is not None and np.isscalar(number) and number != 0 and bool(np.isfinite(number))


def _is_number(r):
    """A constant the generated code may compute with while it is written: a number, not an array or
    a list, which is read on every call as the forward step reads it (changed in place, both see it)."""
    return type(r) is Const and isinstance(r.value, (int, float, np.generic))


def _same(a, b):
    """Whether a replayed plain result equals the recorded one: arrays by value, tuples and lists
    (``np.nonzero``'s arrays) element by element."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    try:
        return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) else bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable results are different results
        return False


def _python_number(value):
    """A literal that keeps Python-float arithmetic exact to float64's: a float, or an int a float
    holds exactly (a bool or a huge int is left to NumPy)."""
    return type(value) is float or (type(value) is int and abs(value) <= 2**53)
