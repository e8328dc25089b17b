"""Loops of small steps in a prepared program: the repeated block found, compiled as a loop (Numba), chosen by
measurement against the straight-line replay.

A time loop written in plain NumPy (RK4 on 2-element arrays) records the same block of steps once per iteration:
80 steps of Lotka-Volterra are 6,000 steps, each a NumPy call on 2 elements that costs a microsecond of dispatch
for a nanosecond of arithmetic. `find_loop` (`loop_finding`) finds the longest run of iterations of one block in
the recorded steps: the same functions on the same shapes and constants, each value read either from the same
iteration, from the one before (a carry), or from before the loop (an invariant); a constant that differs
between iterations (``data[k]``) is read from an array of them, one row per iteration. `scalar_source` writes
the whole program, forward and backward, as scalar code (each small array a few scalars, a selection or a
stacking only a renaming of them) with the loop a loop: its forward values kept one row per iteration for the
backward loop, which runs the iterations last first, carrying the carries' cotangents back. It runs as Python
from the first call, and Numba compiles it in a background thread once the calls have taken long enough; the
straight-line replay is compiled only where it is needed or might be faster (`LoopTier`). Without Numba
(``pip install 'dualbroadcast[fast]'``) nothing changes but the speed.
"""

import contextvars
import importlib.util
import math
import threading
import time
import weakref

import numpy as np

from .derivatives import DERIVATIVES
from .expr import Src
from .loop_finding import find_loop, renamed, scalar_step
from .numpy_facts import getitem
from .program import Const, Pack, Step
from .registry import SEQUENCE
from .replay import MISS, Namespace, globals_check

COMPILE = contextvars.ContextVar("dualbroadcast_loop_compile", default="background")  # "now" (tests), "off"
SCALAR_MAX = 64  # elements from which a value is not written as scalars (its NumPy steps cost less per element)
OPS_MAX = 20000  # scalar operations outside the loop body from which a program is not compiled (compile time)
def _integral(x):
    """Whether ``x`` is a literal integer: a power of it is real in Python for every real base."""
    return type(x) is not str and float(x).is_integer()


MATH = {np.exp: math.exp, np.log: math.log, np.sin: math.sin, np.cos: math.cos, np.tan: math.tan,
        np.tanh: math.tanh, np.sinh: math.sinh, np.cosh: math.cosh, np.sqrt: math.sqrt, np.arctan: math.atan,
        np.log1p: math.log1p, np.expm1: math.expm1}  # on a Python float: a Python float, ~5x faster; a NaN or
# infinity NumPy would give raises instead (the call is then replayed straight-line)


class Unsupported(Exception):
    """A step the scalar code does not write: the program runs as straight-line replay."""


STRUCTURAL = {getitem, np.stack, np.concatenate, np.hstack, np.vstack, np.column_stack, np.reshape, np.ravel,
              np.transpose, np.broadcast_to, np.expand_dims, np.squeeze, np.flip, np.moveaxis, np.swapaxes,
              np.atleast_1d}  # functions that only place elements: run on arrays of names, they rename them


