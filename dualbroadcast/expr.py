"""Tracing a scalar-style function into an expression graph, and its forward derivatives.

``trace(f_rebuilt, n_inputs)`` calls ``f`` once on symbolic values (`Sym`), which
record every NumPy ufunc and operator into a `Graph`.  The graph collapses
common subexpressions, folds literals and expands small integer powers into
products (so ``x**9`` reuses ``x**8``).  `derivatives` then runs forward mode
symbolically: ∂out/∂input for each active input, built from the same
`DERIVATIVES` table the reverse rules use, so ``exp``'s partial is its value.

A function becomes one node if it has a forward rule when the trace runs: an entry
in `DERIVATIVES` (the NumPy ufuncs, np.where, and whatever `db.defderivative`
registers: a ``scipy.special`` ufunc, a NumPy function, a `db.primitive`), or no
derivative at all (`ZERO_DERIVATIVE`, the predicates).  A `db.primitive` without
an entry is traced through: its body runs on the symbols.
"""

import contextvars
import inspect

import numpy as np

from .derivatives import DERIVATIVES, OVERFLOWS_ONLY, SELECTIONS, SMOOTH, ZERO_DERIVATIVE
from .errors import KernelError
from .numpy_facts import PREDICATES, qualified_name, source_of
from .registry import ARGUMENT_REASONS, LAZY_FAMILIES, register_lazy_rules

LITERAL_TYPES = (int, float, complex, bool, np.number, np.bool_)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
TRACING = contextvars.ContextVar("dualbroadcast_tracing", default=None)  # the graph of the trace running
_NOT_ELEMENTWISE = (
    "{name} is not elementwise, so it cannot run inside a broadcast kernel "
    "(f sees one element at a time). Compute it outside f, or use db.sum(f, x) to sum."
)
_ONE_ELEMENT = (
    "{what} inside db.sum/db.broadcast: f sees one element at a time (a number, not an array), so it "
    "cannot index, measure or iterate its arguments. Compute array-level values outside f and pass them "
    "as arguments (they broadcast)."
)


class KernelAttributeError(KernelError, AttributeError):
    """An array attribute (``p.shape``) asked of one element inside a kernel."""


def _cut(x):
    """The op of ``db.cut(x)`` inside a kernel: the value of ``x``, a constant (it has no derivative rule)."""
    return x


def _has_forward_rule(func):
    """Whether a kernel knows ``func``'s partial derivatives now: an entry in the table (`db.defderivative`
    adds one), or a function whose derivative is zero; SciPy's entries are made on first need."""
    if func in DERIVATIVES or func in ZERO_DERIVATIVE or func in PREDICATES:
        return True
    return bool(LAZY_FAMILIES) and register_lazy_rules(func) and func in DERIVATIVES


def _no_rule_message(func):
    """Why ``func`` cannot run inside a kernel, and the two ways that work: register its partial
    derivatives, or compute it outside f."""
    name = qualified_name(func)
    if _has_axis(func):
        return _NOT_ELEMENTWISE.format(name=name)
    arguments = _argument_names(func)
    formula = f"lambda ans, {', '.join(arguments)}: ..."
    return (
        f"{name} has no forward-mode (kernel) rule, so it cannot run inside db.sum/db.broadcast. If it is "
        "elementwise, register its partial derivatives, one formula per argument written with NumPy functions "
        f"of the result ans and the arguments: db.defderivative({name}, {', '.join([formula] * len(arguments))}) "
        f"(reverse mode and prepared gradients use them too). Or compute {name} outside f and pass its result "
        "to db.sum/db.broadcast as an argument."
    )


def _argument_names(func):
    """Names for ``func``'s arguments in a message: its parameters without a default, or x, y, ... for a ufunc."""
    count = getattr(func, "nin", None)
    if count is None:
        try:
            parameters = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):
            return ["x"]
        return [p.name for p in parameters if p.kind in _POSITIONAL and p.default is p.empty] or ["x"]
    return ["x", "y", "z"][:count] if count <= 3 else [f"x{k}" for k in range(count)]



def _has_axis(func):
    """Whether ``func`` works along axes (a reduction, a sort, a scan): not elementwise."""
    try:
        return bool({"axis", "axes"} & set(inspect.signature(func).parameters))
    except (TypeError, ValueError):
        return False


