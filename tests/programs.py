"""Random NumPy programs as data, and the checks that compare their gradients.

A `Program` is a few inputs and a list of `Step`s; each step assigns one new
value, computed from earlier ones by a registered rule: an elementwise ufunc on
a domain-safe argument, a reduction, a shape or indexing operation (slices in
loops too), a contraction, a matrix function, a ``db.cut``, or a
``db.sum`` / ``db.broadcast`` kernel whose body is itself a list of elementwise
steps.  The program's result is a weighted sum of the values nothing else reads.

A step's source is plain Python over ``np``, ``db`` and ``DT`` (the dtype), so
the same text runs under ``db.gradient``, on plain NumPy (values, finite
differences), on ``jax.numpy`` (``jax.grad``) and in float32; a failure prints
it as a copy-pastable reproduction (`snippet`).
"""

import contextlib
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import dualbroadcast as db

from . import compositions

MAX_SIZE = 64  # elements of any value: finite differences stay cheap
MAX_NDIM = 4
KINK_MARGIN = 1e-3  # nearer a kink than this (in any intermediate), finite differences and JAX are not compared
FLOAT32_MARGIN = 1e-2  # float32 rounding moves intermediates further
LARGEST = 1e4  # programs with larger (or non-finite) intermediates are not drawn


# --- programs as data -------------------------------------------------------------------------
@dataclass
class Step:
    """``name = source.format(*reads)``.

    ``kink(*read values)``: how far the read values are from the nearest point where
    the step is not smooth (a tie, a jump, a singular matrix); None: smooth everywhere.
    ``body``: the `Kernel` the step calls, defined just before it.
    ``refusable``: the library may refuse the step with a clear error (a value that leaves the tape:
    complex, integer or object); if it does not, its gradient must be right.
    """

    name: str
    source: str
    reads: tuple
    kink: object = None
    body: object = None
    refusable: bool = False

    def line(self):
        return f"{self.name} = {self.source.format(*self.reads)}"


@dataclass
class Kernel:
    """A ``db.sum`` / ``db.broadcast`` body: elementwise steps over ``params`` (and closure names)."""

    name: str
    params: tuple
    steps: list
    complex: bool = False  # its value is complex (`complex_kernel_step`): compared through `COMPLEX_PROJECTION`

    def lines(self):
        body = [f"    {step.line()}" for step in self.steps]
        return [f"def {self.name}({', '.join(self.params)}):", *body, f"    return {self.steps[-1].name}"]


@dataclass
class Input:
    """An argument of the program: its shape, how it is passed (``kind``) and whether it is cut."""

    name: str
    shape: tuple
    kind: str  # "array", "fortran array", "0-d array", "numpy scalar" or "python float"
    cut: bool

    def source(self, stream, dtype="float64", kind=None):
        """The expression that builds this input's values from random ``stream`` (a list of ints), passed as
        ``kind`` (default: its own; a Python float is a NumPy scalar in float32)."""
        values = f"draw({list(stream)}, {self.shape})"
        kind = kind or self.kind
        kind = "numpy scalar" if kind == "python float" and dtype == "float32" else kind
        return {
            "array": f"{values}.astype(DT)",
            "fortran array": f"np.asfortranarray({values}.astype(DT))",
            "0-d array": f"np.asarray({values}, DT)",
            "numpy scalar": f"DT({values})",
            "python float": f"float({values})",
        }[kind]


@dataclass
class Program:
    """Inputs, steps and the random streams of the inputs (``seed``).

    ``shapes``: every value's shape; ``trace``: the plain float64 evaluation at the example inputs;
    ``kernel_cuts``: for each kernel step, which of its arguments the kernel check cuts.
    """

    inputs: list
    steps: list
    seed: int
    shapes: dict = field(default_factory=dict)
    kernel_cuts: dict = field(default_factory=dict)
    replay_kinds: list = None  # how the inputs are passed in replays 1, 2, ... (a 0-d input may change kind)
    trace: object = None

    def _repr_pretty_(self, printer, cycle):  # how hypothesis prints a drawn program
        printer.text(repr(self))

    def __repr__(self):
        inputs = ", ".join(f"{x.name}: {x.kind}{x.shape}" + (" cut" if x.cut else "") for x in self.inputs)
        return f"Program(seed={self.seed}; {inputs})\n{self.function_source()}"

    def refusable(self):
        return any(step.refusable for step in self.steps)

    def sinks(self):
        """The values no later step reads: the result is their weighted sum."""
        read = set()
        for step in self.steps:
            read.update(step.reads)
            for inner in step.body.steps if step.body else ():
                read.update(inner.reads)
        names = [x.name for x in self.inputs] + [s.name for s in self.steps]
        return [n for n in names if n not in read]

    def function_source(self):
        """``def f(x0, ...)``: the steps, then the weighted sum of the sinks."""
        lines = [f"def f({', '.join(x.name for x in self.inputs)}):"]
        for step in self.steps:
            if step.body:
                lines += ["    " + line for line in step.body.lines()]
            lines.append("    " + step.line())
        terms = [f"np.sum({n} * weights({k}, {self.shapes[n]}))" for k, n in enumerate(self.sinks())]
        lines.append("    return " + " + ".join(terms))
        return "\n".join(lines)

    def kinds(self, replay=0):
        return self.replay_kinds if replay and self.replay_kinds else [x.kind for x in self.inputs]

    def streams(self, replay=0):
        """The random stream of each input: replay 0 is the example, 1, 2, ... new inputs of the same shapes."""
        return [[self.seed, k, replay] for k in range(len(self.inputs))]


HELPERS = '''\
def draw(stream, shape):
    return np.random.default_rng(stream).uniform(-2, 2, shape)


def weights(k, shape):
    return np.cos(np.arange(math.prod(shape), dtype=DT) + k).reshape(shape)


def updated(a, b):  # augmented assignments on a value of its own, one read before them
    y = a + 0.0 * b  # tracked if b is (a plain y += tracked b is refused: it cannot hold a gradient)
    z = np.sin(y)
    y += b
    y *= z
    y -= 0.5 * b
    y /= 2.0
    return y


def view_updated(a, b):  # NumPy writes through the slice into y
    y = a * 1.0
    v = y[..., :1]
    v += b
    return y * 1.0
'''


# --- running a program ---------------------------------------------------------------------------
def db_stand_in(xp, cut):
    """A ``db`` stand-in on the array module ``xp`` (NumPy, jax.numpy): kernels broadcast f with it, and ``cut``."""

    class StandIn:
        @staticmethod
        def broadcast(f, *args, backend=None):
            return xp.broadcast_to(f(*args), xp.broadcast_shapes(*map(xp.shape, args)))

        @staticmethod
        def sum(f, *args, backend=None):
            return xp.sum(StandIn.broadcast(f, *args))

        @staticmethod
        def elementwise(f):
            return lambda *args: StandIn.broadcast(f, *args)

    StandIn.cut = staticmethod(cut)
    return StandIn


PlainDB = db_stand_in(np, lambda x: x)  # plain evaluation (values, finite differences): cut is the identity


class FrozenCuts(PlainDB):
    """``db`` for finite differences: ``db.cut(y)`` is the value ``y`` had in the first evaluation (the
    example), since a cut value is a constant; calls are matched by their order, which never changes."""

    def __init__(self):
        self.frozen = []
        self.calls = itertools.count()

    def restart(self):
        self.calls = itertools.count()

    def cut(self, x):
        k = next(self.calls)
        if k == len(self.frozen):
            self.frozen.append(x)
        return self.frozen[k]


def namespace(np_module, db_module, dtype):
    """The globals a program's source runs in."""
    space = {"np": np_module, "db": db_module, "DT": dtype, "math": math}
    exec(HELPERS, space)
    return space


def compile_program(program, np_module=np, db_module=db, dtype=np.float64):
    """The program's ``f``, its source run with ``np_module``, ``db_module`` and ``DT = dtype``."""
    space = namespace(np_module, db_module, dtype)
    exec(program.function_source(), space)
    return space["f"]


def build_inputs(program, replay=0, dtype=np.float64):
    """The program's input values for stream ``replay``, each as its `Input.source` builds it."""
    space = namespace(np, db, dtype)
    sources = [x.source(s, np.dtype(dtype).name, kind)
               for x, kind, s in zip(program.inputs, program.kinds(replay), program.streams(replay))]
    return [eval(source, space) for source in sources]


def wrap(program, values):
    """The inputs as `db.gradient` takes them: cut ones in ``db.cut``."""
    return [db.cut(v) if x.cut else v for x, v in zip(program.inputs, values)]


@dataclass
class Trace:
    """One plain evaluation, step by step: every value, the nearest kink, the largest magnitude."""

    values: dict
    kink: float = math.inf
    largest: float = 0.0

    def note(self, value, kink):
        value = np.asarray(value)
        with np.errstate(all="ignore"):
            magnitude = float(np.max(np.abs(value if value.dtype.kind == "c" else np.asarray(value, np.float64)),
                                     initial=0.0))
        self.largest = max(self.largest, magnitude if math.isfinite(magnitude) else math.inf)
        self.kink = min(self.kink, kink)

    def well_defined(self):
        return self.largest < LARGEST


def trace(program, values, dtype=np.float64):
    """Evaluate the program step by step on plain arrays, noting kinks and magnitudes."""
    space = namespace(np, PlainDB, dtype)
    space.update({x.name: v for x, v in zip(program.inputs, values)})
    result = Trace(space)
    run_steps(program.steps, space, result)
    return result


def run_steps(steps, space, result):
    """Run ``steps`` in ``space`` (the values by name), noting their kinks and magnitudes in ``result``."""
    for step in steps:
        if step.body:
            exec("\n".join(step.body.lines()), space)
            arguments = [space[r] for r in step.reads[: len(step.body.params)]]
            inner = dict(space, **dict(zip(step.body.params, arguments)))
            run_steps(step.body.steps, inner, result)
        with np.errstate(all="ignore"):
            space[step.name] = eval(step.source.format(*step.reads), space)
            reads = [space[r] for r in step.reads]
            result.note(space[step.name], math.inf if step.kink is None else float(step.kink(*reads)))