class _Scalars:
    """A program's values as scalars: per value index an object array of its elements' names (or numbers), and the
    scalar operations ``(name, function, arguments)`` that compute them (``"sum"``: the arguments added; ``"cut"``:
    the argument without its cotangent)."""

    def __init__(self, meta, dtype):
        self.meta = meta
        self.dtype = dtype
        self.elements = {}
        self.live = []  # (Const, its names): the arrays read on every call
        self.differentiable = set()  # the names that have cotangents
        self.count = 0

    def name(self, prefix, differentiable=True):
        self.count += 1
        name = f"{prefix}{self.count}"
        if differentiable:
            self.differentiable.add(name)
        return name

    def names(self, shape, prefix, differentiable=True):
        names = np.empty(shape, object)
        for index in np.ndindex(*shape):
            names[index] = self.name(prefix, differentiable)
        return names

    def constant(self, constant):
        """A constant's elements: Python numbers, or for an array names read from it on every call (``live``: the
        replay reads an array changed in place anew, see `prepared.prepare_gradient`)."""
        value = constant.value
        if type(value) is np.ndarray and value.dtype.kind == "f":
            names = self.names(value.shape, "k", False)
            self.live.append((constant, names))
            return names
        if type(value) in (int, float) or (isinstance(value, np.generic) and value.dtype.kind in "biuf"):
            return np.array(value.item() if isinstance(value, np.generic) else value, dtype=object)
        raise Unsupported(f"a constant {type(value).__name__}")

    def step(self, step, args):
        """The operations of ``step`` given its arguments' elements (``args``, per reference), its results'
        elements recorded."""
        if type(step) is not Step or any(type(r) is Pack for r in step.refs) or len(step.outs) != 1 \
                or step.outs[0] is None or step.complex:
            raise Unsupported("a step that is not an operation of one result")
        out = step.outs[0]
        shape, dtype = self.meta[out]
        if dtype != self.dtype or math.prod(shape) > SCALAR_MAX:
            raise Unsupported("a value of another dtype, or too large to be written as scalars")
        ops = []
        if step.func == "cut":
            result = np.empty(shape, object)
            for index in np.ndindex(*shape):
                result[index] = self.name("t", False)
                ops.append((result[index], "cut", [args[0][index]]))
        elif scalar_step(step):
            broadcast = np.broadcast_arrays(*args)
            result = self.names(shape, "t")
            for index in np.ndindex(*shape):
                ops.append((result[index], step.func, [a[index] for a in broadcast]))
        elif step.func is np.sum and not step.kwargs and not step.rest:
            result = np.array(self.name("t"), dtype=object)
            ops.append((result[()], "sum", list(args[0].ravel())))
        elif step.func in STRUCTURAL:
            if step.kind != SEQUENCE and any(type(r) is not Const for r in step.refs[1:]):
                raise Unsupported("a placement read from traced values")
            if step.kind == SEQUENCE:
                value = step.func(list(args), *step.rest, **step.kwargs)
            else:
                value = step.func(args[0], *[r.value for r in step.refs[1:]], **step.kwargs)
            result = value if type(value) is np.ndarray else np.array(value, dtype=object)
        else:
            raise Unsupported(f"{getattr(step.func, '__name__', step.func)} is not written as scalars")
        if result.shape != shape:
            raise Unsupported("a result of another shape")
        self.elements[out] = result
        return ops


