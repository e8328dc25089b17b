"""Prepared gradients — record once, replay many times.

``prepare_gradient(f, *example_args)`` records ``f`` once as a list of steps:
every operation on a value derived from *any* argument (cut arguments
included, so new data is seen), with references to the values it used.
Replaying runs those steps on new arguments — no user Python, no dispatch —
then sweeps the backward pass, and can write the gradient into ``out=``.

Every decision the recording took on a traced value is a guard: ``bool`` of a
comparison, ``int``/``float``/index conversions, non-array results (shapes,
counts).  Replay checks each guard where it was taken; if one differs, the
program is recorded again for the new case (kept among a few variants) and
``recordings`` counts it.  Replay never returns a gradient for a path the
function did not take.  Globals ``f`` reads are checked too: rebound, they
make ``f`` recorded again; state it reads otherwise is baked in (see
`prepare_gradient`).
"""

import collections
import contextvars
import threading
import types
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from . import loops, pullbacks, pytree
from .api import directional_derivative, hvp_arguments
from .context import ACTIVE_TAPE
from .errors import UnsupportedFunctionError
from .guards import RECORDER, NotReplayableError, note_views
from .loop_finding import constant_key, flat_refs, step_key
from .numpy_facts import FLOAT_LEAVES, FLOAT_SCALARS, getitem, qualified_name
from .program import Const, Guard, KernelStep, Pack, SecondOrderStep, Step, unpacked
from .pytree import Cut
from .regions import FUSE_REGIONS, forward_regions
from .registry import BY_ARGNUM, OUTPUTS, PER_ARGUMENT, complex_rule, first_output
from .replay import MISS, compile_plans, globals_check
from .replay_forward import same_result
from .reverse import TrackedArgument, argument_gradients, call_on_tape, scalar_seed, track_arguments, value_and_gradient
from .sweeps import backward
from .tape import Tape
from .tracked import Tracked, _record_result, keep_constants, record_binary, tape_checked

MAX_VARIANTS = 8
_thread = threading.get_ident


class GuardFailed(Exception):
    """A replayed decision differs from the recorded one: record this case anew."""


