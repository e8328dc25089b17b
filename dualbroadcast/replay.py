"""Straight-line Python for a recorded prepared program: forward steps, guards, then the adjoints.

Elementwise steps become inline expressions (operators on NumPy scalars cost
no ufunc dispatch) and their adjoints are rendered from the `DERIVATIVES`
table through `Src`, an algebra that writes code instead of computing.  Other
steps call their implementation, and their vjp maker in the backward part.

Three units write it: `ForwardWriter` the forward steps and guards (`replay_forward`); `BackwardWriter`
walks the steps last first and writes each argument's cotangent term; and
`_Cotangents` (both `replay_backward`) decides, once, from the recorded order, how each term lands
(assigned, added, added in place, added now to a number known while writing,
or a leaf's one kernel product written last, straight into ``out=``) — the
generated code has no bookkeeping left.  This module compiles a program with them
(`compile_program`), tidies the source, and chooses between the compiled plans
(`compile_plans`); a fused region's kernel runs through `region_runners`.

Arguments that were Python floats enter as Python floats: ``+``, ``-``, ``*`` and
negation on them give what NumPy's float64 gives (IEEE, no exception), and cost
less.  Any other use first converts the value to ``np.float64``.
"""

import copy
import math
import re

import numpy as np

from .kernels import (
    BackendChoice,
    Bucket,
)
from .program import KernelStep, SecondOrderStep
from .pullbacks import (
    IndexPullback,
)
from .region_runners import CHOSEN_MIN, Runners
from .replay_backward import BackwardWriter
from .replay_forward import ForwardWriter, unbroadcast_short_axes


class Namespace:
    """The names generated code refers to; every one made by the library."""

    def __init__(self):
        self.names = {"np": np, "unbroadcast": unbroadcast_short_axes, "IndexPullback": IndexPullback}
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
    forward = ForwardWriter(program, space)
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
        writer = BackwardWriter(program, space, forward.fresh_partials(()), forward.floats)
        backward = _tidied(writer.lines(returned))
        needed = set(_LOCAL.findall("\n".join(backward)))
        dropped = []
        lines = _live(blocks, needed, dropped)
        dead = _dead_region_values(program, lines + backward)
        if dead:  # their kernels again, without the value
            dropped = []
            lines = _live(forward.without_values(blocks, dead), needed, dropped)
            writer = BackwardWriter(program, space, forward.fresh_partials(dead), forward.floats)
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
    names = space.names  # (the functions taken out of their own globals: freed with their program, by its count)
    return names.pop("run"), names.pop("gradient"), names.pop("one", None), source, removed


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
    fused plan's; the plans share each region's runner (`ForwardWriter.kernel_runner`)."""
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
    choice = BackendChoice(Runners([(f, name) for name, f in functions.items()]), PLAN_MARGIN)
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
    then the ``forward`` lines and ``writer``'s backward ones (`BackwardWriter.single` or ``every``), the gradient
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
    return space.names.pop("unchanged")  # (not kept in its own globals: freed with its program)


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