class ScalarProgram:
    """A program written as one scalar function ``loop_program(X, R, K) -> (value, G)``: ``X`` the leaves' elements
    (flat), ``R`` the per-iteration constants (a row per iteration), ``K`` the constant arrays' elements, both read
    on every call, ``G`` the active leaves' gradients (flat); ``loop`` None: a program without one (straight-line
    scalar code, which `dualbroadcast.scipy.integrate` runs for a small right-hand side's products).
    `source` writes it for Numba (arrays, float32 kept by a cast after each operation) or for Python (lists of
    Python floats, the `math` functions: float64 only)."""

    def __init__(self, program, loop):
        self.p, self.loop = program, loop
        dtypes = {dtype for shape, dtype in program.meta.values()}
        if len(dtypes) != 1 or next(iter(dtypes)) not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise Unsupported("values of several dtypes, or not real floats")
        if program.out is None or program.meta[program.out][0] != () or program.complex_leaves:
            raise Unsupported("not a real number's gradient")
        self.dtype = next(iter(dtypes))
        self.scalars = scalars = _Scalars(program.meta, self.dtype)
        self.rows = []  # the per-iteration constants: (their `Const` s, one per iteration, their names)
        steps = program.recorded_steps
        for _, i in program.leaves:
            scalars.elements[i] = scalars.names(program.meta[i][0], "x")
        if loop is None:
            self.before, self.carries, self.body, self.columns, self.last, self.after = \
                self._ops(steps), {}, [], {}, [], []
        else:
            start, period, trips = loop.start, loop.period, loop.trips
            self.before = self._ops(steps[:start])
            self.carries = self._carries()
            self.body = self._template(steps[start:start + period], self.carries)
            self.columns = {name: c for c, name in enumerate(list(self.carries) + self._defined(self.body))}
            self.last = [name for name in self._last_iteration() if name in self.columns]
            self.after = self._ops(steps[start + period * trips:])
        if len(self.before) + len(self.after) + (0 if loop is None else loop.trips) > OPS_MAX:
            raise Unsupported("too many scalar operations outside the loop")
        self.value = scalars.elements[program.out][()]

    def rows_array(self):
        """``R``: the per-iteration constants as they are now, one row per iteration."""
        if not self.rows:
            return np.zeros((0 if self.loop is None else self.loop.trips, 0), self.dtype)
        return np.concatenate([np.array([c.value for c in constants], self.dtype).reshape(self.loop.trips, -1)
                               for constants, _ in self.rows], axis=1)

    def live_array(self):
        """``K``: the constant arrays' elements as they are now."""
        if not self.scalars.live:
            return np.zeros(0, self.dtype)
        return np.concatenate([np.ravel(c.value) for c, _ in self.scalars.live]).astype(self.dtype, copy=False)

    def source(self, numba):
        """The source of ``loop_program`` and the names it reads."""
        self.space = Namespace()
        self.numba = numba
        scalars = self.scalars
        lines = ["def loop_program(X, R, K):"]
        lines += [f"    {name} = X[{e}]" for e, name in enumerate(self._leaf_names())]
        live = [name for _, names in self.scalars.live for name in names.ravel()]
        lines += [f"    {name} = K[{e}]" for e, name in enumerate(live)]
        lines += self._forward(self.before, "    ")
        if self.loop is not None:
            lines += self._loop_forward()
        lines.append(f"    value = {self._text(self.value)}")
        # the backward pass, each cotangent a new name per term added (`_backward`): Numba's SSA pass takes
        # seconds over names assigned many times; only the loop's carried sums are reassigned
        zero = self._cast(self._literal(0.0))
        self.versions = 0
        cotangents = {}
        if self.value in scalars.differentiable:
            cotangents[self.value] = self._cast(self._literal(1.0))
        if self.loop is not None:
            lines += self._loop_backward(cotangents, zero)
        lines += self._backward(self.before, "    ", cotangents)
        gradient = [cotangents.get(n, zero) for i in self.p.active_leaves for n in scalars.elements[i].ravel()]
        if numba:
            lines.append(f"    G = {self.space.bind(np.empty, 'f')}({len(gradient)}, {self.space.bind(self.dtype)})")
            lines += [f"    G[{e}] = {a}" for e, a in enumerate(gradient)]
        else:
            lines.append(f"    G = [{', '.join(gradient)}]")
        lines.append("    return value, G")
        names = self.space.names
        if not numba:
            if any(func in (np.power, np.float_power) and not _integral(args[1])
                   for _, func, args in self.before + self.body + self.after):
                raise Unsupported("a power Python would make complex")
            names = {name: MATH.get(value, value) if isinstance(value, np.ufunc) else value
                     for name, value in names.items()}
        return "\n".join(lines), names

    def _loop_forward(self):
        """The loop's forward lines and those after it: each iteration's values kept in ``T``, a row per iteration."""
        trips = self.loop.trips
        if self.numba:
            lines = [f"    T = {self.space.bind(np.empty, 'f')}(({trips}, {max(len(self.columns), 1)}), "
                     f"{self.space.bind(self.dtype)})"]
        else:
            lines = [f"    T = [None] * {trips}"]
        carried = [init for (_, init, _) in self.carries.values()]
        sources = [source for (_, _, source) in self.carries.values()]
        lines += self._assign(list(self.carries), carried, "    ")
        lines.append(f"    for k in range({trips}):")
        lines += self._rows("        ")
        lines += self._forward(self.body, "        ")
        lines += self._store("        ")
        lines += self._assign(list(self.carries), sources, "        ")
        lines += self._load(self.last, trips - 1, "    ")
        return lines + self._forward(self.after, "    ")

    def _loop_backward(self, cotangents, zero):
        """The backward lines of the steps after the loop and of the loop, the iterations last first, carrying the
        carries' cotangents back; ``cotangents`` kept current."""
        scalars, trips = self.scalars, self.loop.trips
        carried = [(h, init) for (h, init, _) in self.carries.values()]
        sources = [(h, source) for (h, _, source) in self.carries.values()]
        lines = self._backward(self.after, "    ", cotangents)
        incoming = [n for n in dict.fromkeys(self.last + [s for _, s in sources]) if n in scalars.differentiable]
        lines += [f"    c_{n} = {cotangents.get(n, zero)}" for n in incoming]
        invariant = [n for n in dict.fromkeys(a for _, _, args in self.body for a in args)
                     if type(n) is str and n in scalars.differentiable and n not in self.columns]
        lines += [f"    s_{n} = {cotangents.get(n, zero)}" for n in invariant]
        initial = [(h, init) for h, init in carried if type(init) is str and init in scalars.differentiable]
        lines += [f"    e_{h} = {zero}" for h, _ in initial]
        lines.append(f"    for k in range({trips - 1}, -1, -1):")
        inner = {n: f"c_{n}" for n in incoming}
        inner.update({n: f"s_{n}" for n in invariant})
        local = set(self.columns) | {name for _, names in self.rows for name in names.ravel()}
        lines += renamed(self._rows("        ") + self._load(list(self.columns), "k", "        ")
                          + self._backward(self.body, "        ", inner), local)  # (names defined once: SSA)
        for n in incoming:
            terms = [inner[h] for h, source in sources if source == n and h in inner]
            lines.append(f"        c_{n} = {' + '.join(terms) if terms else zero}")
        lines += [f"        s_{n} = {inner[n]}" for n in invariant if inner[n] != f"s_{n}"]
        lines += [f"        e_{h} = {inner.get(h, zero)}" for h, _ in initial]
        for n in invariant:
            cotangents[n] = f"s_{n}"
        for h, init in initial:
            lines += self._add(cotangents, init, f"e_{h}", "    ")
        return lines

    def _rows(self, indent):
        index = "R[k, {}]" if self.numba else "R[k][{}]"
        names = [name for _, names in self.rows for name in names.ravel()]
        return [f"{indent}{name} = {index.format(c)}" for c, name in enumerate(names)]

    def _store(self, indent):
        if self.numba:
            return [f"{indent}T[k, {c}] = {name}" for name, c in self.columns.items()]
        return [f"{indent}T[k] = ({''.join(f'{name}, ' for name in self.columns)})"]

    def _load(self, names, k, indent):
        if not names:
            return []
        if self.numba:
            return [f"{indent}{name} = T[{k}, {self.columns[name]}]" for name in names]
        every = list(self.columns)
        if names == every:
            return [f"{indent}{''.join(f'{name}, ' for name in every)}= T[{k}]"]
        return [f"{indent}{name} = T[{k}][{self.columns[name]}]" for name in names]

    def _leaf_names(self):
        return [n for _, i in self.p.leaves for n in self.scalars.elements[i].ravel()]

    def _ops(self, steps):
        """The operations of straight-line steps, their arguments' elements those recorded."""
        ops = []
        for step in steps:
            if type(step) is not Step:
                raise Unsupported("a guard or a kernel")
            args = [self.scalars.elements[r] if type(r) is int else self.scalars.constant(r)
                    for r in (step.refs if step.kind == SEQUENCE or step.func not in STRUCTURAL else step.refs[:1])]
            ops += self.scalars.step(step, args)
        return ops

    def _carries(self):
        """Per carried reference ``(j, slot, init)``: its names, its initial elements and the template's elements it
        takes at the end of an iteration (filled in by `_template`)."""
        carries = {}
        for _j, kinds in enumerate(self.loop.kinds):
            for kind in kinds:
                if kind[0] == "carry" and kind[1:] not in carries:
                    init = self.scalars.elements[kind[3]]
                    carries[kind[1:]] = (self.scalars.names(init.shape, "h"), init, None)
        return carries

    def _template(self, template, carries):
        """The loop body's operations, on iteration 0's steps read as `Loop.kinds` says; the carries' sources."""
        scalars, ops = self.scalars, []
        for step, kinds in zip(template, self.loop.kinds):
            args = []
            structural = step.func in STRUCTURAL and step.kind != SEQUENCE
            for slot, (r, kind) in enumerate(zip(step.refs, kinds)):
                if structural and slot > 0:
                    break
                if kind[0] == "inner":
                    args.append(scalars.elements[template[kind[1]].outs[kind[2]]])
                elif kind[0] == "carry":
                    args.append(carries[kind[1:]][0])
                elif kind[0] == "invariant":
                    args.append(scalars.elements[kind[1]])
                elif kind[0] == "row":
                    names = scalars.names(np.shape(r.value), "q", False)
                    self.rows.append((kind[1], names))
                    args.append(names)
                else:
                    args.append(scalars.constant(r))
            ops += scalars.step(step, args)
        for key, (names, init, _) in carries.items():
            source = scalars.elements[template[key[0]].outs[key[1]]]
            if source.shape != names.shape:
                raise Unsupported("a carried value of another shape")
            carries[key] = (names, init, source)
        flat = {}
        for names, init, source in carries.values():
            for h, i, s in zip(names.ravel(), init.ravel(), source.ravel()):
                flat[h] = (h, i, s)
        carries.clear()
        carries.update(flat)
        return ops

    @staticmethod
    def _defined(ops):
        return [name for name, _, _ in ops]

    def _last_iteration(self):
        """The names of the last iteration's values that steps after the loop read (`Loop` checked that they read
        no other iteration's): the template's elements, mapped to the last iteration's value indices."""
        loop, steps, scalars = self.loop, self.p.recorded_steps, self.scalars
        last = loop.start + loop.period * (loop.trips - 1)
        names = []
        for j in range(loop.period):
            template, step = steps[loop.start + j], steps[last + j]
            for o, t in zip(step.outs, template.outs):
                if o is not None and t in scalars.elements:
                    scalars.elements[o] = scalars.elements[t]
                    names += [n for n in scalars.elements[t].ravel() if type(n) is str]
        return list(dict.fromkeys(names))

    def _forward(self, ops, indent):
        lines = []
        for name, func, args in ops:
            if func == "cut":
                text = self._text(args[0])
            elif func == "sum":
                text = " + ".join(map(self._text, args))
            else:
                text = Src("", self.space)._apply(func, [Src(self._text(a), self.space) for a in args]).text
            lines.append(f"{indent}{name} = {self._cast(text)}")
        return lines

    def _backward(self, ops, indent, cotangents):
        """The adjoints of ``ops``, last first: each term added to its argument's cotangent under a new name,
        ``cotangents`` (name -> the name or number holding its cotangent) kept current; an operation whose result
        has no cotangent is left out."""
        lines = []
        for name, func, args in reversed(ops):
            g = cotangents.get(name)
            if g is None or func == "cut":
                continue
            for i, a in enumerate(args):
                if type(a) is not str or a not in self.scalars.differentiable:
                    continue
                if func == "sum":
                    lines += self._add(cotangents, a, g, indent)
                    continue
                partial = DERIVATIVES[func][i]
                if callable(partial):
                    partial = partial(Src(name, self.space), *[Src(x, self.space) if type(x) is str else x
                                                               for x in args])
                if type(partial) is not Src and partial == 0:
                    continue
                d = partial.text if type(partial) is Src else self._text(partial)
                term = g if type(partial) is not Src and partial == 1 else f"{g} * {d}"
                lines += self._add(cotangents, a, self._cast(term), indent)
        return lines

    def _add(self, cotangents, name, term, indent):
        """The line adding ``term`` to ``name``'s cotangent, under a new name."""
        self.versions += 1
        new = f"a{self.versions}"
        current = cotangents.get(name)
        cotangents[name] = new
        return [f"{indent}{new} = {term if current is None else f'{current} + {term}'}"]

    def _assign(self, targets, values, indent):
        if not targets:
            return []
        return [f"{indent}{', '.join(targets)}, = {', '.join(map(self._text, values))},"]

    def _cast(self, text):
        """``text`` cast to the program's dtype where Numba would widen it (float32 times a Python number)."""
        if self.numba and self.dtype != np.float64:
            return f"{self.space.bind(self.dtype.type, 'F')}({text})"
        return text

    def _text(self, x):
        return x if type(x) is str else self._literal(x)

    def _literal(self, x):
        if type(x) in (int, float) and math.isfinite(x):
            return repr(x)
        return self.space.bind(x)