def complex_kernel_message(op):
    """Why ``op`` cannot run inside a kernel where complex numbers take part."""
    name = qualified_name(op)
    return (
        f"{name} met complex numbers inside db.sum/db.broadcast: a kernel differentiates holomorphic "
        f"functions of complex numbers only (arithmetic, exp, log, sin, ...), and {name} is not one. Compute "
        f"it with plain NumPy outside the kernel, where db.gradient differentiates {name} of complex values "
        "too (|r + 1j| of a real r is np.hypot(r, 1.0))."
    )


class UfuncOperators:
    """Python's operators as the NumPy ufuncs they mean, for symbolic array types.

    A subclass defines ``_ufunc(func, args)``: build the node (or text) ``func(*args)``.
    The operators are made below from `_OPERATORS`.
    """

    __hash__ = None


# The special-method name of each operator, the ufunc it means, and its number of operands; arithmetic
# also has its reflected form (``2 - x`` is ``x.__rsub__(2)``).
_OPERATORS = (
    ("add", np.add, 2), ("sub", np.subtract, 2), ("mul", np.multiply, 2), ("truediv", np.divide, 2),
    ("pow", np.power, 2), ("mod", np.remainder, 2), ("floordiv", np.floor_divide, 2),
    ("lt", np.less, 2), ("le", np.less_equal, 2), ("gt", np.greater, 2), ("ge", np.greater_equal, 2),
    ("eq", np.equal, 2), ("ne", np.not_equal, 2), ("and", np.logical_and, 2), ("or", np.logical_or, 2),
    ("neg", np.negative, 1), ("abs", np.absolute, 1), ("invert", np.logical_not, 1),
)
_REFLECTED = ("add", "sub", "mul", "truediv", "pow", "mod", "floordiv")


def _operator(func, operands, reflected=False):
    """The special method applying ``func`` to ``self`` (and ``other``, first if ``reflected``)."""
    if operands == 1:
        return lambda self: self._ufunc(func, (self,))
    if reflected:
        return lambda self, other: self._ufunc(func, (other, self))
    return lambda self, other: self._ufunc(func, (self, other))


for _name, _func, _operands in _OPERATORS:
    setattr(UfuncOperators, f"__{_name}__", _operator(_func, _operands))
    if _name in _REFLECTED:
        setattr(UfuncOperators, f"__r{_name}__", _operator(_func, _operands, reflected=True))


class Sym(UfuncOperators):
    """A node of the graph: an input (``op is None``) or ``op(*args)``; args are Syms or literals."""

    __slots__ = ("graph", "op", "args", "index")
    kernel_symbol = True  # a tracked value that meets one reached the kernel by a way it cannot see (tape.py)

    def __init__(self, graph, op, args, index):
        self.graph = graph
        self.op = op
        self.args = args
        self.index = index

    # --- NumPy protocols ---------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise KernelError(
                f"np.{ufunc.__name__}.{method} or keyword arguments cannot run inside a broadcast "
                "kernel: write the elementwise formula for one element"
            )
        return self.graph.apply(ufunc, inputs)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.clip:
            return _clip(self.graph, *args, **kwargs)
        if func is np.round and len(args) == 1 and not kwargs:
            return self.graph.apply(np.rint, args)  # a ufunc, which blocked kernels write in place
        return self.graph.call(func, args, kwargs)  # np.where, or a function given a rule by db.defderivative

    def __matmul__(self, other):
        raise KernelError(_NOT_ELEMENTWISE.format(name="@ (np.matmul)"))

    __rmatmul__ = __matmul__

    def __bool__(self):
        raise KernelError(
            "a value-dependent `if`/`while` (or and/or/not) inside a broadcast kernel: f runs on whole "
            "arrays at once, so a branch cannot depend on one element. Use np.where(cond, a, b)."
        )

    def _conversion(self, *_):
        raise KernelError(
            "math.* functions, float() and int() cannot run inside a broadcast kernel; use the np.* "
            "function (np.exp, not math.exp)"
        )

    __float__ = __int__ = __index__ = __complex__ = _conversion

    def __getitem__(self, index):
        raise KernelError(_ONE_ELEMENT.format(what=f"indexing an argument (p[{index!r}])"))

    def __setitem__(self, index, value):
        raise KernelError(_ONE_ELEMENT.format(what=f"assigning into an argument (p[{index!r}] = ...)"))

    def __len__(self):
        raise KernelError(_ONE_ELEMENT.format(what="len() of an argument"))

    def __iter__(self):
        raise KernelError(_ONE_ELEMENT.format(what="iterating over (or unpacking) an argument"))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)  # a protocol probe (hasattr(p, "__array__")): not the user's code
        raise KernelAttributeError(_ONE_ELEMENT.format(what=f"p.{name} of an argument"))

    def clip(self, *bounds, **keywords):
        return _clip(self.graph, self, *bounds, **keywords)

    def _ufunc(self, func, args):
        return self.graph.apply(func, args)

    def __pos__(self):
        return self


