"""Straight-line Python for a recorded prepared program: forward steps, guards, then the adjoints.

Elementwise steps become inline expressions (operators on NumPy scalars cost
no ufunc dispatch) and their adjoints are rendered from the `DERIVATIVES`
table through `Src`, an algebra that writes code instead of computing.  Other
steps call their implementation, and their vjp maker in the backward part.
Which cotangent is assigned, added or added in place is decided here, once,
from the recorded order — the generated code has no bookkeeping left.

Arguments that were Python floats enter as Python floats: ``+``, ``-``, ``*`` and
negation on them give what NumPy's float64 gives (IEEE, no exception), and cost
less.  Any other use first converts the value to ``np.float64``.
"""

import re

import numpy as np

from .derivatives import DERIVATIVES
from .expr import UfuncOperators
from .kernels import _infer_dtypes, _kind, _out_dtypes
from .numpy_facts import as_dtype, getitem, source_of
from .program import Const, Guard, KernelStep, Pack, Step, unpacked
from .pullbacks import IndexPullback, apply, unbroadcast
from .registry import OUTPUTS, PER_ARGUMENT, SEQUENCE
from .rules.linalg import DOT_PULLBACKS


class Namespace:
    """The names generated code refers to; every one made by the library."""

    def __init__(self):
        self.names = {"np": np, "unbroadcast": unbroadcast, "IndexPullback": IndexPullback}
        self._ids = {}

    def bind(self, value, prefix="c"):
        key = id(value)
        if key not in self._ids:
            name = f"{prefix}{len(self.names)}"
            self.names[name] = value
            self._ids[key] = (name, value)  # keep value alive so its id stays unique
        return self._ids[key][0]


class Src(UfuncOperators):
    """Source text of an expression; NumPy functions and operators applied to it write code."""

    __slots__ = ("text", "space")

    def __init__(self, text, space):
        self.text = text
        self.space = space

    def _of(self, x):
        if type(x) is Src:
            return x.text
        if type(x) in (int, float) and np.isfinite(x):
            return repr(x)
        return self.space.bind(x)

    def _apply(self, func, args):
        texts = [self._of(a) for a in args]
        text = source_of(func, texts)
        return Src(text or f"{self.space.bind(func, 'f')}({', '.join(texts)})", self.space)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return self._apply(ufunc, inputs)

    def __array_function__(self, func, types, args, kwargs):
        return self._apply(func, args)

    _ufunc = _apply

    def __matmul__(self, other):  # the linear-algebra formulas (`DOT_PULLBACKS`) use @ and .T
        return Src(f"({self.text} @ {self._of(other)})", self.space)

    def __rmatmul__(self, other):
        return Src(f"({self._of(other)} @ {self.text})", self.space)

    T = property(lambda self: Src(f"{self.text}.T", self.space))


def compile_program(program, guard_failed):
    """Generate two functions of the leaf values for ``program``:

    ``run(leaf_values, out=None) -> (value, gradients of the active leaves)``, and
    ``gradient(...)``, the same without the value: forward steps only the value needed
    are left out.  With ``out`` (one array per active leaf) the gradients are written
    there instead and ``out`` is returned in their place.
    """
    space = Namespace()
    space.names["GuardFailed"] = guard_failed
    writer = _Writer(program, space)
    blocks = writer.forward()
    if program.out is None:
        value = space.bind(program.constant)
    elif program.out in writer.floats:
        value = f"{space.bind(np.float64)}(v{program.out})"
    else:
        value = f"v{program.out}"
    leaves = f"    {''.join(f'v{i}, ' for _, i in program.leaves)}= leaves"
    functions = []
    for name, returned in (("run", value), ("gradient", "None")):
        backward = writer.backward(returned)
        needed = set(_LOCAL.findall("\n".join(backward)))
        functions += [f"def {name}(leaves, out=None):", leaves] + _live(blocks, needed) + backward
    source = "\n".join(functions)
    exec(compile(source, "<dualbroadcast prepared program>", "exec"), space.names)
    return space.names["run"], space.names["gradient"], source