class Recorder:
    """Records the steps of one evaluation on ``tape``; values not needing a gradient are inactive."""

    def __init__(self, tape):
        self.tape = tape
        self.steps = []
        self.inactive = set()
        self.copies = []  # (Const, a copy of its arrays when a step used it): see `hold`
        self.meta = {}  # value index -> (shape, dtype)
        self.fixed = set()  # value indices whose shape every replay of this signature gives (see `shape_fixed`)
        self.keys = {}  # `loop_finding.step_key` -> its number, a step's ``signature``

    def signature(self, key):
        """The number of a step's ``key`` (`loop_finding.step_key`) in this recording: steps that `find_loop` may
        take for the same step of two iterations have the same one, so that it compares integers."""
        keys = self.keys
        try:
            return keys.setdefault(key, len(keys))
        except TypeError:  # an unhashable constant or keyword: by its text
            return keys.setdefault(repr(key), len(keys))

    def describe(self, t):
        """Note the shape and dtype of ``t``'s value (an array's or NumPy scalar's read directly: once per step)."""
        v = t.value
        self.meta[t.index] = (v.shape, v.dtype) if isinstance(v, _WITH_DTYPE) else (np.shape(v), np.result_type(v))

    def references(self, func, sequence):
        """How a step refers to each argument (a value index, a `Const` or a `Pack`), for `tracked.record_operation`:
        ``(values, refs, traced, active)``, ``traced`` whether any argument is traced, ``active`` the
        positions of those needing a gradient."""
        refs, values = [], []
        for a in sequence:
            if type(a) is Tracked and a.tape is self.tape:  # the common case, without `reference`'s call
                refs.append(a.index)
                values.append(a.value)
                continue
            ref, value = self.reference(func, a)
            refs.append(ref)
            values.append(value)
        traced = any(type(r) is not Const for r in refs)
        active = [i for i, r in enumerate(refs) if type(r) is int and r not in self.inactive]
        return values, refs, traced, active

    def record_per_argument(self, func, rule, args):
        """`tracked.record_operation` of ``func(*args)``, its ``rule`` one maker per argument, called without
        keywords on values of this recording (one needing a gradient) and plain constants (numbers, arrays, basic
        indices): the common step, recorded as the general path records it in a third of its time; NotImplemented
        for anything else, which the general path records (its errors, nested and complex values, packs)."""
        tape = self.tape
        makers = rule.makers
        if tape.complex or tape.closed or tape.level or RECORDER.get() is not self or rule.kind != PER_ARGUMENT:
            return NotImplemented
        inactive, meta = self.inactive, self.meta
        refs, values, active, arrays, keys = [], [], [], False, []  # (keys: `step_key`'s, written out)
        real = True  # every traced value a real float needing a gradient, every constant a real number or array
        for i, a in enumerate(args):
            kind = type(a)
            if kind is Tracked:
                if a.tape is not tape or a.slice_index is not None:
                    return NotImplemented
                index = a.index
                if index not in inactive:
                    if i >= len(makers) or makers[i] is None:
                        return NotImplemented  # the general path's error: no derivative in this argument
                    active.append(i)
                    real = real and meta[index][1].kind == "f"
                else:
                    real = False
                refs.append(index)
                values.append(a.value)
                keys.append(meta[index])
            elif kind in _PLAIN_CONSTANTS or (kind in _INDICES and not _holds_traced(_bounds(a) if kind is slice
                                                                                     else a)):
                if kind is np.ndarray:
                    arrays = True
                    real = real and a.dtype.kind in "fiub"
                else:
                    real = real and kind in _REAL_NUMBERS
                refs.append(Const(a))
                values.append(a)
                keys.append(_NUMBER_KEYS.get(kind) or constant_key(a))
            else:
                return NotImplemented
        if not active:
            return NotImplemented  # a traced step without a gradient (`traced`)
        if real and rule.binary and rule.keeps_arguments and len(args) == 2:  # a real float result: recorded as
            out = record_binary(args[0], args[1], func, self)  # `db.gradient` records it, its cheapest pullbacks
            ans = out.value
            kind = type(ans)
            meta = _SCALAR_META[kind] if kind in FLOAT_SCALARS else (ans.shape, ans.dtype)
        else:
            ans = rule.plain(*values)
            if arrays:
                self.hold(refs, rule.keeps_arguments)
            kind = type(ans)
            if kind in FLOAT_SCALARS:
                meta = _SCALAR_META[kind]
            elif kind is np.ndarray and ans.dtype.kind == "f":
                meta = (ans.shape, ans.dtype)
            else:  # complex, or not a float: as `record_operation` records it
                out = _record_result(tape, func, rule, None, ans, ans, values, {}, [args[i] for i in active], self,
                                     active)
                if kind is np.ndarray and ans.base is not None:
                    note_views(args, (out,), func is getitem)
                self.step(func, rule, refs, (), {}, active, (out,), ans)
                return out
            out = tape.record(ans, tuple([(refs[i], makers[i](ans, *values)) for i in active]), func)  # (no view)
        if kind is np.ndarray and ans.base is not None:  # a view (x[1:], x.T)
            note_views(args, (out,), func is getitem)
        index = out.index  # `step`, its facts read directly
        self.meta[index] = meta
        fixed = self.fixed
        shape_fixed = _shapes_follow(func, refs) and all(type(r) is Const or r in fixed for r in refs)
        if shape_fixed:
            fixed.add(index)
        numbers = self.keys  # (`signature`, inline: its key is hashable)
        signature = numbers.setdefault((id(func), PER_ARGUMENT, "", tuple(keys), (), (meta,)), len(numbers))
        self.steps.append(Step(func, rule.impl, PER_ARGUMENT, tuple(refs), (), {}, (index,), tuple(active), makers,
                               None, False, signature))  # (tuples: of numbers, untracked by the collector once seen)
        if not shape_fixed and self.selects(refs, [index]):
            self.guard_shapes([index])
        return out

    def traced(self, a, func):
        """A result without a gradient, kept traced: the replay recomputes it from the new arguments."""
        out = self.tape.record(a, (), func)
        self.inactive.add(out.index)
        return out

    def step(self, func, rule, refs, rest, kwargs, active, results, ans):
        """The step `tracked.record_operation` recorded: its outputs are ``results`` (tracked, or plain
        results, guarded by equality on replay)."""
        outs = []
        for r in results:
            if type(r) is Tracked:
                self.describe(r)
                outs.append(r.index)
            else:
                outs.append(None)
        complex_step = rule is not None and self.tape.complex and self.holds_complex(refs, rest, kwargs, results)
        if complex_step:
            rule = complex_rule(func)  # the rule `tracked._record_complex` recorded it with
        kind = rule.kind if rule is not None else None
        makers = rule.makers if rule is not None else None
        if kind == OUTPUTS and not isinstance(ans, (tuple, list)):  # one array (svd without u, v): output 0
            kind, makers = BY_ARGNUM, partial(first_output, rule.makers)
        if kind == OUTPUTS:
            expected = {j: r for j, (r, o) in enumerate(zip(results, outs)) if o is None}
        else:
            expected = ans if outs == [None] else None
        fixed = self.shape_fixed(func, refs, kwargs)
        if fixed:
            if outs == [None] and func in _SIZES:  # the size of a value of a known shape: no guard
                return
            self.fixed.update(o for o in outs if o is not None)
        impl = rule.impl if rule is not None else func
        step = Step(func, impl, kind, refs, rest, kwargs, outs, active, makers, expected, complex_step)
        step.signature = self.signature(step_key(step, self.meta))
        self.steps.append(step)
        if not fixed and self.selects(refs, outs):
            self.guard_shapes(outs)

    def selects(self, refs, outs):
        """Whether a step may give arrays whose shapes depend on values: it reads integers or booleans computed
        from the arguments (``x[x > 0]``, ``np.compress(x > 0, x)``, ``x[np.nonzero(d)]``), or its results are such
        values (``np.nonzero(x)``)."""
        inactive, meta = self.inactive, self.meta
        for r in flat_refs(refs):
            if type(r) is int and r in inactive and meta[r][1].kind in "biu":
                return True
        return any(o is not None and o in inactive and meta[o][1].kind in "biu" for o in outs)

    def guard_shapes(self, outs):
        """A guard on the shape of each array result: the program is compiled for these shapes (a broadcast
        undone by a sum over its axes, a region's kernel bound to buffers), so another shape on replay is a
        new case, recorded anew; the shapes are fixed from here on."""
        for o in outs:
            if o is not None and self.meta[o][0]:
                self.steps.append(Guard(o, np.shape, self.meta[o][0]))
                self.fixed.add(o)

    def shape_fixed(self, func, refs, kwargs):
        """Whether the results of ``func`` on ``refs`` have the same shapes on every replay of this signature:
        a function whose results' shapes follow from its arguments' shapes (a ufunc, x[index] with a constant
        index, ...), every traced argument of a fixed shape (an argument's leaves: the signature fixes them)."""
        if not _shapes_follow(func, refs):
            return False
        return all(type(r) is Const or r in self.fixed for r in flat_refs(refs)) \
            and all(type(v) is not Tracked for v in kwargs.values())

    def holds_complex(self, refs, rest, kwargs, results):
        """Whether a complex value took part in a step (an argument, a result): on a tape holding complex
        values, the tape then recorded it with the function's complex rule (`tracked._record_result`)."""
        refs = list(unpacked(refs))
        if any(self.meta[r][1].kind == "c" for r in refs if type(r) is int):
            return True
        values = [r.value for r in refs if type(r) is not int] + list(rest) + list(kwargs.values())
        values += [r.value if type(r) is Tracked else r for r in results]
        return any(map(_is_complex, values))

    def reference(self, func, a):
        """How a step refers to its argument ``a`` (a value index, a `Const` or a `Pack`), and its value."""
        if type(a) is Tracked:
            return self.index_of(a), a.value
        if type(a) in (tuple, list) and _holds_traced(a):
            return self.pack(func, a)
        if type(a) is slice and _holds_traced(_bounds(a)):
            return self.pack(func, a)
        return Const(a), a

    def pack(self, func, items):
        """A tuple, list or slice holding traced values (``x[i, 0]`` with ``i = np.argmax(d)``, ``x[:i + 1]``),
        rebuilt from their new values on replay.  Such a value has no gradient path, so it must carry none."""
        kind = type(items)
        refs, values = zip(*[self.reference(func, a) for a in (_bounds(items) if kind is slice else items)])
        if any(type(r) is int and r not in self.inactive for r in refs):
            raise UnsupportedFunctionError(
                f"{qualified_name(func)} got a differentiated value inside a {kind.__name__}, where "
                "its gradient cannot be followed; pass it as an argument of its own, or db.cut it"
            )
        value = slice(*values) if kind is slice else kind(values)
        return Pack(kind, list(refs), value), value

    def index_of(self, t):
        """The value index of ``t``, traced on this tape; the tape's clear error for a tracked value of
        another evaluation (kept from an earlier call, or of a gradient this one runs inside)."""
        if t.tape is not self.tape:
            tape_checked(self.tape, t.tape)
        return t.index

    def kernel(self, kernel, inputs, values, active, backend, reduce, record):
        """Record a broadcast/sum kernel call; ``record()`` makes its tape record (the active inputs
        are its parents)."""
        refs = [self.index_of(x) if type(x) is Tracked else Const(v) for x, v in zip(inputs, values)]
        self.hold(refs, False)  # its partials are computed now: db.gradient reads it no more
        out = record()
        self.describe(out)
        if all(type(r) is Const or r in self.fixed for r in refs):
            self.fixed.add(out.index)
        self.steps.append(KernelStep(kernel, refs, active, backend, out.index, reduce))
        if not active:
            self.inactive.add(out.index)
        return out

    def levels(self, levels):
        """`broadcast._two_levels` of a second-order kernel in a recording: its outer tape must be the recorded
        one (else None: the kernel's function runs operation by operation), and an outer value that needs no
        gradient is an input like any constant."""
        inner, outer, inner_positions, outer_parents = levels
        if outer is not self.tape or any(p in outer_parents and outer_parents[p].index in self.inactive
                                         for p in inner_positions):
            return None  # (an inner argument whose value needs no outer gradient: its partial would be baked in)
        return inner, outer, inner_positions, {p: a for p, a in outer_parents.items() if a.index not in self.inactive}

    def second_order(self, kernel, inputs, values, backend, out, active, pairs, outer, partials, result_shapes):
        """Record a second-order kernel (`broadcast_pullbacks.run_second_order`): ``out`` its value and ``partials``
        (position -> the partial of an inner argument) as this tape recorded them; ``active`` the positions whose
        partials it computes, ``pairs`` those of its second partials, ``outer`` the positions of this tape's
        arguments."""
        refs = []
        for x, v in zip(inputs, values):
            x = x.value if type(x) is Tracked and x.tape is not self.tape else x  # an inner input: its value
            refs.append(self.index_of(x) if type(x) is Tracked else Const(v))
        self.hold(refs, False)  # its partials are computed now: db.gradient reads it no more
        for t in [out, *partials.values()]:
            self.describe(t)
            if all(type(r) is Const or r in self.fixed for r in refs):
                self.fixed.add(t.index)
        slots = {p: k for k, p in enumerate(active)}
        pair_slots = {}
        for k, (a, b) in enumerate(pairs):
            pair_slots[a, b] = pair_slots[b, a] = len(active) + k
        self.steps.append(SecondOrderStep(kernel, refs, backend, out.index, slots, pair_slots, outer,
                                          {p: d.index for p, d in partials.items()}, result_shapes))

    def hold(self, refs, kept):
        """Replay reads each constant array as it is once f has run, so f must not change one after its
        use: read-only while f runs where `db.gradient` keeps it too (``kept``: a change is its error),
        else copied, the copy replacing it if f changed it (see `settle`)."""
        constants = _constants(refs)
        if kept:
            keep_constants(self.tape, [c.value for c in constants])
        else:
            self.copies += [(c, _copied(c.value)) for c in constants if _holds_array(c.value)]

    def settle(self):
        """After f: each constant changed since its use is replayed as it was then."""
        for constant, copy in self.copies:
            if not same_result(constant.value, copy):
                constant.value = copy
        self.copies = []

    def alias(self, x):
        """``cut(x)`` of a traced value: the same value, inactive from here on.  Of a value of another
        evaluation (kept from an earlier call): its value, a constant, as `db.gradient` gives it; of a value of a
        gradient taken inside f: the cut of its value (`cut` stops every level)."""
        if x.tape is not self.tape:
            if type(x.value) is Tracked and x.tape.level > self.tape.level and not x.tape.closed:
                return self.alias(x.value)
            return x.value
        out = self.traced(x.value, "cut")
        self.describe(out)
        if x.index in self.fixed:
            self.fixed.add(out.index)
        step = Step("cut", _identity, None, [x.index], (), {}, [out.index], [], None)
        step.signature = self.signature(step_key(step, self.meta))
        self.steps.append(step)
        return out

    def guard(self, x, convert):
        """A decision on a traced value: its result must be the same on every replay."""
        index = self.index_of(x)
        result = convert(x.value)
        if convert in _SIZES and index in self.fixed:  # a size every replay gives: no guard
            return result
        self.steps.append(Guard(index, convert, result))
        return result