def _clip(graph, *args, **keywords):
    """``np.clip(x, ...)`` (``x`` by position or as ``a=``) as ``minimum(maximum(x, lo), hi)``: the selections carry
    its derivative."""
    x, bounds = (args[0], args[1:]) if args else (keywords.pop("a", None), ())
    try:
        lo, hi = _clip_bounds(*bounds, **keywords)
    except TypeError as error:
        raise KernelError(
            f"np.clip inside a broadcast kernel takes its bounds (positional, a_min=/a_max= or min=/max=, "
            f"None for no bound) and nothing else: {error}"
        ) from None
    if lo is not None:
        x = graph.apply(np.maximum, (x, lo))
    if hi is not None:
        x = graph.apply(np.minimum, (x, hi))
    return x


def _clip_bounds(a_min=None, a_max=None, out=None, *, min=None, max=None):  # NumPy's names
    """``np.clip``'s bounds in any form NumPy takes them."""
    if out is not None or (a_min is not None and min is not None) or (a_max is not None and max is not None):
        raise TypeError("out= or a bound given twice")
    return (min if a_min is None else a_min), (max if a_max is None else a_max)


def _is_literal(a):
    return isinstance(a, LITERAL_TYPES) and not isinstance(a, np.ndarray)


class Graph:
    """Nodes in creation (topological) order, with common subexpressions shared."""

    def __init__(self):
        self.nodes = []
        self.table = {}

    def input(self):
        node = Sym(self, None, (), len(self.nodes))
        self.nodes.append(node)
        return node

    def apply(self, op, args):
        """The node ``op(*args)``, simplified; literals fold to literals."""
        if not _has_forward_rule(op):
            if getattr(op, "signature", None):
                raise KernelError(_NOT_ELEMENTWISE.format(name=qualified_name(op)))
            raise KernelError(_no_rule_message(op))
        args = tuple(a[()] if isinstance(a, np.ndarray) and a.ndim == 0 else a for a in args)
        for a in args:
            if not (type(a) is Sym or _is_literal(a)):
                raise KernelError(
                    f"a value of type {type(a).__name__} reached {qualified_name(op)} inside a broadcast "
                    "kernel; pass arrays as arguments of db.broadcast/db.sum (they broadcast) instead"
                )
        if all(_is_literal(a) for a in args):
            folded = op(*args)
            return folded[()] if isinstance(folded, np.ndarray) else folded
        simple = _simplify(self, op, args)
        if simple is not NotImplemented:
            return simple
        return self.node(op, args)

    def call(self, func, args, kwargs):
        """The node ``func(*args)`` of a function with a forward rule; its partials are per positional
        argument, so keyword arguments cannot be placed."""
        if kwargs and _has_forward_rule(func):
            raise KernelError(
                f"{qualified_name(func)} inside db.sum/db.broadcast takes its arguments by position, as its "
                f"partial derivatives do: pass {', '.join(sorted(kwargs))} positionally"
            )
        return self.apply(func, args)

    def primitive(self, func, body, args, kwargs):
        """A `db.primitive` ``func`` called on symbols: one node if it has partial derivatives
        (`db.defderivative`), its ``body`` then running on whole arrays or blocks; else ``body`` traced."""
        if func in DERIVATIVES:
            return self.call(func, args, kwargs)
        return body(*args, **kwargs)

    def cut(self, x):
        """``db.cut(x)`` of a node: the same value, a constant of the kernel (no tangent flows through it).

        A node that carries no tangent anyway (a comparison, ``np.floor``) is its own cut, so a
        truth value stays recognisably boolean (see `_is_boolean`).
        """
        if x.op is _cut or x.op in PREDICATES or x.op in ZERO_DERIVATIVE:
            return x
        return self.node(_cut, (x,))

    def multiply(self, d, t):
        """``d * t`` as a node: a boolean ``d`` times a typed one becomes a number, never simplified away."""
        if _is_boolean(d) or _is_boolean(t):
            return self.node(np.multiply, (d, t))
        return self.apply(np.multiply, (d, t))

    def node(self, op, args):
        """The node ``op(*args)`` itself, shared if it exists."""
        key = (op,) + tuple(("n", a.index) if type(a) is Sym else ("l", type(a), a) for a in args)
        node = self.table.get(key)
        if node is None:
            node = self.table[key] = Sym(self, op, tuple(args), len(self.nodes))
            self.nodes.append(node)
        return node