# --- kinks --------------------------------------------------------------------------------------
def nearest(x):
    """Smallest |x| (inf for an empty array)."""
    return float(np.min(np.abs(x), initial=np.inf))


def to_integer(x):
    """Distance to the nearest integer (where floor, trunc, ... jump)."""
    return nearest(x - np.round(x))


def to_half_integer(x):
    """Distance to the nearest half-integer (where round jumps)."""
    return nearest(x - np.floor(x) - 0.5)


def extreme_gap(x, axis, largest=True, where=True):
    """The smallest gap between the extreme and the runner-up along ``axis`` (0 at a tie)."""
    x = np.sort(as_rows(np.where(where, x, -np.inf if largest else np.inf), axis), axis=-1)
    if x.shape[-1] < 2:
        return math.inf
    gap = x[..., -1] - x[..., -2] if largest else x[..., 1] - x[..., 0]
    return nearest(np.where(np.isfinite(gap), gap, np.inf))


def reduced(axis, ndim):
    """``axis`` (None, an int or a tuple) as a tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,)))


def as_rows(x, axis):
    """``x`` with the reduced axes moved last and merged into one."""
    x = np.asarray(x)
    axes = reduced(axis, x.ndim)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    return moved.reshape(moved.shape[: x.ndim - len(axes)] + (-1,))


def inverse_condition(a):
    """1 / condition number of the (stack of) matrices ``a``: 0 when singular."""
    with np.errstate(all="ignore"):
        return float(np.min(1 / np.linalg.cond(a)))


def singular_gap(a, which):
    """Distance from a kink of a matrix 2-norm (gap of the top or bottom two singular values) or nuclear norm."""
    s = np.linalg.svd(a, compute_uv=False)
    if which == "nuc":
        return float(np.min(s))
    pair = s[..., :2] if which == 2 else s[..., -2:]
    return nearest(pair[..., 0] - pair[..., 1]) if s.shape[-1] > 1 else math.inf


def norm_kink(x, ord, axis):
    """Distance from a kink of ``np.linalg.norm(x, ord, axis)``: a zero norm, an element at 0, a tie."""
    axes = reduced(axis, np.ndim(x))
    if len(axes) == 1 and ord in (np.inf, -np.inf):
        return min(nearest(x), extreme_gap(np.abs(x), axes[0], largest=ord > 0))
    if len(axes) == 1:
        return nearest(x) if ord == 1 else nearest(np.linalg.norm(x, axis=axes))
    rows, cols = axes
    if ord in (1, -1):
        return min(nearest(x), extreme_gap(np.sum(np.abs(x), axis=rows, keepdims=True), cols, largest=ord > 0))
    if ord in (np.inf, -np.inf):
        return min(nearest(x), extreme_gap(np.sum(np.abs(x), axis=cols, keepdims=True), rows, largest=ord > 0))
    if ord in (2, -2, "nuc"):
        return singular_gap(np.moveaxis(x, axes, (-2, -1)), ord)
    return nearest(np.linalg.norm(x, axis=axes))


# --- drawing steps -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Value:
    name: str
    shape: tuple


def size(shape):
    return math.prod(shape)


def fits(shape):
    return shape is not None and size(shape) <= MAX_SIZE and len(shape) <= MAX_NDIM


def broadcast(*shapes):
    """The broadcast shape, or None if the shapes do not broadcast."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def pick(draw, pool, accept=lambda v: True):
    """A value of ``pool`` that ``accept`` accepts (half the time the latest: programs grow deep), or None."""
    candidates = [v for v in pool if accept(v)]
    if not candidates:
        return None
    return candidates[-1] if draw(st.booleans()) else draw(st.sampled_from(candidates))


def arity(template):
    return 1 + max(int(c) for c in "0123" if "{" + c + "}" in template)


def gap(a, b):
    return nearest(a - b)


# Elementwise functions on domain-safe arguments (log of x*x + 0.5, arcsin of 0.9 tanh x, ...), each
# with the distance from its kinks.  Everything here also runs inside a db.sum / db.broadcast kernel.
UNARY = [
    ("np.sin({0})", None), ("np.cos({0})", None), ("-{0}", None), ("+{0}", None), ("np.negative({0})", None),
    ("np.positive({0})", None), ("2.5 * {0}", None), ("{0} - 0.75", None), ("0.5 - {0}", None), ("{0} / 3.0", None),
    ("1.0 / ({0} * {0} + 0.5)", None), ("np.reciprocal({0} * {0} + 0.5)", None), ("np.square({0})", None),
    ("np.sqrt({0} * {0} + 0.5)", None), ("np.cbrt({0})", nearest), ("np.exp({0})", None), ("np.exp2({0})", None),
    ("np.expm1({0})", None), ("np.log({0} * {0} + 0.5)", None), ("np.log2({0} * {0} + 0.5)", None),
    ("np.log10({0} * {0} + 0.5)", None), ("np.log1p({0} * {0} - 0.5)", None), ("np.tan(np.tanh({0}))", None),
    ("np.arcsin(0.9 * np.tanh({0}))", None), ("np.arccos(0.9 * np.tanh({0}))", None), ("np.arctan({0})", None),
    ("np.sinh({0})", None), ("np.cosh({0})", None), ("np.tanh({0})", None), ("np.arcsinh({0})", None),
    ("np.arccosh({0} * {0} + 1.25)", None), ("np.arctanh(0.9 * np.tanh({0}))", None), ("np.deg2rad({0})", None),
    ("np.rad2deg({0})", None), ("np.abs({0})", nearest), ("abs({0})", nearest), ("np.absolute({0})", nearest),
    ("{0} ** 2", None), ("{0} ** 3", None), ("{0} ** 2.0", None), ("{0} ** 1", None),
    ("{0} ** 0.0", nearest),  # at 0 the derivative is 0 here (tests/rules/test_conventions.py), nan in JAX
    ("np.fabs({0})", nearest), ("np.radians({0})", None), ("np.degrees({0})", None),
    ("{0} ** -2", nearest), ("np.power({0}, 3)", None), ("({0} * {0} + 0.5) ** 0.75", None),
    ("({0} * {0} + 0.5) ** -1.5", None), ("2.0 ** {0}", None), ("np.floor({0})", to_integer),
    ("np.ceil({0})", to_integer), ("np.trunc({0})", to_integer), ("np.rint({0})", to_half_integer),
    ("np.round({0})", to_half_integer), ("np.sign({0})", nearest), ("np.heaviside({0}, 0.5)", nearest),
    ("{0} // 0.75", lambda a: to_integer(a / 0.75)), ("np.floor_divide({0}, 0.75)", lambda a: to_integer(a / 0.75)),
    ("{0} % 1.5", lambda a: to_integer(a / 1.5)), ("np.fmod({0}, 0.75)", lambda a: to_integer(a / 0.75)),
    ("np.clip({0}, -0.5, 0.75)", lambda a: min(gap(a, -0.5), gap(a, 0.75))),
    ("np.clip({0}, min=-0.5, max=0.75)", lambda a: min(gap(a, -0.5), gap(a, 0.75))),
    ("np.clip({0}, a_min=-0.5, a_max=0.75)", lambda a: min(gap(a, -0.5), gap(a, 0.75))),
    ("np.clip({0}, None, 0.25)", lambda a: gap(a, 0.25)),
    ("{0}.clip(-0.5, 0.75)", lambda a: min(gap(a, -0.5), gap(a, 0.75))),
    ("np.maximum({0}, 0.0)", nearest), ("np.minimum(0.5, {0})", lambda a: gap(a, 0.5)),
    ("np.where({0} > 0.25, {0}, 0.5 * {0})", lambda a: gap(a, 0.25)), ("db.cut({0})", None),
]
BINARY = [
    ("{0} + {1}", None), ("{0} * {1}", None), ("{0} - {1}", None), ("{0} / ({1} * {1} + 0.5)", None),
    ("np.add({0}, {1})", None), ("np.subtract({0}, {1})", None), ("np.multiply({0}, {1})", None),
    ("np.divide({0}, np.exp({1}))", None), ("np.power({0} * {0} + 0.5, {1})", None),
    ("({0} * {0} + 0.5) ** np.tanh({1})", None),
    ("np.arctan2({0}, {1})", lambda a, b: min(nearest(np.hypot(a, b)), nearest(np.where(b < 0, a, np.inf)))),
    ("np.hypot({0}, {1})", lambda a, b: nearest(np.hypot(a, b))), ("np.logaddexp({0}, {1})", None),
    ("np.logaddexp2({0}, {1})", None), ("np.maximum({0}, {1})", gap), ("np.minimum({0}, {1})", gap),
    ("np.fmax({0}, {1})", gap), ("np.fmin({0}, {1})", gap),
    ("np.copysign({0}, {1})", lambda a, b: min(nearest(a), nearest(b))),
    ("np.remainder({0}, {1} * {1} + 0.5)", lambda a, b: to_integer(a / (b * b + 0.5))),
    ("{0} % ({1} * {1} + 0.5)", lambda a, b: to_integer(a / (b * b + 0.5))),
    ("np.fmod({0}, {1} * {1} + 0.5)", lambda a, b: to_integer(a / (b * b + 0.5))),
    ("np.clip({0}, {1} - 1.0, {1} + 1.0)", lambda a, b: min(gap(a, b - 1.0), gap(a, b + 1.0))),
    ("np.where({0} > {1}, {0} * {1}, {0} - {1})", gap),
    ("np.where({0} < 0.25, {1}, np.sin({1}))", lambda a, b: gap(a, 0.25)),
    ("{0} * db.cut({1})", None),
]
TERNARY = [("np.where({0} > 0.25, {1}, {2})", lambda a, b, c: gap(a, 0.25))]
ELEMENTWISE = UNARY + BINARY + TERNARY


def elementwise_step(draw, pool, name):
    """An elementwise function of values that broadcast together."""
    template, kink = draw(st.sampled_from(ELEMENTWISE))
    first = pick(draw, pool)
    reads, shape = [first.name], first.shape
    for _ in range(arity(template) - 1):
        other = pick(draw, pool, lambda v, shape=shape: fits(broadcast(shape, v.shape)))
        reads.append(other.name)
        shape = broadcast(shape, other.shape)
    return Step(name, template, tuple(reads), kink)