_WITH_DTYPE = (np.ndarray, np.generic)
_SCALAR_META = {kind: ((), np.dtype(kind)) for kind in FLOAT_SCALARS}  # the (shape, dtype) of a float scalar
# The constants `Recorder.record_per_argument` takes as they are: numbers, arrays, None; and the indices it takes
# when they hold no traced value (``x[1:]``, ``x[0, :]``)
_PLAIN_CONSTANTS = frozenset((float, int, bool, type(None), np.ndarray, np.float64, np.float32, np.int64, np.intp,
                              np.bool_))
_INDICES = frozenset((slice, tuple))
_NUMBER_KEYS = {kind: constant_key(kind(0)) for kind in (float, int, np.float64, np.float32, np.int64, np.intp)}
_REAL_NUMBERS = frozenset((float, int, bool, np.float64, np.float32, np.int64, np.intp, np.bool_))
_SIZES = {np.shape, np.ndim, np.size, len}  # what a guard of a value's size reads
_SHAPE_FUNCTIONS = {np.sum, np.dot, np.matmul, np.reshape, np.ravel, np.transpose, np.broadcast_to, np.shape,
                    np.ndim, np.size, np.stack,
                    np.concatenate}  # ... whose results' shapes follow from their arguments' (ufuncs too)


def _shapes_follow(func, refs):
    """Whether the shapes of the results of ``func`` on ``refs`` follow from its arguments' shapes (a ufunc, x[index]
    with a constant index, ...)."""
    return isinstance(func, np.ufunc) or func in _SHAPE_FUNCTIONS or func == "cut" \
        or func is pullbacks.SCATTER_RECORDED \
        or (func is getitem and len(refs) == 2 and type(refs[1]) is Const) \
        or (func is np.where and len(refs) == 3)  # (np.where(c) alone is np.nonzero(c))