def attach(program, compile_straight, expected=None):
    """The program's `Loop` (None if it has none), its scalar code tried as ``program``'s run, gradient and one
    (`LoopTier`) unless `COMPILE` is ``"off"`` or the program has steps it does not write.  ``compile_straight()``
    gives the straight-line replay (`replay.compile_plans`' run, gradient, one, source, removed, plans): compiled now,
    or for a loop run as Python scalar code, only where it is needed (thousands of lines take seconds to write and
    compile, the scalar code milliseconds).  ``expected``: the recording's leaves, value and gradients (`expected`),
    which the scalar code must give."""
    mode = COMPILE.get()
    loop = find_loop(program.recorded_steps, program.meta, program.out)
    tier = _tier(program, loop, mode, expected) if loop is not None and mode != "off" else None
    if loop is not None:
        loop.tier = tier
    if type(tier) is not LoopTier:
        _straight(program, compile_straight(), None)
        return loop
    if mode == "background" and "python" in tier.runners:
        tier.straight_later(compile_straight)
    else:
        _straight(program, compile_straight(), tier)
    program.run, program.gradient, program.one = tier.run, tier.gradient, tier._one if tier.takes_one else None
    return loop


def _tier(program, loop, mode, expected):
    """The `LoopTier` of the loop, or `Straight` saying why there is none.  The tier and its scalar program refer to
    ``program`` and ``loop`` weakly (the program's ``run`` is the tier's, the loop's ``tier`` the tier): a dropped
    program is freed at once, not by a full collection."""
    program = weakref.proxy(program)
    try:
        tier = LoopTier(program, ScalarProgram(program, weakref.proxy(loop)), mode, expected)
    except Unsupported as e:
        return Straight(str(e))
    except Exception as e:  # noqa: BLE001 - the scalar code could not be written: the straight-line replay runs
        return Straight(f"its scalar code failed: {type(e).__name__}: {e}")
    if not tier.runners and not tier.numba:
        reason = tier.failed or "a float32 program runs as scalar code in Numba only: pip install 'dualbroadcast[fast]'"
        return Straight(reason)
    return tier