SMOOTH_UNARY = [t for t, kink in UNARY if kink is None and "db.cut" not in t]
SMOOTH_BINARY = [t for t, kink in BINARY if kink is None and "db.cut" not in t]


def reduced_chain_step(draw, pool, name):
    """A smooth elementwise function of two values that broadcast together, another of its result, summed or
    averaged along axes (``np.sum(np.exp(a - b), axis=1)``, maybe keepdims, negative axes, as a method): what a
    prepared program fuses into one region summed along axes (`axis_sums.AxisSum`)."""
    first = pick(draw, pool)
    other = pick(draw, pool, lambda v: fits(broadcast(first.shape, v.shape)))
    shape = broadcast(first.shape, other.shape)
    if not shape:
        return None
    inner = draw(st.sampled_from(SMOOTH_BINARY)).format("{0}", "{1}")
    chain = draw(st.sampled_from(SMOOTH_UNARY)).format(f"({inner})")
    axis = axis_choice(draw, len(shape))
    axis = 0 if axis is None else axis  # (a whole sum is the regions' older case)
    func = draw(st.sampled_from(["sum", "mean"]))
    keywords = keyword_text(axis=axis, keepdims=draw(st.booleans()) or None)[2:]
    source = f"({chain}).{func}({keywords})" if draw(st.booleans()) else f"np.{func}({chain}, {keywords})"
    return Step(name, source, (first.name, other.name))


def axis_choice(draw, ndim, tuples=True):
    """An ``axis`` argument for ``ndim`` axes: None, an int (maybe negative) or a tuple of ints."""
    options = [None]
    if ndim:
        options += [draw(st.integers(0, ndim - 1)), draw(st.integers(-ndim, -1))]
        if tuples:
            options.append(tuple(draw(st.permutations(range(ndim)))[: draw(st.integers(1, ndim))]))
    return draw(st.sampled_from(options))


def keyword_text(**kwargs):
    """``, name=value`` for each keyword that is given (not None)."""
    return "".join(f", {k}={v!r}" for k, v in kwargs.items() if v is not None)


def mask_text(draw, length):
    """A constant boolean mask of ``length`` with at least one True."""
    bits = draw(st.lists(st.booleans(), min_size=length, max_size=length))
    bits[draw(st.integers(0, length - 1))] = True
    return f"np.array({bits})"


def reduction_step(draw, pool, name):
    """sum, mean, prod, max/min (and amax/amin), var, std over an axis, maybe with keepdims or where=."""
    x = pick(draw, pool)
    func = draw(st.sampled_from(["sum", "mean", "prod", "max", "min", "amax", "amin", "var", "std"]))
    ndim = len(x.shape)
    axis = axis_choice(draw, ndim)
    keepdims = draw(st.booleans()) or None
    covers_last = ndim and (axis is None or ndim - 1 in reduced(axis, ndim))  # each result reads a True (mean)
    maskable = func in ("sum", "max", "min") or (func == "mean" and covers_last)
    mask = mask_text(draw, x.shape[-1]) if ndim and maskable and draw(st.booleans()) else None
    initial = {"max": -100.0, "min": 100.0}.get(func) if mask else None
    ddof = 1 if func in ("var", "std") and draw(st.booleans()) and size(x.shape) > 1 else None
    if ddof and axis is not None and min(x.shape[a] for a in reduced(axis, ndim)) < 2:
        ddof = None
    method = func in ("sum", "mean", "prod", "max", "min", "var", "std") and draw(st.booleans())
    keywords = keyword_text(axis=axis, keepdims=keepdims, ddof=ddof, initial=initial)
    keywords += f", where={mask}" if mask else ""
    source = f"{{0}}.{func}({keywords[2:]})" if method else f"np.{func}({{0}}{keywords})"
    where = eval(mask) if mask else True
    if func in ("max", "amax", "min", "amin"):
        largest = func in ("max", "amax")
        return Step(name, source, (x.name,), lambda a: extreme_gap(a, axis, largest, where))
    if func == "std":
        return Step(name, source, (x.name,), lambda a: nearest(np.std(a, axis=axis, ddof=ddof or 0)))
    return Step(name, source, (x.name,))


def cumulative_step(draw, pool, name):
    x = pick(draw, pool)
    func = draw(st.sampled_from(["cumsum", "cumprod"]))
    axis = axis_choice(draw, len(x.shape), tuples=False)
    if draw(st.booleans()):
        return Step(name, f"{{0}}.{func}({keyword_text(axis=axis)[2:]})", (x.name,))
    return Step(name, f"np.{func}({{0}}{keyword_text(axis=axis)})", (x.name,))


def norm_step(draw, pool, name):
    """np.linalg.norm: a vector norm along one axis or a matrix norm over two."""
    x = pick(draw, pool, lambda v: len(v.shape) >= 1)
    if x is None:
        return None
    ndim = len(x.shape)
    if ndim >= 2 and draw(st.booleans()):
        axis = tuple(draw(st.permutations(range(ndim)))[:2])
        ord = draw(st.sampled_from([None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]))
    else:
        axis = draw(st.integers(-ndim, ndim - 1))
        ord = draw(st.sampled_from([None, 1, 2, 3, np.inf, -np.inf]))
    keepdims = draw(st.booleans()) or None
    written = "np.inf" if ord == np.inf else "-np.inf" if ord == -np.inf else repr(ord)
    ord_text = "" if ord is None else f", ord={written}"
    source = f"np.linalg.norm({{0}}{ord_text}, axis={axis}{keyword_text(keepdims=keepdims)})"
    return Step(name, source, (x.name,), lambda a: norm_kink(a, ord, axis))


_SHAPE_SPACE = namespace(np, PlainDB, np.float64)


def result_shape(template, *shapes):
    """The shape of ``template`` applied to arrays of ``shapes``, or None if NumPy rejects them."""
    operands = {f"_{k}": np.full(s, 0.5) for k, s in enumerate(shapes)}
    try:
        with np.errstate(all="ignore"):
            value = eval(template.format(*operands), dict(_SHAPE_SPACE, **operands))
    except (ValueError, TypeError, IndexError, np.linalg.LinAlgError):
        return None
    return np.shape(value)


def usable(shape):
    """A result shape a program may keep: valid, not empty, not too large."""
    return fits(shape) and size(shape) > 0


def structural_step(draw, pool, name, template, pair=False):
    """``template`` of one value, or of two (``pair``) that NumPy accepts together; None if no value fits."""
    if not pair:
        x = pick(draw, pool, lambda v: usable(result_shape(template, v.shape)))
        return x and Step(name, template, (x.name,))
    a = pick(draw, pool, lambda v: any(usable(result_shape(template, v.shape, w.shape)) for w in pool))
    if a is None:
        return None
    b = pick(draw, pool, lambda w: usable(result_shape(template, a.shape, w.shape)))
    return Step(name, template, (a.name, b.name))


def one_axis(draw, ndim, extra=0):
    """An axis of ``ndim`` axes (``extra``: of the result with that many new axes), maybe negative."""
    n = ndim + extra
    return draw(st.integers(-n, n - 1)) if n else 0