def _identity(x):
    return x


def _is_complex(value):
    """Whether ``value`` is (or a tuple or list of it holds) a complex number or array."""
    if type(value) in (tuple, list):
        return any(map(_is_complex, value))
    return type(value) is complex or (isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind == "c")


def _constants(refs):
    """The `Const` s among ``refs`` and in their Packs."""
    return [r for r in flat_refs(refs) if type(r) is Const]


def _holds_array(value):
    return type(value) is np.ndarray or (type(value) in (tuple, list) and any(map(_holds_array, value)))


def _copied(value):
    """``value`` with its arrays copied (in tuples and lists too: an index)."""
    if type(value) is np.ndarray:
        return value.copy()
    return type(value)(map(_copied, value)) if type(value) in (tuple, list) else value


def _holds_traced(items):
    """Whether a tuple or list holds a traced value, at any depth (a slice's bounds included)."""
    return any(type(a) is Tracked or (type(a) in (tuple, list) and _holds_traced(a))
               or (type(a) is slice and _holds_traced(_bounds(a))) for a in items)


def _bounds(s):
    return s.start, s.stop, s.step


class Program:
    """One recorded variant, compiled to straight-line Python (see `replay.compile_plans`)."""

    def __init__(self, tape, recorder, arguments, out, float_leaves, complex_leaves=(), globals_read=(), recorded=None):
        self.recorded_steps = recorder.steps
        self.meta = recorder.meta
        self.tape = tape  # the recorded pullbacks' kinds shape the generated code
        self.arguments = arguments
        self.leaves = _leaves(arguments)
        self.active_leaves = [t.index for arg in arguments for t in arg.inputs if t is not None]
        self.gradient_shapes = [self.meta[i][0] for i in self.active_leaves]  # what ``out=`` arrays must have
        self.out = out.index if type(out) is Tracked else None
        self.constant = None if type(out) is Tracked else out  # a result that depends on no argument
        self.float_leaves = float_leaves  # value indices of the leaves passed as Python floats
        self.complex_leaves = complex_leaves  # ... and as Python complex numbers
        self.globals_read = globals_read  # (namespace, name, value) of the globals it bakes in: ``one`` checks them
        # steps, regions, runners, plans, loop, run, gradient, one, source, removed: set by `_attach` at the first
        # replay (or the first read of one of them), in the context of the recording; until then the methods ``run``
        # and ``gradient`` give the recording's value and gradient for the recorded leaves (`_first`)
        self.context = contextvars.copy_context()
        self.expected = loops.expected(self, recorded)  # (leaves, (value, gradients)) of the recording, or None
        self.first = self.expected if _returnable(self) else None
        self.one = None
        # Whether ``gradient`` gives Python floats, known after its first call: a program of Python-float leaves gives
        # the same types on every call (its steps' types follow from its leaves'), a tuple of them its gradient as is.
        self.floats_out = None

    def __getattr__(self, name):
        """An attribute `_attach` sets, read before the first replay: attached now."""
        if name not in _ATTACHED or "loop" in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._attach()
        return getattr(self, name)

    def _attach(self):
        """Find the program's loop and compile its replay (`loops.attach`), in the context it was recorded in (the
        loop compile mode, region fusion, a backend forced)."""
        self.steps, self.regions, self.plans, self.first = self.recorded_steps, [], None, None
        self.runners = {}  # (a region's KernelStep, without its value) -> its runner, which every plan runs; also
        # (a product's step, "matmul", site) and (a region's step, "product sums", partial): `region_runners`'
        fuse = self.context.run(FUSE_REGIONS.get)  # (the program's own functions refer to it weakly: a dropped program
        # is freed at once, not by a full collection)
        compile_straight = partial(_compile_straight, weakref.proxy(self), fuse)
        self.loop = self.context.run(loops.attach, self, compile_straight, self.expected)
        self.expected = self.context = None

    def run(self, leaves, out=None):
        """The value and gradient at ``leaves`` (the attached program's ``run`` replaces this method)."""
        return self._first("run", leaves, out)

    def gradient(self, leaves, out=None):
        """The gradient at ``leaves`` (the attached program's ``gradient`` replaces this method)."""
        return self._first("gradient", leaves, out)

    def _first(self, which, leaves, out=None):
        """``run`` or ``gradient`` (``which``) before the program is attached: the recording's value and gradient if
        ``leaves`` are the recorded ones bit for bit (a first call after `prepare_gradient` pays no loop finding or
        compiling), else the program attached and run."""
        first, self.first = self.first, None
        if first is None or not _same_leaves(leaves, first[0]):
            if "loop" not in self.__dict__:
                self._attach()
            return getattr(self, which)(leaves, out)
        value, gradients = first[1]
        if out is None:
            return value, tuple(map(np.copy, gradients))
        for target, g in zip(out, gradients):
            np.copyto(target, g)
        return value, out

    def shape_of(self, ref):
        return self.meta[ref][0] if type(ref) is int else np.shape(ref.value)


_ATTACHED = {"steps", "regions", "runners", "plans", "loop", "source", "removed"}  # what `Program._attach` sets