def expected(program, recorded):
    """``(leaves, (value, gradients))`` of the recording (``cotangents``: per value index), which a scalar runner
    must reproduce; None if unknown.  Copied: the caller may change its arrays, and the gradient it was given, in
    place."""
    if recorded is None or recorded[1] is None:
        return None
    value, cotangents = recorded
    leaves = [leaf for arg in program.arguments for leaf in arg.originals]
    zero = np.zeros((), program.meta[program.out][1])
    gradients = tuple(zero if cotangents[i] is None else np.copy(cotangents[i]) for i in program.active_leaves)
    return [np.copy(leaves[k]) if type(leaves[k]) is np.ndarray else leaves[k] for k, _ in program.leaves], \
        (value, gradients)


def _straight(program, compiled, tier):
    """Take the straight-line replay ``compiled``: the program's functions (``tier``: the loop's runner among
    others), its source; the recording's tape is not needed any more."""
    run, gradient, one, program.source, program.removed, program.plans = compiled
    if tier is None:
        program.run, program.gradient, program.one = run, gradient, one
    else:
        tier.take_straight({"run": run, "gradient": gradient, "one": one})
    program.tape = None


def wait(program):
    """The program's straight-line replay, compiled now if it was left for later (`db.explain` reads it)."""
    tier = program.loop.tier if program.loop is not None else None
    if type(tier) is LoopTier:
        tier.wait()