def reshape_step(draw, pool, name):
    """reshape (C and F order, as a function and a method), ravel, flatten."""
    x = pick(draw, pool)
    n = size(x.shape)
    d = draw(st.sampled_from([k for k in range(1, n + 1) if n % k == 0]))
    shape = draw(st.sampled_from([(n,), (d, n // d), (d, -1), (n // d, 1, d)]))
    template = draw(st.sampled_from([
        f"np.reshape({{0}}, {shape})", f"np.reshape({{0}}, {shape}, order='F')", f"{{0}}.reshape({shape})",
        f"{{0}}.reshape({', '.join(map(str, shape))})", "np.ravel({0})", "np.ravel({0}, order='F')", "{0}.ravel()",
        "{0}.flatten()",
    ]))
    return Step(name, template, (x.name,))


def transpose_step(draw, pool, name):
    """transpose (all axes or a permutation), .T, swapaxes, moveaxis."""
    x = pick(draw, pool)
    ndim = len(x.shape)
    perm = tuple(draw(st.permutations(range(ndim))))
    templates = ["{0}.T", "np.transpose({0})", f"np.transpose({{0}}, {perm})", f"{{0}}.transpose({perm})"]
    if ndim:
        a, b = one_axis(draw, ndim), one_axis(draw, ndim)
        templates += [f"np.swapaxes({{0}}, {a}, {b})", f"{{0}}.swapaxes({a}, {b})", f"np.moveaxis({{0}}, {a}, {b})"]
    return Step(name, draw(st.sampled_from(templates)), (x.name,))


def new_axis_step(draw, pool, name):
    """expand_dims, indexing with None, squeeze and broadcast_to."""
    x = pick(draw, pool)
    ndim = len(x.shape)
    ones = [k for k, n in enumerate(x.shape) if n == 1]
    target = tuple(draw(st.integers(1, 3)) if n == 1 else n for n in x.shape)
    if draw(st.booleans()):
        target = (2,) + target
    options = [f"np.broadcast_to({{0}}, {target})"]
    if ndim < MAX_NDIM:
        options += [f"np.expand_dims({{0}}, {one_axis(draw, ndim, 1)})", "{0}[None]", "{0}[..., None]"]
    if ones:
        options += ["np.squeeze({0})", f"np.squeeze({{0}}, axis={draw(st.sampled_from(ones))})", "{0}.squeeze()"]
    template = draw(st.sampled_from(options))
    return Step(name, template, (x.name,)) if usable(result_shape(template, x.shape)) else None


def join_step(draw, pool, name):
    """concatenate, stack, hstack, vstack of two values; split."""
    axis = draw(st.integers(-2, 2))
    template = draw(st.sampled_from([
        f"np.concatenate([{{0}}, {{1}}], axis={axis})", "np.concatenate([{0}, {1}], axis=None)",
        f"np.stack([{{0}}, {{1}}], axis={axis})", "np.hstack([{0}, {1}])", "np.vstack([{0}, {1}])",
        f"np.concatenate([{{0}}, {{1}}, {{0}}], axis={axis})",
        f"np.split({{0}}, 2, axis={axis})[{draw(st.integers(0, 1))}]",
        f"np.split({{0}}, [1], axis={axis})[{draw(st.integers(0, 1))}]",
        f"np.multiply(*np.split({{0}}, 2, axis={axis}))",
    ]))
    return structural_step(draw, pool, name, template, pair="{1}" in template)


def copies_step(draw, pool, name):
    """tile, repeat, flip, roll."""
    axis = draw(st.integers(-2, 2))
    counts = draw(st.lists(st.integers(0, 2), min_size=1, max_size=4))
    counts[-1] = counts[-1] or 1  # some element is repeated
    template = draw(st.sampled_from([
        f"np.tile({{0}}, {draw(st.sampled_from([2, (2, 1), (1, 2), (2, 1, 1)]))})",
        "np.repeat({0}, 2)", f"np.repeat({{0}}, 2, axis={axis})", f"{{0}}.repeat(2, axis={axis})",
        f"np.repeat({{0}}, np.array({counts}), axis={axis})",
        "np.flip({0})", f"np.flip({{0}}, axis={axis})", "{0}[::-1]", "np.flip({0}, axis=(0, 1))",
        "np.roll({0}, 1)", f"np.roll({{0}}, {draw(st.integers(-3, 3))}, axis={axis})",
        "np.roll({0}, (1, -2), axis=(0, 1))",
    ]))
    return structural_step(draw, pool, name, template)


def diagonal_step(draw, pool, name):
    """diagonal, diag, triu, tril, trace."""
    offset = draw(st.integers(-2, 2))
    a, b = draw(st.sampled_from([(0, 1), (1, 0), (0, 2), (-1, -2), (1, 2)]))
    template = draw(st.sampled_from([
        f"np.diagonal({{0}}, {offset}, {a}, {b})", "{0}.diagonal()", f"np.diag({{0}}, {offset})", "np.diag({0})",
        f"np.triu({{0}}, {offset})", f"np.tril({{0}}, {offset})", "np.trace({0})", f"np.trace({{0}}, offset={offset})",
        f"np.trace({{0}}, axis1={a}, axis2={b})", "{0}.trace()",
    ]))
    return structural_step(draw, pool, name, template)


def index_text(draw, n):
    """An index into an axis of length ``n``: an int, a slice or an integer array (repeats allowed)."""
    start, stop = draw(st.integers(-n, n - 1)), draw(st.integers(-n, n))
    step = draw(st.sampled_from([1, 2, -1, -2]))
    positions = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
    return draw(st.sampled_from([
        ":", str(start), f"{start}:", f":{stop}", f"{start}:{stop}:{step}", f"::{step}", f"np.array({positions})",
    ]))


def getitem_step(draw, pool, name):
    """x[index]: basic (ints, slices, None, ...) and advanced (integer arrays, a boolean mask) indexing."""
    x = pick(draw, pool)
    parts = [index_text(draw, n) for n in x.shape[: draw(st.integers(0, len(x.shape)))]]
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(["None", "..."])))
    if x.shape and draw(st.integers(0, 3)) == 0:
        parts = [mask_text(draw, x.shape[0])]
    index = ", ".join(parts) if len(parts) != 1 else parts[0]
    template = f"{{0}}[{index or '()'}]"
    return Step(name, template, (x.name,)) if usable(result_shape(template, x.shape)) else None


def take_step(draw, pool, name):
    x = pick(draw, pool, lambda v: len(v.shape) >= 1)
    if x is None:
        return None
    axis = draw(st.sampled_from([None, *range(-len(x.shape), len(x.shape))]))
    n = size(x.shape) if axis is None else x.shape[axis]
    mode = draw(st.sampled_from([None, "clip", "wrap"]))
    low, high = (0, n - 1) if mode is None else (-n - 2, n + 2)
    indices = draw(st.one_of(st.integers(low, high), st.lists(st.integers(low, high), min_size=1, max_size=4)))
    indices = f"np.array({indices})" if isinstance(indices, list) else str(indices)
    keywords = keyword_text(axis=axis, mode=mode)
    form = draw(st.sampled_from([f"np.take({{0}}, {indices}{keywords})", f"{{0}}.take({indices}{keywords})"]))
    return Step(name, form, (x.name,)) if usable(result_shape(form, x.shape)) else None


def copy_step(draw, pool, name):
    x = pick(draw, pool)
    return Step(name, draw(st.sampled_from(["{0}.astype(np.float64)", "np.copy({0})", "{0}.copy()"])), (x.name,))


def loop_step(draw, pool, name):
    """Slices in Python loops: dots of columns, products of rows, a stack of rows."""
    templates = {
        "sum(np.dot({0}[:, j], {1}[:, j]) for j in range({n}))": lambda a: len(a) == 2,
        "sum({0}[j] * {1}[j] for j in range({n}))": lambda a: len(a) >= 1,
        "np.stack([row * {1}[-1] for row in {0}])": lambda a: len(a) >= 1,
        "np.stack([{0}[:, j] * {1}[:, j - 1] for j in range(1, {n})], axis=1)": lambda a: len(a) == 2 and a[1] >= 2,
    }
    template = draw(st.sampled_from(sorted(templates)))
    a = pick(draw, pool, lambda v: templates[template](v.shape))
    if a is None:
        return None
    b = pick(draw, pool, lambda v: v.shape == a.shape)
    n = a.shape[1] if len(a.shape) > 1 and "[:, j]" in template else a.shape[0]
    return Step(name, template.replace("{n}", str(n)), (a.name, b.name))


def contraction_step(draw, pool, name):
    """dot, matmul, inner, outer, vdot, tensordot of two values (or of a value and its transpose).

    (``a.dot(b)`` only with ``b`` of ``a``: a plain array's method cannot see a tracked argument.)
    """
    template = draw(st.sampled_from([
        "np.dot({0}, {1})", "{0}.dot({0}.T)", "{0} @ {1}", "np.matmul({0}, {1})", "np.inner({0}, {1})",
        "np.outer({0}, {1})", "np.vdot({0}, {1})", "np.tensordot({0}, {1}, axes=1)", "np.tensordot({0}, {1}, axes=2)",
        "np.tensordot({0}, {1}, axes=([0], [0]))", "np.tensordot({0}, {1}, axes=([-1, 0], [0, 1]))",
        "np.dot({0}, {0}.T)", "{0} @ np.swapaxes({0}, -1, -2)",
    ]))
    return structural_step(draw, pool, name, template, pair="{1}" in template)


def einsum_step(draw, pool, name):
    """np.einsum of one or two values with random subscripts: contractions, diagonals, sums, transposes."""
    operands = [pick(draw, pool, lambda v: len(v.shape) >= 1)]
    if operands[0] is None:
        return None
    if draw(st.booleans()):
        operands.append(pick(draw, pool, lambda v: len(v.shape) >= 1))
    letters, sizes, terms = iter("ijklmnop"), {}, []
    for x in operands:
        term = ""
        for n in x.shape:
            same = [c for c, m in sizes.items() if m == n]
            c = draw(st.sampled_from(same)) if same and draw(st.booleans()) else next(letters)
            sizes[c] = n
            term += c
        terms.append(term)
    used = list(sizes)
    output = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    spec = ",".join(terms) + ("" if draw(st.integers(0, 3)) == 0 else "->" + output)
    template = f"np.einsum('{spec}', " + ", ".join(f"{{{k}}}" for k in range(len(operands))) + ")"
    shape = result_shape(template, *(x.shape for x in operands))
    return Step(name, template, tuple(x.name for x in operands)) if usable(shape) else None


def matrix_step(draw, pool, name):
    """inv, det, slogdet and solve of a value plus 3 I (square, usually well conditioned)."""
    x = pick(draw, pool, lambda v: len(v.shape) <= 3 and (len(v.shape) < 2 or v.shape[-2] in (1, v.shape[-1])))
    if x is None:
        return None
    n = x.shape[-1] if x.shape else 2
    matrix = f"({{0}} + 3.0 * np.eye({n}, dtype=DT))"

    def kink(a, *rest):
        return inverse_condition(a + 3.0 * np.eye(n))

    func = draw(st.sampled_from(["inv", "det", "slogdet", "solve"]))
    if func == "solve":
        template = f"np.linalg.solve({matrix}, {{1}})"
        b = pick(draw, pool, lambda v: usable(result_shape(template, x.shape, v.shape)))
        if b is None:
            return Step(name, f"np.linalg.solve({matrix}, np.cos(np.arange({n}, dtype=DT)))", (x.name,), kink)
        return Step(name, template, (x.name, b.name), kink)
    return Step(name, f"np.linalg.{func}({matrix})" + ("[1]" if func == "slogdet" else ""), (x.name,), kink)


def kernel_step(draw, pool, name):
    """db.sum / db.broadcast / db.elementwise of a kernel of 1-3 elementwise steps over 1-3 arguments
    (some cut), maybe reading one more value through its closure."""
    args = [pick(draw, pool)]
    shape = args[0].shape
    for _ in range(draw(st.integers(0, 2))):
        args.append(pick(draw, pool, lambda v, shape=shape: fits(broadcast(shape, v.shape))))
        shape = broadcast(shape, args[-1].shape)
    params = tuple(f"p{k}" for k in range(len(args)))
    inner = [Value(p, a.shape) for p, a in zip(params, args)]
    if draw(st.booleans()):
        closure = pick(draw, pool, lambda v: broadcast(v.shape, shape) == shape)
        inner.append(closure)
    body = []
    for k in range(draw(st.integers(1, 3))):
        step = elementwise_step(draw, inner, f"u{k}")
        body.append(step)
        inner.append(Value(step.name, broadcast(*(v.shape for v in inner if v.name in step.reads))))
    kernel = Kernel("k" + name[1:], params, body)
    cuts = [draw(st.sampled_from([False, False, False, True])) for _ in args]
    arguments = ", ".join(f"db.cut({{{k}}})" if c else f"{{{k}}}" for k, c in enumerate(cuts))
    call = draw(st.sampled_from(["db.sum({k}, {a})", "db.broadcast({k}, {a})", "db.elementwise({k})({a})"]))
    return Step(name, call.format(k=kernel.name, a=arguments), tuple(a.name for a in args), body=kernel)


# Entire holomorphic functions (no branch cut, no pole), for kernels of complex values.
HOLOMORPHIC = [
    ("np.exp({0})", None), ("np.sin({0})", None), ("np.cos({0})", None), ("np.sinh({0})", None),
    ("np.cosh({0})", None), ("np.expm1({0})", None), ("{0} * {0}", None), ("{0} ** 3", None), ("-{0}", None),
    ("(0.5 - 0.25j) * {0}", None),
]
HOLOMORPHIC_BINARY = [("{0} * {1}", None), ("{0} + {1}", None), ("{0} - {1}", None)]
COMPLEX_LITERALS = [("{0} + 0.5j", None), ("{0} * (0.75 - 0.5j)", None), ("np.exp(1j * {0})", None)]
COMPLEX_PROJECTION = "np.real({} * (0.3 - 0.7j))"  # a real number every real and imaginary part counts in


def complex_kernel_step(draw, pool, name):
    """db.sum / db.broadcast of a kernel whose real arguments meet a complex literal, holomorphic from there,
    its value's real part (a kernel cannot take np.real) projected outside (`COMPLEX_PROJECTION`)."""
    args = [pick(draw, pool)]
    shape = args[0].shape
    if draw(st.booleans()):
        args.append(pick(draw, pool, lambda v, shape=shape: fits(broadcast(shape, v.shape))))
        shape = broadcast(shape, args[-1].shape)
    params = tuple(f"p{k}" for k in range(len(args)))
    template, _ = draw(st.sampled_from(COMPLEX_LITERALS))
    body = [Step("u0", template, (params[0],))]
    for k in range(1, draw(st.integers(2, 3))):
        template, _ = draw(st.sampled_from(HOLOMORPHIC + HOLOMORPHIC_BINARY))
        body.append(Step(f"u{k}", template, (f"u{k - 1}", params[-1])[:arity(template)]))
    kernel = Kernel("k" + name[1:], params, body, complex=True)
    cuts = [draw(st.sampled_from([False, False, False, True])) for _ in args]
    arguments = ", ".join(f"db.cut({{{k}}})" if c else f"{{{k}}}" for k, c in enumerate(cuts))
    call = draw(st.sampled_from(["db.sum({k}, {a})", "db.broadcast({k}, {a})"])).format(k=kernel.name, a=arguments)
    return Step(name, COMPLEX_PROJECTION.format(call), tuple(a.name for a in args), body=kernel)


def cut_step(draw, pool, name):
    x = pick(draw, pool)
    return Step(name, draw(st.sampled_from(["db.cut({0})", "{0} * db.cut(np.exp({0}))"])), (x.name,))


# Real results through values the tape may not carry (complex, integer, object): a clear error or the right gradient.
ESCAPES = [
    ("np.abs({0} + 1j)", None), ("np.real(np.exp(1j * {0}))", None), ("np.imag(({0} + 0.5j) ** 2)", None),
    ("np.angle({0} + 1j)", None), ("{0}.astype(np.int64) * 1.5", to_integer), ("np.vectorize(math.sin)({0})", None),
    ("np.frompyfunc(math.cos, 1, 1)({0}).astype(np.float64)", None),
    ("(np.asarray({0}, dtype=object) * 2.0).astype(np.float64)", None),
]


def escape_step(draw, pool, name):
    x = pick(draw, pool)
    template, kink = draw(st.sampled_from(ESCAPES))
    return Step(name, template, (x.name,), kink, refusable=True)


def mutation_step(draw, pool, name):
    """A constant changed in place after a differentiated operation used it: a clear error, or the gradient
    with the value the constant had when it was used."""
    x = pick(draw, pool, lambda v: size(v.shape) <= 8)
    if x is None:
        return None
    # An array of its own: a write through another view of the memory a kept view shares is the documented
    # hole of the read-only guarantee (docs/guide/errors.md, "Constants are read-only while a gradient may read them").
    constant = f"np.array(np.linspace(0.5, 1.5, {size(x.shape)}, dtype=DT).reshape({x.shape}))"
    use = draw(st.sampled_from([
        "{0} * c", "np.dot({0}.ravel(), c.ravel())", "np.einsum('...,...->...', {0}, c)", "{0} * c.T.T",
        "np.outer({0}, c)", "np.where(c > 1.0, {0}, 0.5)",
    ]))
    return Step(name, f"(lambda c: ({use}, c.fill(100.0))[0])({constant})", (x.name,), refusable=True)


def update_step(draw, pool, name):
    """Augmented assignments (``y += b``): on a value of its own, NumPy's result; on a slice, which NumPy writes
    through into the array it views, a clear error or that array's new value."""
    a = pick(draw, pool, lambda v: len(v.shape) >= 1)
    if a is None:
        return None
    if draw(st.booleans()):
        b = pick(draw, pool, lambda v: broadcast(a.shape, v.shape) == a.shape)
        return Step(name, "updated({0}, {1})", (a.name, b.name))
    b = pick(draw, pool)
    return Step(name, "view_updated({0}, np.sum({1}))", (a.name, b.name), refusable=True)


DRAWERS = [
    elementwise_step, elementwise_step, elementwise_step, reduction_step, kernel_step, getitem_step, reshape_step,
    contraction_step, cumulative_step, norm_step, transpose_step, new_axis_step, join_step, copies_step,
    diagonal_step, take_step, copy_step, loop_step, einsum_step, matrix_step, cut_step, kernel_step, escape_step,
    mutation_step, complex_kernel_step, reduced_chain_step, reduced_chain_step,
]
WITH_UPDATES = DRAWERS + [update_step]  # test_random_programs' (test_prepare_hvp's draws with it: see hunt2's report)


def accepted(step, trace):
    """Whether NumPy runs ``step`` on the traced values (methods and indexing fail on a Python float); if so,
    it is added to the trace."""
    try:
        run_steps([step], dict(trace.values), Trace({}))
    except (TypeError, ValueError, IndexError, AttributeError, np.linalg.LinAlgError):
        return False
    run_steps([step], trace.values, trace)
    return True


SCALAR_KINDS = ["0-d array", "numpy scalar", "python float"]


@st.composite
def programs(draw, max_steps=8, drawers=DRAWERS):
    """A random `Program` of 1-3 inputs of broadcasting shapes and up to ``max_steps`` steps.

    Its example inputs give finite values of moderate size everywhere (others are rejected).
    """
    n_inputs = draw(st.integers(1, 3))
    shapes = draw(mutually_broadcastable_shapes(num_shapes=n_inputs, min_dims=0, max_dims=3, max_side=4)).input_shapes
    inputs = []
    for k, shape in enumerate(shapes):
        if shape == ():
            kind = draw(st.sampled_from(SCALAR_KINDS))
        else:
            kind = "fortran array" if len(shape) >= 2 and draw(st.booleans()) else "array"
        inputs.append(Input(f"x{k}", shape, kind, cut=draw(st.sampled_from([False, False, True]))))
    inputs[0].cut = inputs[0].cut and not all(x.cut for x in inputs)
    program = Program(inputs, [], draw(st.integers(0, 2**16)))
    program.replay_kinds = [draw(st.sampled_from(SCALAR_KINDS)) if x.shape == () and not x.cut else x.kind
                            for x in inputs]
    program.trace = trace(program, build_inputs(program))
    pool = [Value(x.name, x.shape) for x in inputs]
    for k in range(draw(st.sampled_from(range(1, max_steps + 1)))):  # uniform (integers() favours 1), shrinks to 1
        name = f"v{n_inputs + k}"
        step = None
        while step is None or not accepted(step, program.trace):
            step = draw(st.sampled_from(drawers))(draw, pool, name)
        program.steps.append(step)
        pool.append(Value(name, np.shape(program.trace.values[name])))
        if step.body:
            program.kernel_cuts[name] = tuple(draw(st.booleans()) for _ in step.reads)
    program.shapes = {v.name: v.shape for v in pool}
    assume(program.trace.well_defined())
    return program


# --- reproductions ---------------------------------------------------------------------------------
def input_name(x, replay=0):
    return x.name if replay == 0 else f"{x.name}_{replay}"


def arguments(program, replay=0):
    """The argument list of a call of ``f`` on the inputs of ``replay``, as source."""
    return ", ".join(f"db.cut({input_name(x, replay)})" if x.cut else input_name(x, replay) for x in program.inputs)


def snippet(program, lines, replays=(), dtype="float64"):
    """A standalone script: the program, its inputs (the example and ``replays``) and then ``lines``."""
    parts = ["import math", "", "import numpy as np", "", "import dualbroadcast as db", "", f"DT = np.{dtype}", "", "",
             HELPERS, "", program.function_source(), ""]
    for r in (0, *replays):
        for x, kind, stream in zip(program.inputs, program.kinds(r), program.streams(r)):
            parts.append(f"{input_name(x, r)} = {x.source(stream, dtype, kind)}")
    return "\n".join(parts + ["", *lines])


def literal(value):
    """Source text that rebuilds ``value`` (a float, a NumPy scalar or an array) exactly."""
    if type(value) is float:
        return repr(value)
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({float(value)!r})"
    return f"np.array({np.asarray(value).tolist()!r}, dtype=np.{value.dtype})"


def attempt(call, what, script):
    """``call()``; an exception becomes a failure that shows the reproduction."""
    try:
        with np.errstate(all="ignore"):
            return call()
    except Exception as error:
        raise AssertionError(f"{what} raised {type(error).__name__}: {error}\n\nReproduction:\n{script}") from error


def fail(what, script):
    raise AssertionError(f"{what}\n\nReproduction:\n{script}")


def as_tuple(grads, n):
    return grads if n > 1 else (grads,)


def show(x):
    return np.array2string(np.asarray(x, np.float64), precision=10, threshold=20)


def difference(got, want, rtol=0.0, atol=0.0, same_type=True, values=True):
    """How a gradient differs from the expected one (None, a float, a NumPy scalar, an array), or None.

    ``values=False``: only the structure (None or not, type, shape, dtype)."""
    if got is None or want is None:
        return None if got is want else f"{type(got).__name__} where {type(want).__name__} was expected"
    if same_type and type(got) is not type(want):
        return f"type {type(got).__name__}, expected {type(want).__name__}"
    if np.shape(got) != np.shape(want):
        return f"shape {np.shape(got)}, expected {np.shape(want)}"
    if np.result_type(got) != np.result_type(want):
        return f"dtype {np.result_type(got)}, expected {np.result_type(want)}"
    if not values:
        return None
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    worst = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(np.abs(g - w), nan=np.inf), -1)), bad.shape)
    return (f"{bad.sum()} of {bad.size} elements differ (rtol {rtol:g}, atol {np.max(atol):.3g}); at "
            f"{tuple(map(int, worst))}: "
            f"{g[worst]!r} vs {w[worst]!r}\n  got:      {show(g)}\n  expected: {show(w)}")