def _returnable(program):
    """Whether the recording's gradient is what a replay returns (`Program._first`) to rounding: float64 array
    leaves, each gradient an array of its leaf's shape and dtype (a float32 recording may round differently)."""
    if program.expected is None or program.complex_leaves or program.float_leaves:
        return False
    leaves, (_, gradients) = program.expected
    dtypes = {i: leaf.dtype for leaf, (_, i) in zip(leaves, program.leaves)
              if type(leaf) is np.ndarray and leaf.dtype == np.float64}
    return len(dtypes) == len(leaves) and all(
        type(g) is np.ndarray and g.shape == shape and g.dtype == dtypes[i]
        for g, shape, i in zip(gradients, program.gradient_shapes, program.active_leaves))


def _same_leaves(leaves, recorded):
    """Whether ``leaves`` are the ``recorded`` arrays bit for bit (their types, shapes and dtypes too)."""
    return len(leaves) == len(recorded) and all(
        type(a) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        for a, b in zip(leaves, recorded))


def _compile_straight(program, fuse):
    """`replay.compile_plans` of ``program``, its elementwise chains fused into forward regions first (``fuse``)."""
    if fuse:
        program.steps, program.regions = forward_regions(program.recorded_steps, program.meta, program.out)
    return compile_plans(program, GuardFailed)