_LOCAL = re.compile(r"\b[vpr]\d+\b")  # the generated code's values, kernel partials and multiple results


class _Block:
    """Forward lines for one step, the local names they define and use; a guard is always kept."""

    __slots__ = ("lines", "defines", "uses", "guard")

    def __init__(self, lines, defines, uses, guard=False):
        self.lines, self.defines, self.uses, self.guard = lines, set(defines), set(uses), guard


def _live(blocks, needed):
    """The lines of the blocks that guards or the ``needed`` names depend on, in order."""
    kept, live = [], set(needed)
    for block in reversed(blocks):
        if block.guard or block.defines & live:
            kept.append(block.lines)
            live -= block.defines  # in place: a new set per block made long programs quadratic
            live |= block.uses
    return [line for lines in reversed(kept) for line in lines]


_FLOAT_SAFE = {np.add, np.subtract, np.multiply, np.negative}  # same on Python floats as on float64


class _Writer:
    def __init__(self, program, space):
        self.p = program
        self.space = space
        self.floats = set(program.float_leaves)  # values that are still Python floats here
        self.last = {}  # active leaf -> (partial, kernel value): its one product, written last
        self.known = {}  # value -> its cotangent, a number known while generating

    def ref(self, r):
        if type(r) is int:
            return f"v{r}"
        if type(r) is Pack:  # a tuple or list of values and constants, built anew
            items = "".join(f"{self.ref(m)}, " for m in r.refs)
            return f"({items})" if r.kind is tuple else f"[{items}]"
        return self.space.bind(r.value)

    def args(self, step):
        refs = [self.ref(r) for r in step.refs]
        if step.kind == SEQUENCE:
            return [f"[{', '.join(refs)}]"] + [self.space.bind(x) for x in step.rest]
        return refs

    def call(self, step, args):
        kwargs = f", **{self.space.bind(step.kwargs)}" if step.kwargs else ""
        return f"{self.space.bind(step.impl, 's')}({', '.join(args)}{kwargs})"

    # --- forward ---------------------------------------------------------------------
    def forward(self):
        """The forward steps as `_Block` s, in order."""
        blocks = []
        for k, step in enumerate(self.p.steps):
            uses = [f"v{r}" for r in ([step.index] if type(step) is Guard else _indices(step.refs))]
            if type(step) is Guard:
                blocks += self.as_numpy([step.index])
                convert, expected = self.space.bind(step.convert), self.space.bind(step.expected)
                blocks.append(_Block([f"    if {convert}(v{step.index}) != {expected}: raise GuardFailed"], [], uses, True))
                continue
            if type(step) is Step and step.func == "cut":
                if step.refs[0] in self.floats:
                    self.floats.add(step.outs[0])
                blocks.append(_Block([f"    v{step.outs[0]} = {self.ref(step.refs[0])}"], [f"v{step.outs[0]}"], uses))
                continue
            if type(step) is Step and self.stays_float(step):
                self.floats.add(step.outs[0])
            else:
                blocks += self.as_numpy(_indices(step.refs))
            if type(step) is KernelStep:
                line = f"    v{step.out}, p{step.out} = {self.kernel_runner(step)}({', '.join(self.ref(r) for r in step.refs)})"
                blocks.append(_Block([line], [f"v{step.out}", f"p{step.out}"], uses))
            elif step.kind == OUTPUTS:  # its plain outputs (a count) are guards
                same = self.space.bind(_same)
                lines = [f"    r{k} = {self.call(step, self.args(step))}"]
                lines += [f"    v{o} = r{k}[{j}]" for j, o in enumerate(step.outs) if o is not None]
                lines += [f"    if not {same}(r{k}[{j}], {self.space.bind(a)}): raise GuardFailed" for j, a in step.expected.items()]
                blocks.append(_Block(lines, [f"r{k}"] + [f"v{o}" for o in step.outs if o is not None], uses, bool(step.expected)))
            elif step.outs == [None]:
                same = self.space.bind(_same)
                line = f"    if not {same}({self.call(step, self.args(step))}, {self.space.bind(step.expected)}): raise GuardFailed"
                blocks.append(_Block([line], [], uses, True))
            elif self.inline(step):
                expression = Src("", self.space)._apply(step.func, [Src(self.ref(r), self.space) for r in step.refs])
                blocks.append(_Block([f"    v{step.outs[0]} = {expression.text}"], [f"v{step.outs[0]}"], uses))
            elif step.func is getitem and not step.kwargs:  # x[index] as written, no call of `getitem`
                line = f"    v{step.outs[0]} = {self.ref(step.refs[0])}[{self.ref(step.refs[1])}]"
                blocks.append(_Block([line], [f"v{step.outs[0]}"], uses))
            else:
                blocks.append(_Block([f"    v{step.outs[0]} = {self.call(step, self.args(step))}"], [f"v{step.outs[0]}"], uses))
        return blocks

    def stays_float(self, step):
        """Whether an inline step on Python floats (and Python number literals) may run on them."""
        if not (step.func in _FLOAT_SAFE and self.inline(step)):
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

    def inline(self, step):
        return step.kind == PER_ARGUMENT and not step.kwargs and step.func in DERIVATIVES and step.func is not np.clip

    def kernel_runner(self, step):
        """The kernel on its recorded backend and shapes; blocked with buffers of its own when the
        shapes allow (no allocation per call), else the recorded backend."""
        kernel, backend = step.kernel, step.backend
        examples = [np.zeros(*self.p.meta[r]) if type(r) is int else r.value for r in step.refs]
        shape = np.broadcast_shapes(*[np.shape(v) for v in examples])
        size = int(np.prod(shape))
        active_shapes = [np.shape(examples[i]) for i in step.active]
        if size and all(np.size(v) in (1, size) for v in examples) and _partials_typed_as_value(kernel, examples):
            return self.space.bind(kernel.blocked_runner(examples, shape, size, active_shapes), "k")

        def run(*values):
            return kernel.run(backend, values, shape, size, active_shapes)

        def run_full(*values):  # a broadcast's adjoints take each partial at the value's shape (see kernel_adjoints)
            value, partials = kernel.run(backend, values, shape, size, active_shapes)
            return value, [p if p.shape == shape else np.array(np.broadcast_to(p, shape)) for p in partials]

        return self.space.bind(run if step.reduce else run_full, "k")

    # --- backward --------------------------------------------------------------------
    def backward(self, value):
        """The adjoints, then the gradients returned (or written into ``out``) with ``value``."""
        p = self.p
        out = p.out
        self.last = {}
        self.known = {}  # cotangents that are numbers known here
        state = {}  # per value: None (no cotangent yet), "shared" or "owned"
        lines = []
        if out is not None:  # else f's result is a constant: every gradient is zero
            self.known[out] = p.meta[out][1].type(1)
            state[out] = "shared"
            lines.append(f"    g{out} = {self.space.bind(self.known[out])}")
        for k in range(len(p.steps) - 1, -1, -1):
            step = p.steps[k]
            if type(step) is Guard:
                continue
            if type(step) is KernelStep:
                if step.out in state and step.active:
                    lines += self.kernel_adjoints(step, state)
                continue
            for j, o in enumerate(step.outs):
                if o is not None and o in state and p.records[o][0]:  # recorded with edges: it has parents
                    lines += self.adjoints(k, step, j, o, state)
        for i in p.active_leaves:
            if i not in state:
                shape, dtype = p.meta[i]
                lines.append(f"    g{i} = {self.space.bind(np.zeros)}({shape!r}, {self.space.bind(dtype)})")
        returned, written = [], []
        for k, i in enumerate(p.active_leaves):
            if i in self.last:
                partial, o = self.last[i]
                returned += self.product(partial, o, partial, f"g{i} = ")
                written += self.product(partial, o, f"out[{k}]", "")
            else:
                written.append(f"    np.copyto(out[{k}], g{i})")
        lines.append("    if out is None:")
        lines += ["    " + line for line in returned]
        lines.append(f"        return {value}, ({''.join(f'g{i}, ' for i in p.active_leaves)})")
        lines += written
        lines.append(f"    return {value}, out")
        return lines

    def adjoints(self, k, step, j, o, state):
        lines = []
        backs = [back for _, back in self.p.records[o][0]]
        parents = [step.refs[i] for i in step.active]
        for slot, (i, parent) in enumerate(zip(step.active, parents)):
            recorded = backs[slot]
            if self.inline(step):
                lines += self.accumulate(parent, self.inline_adjoint(step, i, o), state)
            elif self.dot_formulas(step) is not None:
                other = Src(self.ref(step.refs[1 - i]), self.space)
                lines += self.accumulate(parent, self.dot_formulas(step)[i](other, Src(f"g{o}", self.space)).text, state)
            elif type(recorded) is IndexPullback and step.func is getitem and type(step.refs[1]) is Const:
                lines += self.index_add(parent, f"{self.ref(step.refs[1])}", f"g{o}", recorded.repeats, state)
            else:
                maker = self.maker(step, i, j, k, o)
                if type(recorded) is IndexPullback:
                    lines.append(f"    b = {maker}")
                    lines += self.index_add(parent, None, f"g{o}", None, state, back="b")
                else:
                    lines += self.accumulate(parent, f"{self.space.bind(apply, 'a')}({maker}, g{o})", state)
        return lines

    def dot_formulas(self, step):
        """`DOT_PULLBACKS` for an np.dot of vectors and matrices (as recorded), else None."""
        if step.func is not np.dot or step.kwargs or len(step.refs) != 2:
            return None
        return DOT_PULLBACKS.get(tuple(len(self.p.shape_of(r)) for r in step.refs))

    def maker(self, step, i, j, k, o):
        args = self.args(step)
        kwargs = f", **{self.space.bind(step.kwargs)}" if step.kwargs else ""
        if step.kind == OUTPUTS:
            return f"{self.space.bind(step.makers, 'm')}({j}, r{k}, {', '.join(args)}{kwargs})"
        if step.kind == PER_ARGUMENT:
            return f"{self.space.bind(step.makers[i], 'm')}(v{o}, {', '.join(args)}{kwargs})"
        return f"{self.space.bind(step.makers, 'm')}({i}, v{o}, {', '.join(args)}{kwargs})"

    def inline_adjoint(self, step, i, o):
        """``g · ∂f/∂argᵢ`` from the derivative table, summed back to argᵢ's shape; a `Folded`
        number when the cotangent and the partial are numbers (the product the code would compute)."""
        partial = DERIVATIVES[step.func][i]
        dtype = self.p.meta[o][1]
        args = as_dtype([r.value if _is_number(r) else Src(self.ref(r), self.space) for r in step.refs], dtype)
        shape = self.p.shape_of(step.refs[i])
        g = self.known.get(o) if shape == self.p.meta[o][0] else None
        if callable(partial):
            d = partial(Src(f"v{o}", self.space), *args)
            if type(d) is not Src and g is not None:
                return Folded(g * d)
            term = f"(g{o} * {d.text if type(d) is Src else Src('', self.space)._of(d)})"
        elif g is not None:
            return Folded(g if partial == 1 else -g if partial == -1 else g * partial)
        elif partial == 1:
            term = f"g{o}"
        elif partial == -1:
            term = f"(-g{o})"
        else:
            term = f"(g{o} * {partial!r})"
        if shape != self.p.meta[o][0]:
            term = f"unbroadcast({term}, {shape!r})"
        return term

    def kernel_adjoints(self, step, state):
        lines = []
        out_shape = () if step.reduce else self.p.meta[step.out][0]
        for slot, i in enumerate(step.active):
            parent = step.refs[i]
            shape = self.p.shape_of(parent)
            partial = f"p{step.out}[{slot}]"
            if shape == out_shape or step.reduce:
                if shape and parent in self.p.active_leaves and parent not in state:
                    self.last[parent] = (partial, step.out)  # written last, into out= if given
                    state[parent] = "last"
                    continue
                if shape:  # a full partial array of our own: it becomes the cotangent
                    term = f"np.multiply({partial}, g{step.out}, out={partial})"
                else:
                    term = f"(g{step.out} * {partial})"
            else:
                term = f"unbroadcast(np.broadcast_to(g{step.out} * {partial}, {out_shape!r}), {shape!r})"
            lines += self.accumulate(parent, term, state)
        return lines

    def product(self, partial, o, target, assign):
        """``partial · g_o`` written into ``target``.  A scalar cotangent of the dtype it was recorded
        with goes through a 0-d buffer of the program's: a ufunc takes that ~150 ns faster than a
        NumPy scalar, and computes the same (both are strong, same dtype); any other type as it is."""
        multiply = self.space.bind(np.multiply, "f")
        shape, dtype = self.p.meta[o]
        if shape:
            return [f"    {assign}{multiply}({partial}, g{o}, {target})"]
        scalar, buffer = self.space.bind(dtype.type), self.space.bind(np.empty((), dtype), "z")
        return [
            f"    if type(g{o}) is {scalar}:",
            f"        {buffer}[()] = g{o}",
            f"        {assign}{multiply}({partial}, {buffer}, {target})",
            "    else:",
            f"        {assign}{multiply}({partial}, g{o}, {target})",
        ]

    def materialize(self, p, state):
        """A leaf's deferred in-place product, written now: another contribution follows."""
        if state.get(p) != "last":
            return []
        partial, o = self.last.pop(p)
        state[p] = "shared"
        return self.product(partial, o, partial, f"g{p} = ")

    def accumulate(self, p, term, state):
        lines = self.materialize(p, state)
        return lines + self._accumulate(p, term, state)

    def _accumulate(self, p, term, state):
        current = state.get(p)
        if type(term) is Folded:
            if current is None or p in self.known:  # the first cotangent, or a number plus a number
                value = term.value if current is None else self.known[p] + term.value
                self.known[p] = value
                state[p] = "shared"
                return [f"    g{p} = {self.space.bind(value)}"]
            term = self.space.bind(term.value)
        self.known.pop(p, None)
        if current is None:
            state[p] = "shared"
            return [f"    g{p} = {term}"]
        if current == "owned":
            return [f"    g{p} += {term}"]
        state[p] = "owned" if self.p.meta[p][0] else "shared"
        return [f"    g{p} = g{p} + {term}"]

    def index_add(self, p, index, g, repeats, state, back=None):
        shape, dtype = self.p.meta[p]
        lines = self.materialize(p, state)
        current = state.get(p)
        if current is None:
            lines.append(f"    g{p} = {self.space.bind(np.zeros)}({shape!r}, {self.space.bind(dtype)})")
        elif current == "shared":
            lines.append(f"    g{p} = {self.space.bind(np.array)}(g{p}, dtype={self.space.bind(dtype)})")
        state[p] = "owned"
        if back is not None:
            lines.append(f"    {back}.add(g{p}, {g})")
        elif repeats:
            lines.append(f"    np.add.at(g{p}, {index}, {g})")
        else:
            lines.append(f"    g{p}[{index}] += {g}")
        return lines


def _partials_typed_as_value(kernel, examples):
    """Whether the blocked kernel computes every partial in the value's dtype: a selection's partial
    (a comparison) is computed as a boolean or integer, which `Kernel.run` casts and it does not."""
    dtypes = _out_dtypes(kernel, _infer_dtypes(kernel, tuple(map(_kind, examples))))
    return all(np.dtype(d) == np.dtype(dtypes[0]) for d in dtypes[1:])


def _indices(refs):
    """The value indices that references read: their own, and those inside a `Pack`."""
    return [r for r in unpacked(refs) if type(r) is int]


def _is_number(r):
    """A constant the generated code may compute with while it is written: a number, not an array or
    a list, which is read on every call as the forward step reads it (changed in place, both see it)."""
    return type(r) is Const and isinstance(r.value, (int, float, np.generic))


class Folded:
    """A cotangent term computed while generating the code: the same operation on the same numbers."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


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