def finite_scale(magnitude):
    """The scale of an absolute tolerance: ``magnitude`` (at least 1), or 1 if it is infinite or NaN (a program
    with an infinite value): an infinite tolerance would make every comparison pass."""
    return max(1.0, magnitude) if math.isfinite(magnitude) else 1.0


def gradient_scale(grads):
    """The largest finite gradient element (at least 1): the scale of absolute tolerances.  An infinite one
    would make the tolerance infinite and every comparison pass; it is compared exactly instead."""
    finite = [np.abs(g)[np.isfinite(g)] for g in map(np.asarray, grads) if g.dtype != object]
    return max([1.0] + [float(np.max(a, initial=0)) for a in finite])


# --- check 1: db.gradient against plain NumPy values and finite differences ---------------------------
def check_gradient(program):
    """``db.value_and_gradient`` at the example: the gradient's structure (None for a cut input, else the input's
    type, shape and dtype), the value against plain NumPy, and (away from kinks) the gradient against central
    finite differences.  Returns the gradients, the reference of the other checks, or None if the program
    is `refusable` and the library refused it with a clear error."""
    values = build_inputs(program)
    script = snippet(program, [f"print(db.value_and_gradient(f, {arguments(program)}))"])
    f = compile_program(program)
    if program.refusable() and refused(lambda: db.value_and_gradient(f, *wrap(program, values))):
        return None
    value, grads = attempt(lambda: db.value_and_gradient(f, *wrap(program, values)), "db.value_and_gradient", script)
    grads = as_tuple(grads, len(values))
    for x, v, g in zip(program.inputs, values, grads):
        problem = difference(g, None if x.cut else v, values=False)
        if problem:
            fail(f"gradient of {x.name}: {problem}", script)
    with np.errstate(all="ignore"):
        plain = compile_program(program, db_module=PlainDB)(*values)
    atol = 1e-9 * finite_scale(program.trace.largest)
    problem = difference(np.float64(value), np.float64(plain), rtol=1e-9, atol=atol)
    if problem:
        fail(f"value of db.value_and_gradient against plain NumPy: {problem}", script)
    if program.trace.kink > KINK_MARGIN:
        problem = finite_difference_error(program, values, grads)
        if problem:
            fail(f"gradient against finite differences: {problem}", script)
    return grads