class PreparedGradient:
    """A gradient program recorded for one argument structure; call it like `db.gradient`.

    ``prog(*args, out=None)`` returns the gradient (written into ``out`` if given);
    ``prog.value_and_gradient(*args, out=None)`` also returns the value.
    ``prog.recordings`` counts how often ``f`` was recorded (a new variant, a
    guard that failed: a branch that went another way, or a global rebound).
    """

    def __init__(self, f: Callable[..., Any], example_args: tuple[Any, ...]) -> None:
        self.f = f
        self.reads = f  # the function whose globals a recording bakes in (`_globals_read`)
        self.recordings = 0
        self.threads = {}  # thread id -> its variants, signature -> [Program, ...]: see `variants`
        self.local = threading.local()  # .variants: the calling thread's (read faster than by its id); .one: its last
        self.globals_read = ()  # (namespace, name, value) the variants were recorded with
        self.unchanged = None  # () -> whether each is still bound to its value (`replay.globals_check`); None: none
        self.unreplayable = set()  # signatures whose recording cannot be replayed: `gradient` evaluates them
        if example_args is not None and ACTIVE_TAPE.get() is None:  # inside a gradient, every call is a nested one
            self._record(example_args, _signature([pytree.flatten(arg) for arg in example_args]))

    @property
    def variants(self):
        """The calling thread's variants (signature -> [Program, ...]).  A program's buffers (its kernels' outputs,
        its scratch) are reused by every replay, so each thread records and replays programs of its own."""
        try:
            return self.local.variants
        except AttributeError:
            variants = self.local.variants = self.threads[_thread()] = collections.OrderedDict()
            return variants

    def __call__(self, *args: Any, out: Any = None) -> Any:
        if out is None and len(args) == 1:
            try:  # the thread's last program of one argument, if this call is its case (`replay._one`)
                g = self.local.one(args[0])
            except AttributeError:  # the thread's first call
                self.local.one = _miss
                return self._call_one(args)
            except (GuardFailed, KeyError):  # a guard in the program failed, a global was deleted
                return self._call_one(args)
            return self._call_one(args) if g is MISS else g
        if len(args) == 1 and type(args[0]) is np.ndarray and type(out) is np.ndarray:  # one array into one
            return self._array_into(args, out)
        return self._evaluate(args, out, False)[1]

    def _call_one(self, args):
        """``self(x)`` of one argument that the thread's last program did not take: one array, one float, or one
        tuple or list of floats by a cheap key, the program that replays it kept as the thread's ``one`` for the
        next call; anything else by `_evaluate`."""
        self._check_globals()
        x = args[0]
        kind = type(x)
        if kind is tuple or kind is list:
            return self._call_floats(x, kind)
        if kind is not np.ndarray and kind is not float:
            return self._evaluate(args, None, False)[1]
        key = _ONE_FLOAT if kind is float else ((x.shape, x.dtype),)
        for program in self.variants.get(key, ()):
            try:
                g = program.gradient(args)[1][0]
            except GuardFailed:
                continue
            if program.one is not None:
                self.local.one = program.one
            if kind is float:
                return float(g)
            return g if type(g) is np.ndarray and g.dtype == x.dtype else np.asarray(g, dtype=x.dtype)
        if kind is float:
            return self._evaluate(args, None, False)[1]
        return self._evaluate_tree(args, None, False, (key, args))[1]

    def _call_floats(self, x, kind):
        """``self(x)`` of one tuple or list ``x``: of Python floats, replayed by a cheap key (the program kept as
        the thread's ``one``); else `_evaluate`."""
        if x and list(map(type, x)).count(float) == len(x):
            for program in self.variants.get(((kind, len(x)),), ()):
                try:
                    grads = program.gradient(x)[1]
                except GuardFailed:
                    continue
                if program.one is not None:
                    self.local.one = program.one
                if program.floats_out is None:  # Python floats on the first call: on every call (see `floats_out`)
                    program.floats_out = list(map(type, grads)).count(float) == len(grads)
                if program.floats_out:  # a tuple as it is; a list made of it (the caller's to change)
                    return grads if kind is tuple else list(grads)
                return kind(map(float, grads))
        return self._evaluate((x,), None, False)[1]

    def _array_into(self, args, out):
        """``self(x, out=out)`` of one array ``x`` into one array: `_evaluate` less its branches."""
        self._check_globals()
        x = args[0]
        try:
            programs = self.local.variants.get(((x.shape, x.dtype),), ())
        except AttributeError:  # a thread's first call
            programs = ()
        for program in programs:
            if len(program.active_leaves) != 1 or out.shape != program.gradient_shapes[0]:
                break  # `_evaluate` says what is wrong
            try:
                program.gradient(args, (out,))
            except GuardFailed:
                continue
            return out
        return self._evaluate(args, out, False)[1]

    def value_and_gradient(self, *args: Any, out: Any = None) -> tuple[Any, Any]:
        return self._evaluate(args, out, True)

    def _evaluate(self, args, out, with_value, plain=None):
        """Replay a program recorded for arguments like ``args`` (plain ones by a cheap key), or record
        one; ``with_value``: also compute the value (else it may be None).  Inside a gradient (a prepared gradient
        in a function another differentiates), anything but the replay of a variant recorded outside on plain
        arguments is `value_and_gradient`: f may read that gradient's values, which a replay could not see (and
        no variant is recorded there).  ``plain`` given (the key and leaves, `_plain`, of more arguments than
        ``args``, whose gradients are returned: `PreparedHvp`): only the replay, None if no variant fits."""
        replay_only = plain is not None
        if self.globals_read:
            self._check_globals()
        if replay_only:
            pass
        elif len(args) == 1 and type(args[0]) is np.ndarray:  # the most common call, at the least cost
            plain = ((args[0].shape, args[0].dtype),), args
        else:
            plain = _plain(args)
        if plain is not None:
            key, leaves = plain
            try:
                programs = self.local.variants.get(key, ())
            except AttributeError:  # a thread's first call
                programs = ()
            for program in programs:
                run = program.run if with_value else program.gradient
                try:
                    if out is None:
                        value, grads = run(leaves)
                        return value, _plain_gradients(args, grads)
                    if type(out) is not np.ndarray or len(program.active_leaves) != 1 \
                            or out.shape != program.gradient_shapes[0]:
                        return run(leaves, _targets(out, program.gradient_shapes))[0], out
                    return run(leaves, (out,))[0], out
                except GuardFailed:
                    continue
        return None if replay_only else self._evaluate_tree(args, out, with_value, plain)

    def _check_globals(self):
        """Forget every thread's variants if a global f reads was rebound: each baked the old value in."""
        if self.unchanged is not None and not self.unchanged():
            self._forget()

    def _forget(self):
        """Forget every thread's variants (a thread's last ``one`` checks the globals itself)."""
        for variants in list(self.threads.values()):
            variants.clear()

    def _evaluate_tree(self, args, out, with_value, plain):
        """`_evaluate` of arguments that no variant for plain ones fits: by their signature, or recorded."""
        if ACTIVE_TAPE.get() is not None:
            if out is not None:
                raise ValueError("out= cannot hold a gradient that an outer gradient differentiates; drop out=")
            return value_and_gradient(self.f, *args)
        flat = [pytree.flatten(arg) for arg in args]
        signature = _signature(flat)
        if plain is not None:
            self.variants[plain[0]] = self.variants.setdefault(signature, [])  # the same programs
        for program in self.variants.get(signature, ()):
            try:
                return call_on_leaves(program.run if with_value else program.gradient, program, flat, out)
            except GuardFailed:
                continue
        if signature in self.unreplayable:
            value, grads = value_and_gradient(self.f, *args)
        else:
            value, grads = self._record(args, signature)
        if out is None:
            return value, grads
        gradients = _active_gradients(grads, len(args))
        for g, o in zip(gradients, _targets(out, [np.shape(g) for g in gradients])):
            np.copyto(o, g)
        return value, out

    def _record(self, args, signature):
        """Record ``f`` on ``args``: a new program for this signature; return its value and gradient."""
        tape = Tape(single_sweep=True)
        call_args, arguments = track_arguments(tape, args, constants_traced=True)
        recorder = tape.recorder = Recorder(tape)
        for a in arguments:
            for t, i in zip(a.every_input, a.inputs):
                if t is not None:
                    recorder.describe(t)
                    recorder.fixed.add(t.index)
                    if i is None:
                        recorder.inactive.add(t.index)
        token = RECORDER.set(recorder)
        try:
            out = call_on_tape(tape, self.f, call_args)
        except NotReplayableError:  # f runs code on a cut argument's values that a replay cannot repeat
            self.unreplayable.add(signature)
        finally:
            RECORDER.reset(token)
        if signature in self.unreplayable:
            tape.recorder = None
            return value_and_gradient(self.f, *args)
        try:
            value, seed = scalar_seed(out, tape)
            differentiated = seed is not None and out.index not in recorder.inactive
            grads = backward(tape, {out.index: seed}) if differentiated else None
        finally:
            tape.thaw()  # the steps' constant arrays, read-only while f ran (see `Recorder.hold`)
            tape.recorder = None  # the recording is over (tape and recorder referring to each other, the steps,
            # records and pullbacks would wait for a full collection)
        recorder.settle()
        leaf_keys = [key for _, keys in signature for key in keys]
        self.globals_read = _globals_read(self.reads)  # after f ran: what it rebinds itself is not a change
        self.unchanged = globals_check(self.globals_read)
        program = Program(tape, recorder, arguments, out, {i for k, i in _leaves(arguments) if leaf_keys[k] is float},
                          {i for k, i in _leaves(arguments) if leaf_keys[k] is complex}, self.globals_read,
                          (value, grads))
        self.recordings += 1
        programs = self.variants.setdefault(signature, [])
        programs.insert(0, program)
        del programs[MAX_VARIANTS:]
        if len(self.variants) > MAX_VARIANTS:
            self.variants.popitem(last=False)
        return value, one_or_tuple(argument_gradients(arguments, grads))


def _globals_read(f):
    """``(namespace, name, value)`` for every global (other than a module) read by ``f``, the lambdas
    and functions written inside it, and the functions it calls by a global or a closure's name:
    a recording bakes their values in."""
    found, seen, stack = [], set(), [(getattr(f, "__func__", f), None)]  # a bound method: its function
    while stack:
        code, namespace = stack.pop()
        if isinstance(code, types.FunctionType) and code not in seen:
            seen.add(code)
            stack += [(pytree._cell_value(cell), None) for cell in code.__closure__ or ()]
            code, namespace = code.__code__, code.__globals__
        if not isinstance(code, types.CodeType) or code in seen:
            continue
        seen.add(code)
        stack += [(c, namespace) for c in code.co_consts if isinstance(c, types.CodeType)]  # lambdas, inner defs
        for name in code.co_names:
            if name in namespace and not isinstance(namespace[name], types.ModuleType):
                found.append((namespace, name, namespace[name]))
                stack.append((namespace[name], None))
    return tuple(found)