def _is_boolean(a):
    """Whether ``a`` is a truth value: a comparison, a logical operation or a bool literal."""
    if type(a) is Sym:
        return a.op in PREDICATES
    return isinstance(a, (bool, np.bool_))


# ``x op c`` or ``c op x`` that is ``x`` or ``-x``: (op, position of the literal c, c) -> whether it is ``-x``.
_IDENTITIES = {
    (np.add, 0, 0): False, (np.add, 1, 0): False, (np.subtract, 1, 0): False, (np.subtract, 0, 0): True,
    (np.multiply, 0, 1): False, (np.multiply, 1, 1): False, (np.multiply, 0, -1): True, (np.multiply, 1, -1): True,
    (np.divide, 1, 1): False,
}


def _simplify(graph, op, args):
    """Algebraic identities that keep derivative graphs small; NotImplemented if none applies."""
    if len(args) == 2:
        for position, literal in enumerate(args):
            if _is_literal(literal) and not isinstance(literal, (bool, np.bool_)):
                negated = _IDENTITIES.get((op, position, literal))
                if negated is not None:
                    other = args[1 - position]
                    return graph.apply(np.negative, (other,)) if negated else other
    if op is np.power and _is_literal(args[1]) and not isinstance(args[1], (complex, np.complexfloating)) \
            and float(args[1]).is_integer() and 0 < abs(args[1]) <= 16:
        return _integer_power(graph, args[0], int(args[1]))
    if op is np.negative and type(args[0]) is Sym and args[0].op is np.negative:
        return args[0].args[0]
    return NotImplemented


def _integer_power(graph, x, k):
    """``x**k`` as a product chain, so every lower power is shared; ``x**-k`` as ``(1/x)**k``, whose
    derivative at 0 is infinite as ``k * x**(k - 1)`` is (``1 / x**k``'s would be inf * 0 = nan)."""
    if k < 0:
        return _integer_power(graph, graph.apply(np.reciprocal, (x,)), -k)
    if k == 1:
        return x
    return graph.apply(np.multiply, (_integer_power(graph, x, k - 1), x))


def _is_one(a):
    return _is_literal(a) and not isinstance(a, (bool, np.bool_)) and a == 1


def derivatives(graph, output, active, seeds, unbounded_seeds=False):
    """Forward mode over the graph: ∂output/∂a for each active input node ``a``.

    ``seeds``: per active input, a one of its dtype (``np.float32(1)``), so tangents
    have the inputs' precision.  A selection's partial is boolean (``x >= y``); it
    is always multiplied by its tangent, so tangents are never boolean (adding two
    booleans would be OR).  Each result is a Sym, a literal, or 0 where the output
    does not depend on that input.  ``unbounded_seeds``: the seeds (a jvp's tangents) may be infinite or NaN.
    """
    tangents = {a.index: {slot: seed} for slot, (a, seed) in enumerate(zip(active, seeds))}
    zeroable = set()  # (node, slot): a tangent that a selection may have made exactly 0 somewhere
    # (node, slot): a tangent a singular partial may have made infinite or NaN (at a finite value)
    unbounded = {(a.index, slot) for slot, a in enumerate(active)} if unbounded_seeds else set()
    for node in list(graph.nodes):
        if node.op is None or node.op not in DERIVATIVES:
            continue
        partials = DERIVATIVES[node.op]
        total = {}
        for j, arg in enumerate(node.args):
            incoming = tangents.get(arg.index) if type(arg) is Sym else None
            if not incoming:
                continue
            if partials[j] is None:  # no derivative (jv's order, betainc's a): an error, never a NaN
                why = ARGUMENT_REASONS.get((node.op, j), "an index, axis, shape or integer argument")
                raise KernelError(
                    f"argument {j} of {qualified_name(node.op)} is not differentiable ({why}) but depends on a "
                    "differentiated argument of the kernel; pass a constant or db.cut(x)"
                )
            d = partials[j](node, *node.args) if callable(partials[j]) else partials[j]
            for slot, t in incoming.items():
                may_be_zero, infinite = (arg.index, slot) in zeroable, (arg.index, slot) in unbounded
                term = _chain_term(graph, node.op, d, t, may_be_zero, infinite)
                if may_be_zero or node.op in SELECTIONS:
                    zeroable.add((node.index, slot))
                if infinite or (type(d) is Sym and node.op not in SMOOTH and node.op not in SELECTIONS
                                and node.op not in OVERFLOWS_ONLY):
                    unbounded.add((node.index, slot))
                total[slot] = graph.apply(np.add, (total[slot], term)) if slot in total else term
        if total:
            tangents[node.index] = total
        if node is output:
            break
    if type(output) is not Sym:
        return [0] * len(active)
    found = tangents.get(output.index, {})
    return [found.get(slot, 0) for slot in range(len(active))]