def refused(call):
    """Whether ``call()`` raises a `db.DifferentiationError` (a clear refusal)."""
    try:
        with np.errstate(all="ignore"):
            call()
    except db.DifferentiationError:
        return True
    return False


def check_refused(program):
    """After `db.gradient` refused the program with a clear error: the prepared gradient refuses it too or is
    right (against finite differences, away from kinks), and float32 refuses it too."""
    values = build_inputs(program)
    f = compile_program(program)
    lines = [f"prog = db.prepare_gradient(f, {arguments(program)})", f"print(prog({arguments(program)}))"]
    try:
        with np.errstate(all="ignore"):
            grads = db.prepare_gradient(f, *wrap(program, values))(*wrap(program, values))
    except db.DifferentiationError:
        pass
    else:
        problem = program.trace.kink > KINK_MARGIN \
            and finite_difference_error(program, values, as_tuple(grads, len(values)))
        if problem:
            fail(f"db.gradient refused the program; the prepared gradient against finite differences: {problem}",
                 snippet(program, lines))
    f32 = compile_program(program, dtype=np.float32)
    if not refused(lambda: db.gradient(f32, *wrap(program, build_inputs(program, dtype=np.float32)))):
        fail("db.gradient refused the program with a clear error in float64, but not in float32",
             snippet(program, [f"print(db.gradient(f, {arguments(program)}))"], dtype="float32"))


def finite_difference_error(program, values, grads):
    """Directional derivatives along two random directions against Richardson-extrapolated central
    differences (at two step sizes, which must agree: else the differences are not trusted)."""
    cuts = FrozenCuts()
    f = compile_program(program, db_module=cuts)
    f(*values)
    active = [k for k, x in enumerate(program.inputs) if not x.cut]
    rng = np.random.default_rng(program.seed)
    for _ in range(2):
        direction = {k: rng.uniform(-1, 1, np.shape(values[k])) for k in active}

        def along(t, direction=direction):
            shifted = list(values)
            for k in active:
                shifted[k] = moved(values[k], t * direction[k])
            cuts.restart()
            with np.errstate(all="ignore"):
                return float(f(*shifted))

        def slope(h):
            return (4 * (along(h / 2) - along(-h / 2)) / h - (along(h) - along(-h)) / (2 * h)) / 3

        got = sum(float(np.sum(grads[k] * direction[k])) for k in active)
        tolerance = 1e-6 * max(1.0, sum(float(np.sum(np.abs(grads[k] * direction[k]))) for k in active))
        coarse, fine = slope(1e-5), slope(1e-6)
        if abs(coarse - fine) <= tolerance and not abs(got - coarse) <= tolerance:
            per_element = {program.inputs[k].name: show(partials(f, cuts, values, k)) for k in active}
            return (f"directional derivative {got!r}, finite differences {coarse!r}; finite differences per element: "
                    f"{per_element}; gradient: { {program.inputs[k].name: show(grads[k]) for k in active} }")
    return None


def moved(value, step):
    """``value + step``, passed as ``value`` is (a 0-d array stays one: its methods differ from a scalar's)."""
    if isinstance(value, np.ndarray):
        return np.asarray(value + step)
    return type(value)(value + step)


def partials(f, cuts, values, k, h=1e-6):
    """Central differences of ``f`` (its cut values frozen by ``cuts``) in each element of argument ``k``
    (for the failure report)."""
    base = np.asarray(values[k], np.float64)
    out = np.zeros(base.shape)
    for index in np.ndindex(base.shape):
        step = np.zeros(base.shape)
        step[index] = h
        shifted = [list(values), list(values)]
        shifted[0][k], shifted[1][k] = moved(values[k], step), moved(values[k], -step)
        with np.errstate(all="ignore"):
            cuts.restart()
            forward = float(f(*shifted[0]))
            cuts.restart()
            out[index] = (forward - float(f(*shifted[1]))) / (2 * h)
    return out


# --- JAX: the same source on jax.numpy --------------------------------------------------------------
def jax_modules():
    """``np`` and ``db`` stand-ins on jax.numpy: cut is stop_gradient, kernels broadcast their function."""
    import jax
    import jax.numpy as jnp

    class JaxNumpy:
        array = staticmethod(np.array)  # constant indices, masks and counts stay concrete under jax.jit

        def __getattr__(self, name):
            return getattr(jnp, name)

        @staticmethod
        def clip(x, *bounds, a_min=None, a_max=None, **kwargs):
            if a_min is not None or a_max is not None:
                return jnp.clip(x, a_min, a_max)
            return jnp.clip(x, *bounds, **kwargs)

        @staticmethod
        def triu(x, k=0):  # NumPy takes a vector as the rows of a square matrix
            return jnp.triu(jnp.broadcast_to(x, (x.shape[-1],) * 2) if jnp.ndim(x) < 2 else x, k)

        @staticmethod
        def tril(x, k=0):
            return jnp.tril(jnp.broadcast_to(x, (x.shape[-1],) * 2) if jnp.ndim(x) < 2 else x, k)

    return JaxNumpy(), db_stand_in(jnp, jax.lax.stop_gradient)


def check_jax(program, grads):
    """``db.gradient`` against ``jax.grad`` of the same source on jax.numpy, in float64 (away from kinks, where
    the two may follow different conventions, and without values leaving the tape, which JAX treats its own way)."""
    if program.trace.kink <= KINK_MARGIN or program.refusable():
        return
    import jax
    import jax.numpy as jnp

    jnp_module, jax_db = jax_modules()
    active = tuple(k for k, x in enumerate(program.inputs) if not x.cut)
    with jax.enable_x64(True), np.errstate(all="ignore"):
        f = compile_program(program, jnp_module, jax_db, jnp.float64)
        values = [jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in build_inputs(program)]
        want = jax.jit(jax.grad(f, argnums=active))(*values)  # compiled once: faster, less memory kept than op by op
    scale = gradient_scale(grads)
    for k, w in zip(active, want):
        problem = difference(grads[k], np.asarray(w), rtol=1e-7, atol=1e-7 * scale, same_type=False)
        if problem:
            script = snippet(program, [f"print(db.gradient(f, {arguments(program)}))"])
            fail(f"gradient of {program.inputs[k].name} against jax.grad: {problem}", script)


# --- check 2: prepared gradients replayed --------------------------------------------------------------
def check_prepared(program, replays=2):
    """``db.prepare_gradient(f, *example)`` replayed on new inputs of the same shapes (1..``replays``) and on
    the example, against ``db.gradient`` on the same inputs: same types, shapes, dtypes and values, or the same
    error (new inputs may make a matrix singular)."""
    f = compile_program(program)
    lines = [f"prog = db.prepare_gradient(f, {arguments(program)})"]
    order = [1, 0] + list(range(2, replays + 1))
    script = snippet(program, lines)
    prog = attempt(lambda: db.prepare_gradient(f, *wrap(program, build_inputs(program))), "db.prepare_gradient", script)
    for position, r in enumerate(order):
        values = wrap(program, build_inputs(program, r))
        lines.append(f"print(prog({arguments(program, r)}))")
        script = snippet(program, lines + [f"print(db.gradient(f, {arguments(program, r)}))"],
                         [k for k in order[: position + 1] if k])
        what = f"the prepared gradient (call {position + 1})"
        want, error = outcome(lambda v=values: db.gradient(f, *v))
        if error is not None:
            other = outcome(lambda v=values: prog(*v))[1]
            if type(other) is not type(error):
                instead = f"raised {type(other).__name__}: {other}" if other else "returned a gradient"
                fail(f"db.gradient raised {type(error).__name__}: {error}; {what} {instead}", script)
            continue
        got = as_tuple(attempt(lambda v=values: prog(*v), what, script), len(values))
        want = as_tuple(want, len(values))
        scale = gradient_scale(want)
        for x, g, w in zip(program.inputs, got, want):
            problem = difference(g, w, rtol=1e-10, atol=1e-12 * scale)
            if problem:
                fail(f"prepared gradient of {x.name} (call {position + 1}) against db.gradient: {problem}", script)