def _leaves(arguments):
    """Per traced leaf of the arguments: its position among all leaves, and its value index."""
    inputs = [t for arg in arguments for t in arg.every_input]
    return [(k, t.index) for k, t in enumerate(inputs) if t is not None]


def call_on_leaves(run, program, flat, out):
    """``run`` (``program.run`` or ``program.gradient``) on the leaves of pytree arguments."""
    leaves = [leaf for leaves, _ in flat for leaf in leaves]
    values = [leaves[k] for k, _ in program.leaves]
    if out is not None:
        return run(values, _targets(out, program.gradient_shapes))[0], out
    value, grads = run(values)
    by_index = {i: np.array(g) for i, g in zip(program.active_leaves, grads)}  # buffers are reused
    return value, one_or_tuple(argument_gradients(_called_with(program.arguments, flat), by_index))


def _called_with(arguments, flat):
    """The recorded ``arguments`` with this call's trees and leaves: each gradient takes the type of
    the leaf it is for now (an ``np.float64`` where the recording had a 0-d array: same signature)."""
    return [TrackedArgument(treedef, leaves, arg.inputs, floats=arg.floats)
            for arg, (leaves, treedef) in zip(arguments, flat)]


_SEQUENCES = (tuple, list)


def _plain(args):
    """For arguments that are floats, float arrays and scalars, or flat tuples and lists of floats or of arrays
    (a model's parameters): a cheap signature and the leaf values in order (Python floats as they are); else None.

    The signature cannot equal a pytree signature (`_signature`: pairs of a structure and leaf keys).
    """
    key, leaves = [], []
    for a in args:
        kind = type(a)
        if kind is float:
            key.append(float)
            leaves.append(a)
        elif kind in FLOAT_LEAVES:  # an array or a NumPy scalar (a Python float is taken above)
            key.append((a.shape, a.dtype))
            leaves.append(a)
        elif kind in _SEQUENCES and a and list(map(type, a)).count(float) == len(a):
            key.append((kind, len(a)))
            leaves += a
        elif kind in _SEQUENCES and a and all(type(e) in FLOAT_LEAVES and type(e) is not float for e in a):
            key.append((kind, tuple((e.shape, e.dtype) for e in a)))
            leaves += a
        else:
            return None
    return tuple(key), leaves


_ONE_FLOAT = (float,)  # `_plain`'s key of one Python float


def _miss(x):
    """A thread's ``one`` before it has replayed one: no call is its case."""
    return MISS


def _plain_gradients(args, grads):
    """The gradients of plain arguments, as `db.gradient` gives them: Python floats as floats
    (in their tuple or list), arrays as fresh arrays (a program returns no buffer it reuses)."""
    result, k = [], 0
    for a in args:
        kind = type(a)
        if kind in _SEQUENCES:
            result.append(kind(map(_plain_gradient, a, grads[k:k + len(a)])))
            k += len(a)
            continue
        result.append(_plain_gradient(a, grads[k]))
        k += 1
    return result[0] if len(result) == 1 else tuple(result)


def _plain_gradient(leaf, g):
    """The gradient ``g`` of one plain leaf: a Python float for a float; an array of the leaf's dtype (a program
    returns arrays nothing else holds: `_Cotangents.gradients`); a NumPy scalar for one."""
    kind = type(leaf)
    return float(g) if kind is float else np.asarray(g, dtype=leaf.dtype) if kind is np.ndarray \
        else leaf.dtype.type(g)


def _targets(out, shapes):
    """The arrays of ``out=`` (shaped like the gradient, None for cut arguments), in leaf order;
    ``shapes``: the gradient's arrays' (a wrong one would be broadcast into, or fail inside the replay)."""
    targets = (out,) if type(out) is np.ndarray else [o for o in pytree.flatten(out)[0] if o is not None]
    if len(targets) != len(shapes):
        raise ValueError(
            f"out= has {len(targets)} arrays but the gradient has {len(shapes)}; pass arrays shaped like "
            "the gradient (None for cut arguments)"
        )
    for k, (target, shape) in enumerate(zip(targets, shapes)):
        if np.shape(target) != shape:
            raise ValueError(f"out= array {k} has shape {np.shape(target)} but its gradient has shape {shape}; pass "
                             "arrays shaped like the gradient (None for cut arguments)")
    return targets


def _active_gradients(grads, n_args):
    """The gradient arrays of the differentiated leaves, in order."""
    trees = grads if n_args > 1 else (grads,)
    return [g for tree in trees for g in pytree.flatten(tree)[0] if g is not None]


def _signature(flat):
    """What a recording depends on: per argument its structure, and per leaf its shape and dtype
    (arrays and floats) or its value (anything else is baked into the program)."""
    from .kernel_keys import structure_key

    return tuple((structure_key(treedef), tuple(map(_leaf_key, leaves, pytree.leaf_activity(treedef))))
                 for leaves, treedef in flat)


def _leaf_key(leaf, active=True):
    if type(leaf) is float:
        return float
    if type(leaf) is complex and active:  # a cut one is baked into the recording: by its value, below
        return complex
    if isinstance(leaf, (np.ndarray, np.generic)):
        return (leaf.shape, leaf.dtype)
    return (type(leaf), leaf if pytree.hashable(leaf) else id(leaf))


def one_or_tuple(items):
    return items[0] if len(items) == 1 else tuple(items)