def _chain_term(graph, op, d, t, may_be_zero, infinite):
    """``d · t``, the partial ``d`` of ``op`` times an incoming tangent ``t``, as `derivatives.chain_product`
    multiplies: selecting at a selection; strong (0 where a factor is 0 and the product NaN) at a singular function
    whose incoming tangent a selection may have made 0, and where a tangent a singular partial may have made
    infinite meets a partial that may be 0 (a data zero: ``sqrt(x) * c`` at c = 0); a plain product otherwise
    (no extra pass in a kernel where neither can happen: EAM's ``exp(-3 (r + 1))``)."""
    if _is_one(t) and not _is_boolean(d):
        return d
    if op in SELECTIONS:
        if _is_boolean(d):
            return graph.apply(np.where, (d, t, 0))
        return graph.apply(np.where, (graph.apply(np.equal, (d, 0)), 0, graph.multiply(d, t)))
    product = graph.multiply(d, t)
    zero = graph.apply(np.equal, (t, 0)) if may_be_zero and op not in SMOOTH else None
    if infinite and (type(d) is Sym or d == 0):
        d_zero = graph.apply(np.equal, (d, 0))
        zero = d_zero if zero is None else graph.apply(np.logical_or, (zero, d_zero))
    if zero is None:
        return product
    nan_from_zero = graph.apply(np.logical_and, (graph.apply(np.not_equal, (product, product)), zero))
    return graph.apply(np.where, (nan_from_zero, 0, product))


def holds_singular(nodes):
    """Whether one of ``nodes`` (a kernel's operations) is a singular function: one whose partial may be infinite
    or NaN (not in `SMOOTH`, not a selection), so that a cotangent 0 times the kernel's partial may be 0 · ∞."""
    return any(n.op in DERIVATIVES and n.op not in SMOOTH and n.op not in SELECTIONS for n in nodes)


def without_cuts(graph, outputs):
    """``outputs`` with every cut node replaced by its argument: once the derivatives are taken, a cut is
    the identity, and the kernel computes the value itself."""
    def uncut(a):
        return a.args[0] if type(a) is Sym and a.op is _cut else a

    for node in graph.nodes:
        node.args = tuple(uncut(a) for a in node.args)
    return [uncut(o) for o in outputs]


def trace(build_call, n_inputs):
    """Run ``build_call(symbols)`` on ``n_inputs`` symbolic inputs; return (graph, inputs, output)."""
    graph = Graph()
    inputs = [graph.input() for _ in range(n_inputs)]
    token = TRACING.set(graph)  # db.cut of a symbol then makes a cut node, in a gradient or not
    try:
        output = build_call(inputs)
    finally:
        TRACING.reset(token)
    if isinstance(output, np.ndarray) and output.ndim == 0:
        output = output[()]  # a constant computed by NumPy itself
    if isinstance(output, np.ndarray) or not (type(output) is Sym or _is_literal(output)):
        raise KernelError(
            f"the function given to db.broadcast/db.sum returned {type(output).__name__}; it must "
            "return one elementwise value built from its arguments with NumPy functions and operators"
        )
    return graph, inputs, output


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