@contextlib.contextmanager
def small_thresholds(prefer):
    """Prepared programs compiled as they are at 10^4..10^6 elements, at the random programs' few: every
    elementwise region fused (`regions.BROADCAST_MIN`), the blocked kernel in blocks of 8 elements on two
    threads (`kernels.BLOCK`), and where a region has two candidate runners (blocked, whole arrays) the one
    ``prefer`` names taken, as a timing may take it (`region_runners._fastest`, not the per-call choice)."""
    from dualbroadcast import axis_sums, kernels, region_runners, regions, replay

    fastest = region_runners._fastest

    def preferred(candidates, examples, rounds=5):
        return next((c for c in candidates if c[1] == prefer), candidates[0])

    saved = [(regions, "BROADCAST_MIN", 1), (kernels, "BLOCK", 8), (axis_sums, "BLOCK", 8), (kernels, "THREADS", 2),
             (replay, "CHOSEN_MIN", math.inf), (region_runners, "CHOSEN_MIN", math.inf),
             (region_runners, "_fastest", preferred)]
    old = [getattr(module, name) for module, name, _ in saved]
    try:
        for module, name, value in saved:
            setattr(module, name, value)
        db.clear_cache()
        yield
    finally:
        for (module, name, _), value in zip(saved, old):
            setattr(module, name, value)
        db.clear_cache()
    assert region_runners._fastest is fastest


def check_prepared_paths(program):
    """The prepared gradient compiled under `small_thresholds` (regions fused, blocked, chunked on threads, on
    whole arrays), on the example and on new inputs, also written into ``out=``, against ``db.gradient``."""
    f = compile_program(program)
    for prefer in ("numpy", "blocked"):
        lines = [f"from tests.programs import small_thresholds\nwith small_thresholds({prefer!r}):",
                 f"    prog = db.prepare_gradient(f, {arguments(program)})"]
        for r in (0, 1):
            values = wrap(program, build_inputs(program, r))
            want, error = outcome(lambda v=values: db.gradient(f, *v))
            if error is not None:
                continue
            want = as_tuple(want, len(values))
            script = snippet(program, lines + [f"    print(prog({arguments(program, r)}))",
                                               f"print(db.gradient(f, {arguments(program, r)}))"], [r] if r else [])
            with small_thresholds(prefer):
                prog = attempt(lambda: db.prepare_gradient(f, *wrap(program, build_inputs(program))),
                               "db.prepare_gradient", script)
                got = as_tuple(attempt(lambda v=values: prog(*v), f"the prepared gradient ({prefer})", script),
                               len(values))
                out = [None if g is None or not isinstance(g, np.ndarray) else np.full_like(g, np.nan) for g in want]
                written = None
                if all(o is not None or x.cut for o, x in zip(out, program.inputs)) and any(o is not None for o in out):
                    given = out if len(out) > 1 else out[0]
                    attempt(lambda v=values: prog(*v, out=given), f"the prepared gradient ({prefer}, out=)", script)
                    written = out
            scale = gradient_scale(want)
            for k, (x, g, w) in enumerate(zip(program.inputs, got, want)):
                problem = difference(g, w, rtol=1e-10, atol=1e-12 * scale)
                if not problem and written is not None and w is not None:
                    problem = difference(written[k], w, rtol=1e-10, atol=1e-12 * scale, same_type=False)
                if problem:
                    fail(f"prepared gradient of {x.name} ({prefer} runners, small thresholds) against db.gradient: "
                         f"{problem}", script)


# --- check 3b: a pullback called again -------------------------------------------------------------------
PULLBACK_COTANGENTS = (2.0, -0.5, 2.0)


def check_pullback(program, grads):
    """``db.pullback`` of the program, its pullback called three times: each call gives the gradient times its
    cotangent.  A pullback that changed what it keeps (a partial scaled in place, as the cached plan of a
    large ``db.sum`` once did) would make a later call wrong, which one ``db.gradient`` never shows."""
    values = build_inputs(program)
    f = compile_program(program)
    calls = ", ".join(f"back({c})" for c in PULLBACK_COTANGENTS)
    script = snippet(program, [f"y, back = db.pullback(f, {arguments(program)})", f"print({calls})"])
    _, back = attempt(lambda: db.pullback(f, *wrap(program, values)), "db.pullback", script)
    scale = gradient_scale(grads)
    for k, c in enumerate(PULLBACK_COTANGENTS):
        got = as_tuple(attempt(lambda c=c: back(c), f"back({c})", script), len(values))
        for x, g, w in zip(program.inputs, got, grads):
            want = None if w is None else np.multiply(w, c)
            problem = difference(g, want, rtol=1e-12, atol=1e-14 * scale, same_type=False)
            if problem:
                fail(f"pullback call {k + 1} (cotangent {c}) of {x.name} against {c} x the gradient: {problem}", script)


# --- check 5: second derivatives -------------------------------------------------------------------------
def check_second_order(program, grads):
    """``db.hvp`` (a gradient of a gradient) along a random direction against central differences of
    ``db.gradient`` along it, away from kinks; a rule that cannot be differentiated twice must refuse with the
    error naming it, never give a wrong second derivative.  Not for a program that cuts a derived value: the
    gradient of ``x · cut(e^x)`` is ``cut(e^x)``, a constant of every gradient (as JAX's stop_gradient), so its
    second derivative is 0, not the change of that value (the finite difference)."""
    if program.trace.kink <= KINK_MARGIN or "db.cut(" in program.function_source():
        return
    values = build_inputs(program)
    f = compile_program(program)
    rng = np.random.default_rng(program.seed)
    directions = [np.zeros(np.shape(v)) if x.cut else rng.standard_normal(np.shape(v))
                  for x, v in zip(program.inputs, values)]
    script = snippet(program, [f"print(db.hvp(f, {arguments(program)}, vectors=...))"])
    try:
        with np.errstate(all="ignore"):
            got = as_tuple(db.hvp(f, *wrap(program, values), vectors=tuple(directions)), len(values))
    except db.UnsupportedFunctionError as error:
        if "cannot be differentiated again" not in str(error):
            fail(f"db.hvp raised {error}", script)
        return
    h = 1e-6

    def gradient_at(t):
        moved = [v if x.cut else type(v)(v + t * d) if not isinstance(v, np.ndarray) else v + t * d
                 for x, v, d in zip(program.inputs, values, directions)]
        with np.errstate(all="ignore"):
            return as_tuple(db.gradient(f, *wrap(program, moved)), len(values))

    ahead, behind = gradient_at(h), gradient_at(-h)
    scale = gradient_scale(grads)
    for x, g, a, b in zip(program.inputs, got, ahead, behind):
        if x.cut:
            continue
        want = (np.asarray(a, np.float64) - np.asarray(b, np.float64)) / (2 * h)
        problem = difference(np.asarray(g, np.float64), want, rtol=1e-4, atol=1e-4 * scale, same_type=False)
        if problem:
            fail(f"db.hvp of {x.name} against central differences of db.gradient: {problem}", script)


NESTED = (*compositions.SECOND_ORDER, *compositions.THIRD_ORDER)  # the compositions `check_composition` draws from


def check_composition(program, composition):
    """A directional derivative of order 2 or 3 by nested `db.jvp` and `db.gradient` (``composition``, as
    tests/compositions.py names them) against JAX's nested ``jax.jvp`` on the same source, away from kinks; a
    composition may refuse with a clear error (a `db.DifferentiationError`), never give a wrong derivative."""
    if program.trace.kink <= KINK_MARGIN or program.refusable():
        return "not checked"
    import jax
    import jax.numpy as jnp

    values = build_inputs(program)
    active = [k for k, x in enumerate(program.inputs) if not x.cut]
    if not active:
        return "not checked"
    rng = np.random.default_rng(program.seed)
    directions = [[direction_like(values[k], rng) for k in active] for _ in range(3)]

    def on(f, constants):
        def F(*xs):  # f of the active inputs; the cut ones constants (`db.cut` is for the entry points' arguments)
            args = list(constants)
            for k, x in zip(active, xs):
                args[k] = x
            return f(*args)
        return F

    script = snippet(program, [
        "from tests.compositions import derivative  # run from the repository's root",
        f"constants = [{arguments(program)}]",
        f"def F(*xs):\n    args = list(constants)\n    for k, x in zip({active}, xs):\n        args[k] = x\n"
        "    return f(*args)",
        f"directions = {[[literal(d) for d in ds] for ds in directions]!r}".replace("'", ""),
        f"print(derivative({composition!r}, F, [constants[k] for k in {active}], directions))"])
    got, error = outcome(lambda: compositions.derivative(composition, on(compile_program(program), values),
                                                         [values[k] for k in active], directions))
    if isinstance(error, db.DifferentiationError):
        return "refused"
    if error is not None:
        fail(f"{composition} raised {type(error).__name__}: {error}", script)
    jnp_module, jax_db = jax_modules()
    f_jax = compile_program(program, jnp_module, jax_db, jnp.float64)
    with jax.enable_x64(True):  # the constants in float64 too (outside it, jnp.asarray rounds them to float32)
        jax_values = [jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in values]
    with np.errstate(all="ignore"):
        want = compositions.jax_derivative(on(f_jax, jax_values), [values[k] for k in active], directions,
                              len(composition.split("_")))
    if not abs(float(got) - want) <= 1e-7 * abs(want) + 1e-9 * finite_scale(program.trace.largest):
        fail(f"{composition}: {float(got)!r}, JAX's nested jax.jvp {want!r}", script)
    return "checked"