def prepare_gradient(f: Callable[..., Any], *example_args: Any) -> PreparedGradient:
    """Record ``f`` once for arguments like ``example_args``; return a fast `PreparedGradient`.

    >>> def loss(x, data):
    ...     return np.sum((x - data) ** 2)
    >>> prog = db.prepare_gradient(loss, np.zeros(3), db.cut(np.ones(3)))
    >>> prog(np.array([1.0, 2.0, 3.0]), db.cut(np.ones(3)))       # replayed, no tracing
    (array([0., 2., 4.]), None)
    >>> out = (np.empty(3), None)
    >>> _ = prog(np.zeros(3), db.cut(np.ones(3)), out=out)          # the gradient written into out
    >>> out[0], prog.recordings
    (array([-2., -2., -2.]), 1)

    A replay runs the operations on the arguments, not ``f``; what else ``f`` reads is handled so:

    - a global that ``f`` reads, also inside its lambdas and in the functions it calls by a global
      or closure name, rebound since the recording (``K = 5.0``): ``f`` is recorded again;
    - an array an operation on an argument uses (``x * W``), changed in place: read anew on every
      call, as `db.gradient` would (changed by ``f`` after that use: an error, or its old value);
    - anything else is fixed when ``f`` is recorded: dict entries, attributes and list items
      (``CFG["k"]``, ``self.scale``), closure variables rebound with ``nonlocal``, and what ``f``
      computes from them or from arrays without its arguments (``np.exp(W)``).

    The rule: pass state that may change as an argument (``db.cut(...)`` for a constant), or call
    `prepare_gradient` again after changing it.
    """
    return PreparedGradient(f, example_args)


class PreparedHvp:
    """A Hessian-vector product program recorded for one argument structure; call it like `db.hvp`.

    ``prog(x, v, out=None)`` is ``db.hvp(f, x, v)``; ``prog(*args, vectors=(v1, ...), out=None)`` is
    ``db.hvp(f, *args, vectors=...)`` (written into ``out`` if given: arrays shaped like the products, None
    for cut arguments).  It is the prepared gradient of ``⟨∇f(x), v⟩`` in ``x``, ``v`` a cut argument (see
    `prepare_hvp`); ``prog.recordings`` counts how often ``f`` was recorded, as `PreparedGradient`'s.
    """

    def __init__(self, f: Callable[..., Any], example_args: tuple[Any, ...]) -> None:
        self.f = f
        originals = self.originals = threading.local()  # the arguments being recorded: their cut and uncut markers
        self.program = PreparedGradient(lambda *a: _directional(f, originals, a), None)
        self.program.reads = f  # the globals f reads; the library's own are not checked on every call
        if ACTIVE_TAPE.get() is None:
            vectors = tuple(map(_ones_like_active, example_args))
            self._evaluate_tree(example_args, vectors, None)

    @property
    def recordings(self) -> int:
        return self.program.recordings

    def __call__(self, *args: Any, vectors: Any = None, out: Any = None) -> Any:
        if vectors is None and out is None and len(args) == 2 and type(args[0]) is np.ndarray \
                and type(args[1]) is np.ndarray:
            product = self._product_of_arrays(*args)
            if product is not None:
                return product
        args, vectors = hvp_arguments(args, vectors)
        plain = _plain(args + vectors)
        if plain is not None:
            replayed = self.program._evaluate(args, out, False, plain)
            if replayed is not None:
                return replayed[1]
        return self._evaluate_tree(args, vectors, out, plain)

    def _product_of_arrays(self, x, v):
        """``prog(x, v)`` of two arrays replayed by a variant the calling thread recorded for them (`PreparedGradient.
        _evaluate` less its branches: a trust-region method calls it hundreds of times); None where none replays it."""
        program = self.program
        if program.globals_read:
            program._check_globals()
        try:
            programs = program.local.variants.get(((x.shape, x.dtype), (v.shape, v.dtype)), ())
        except AttributeError:  # the thread's first call
            return None
        for variant in programs:
            try:
                g = variant.gradient([x, v])[1][0]
            except GuardFailed:
                continue
            return g if type(g) is np.ndarray and g.dtype == x.dtype else _plain_gradient(x, g)
        return None

    def _evaluate_tree(self, args, vectors, out, plain=None):
        """The products for arguments no variant for plain ones fits: replayed by their signature, or recorded."""
        vectors = tuple(map(_read_part, args, vectors))
        if self.program.globals_read:
            self.program._check_globals()
        self.originals.args = args
        try:
            full = (*args, Cut(vectors))
            products = self.program._evaluate_tree(full, out, False, None)[1]
        finally:
            self.originals.args = None
        if plain is not None:  # plain arguments take the recorded programs by a cheap key from now on
            signature = _signature([pytree.flatten(a) for a in full])
            self.program.variants[plain[0]] = self.program.variants.setdefault(signature, [])
        if out is not None:
            return out
        return products[0] if len(args) == 1 else tuple(products[:-1])


def _directional(f, originals, args_and_vectors):
    """`api.directional_derivative` of the arguments being recorded (the last holds the vectors), with the markers
    of ``originals.args``, the call's arguments, put back."""
    *args, vectors = args_and_vectors
    marked = getattr(originals, "args", None)
    return directional_derivative(f, args if marked is None else marked, args, vectors)


def _read_part(arg, vector):
    """What the product reads of ``vector``: None for a cut argument, None at the leaves of ``arg`` that are cut
    (so that what a call passes there is not part of its signature)."""
    flags = pytree.leaf_activity(pytree.flatten(arg)[1])
    if not any(flags):
        return None
    leaves, treedef = pytree.flatten(vector)
    if all(flags) or len(leaves) != len(flags):
        return vector
    return pytree.unflatten(treedef, [leaf if on else None for leaf, on in zip(leaves, flags)])


def _ones_like_active(arg):
    """A vector for ``arg`` while it is recorded: ones at its differentiated leaves (None for a cut argument)."""
    leaves, treedef = pytree.flatten(arg)
    flags = pytree.leaf_activity(treedef)
    if not any(flags):
        return None
    ones = [(type(leaf)(1) if isinstance(leaf, (float, np.generic)) else np.ones_like(leaf))
            if on and isinstance(leaf, (float, np.generic, np.ndarray)) else None for leaf, on in zip(leaves, flags)]
    return pytree.unflatten(treedef, ones)


def prepare_hvp(f: Callable[..., Any], *example_args: Any) -> PreparedHvp:
    """Record the Hessian-vector product of ``f`` once for arguments like ``example_args``; return a
    `PreparedHvp`, whose calls replay it (``prog(x, v)`` is ``db.hvp(f, x, v)``).

    >>> prog = db.prepare_hvp(lambda x: np.sum(x ** 3), np.zeros(2))
    >>> prog(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])

    Guards, globals and the state ``f`` reads are handled as by `prepare_gradient`: a branch that goes
    another way records ``f`` again.
    """
    return PreparedHvp(f, example_args)