class Straight:
    """A loop left to the straight-line replay, and why."""

    def __init__(self, reason):
        self.reason = reason

    def status(self):
        return f"straight-line replay ({self.reason})"


class LoopTier:
    """The runners of a program with a loop: the scalar code in Python, compiled (Numba installed), and the
    straight-line replay where it is compiled; each call runs the fastest measured so far.  A scalar runner is
    checked against the recording before it runs a call (one that disagrees is dropped).  The first calls measure
    the runners in turns; Numba compiles in a background thread once the program has spent `TIER_UP` seconds in
    calls (``mode`` "now": at once, waited for), then is measured too.  The straight-line replay is compiled where
    a call needs it (Python raised), for `db.explain`, or in a background thread where the fastest runner takes more
    than `STEP_FLOOR` a recorded step (the straight-line replay might then be faster)."""

    def __init__(self, program, scalar, mode, expected):
        self.straight = None  # the straight-line replay's run, gradient, one (`take_straight`)
        self.compile_straight = None  # ... the function that compiles it, where that is left for later
        self.compiling_straight = None
        self.straight_compiled = None  # ... compiled in the background, taken by the calling thread
        self.scalar, self.program, self.expected = scalar, program, expected
        self.dtype = scalar.dtype
        self.shapes = [program.meta[i][0] for _, i in program.leaves]
        self.active = [k for k, (_, i) in enumerate(program.leaves) if i in program.active_leaves]
        self.floats = [i in program.float_leaves for _, i in program.leaves]
        self.runners = {}  # name -> its function of X, R, K (`ScalarProgram`)
        self.seconds = {}  # name -> its measured calls' seconds
        self.compile_seconds = {}
        self.spent = 0.0
        self.chosen = None
        self.failed = None
        self.numba = mode != "python" and NUMBA_INSTALLED  # (imported when it compiles: ~0.5 s)
        if scalar.dtype == np.float64:
            start = time.perf_counter()
            try:
                source, names = scalar.source(False)
                exec(compile(source, "<dualbroadcast loop>", "exec"), names)  # noqa: S102 - the code this module wrote
                self._add("python", names.pop("loop_program"), time.perf_counter() - start)
            except Unsupported:
                pass
        self.compiling = None
        self.compiled = None
        if self.numba and mode == "now":
            self._compile(True)
        self.takes_one = len(program.leaves) == 1 and self.active and not program.complex_leaves  # `one` (`_one`)
        if self.takes_one:
            self.check_globals = globals_check(program.globals_read)
            self.leaf_dtype = program.meta[program.leaves[0][1]][1]

    def status(self):
        """What runs the loop, with the measured times and compile times (for `db.explain`)."""
        times = ", ".join(f"{name} {min(s) * 1e6:.0f} us" for name, s in self.seconds.items() if s)
        compiled = ", ".join(f"{name} {s:.3f} s" for name, s in self.compile_seconds.items())
        chosen = self.chosen or "being measured"
        notes = f"; {self.failed}" if self.failed else ""
        if not self.numba and "numba" not in self.runners:
            notes += "; Numba not installed (pip install 'dualbroadcast[fast]')" if not NUMBA_INSTALLED \
                else "; Numba not used (COMPILE is 'python')"
        elif "numba" not in self.runners and self.compiling is None and self.failed is None:
            notes += f"; Numba compiles after {TIER_UP:g} s spent in calls ({self.spent:.2f} s so far)"
        if self.compiling is not None and self.compiling.is_alive():
            notes += "; Numba compiling in the background"
        return f"{chosen} (a call: {times or 'not called yet'}; compile: {compiled or '-'}){notes}"

    def _add(self, name, function, compile_seconds):
        """Add the scalar runner ``name`` if it gives the recording's value and gradient (`expected`; a compiled one:
        the Python runner's, which reads the constants as they are now)."""
        if self.expected is not None:
            leaves, expected = self.expected
            if "python" in self.runners:
                expected = self._scalar("python", leaves) or expected
            result = self._scalar(name, leaves, function)
            if result is None or not _agree(result, expected, self.dtype):
                self.failed = f"{name} disagreed with the recording" if result is not None else \
                    f"{name} raised on the recorded arguments"
                return
        self.runners[name] = function
        self.compile_seconds[name] = compile_seconds
        self.seconds[name] = []
        self.chosen = None  # (measured against the others from the next call on)

    def _compile(self, mode_now=False):
        """Compile the scalar code with Numba (``mode_now``: in the calling thread, else in a background one)."""
        start = time.perf_counter()
        try:
            source, names = self.scalar.source(True)
            exec(compile(source, "<dualbroadcast loop>", "exec"), names)  # noqa: S102 - the code this module wrote
            import numba

            function = numba.njit(error_model="numpy")(names.pop("loop_program"))
            function(np.zeros(sum(math.prod(s) for s in self.shapes), self.dtype), self.scalar.rows_array(),
                     self.scalar.live_array())
        except Exception as e:  # noqa: BLE001 - a function Numba does not compile: the other runners stay
            self.failed = f"Numba failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            return
        self.compiled = (function, time.perf_counter() - start)  # taken by the calling thread's next call
        if mode_now:
            self._take_compiled()

    def _take_compiled(self):
        """Measure the compiled function against the other runners from this call on (checked first)."""
        (function, seconds), self.compiled = self.compiled, None
        self._add("numba", function, seconds)

    def straight_later(self, compile_straight):
        """Leave the straight-line replay to be compiled where it is needed (`wait`, `_measured`), in this context
        (a backend `kernels.set_backend` forced holds there too)."""
        context = contextvars.copy_context()
        self.compile_straight = lambda: context.run(compile_straight)

    def _straight_in_background(self):
        def run():
            self.straight_compiled = self.compile_straight()

        self.compiling_straight = threading.Thread(target=run, daemon=True)
        self.compiling_straight.start()

    def take_straight(self, functions):
        """The straight-line replay's functions, measured against the scalar runners from the next call on where
        it might be faster (`_straight_may_win`)."""
        self.straight = functions
        if self._straight_may_win():
            self.seconds["straight-line"] = []
            self.chosen = None

    def _straight_may_win(self):
        """Whether the straight-line replay might be faster than the runner chosen (none yet: it might)."""
        return self.chosen is None or min(self.seconds[self.chosen]) > STEP_FLOOR * len(self.program.recorded_steps)

    def wait(self):
        """The straight-line replay, compiled now (or waited for, if it is being compiled in the background)."""
        if self.straight is not None:
            return
        if self.compiling_straight is None:
            self.straight_compiled = self.compile_straight()
        else:
            self.compiling_straight.join()
            if self.straight_compiled is None:
                raise RuntimeError("the straight-line replay failed to compile (see the background thread's error)")
        _straight(self.program, self.straight_compiled, self)
        self.straight_compiled = None

    def _tier_up(self):
        if self.numba and self.compiling is None and self.spent > TIER_UP:
            self.compiling = threading.Thread(target=self._compile, daemon=True)
            self.compiling.start()

    def _leaf_values(self, leaves, name):
        if name == "numba":
            return np.concatenate([np.ravel(np.asarray(x, self.dtype)) for x in leaves]) if len(leaves) != 1 \
                else np.ravel(np.asarray(leaves[0], self.dtype))
        values = []
        for x in leaves:
            if type(x) is float:
                values.append(x)
            else:
                values += np.ravel(x).tolist()
        return values

    def _scalar(self, name, leaves, function=None):
        """``(value, gradients)`` by the scalar runner ``name``; None where Python raised (a NaN or an infinity
        NumPy would give: the straight-line replay gives it)."""
        function, scalar = function or self.runners[name], self.scalar
        rows, live = scalar.rows_array(), scalar.live_array()
        if name == "python":
            rows, live = rows.tolist(), live.tolist()
        try:
            value, flat = function(self._leaf_values(leaves, name), rows, live)
        except (ArithmeticError, ValueError):
            return None
        if not isinstance(value, float) and not isinstance(value, np.floating):
            return None
        gradients, offset = [], 0
        for k in self.active:
            n = math.prod(self.shapes[k])
            if self.floats[k]:
                gradients.append(self.dtype.type(flat[offset]))
            else:
                gradients.append(np.array(flat[offset:offset + n], self.dtype).reshape(self.shapes[k]))
            offset += n
        return self.dtype.type(value), tuple(gradients)

    def _call(self, leaves, which):
        """``(value, gradients)`` of the runner chosen, or of the next one measured."""
        if self.compiled is not None:
            self._take_compiled()
        if self.straight_compiled is not None:
            self.wait()
        name = self.chosen or self._next()
        start = time.perf_counter()
        result = self.straight[which](leaves) if name == "straight-line" else self._scalar(name, leaves)
        if result is None:  # Python raised: this call replayed straight-line
            self.wait()
            return self.straight[which](leaves)
        seconds = time.perf_counter() - start
        self.spent += seconds
        if self.chosen is None:
            self._measured(name, seconds)
        if self.compiling is None:
            self._tier_up()
        return result

    def _next(self):
        """The runner to measure next: the one measured least (three times each)."""
        return min(self.seconds, key=lambda name: len(self.seconds[name]))

    def _measured(self, name, seconds):
        self.seconds[name].append(seconds)
        if all(len(s) >= MEASURED for s in self.seconds.values()):
            self.chosen = min(self.seconds, key=lambda name: min(self.seconds[name]))
            if self.straight is None and self.compiling_straight is None and self._straight_may_win():
                self._straight_in_background()

    def run(self, leaves, out=None):
        value, gradients = self._call(leaves, "run")
        if out is None:
            return value, gradients
        for target, g in zip(out, gradients):
            np.copyto(target, g)
        return value, out

    def gradient(self, leaves, out=None):
        gradients = self._call(leaves, "gradient")[1]
        if out is None:
            return None, gradients
        for target, g in zip(out, gradients):
            np.copyto(target, g)
        return None, out

    def _one(self, x):
        """`replay._one`'s call ``prepared(x)`` of a program of one leaf: `MISS` unless ``x`` is its case."""
        if self.floats[0]:
            if type(x) is not float:
                return MISS
        elif type(x) is not np.ndarray or x.dtype != self.leaf_dtype or x.shape != self.shapes[0]:
            return MISS
        if self.check_globals is not None and not self.check_globals():
            return MISS
        g = self.gradient([x])[1][0]
        return float(g) if self.floats[0] else g


TIER_UP = 2.0  # seconds spent in calls from which Numba compiles the loop (it takes seconds)
MEASURED = 3  # calls each runner is timed before the fastest is chosen
STEP_FLOOR = 1e-6  # seconds a recorded step takes at least in the straight-line replay (a NumPy call on small
# arrays and its pullback; RK4's: 2.5 us): a scalar runner faster than that per step needs no comparison with it


def _agree(result, expected, dtype):
    tolerance = 1e-9 if dtype == np.float64 else 1e-4
    pairs = [(result[0], expected[0])] + list(zip(result[1], expected[1]))
    return all(np.allclose(np.asarray(a, float), np.asarray(b, float), rtol=tolerance, atol=tolerance, equal_nan=True)
               for a, b in pairs if b is not None)


NUMBA_INSTALLED = importlib.util.find_spec("numba") is not None