def direction_like(value, rng):
    """A random direction for ``value``: of its shape, and its kind (a float, a NumPy scalar, an array)."""
    d = rng.standard_normal(np.shape(value))
    return d if isinstance(value, np.ndarray) else type(value)(d)


def outcome(call):
    """``(call(), None)``, or ``(None, the exception it raised)``."""
    try:
        with np.errstate(all="ignore"):
            return call(), None
    except Exception as error:  # noqa: BLE001  (compared with the other path's outcome)
        return None, error


# --- check 4: float32 against float64 -------------------------------------------------------------------
def float32_rounding(program, count, ulps=4):
    """Per input, twice how far the float64 gradient moves when every input moves by ``ulps`` float32 ulps:
    float32 rounding of an intermediate value moves the float32 gradient as far (``sin(exp(|exp(x)|))`` at
    x = 2: 9%); zero where the program is well conditioned, and where the moved gradient is not finite."""
    f, values = compile_program(program), build_inputs(program)
    moved_values = [v * (1 + ulps * float(np.finfo(np.float32).eps)) for v in values]
    at, error = outcome(lambda: db.gradient(f, *wrap(program, values)))  # not ``grads``: those are checked
    moved, moved_error = outcome(lambda: db.gradient(f, *wrap(program, moved_values)))
    if error is not None or moved_error is not None:
        return [0.0] * count
    moves = []
    for m, g in zip(as_tuple(moved, count), as_tuple(at, count)):
        if m is None or g is None:
            moves.append(0.0)
            continue
        with np.errstate(invalid="ignore"):
            gap = 2 * np.abs(np.asarray(m, np.float64) - np.asarray(g, np.float64))
        moves.append(np.where(np.isfinite(gap), gap, 0.0))
    return moves


def check_float32(program, grads):
    """The program in float32 (DT = np.float32, inputs rounded): float32 gradients of the inputs' types and
    shapes, close to the float64 ones at float32 tolerance (away from kinks: rounding could cross one)."""
    values = build_inputs(program, dtype=np.float32)
    script = snippet(program, [f"print(db.gradient(f, {arguments(program)}))"], dtype="float32")
    f = compile_program(program, dtype=np.float32)
    got = attempt(lambda: db.gradient(f, *wrap(program, values)), "db.gradient in float32", script)
    got = as_tuple(got, len(values))
    scale = gradient_scale(grads)
    close = program.trace.kink > FLOAT32_MARGIN
    moves = float32_rounding(program, len(grads)) if close else [0.0] * len(grads)
    for x, v, g, g64, move in zip(program.inputs, values, got, grads, moves):
        want = None if g64 is None else np.asarray(g64, np.float32) if isinstance(v, np.ndarray) else type(v)(g64)
        problem = difference(g, want, rtol=2e-3, atol=2e-3 * scale + move, values=close)
        if problem:
            fail(f"float32 gradient of {x.name} against the float64 one: {problem}", script)


# --- check 3: kernels against the plain reverse form --------------------------------------------------
BACKENDS = [None, "numpy", "blocked", "numexpr"]
LARGE = {"numexpr": 1024, "blocked": 2 * 16384}  # sizes from which kernels.py runs these backends


def kernel_sources(program, step):
    """Source of a factory ``make(closure values) -> kernel`` and the closure names it takes."""
    local = set(step.body.params) | {s.name for s in step.body.steps}
    closure = sorted({r for s in step.body.steps for r in s.reads if r not in local})
    lines = [f"def make({', '.join(closure)}):", *("    " + line for line in step.body.lines()),
             f"    return {step.body.name}"]
    return "\n".join(lines), closure


def kernel_arguments(program, step, backend):
    """Sources of the kernel's arguments: their example values, or (``backend`` "numexpr"/"blocked") arrays
    with a new leading axis, large enough that the backend runs (numexpr: the first argument; blocked,
    which takes only full-size or one-element inputs: every argument with more than one element)."""
    values = [program.trace.values[r] for r in step.reads]
    sources = [literal(v) for v in values]
    if backend not in LARGE:
        return sources
    shape = np.broadcast_shapes(*map(np.shape, values))
    big = (-(-LARGE[backend] // size(shape)),) + shape
    for k, v in enumerate(values):
        if k == 0 or (backend == "blocked" and np.size(v) > 1):
            sources[k] = f"draw({[program.seed, 100, k]}, {big})"
    return sources


def check_kernels(program):
    """Each kernel of the program with new random cuts of its arguments (cut ones get None), on each backend:
    value and gradient of db.sum(g, *a) against np.sum(g(*a)), and of a weighted sum of db.broadcast(g, *a)
    against that of g(*a)."""
    for step in program.steps:
        if step.body:
            for backend in BACKENDS:
                for sizes in ([None, "numexpr"] if backend is None else [backend]):
                    check_kernel(program, step, backend, sizes)


def check_kernel(program, step, backend, sizes):
    """One kernel of ``program`` on ``backend``, its arguments at the example's sizes or (``sizes``) large enough
    for numexpr / blocked, cut as drawn for this check: the db.sum and db.broadcast forms against the reverse
    form, value and gradient."""
    factory, closure = kernel_sources(program, step)
    names = [f"a{k}" for k in range(len(step.reads))]
    setup = [factory, f"g = make({', '.join(literal(program.trace.values[c]) for c in closure)})"]
    setup += [f"{n} = {source}" for n, source in zip(names, kernel_arguments(program, step, sizes))]
    space = namespace(np, db, np.float64)
    exec("\n".join(setup), space)
    args = [space[n] for n in names]
    shape = np.broadcast_shapes(*map(np.shape, args))
    setup.append(f"w = weights(1, {shape})")
    space["w"] = space["weights"](1, shape)
    params = ", ".join(names)
    call = ", ".join(f"db.cut({n})" if c else n for n, c in zip(names, program.kernel_cuts[step.name]))
    project = COMPLEX_PROJECTION.format if step.body.complex else "{}".format
    summed = f"db.sum(g, {params}, backend={backend!r})"
    broadcast_call = f"db.broadcast(g, {params}, backend={backend!r})"
    forms = [
        (project(summed), project(f"np.sum(np.broadcast_to(g({params}), {shape}))")),
        (f"np.sum(w * {project(broadcast_call)})", f"np.sum(w * {project(f'g({params})')})"),
    ]
    projected = eval(f"lambda *a: {project('g(*a)')}", {"g": space["g"], "np": np})
    value_scale, scales = kernel_scales(projected, args, shape)
    for fused, plain in forms:
        fused, plain = (f"db.value_and_gradient(lambda {params}: {body}, {call})" for body in (fused, plain))
        script = snippet(program, setup + [f"print({fused})", f"print({plain})"])
        want_value, want = attempt(lambda plain=plain: eval(plain, space), "the reverse form", script)
        if not all(np.all(np.isfinite(y)) for y in as_tuple(want, len(args)) if y is not None):
            continue  # a singular point (cbrt at 0, ...): no derivative to compare
        value_moves, moves = rounding_sensitivity(plain, space, names, want_value, as_tuple(want, len(args)))
        for _ in range(2 if backend is None else 1):  # the second call of the automatic choice takes the cached path
            value, got = attempt(lambda fused=fused: eval(fused, space), fused, script)
            problem = difference(np.float64(value), np.float64(want_value), rtol=1e-9,
                                 atol=1e-9 * value_scale + value_moves)
            if problem:
                fail(f"the value of {fused} against the reverse form: {problem}", script)
            for k, (x, y) in enumerate(zip(as_tuple(got, len(args)), as_tuple(want, len(args)))):
                problem = difference(x, y, rtol=1e-9, atol=1e-9 * scales[k] + moves[k])
                if problem:
                    fail(f"{fused} against the reverse form, argument {k}: {problem}", script)


def rounding_sensitivity(plain, space, names, value, grads, ulps=4):
    """How far the reverse form ``plain`` (value and gradients) moves, times two, when every argument moves by
    ``ulps`` float64 ulps: an intermediate value rounded otherwise moves it as far, so two right evaluations in
    different orders (a kernel's and the reverse form's) may differ by that.  Zero where the function is well
    conditioned; ``sin(p ** -2)`` at ``p`` = 9e-5 moves its gradient by 1e-8 relative (a 1-ulp change of
    ``p ** -2`` = 1.2e8)."""
    saved = {n: space[n] for n in names}
    try:
        for n in names:
            space[n] = saved[n] * (1 + ulps * np.finfo(np.float64).eps)
        with np.errstate(all="ignore"):
            moved_value, moved = eval(plain, space)
    except Exception:  # noqa: BLE001 - a singular neighbourhood: no allowance
        return 0.0, [0.0] * len(grads)
    finally:
        space.update(saved)

    def moves(a, b):
        if a is None or b is None:
            return 0.0
        with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: no allowance there
            gap = 2 * np.abs(np.asarray(a, np.complex128) - np.asarray(b, np.complex128))
        return np.where(np.isfinite(gap), gap, 0.0)

    return moves(moved_value, value), [moves(a, b) for a, b in zip(as_tuple(moved, len(grads)), grads)]


def kernel_scales(g, args, shape):
    """The sum of the kernel's absolute values, and per argument the largest sum of absolute per-element
    contributions to one gradient element: rounding in sums over many elements is relative to these, not to
    the (maybe cancelling) results."""
    full = [np.array(np.broadcast_to(np.asarray(a, np.float64), shape)) for a in args]
    with np.errstate(all="ignore"):
        value = db.value_and_gradient(lambda *a: np.sum(np.abs(np.broadcast_to(g(*a), shape))), *full)[0]
        per_element = as_tuple(db.gradient(lambda *a: np.sum(g(*a)), *full), len(args))
    scales = [float(np.max(np.abs(unbroadcast_sum(np.abs(p), np.shape(a))), initial=0))
              for p, a in zip(per_element, args)]
    return finite_scale(float(value)), [finite_scale(s) for s in scales]


def unbroadcast_sum(x, shape):
    """``x`` summed over the axes that broadcasting added to ``shape``."""
    x = np.sum(x, axis=tuple(range(x.ndim - len(shape))))
    return np.sum(x, axis=tuple(k for k, n in enumerate(shape) if n == 1), keepdims=True)
