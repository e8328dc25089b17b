"""The backward part of a replayed program's source: `BackwardWriter` walks the steps last first and writes each
argument's cotangent term (from the `DERIVATIVES` table through `Src` for inline steps, else the vjp maker), and
`_Cotangents` decides, once, from the recorded order, how each term lands (assigned, added, added in place, added
now to a number known while writing, or a leaf's one kernel product written last, straight into ``out=``)."""


import math
import re

import numpy as np

from . import pullbacks
from .axis_sums import product_sums
from .broadcast_pullbacks import unscaled_kernel
from .derivatives import DERIVATIVES, SELECTIONS, SMOOTH, chain_product
from .expr import Src
from .numpy_facts import as_dtype, getitem
from .program import Const, KernelStep, SecondOrderStep, Step
from .pullbacks import (
    IndexPullback,
    RealPart,
    apply,
    kernel_pullback_source,
    strong_kernel_partial,
    table_pullback,
    table_pullback_source,
)
from .region_runners import CHOSEN_MIN, product_sums_runner
from .regions_epilogue import epilogue_adjoint_runner
from .registry import COMPLEX_RULES, OUTPUTS, PER_ARGUMENT, SAME_RULE, output_pullback
from .replay_forward import SourceWriter, along_short_last_axis, extreme_pullback_by_columns, inline_step
from .rules.linalg import DOT_PULLBACKS


def _gives_view(index):
    """Whether ``x[index]`` is a view of x for every array x it indexes (a slice, or a tuple of slices and
    integers with a slice among them): adding into it adds into x."""
    items = index if type(index) is tuple else (index,)
    return slice in map(type, items) and all(type(i) in (slice, int) for i in items)


class BackwardWriter(SourceWriter):
    """The backward code: per step, last first, the terms of its arguments' cotangents, each handed to
    `_Cotangents` (which decides how it is added); then the gradients returned or written into ``out``."""

    def __init__(self, program, space, fresh=(), floats=()):
        super().__init__(program, space)
        self.cotangents = _Cotangents(program, space, fresh)
        self.single = None  # after `lines`: the lines of `_one` for a program of one leaf (None: several)
        self.every = None  # ... and of a program of several, ending in ``return (<gradients>)``
        self.floats = floats  # the values that are Python floats in the backward code (`ForwardWriter.floats`)
        self.by_epilogue = {}  # (matrix product step, argument) -> its term, made by its epilogue's adjoint
        self.scalars = {s.outs[0] for s in program.steps  # ... and NumPy scalars (an expression's 0-d result)
                        if type(s) is Step and inline_step(s) and s.outs[0] is not None  # (None: a result not kept)
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
            if inline_step(step) and (not step.complex or COMPLEX_RULES.get(step.func) is SAME_RULE):
                lines += self.cotangents.accumulate(parent, _real_part(self.inline_adjoint(step, i, o), real))
            elif (step, i) in self.by_epilogue:  # made by its epilogue's adjoint (`epilogue_adjoint`)
                lines += self.cotangents.accumulate(parent, self.by_epilogue[step, i])
            elif dot is not None:
                other = Src(self.ref(step.refs[1 - i]), self.space)
                term = other.text if self.times_one(step, i, o) \
                    else self.product_term(step, i, o) or dot[i](other, Src(f"g{o}", self.space)).text
                lines += self.cotangents.accumulate(parent, _real_part(term, real))
            elif step.func is pullbacks.SCATTER_RECORDED and i == 0 and all(type(r) is Const for r in step.refs[1:]):
                gathered = f"g{o}[{self.ref(step.refs[1])}]"  # `scatter_vjp`'s gather, its scatter left unread
                lines += self.cotangents.accumulate(parent, _real_part(gathered, real))
            elif type(recorded) is IndexPullback and step.func is getitem and type(step.refs[1]) is Const:
                index = self.ref(step.refs[1])
                add = f"np.add.at(g{parent}, {index}, g{o})" if recorded.repeats \
                    else f"w = g{parent}[{index}]; w += g{o}" if _gives_view(step.refs[1].value) \
                    else f"g{parent}[{index}] += g{o}"  # (into a view: no copy of it back into itself)
                lines += self.cotangents.owned(parent) + [f"    {add}"]
            elif type(recorded) is IndexPullback:
                lines.append(f"    b = {self.maker(step, i, j, k, o)}")
                lines += self.cotangents.owned(parent) + [f"    b.add(g{parent}, g{o})"]
            elif along_short_last_axis(step, self.p) is not None:
                run, keepdims = self.space.bind(extreme_pullback_by_columns, "a"), step.kwargs.get("keepdims", False)
                lines += self.cotangents.accumulate(parent, f"{run}(v{o}, {self.ref(parent)}, {keepdims}, g{o})")
            elif real:  # as the tape applies it: `pullbacks.RealPart`
                maker = self.maker(step, i, j, k, o)
                lines += self.cotangents.accumulate(parent, f"{self.space.bind(RealPart, 'a')}({maker})(g{o})")
            else:
                maker = self.maker(step, i, j, k, o)
                lines += self.cotangents.accumulate(parent, f"{self.space.bind(apply, 'a')}({maker}, g{o})")
        return lines

    def product_term(self, step, i, o):
        """The term of matrix ``i`` of a matrix product ``a @ b`` with cotangent ``g<o>``, ``g @ b.T`` or ``a.T @ g``:
        an outer product where the sum runs over one element (``g @ w.T`` of the MLP's last layer, a (4096, 1) by
        (1, 128) product: 1 ms as a BLAS call, 0.4 as ``g * w.T``, and the same numbers), or through
        `region_runners.matmul_runner` where that may split it across the cores; else None."""
        a, b = (self.p.shape_of(r) for r in step.refs)
        if not self.real_matrices(step):
            return None
        other, g = self.ref(step.refs[1 - i]), f"g{o}"
        shapes, operands = (((a[0], b[1]), b[::-1]), (g, f"{other}.T")) if i == 0 \
            else ((a[::-1], (a[0], b[1])), (f"{other}.T", g))
        if shapes[0][1] == 1:
            return f"({operands[0]} * {operands[1]})"
        product = self.split_matmul(step, i, *shapes)
        return product and f"{product}({', '.join(operands)})"

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
        times their partials, each inner partial's times their second partials
        (`broadcast_pullbacks.run_second_order`)."""
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
        scales = (unscaled_kernel(step.kernel)[1] if step.reduce else None) or [1] * len(step.active)
        for slot, i in enumerate(step.active):
            parent = step.refs[i]
            shape = self.p.shape_of(parent)
            partial = f"p{step.out}[{slot}]"
            if step.kernel.singular:  # 0 where the cotangent is 0 and the partial not finite
                strong = self.space.bind(strong_kernel_partial)
                lines.append(f"    s{step.out}_{slot} = {strong}(g{step.out}, {partial})")
                partial = f"s{step.out}_{slot}"
            real = complex_value and self.p.meta[parent][1].kind != "c"  # a real parent's: the real part
            if shape and (shape == out_shape or step.reduce) and not real \
                    and self.cotangents.defer(parent, partial, step.out, scales[slot]):
                continue
            term = kernel_pullback_source(f"g{step.out}", partial, shape, out_shape, scales[slot])
            lines += self.cotangents.accumulate(parent, _real_part(term, real))
        return lines


    def axis_sum_adjoints(self, step, reduction):
        """The contributions of a region summed along axes (`axis_sums.AxisSum`): its cotangent broadcast back along
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
                sharers = [k for k, f in enumerate(firsts) if f == first]
                if first == slot:
                    targets = [shapes[k] for k in sharers]
                    sums = self.sums_apply(reduction, targets, scale)
                    epilogue = sums and self.epilogue_adjoint(step, reduction, first, sharers, targets, partial, g)
                    summed = None if epilogue or not sums else self.product_sums(step, reduction, first, targets)
                    source = epilogue or (f"{summed}({partial}, {g})" if summed
                                          else kernel_pullback_source(g, partial, shared, shared, scale))
                    lines.append(f"    q{step.out}_{first} = {source}")
                    by_product_sums = bool(epilogue) or summed is not None
                term = f"q{step.out}_{first}[{sharers.index(slot)}]" if by_product_sums \
                    else table_pullback_source(f"q{step.out}_{first}", 1, shape, np.broadcast_shapes(product, shared))
                term = term if sign > 0 else f"(-{term})"  # (negated once summed: the input's shape)
            else:
                term = kernel_pullback_source(g, partial, shape, product, scale)
            lines += self.cotangents.accumulate(step.refs[i], term)
        return lines

    @staticmethod
    def sums_apply(reduction, targets, scale):
        """Whether a shared partial's product with the cotangent and its sums to inputs of shapes ``targets`` may run
        in one pass (`axis_sums.product_sums`): not where the product is smaller than ``CHOSEN_MIN``, lacks some of
        the call's axes, or is scaled (a mean), or a sum is not one back to such an input (`pullbacks.unbroadcast`)."""
        shared = reduction.partial_shape(targets[0])
        return scale == 1 and len(shared) == len(reduction.shape) and math.prod(shared) >= CHOSEN_MIN \
            and all(np.broadcast_shapes(reduction.kept, reduction.partial_shape(t), shared) == shared
                    and len(t) <= len(shared) for t in targets)

    def product_sums(self, step, reduction, first, targets):
        """The bound name of `region_runners.product_sums_runner` for partial ``first`` of ``step``, shared by inputs
        of shapes ``targets`` (`sums_apply`): its product with the cotangent and their sums in one pass; None where
        it runs on one thread only, or a backend is forced."""
        runner = self.product_sums_runner(step, reduction, first, targets)
        return None if runner is None else self.space.bind(runner, "k")

    def product_sums_runner(self, step, reduction, first, targets):
        """`product_sums`' runner itself, made once for every plan (None where it has none)."""
        key = (step, "product sums", first)
        if key not in self.p.runners:
            self.p.runners[key] = product_sums_runner(reduction.partial_shape(targets[0]), reduction.kept, targets,
                                                      self.p.meta[step.out][1])
        return self.p.runners[key]


    def epilogue_adjoint(self, step, reduction, first, sharers, targets, partial, g):
        """The source of a call of `regions_epilogue.epilogue_adjoint_runner` on ``partial`` (``first`` of ``step``,
        shared by the inputs at slots ``sharers``, of shapes ``targets``) and the cotangent ``g``, where the region is a
        matrix product's epilogue whose product is among them (`product_sums` applies): the terms `product_sums` gives,
        then the product's adjoints, which the product's step then takes (``by_epilogue``); else None."""
        product = step.region.product
        if product is None or step.active.index(product.slot) not in sharers:
            return None
        key = (step, "epilogue adjoint", first)
        if key not in self.p.runners:
            self.p.runners[key] = self.epilogue_adjoint_runner(step, reduction, first, targets)
        runner = self.p.runners[key]
        if runner is None:
            return None
        for i in product.step.active:
            self.by_epilogue[product.step, i] = f"q{step.out}_{first}[{len(targets) + i}]"
        left, right = map(self.ref, product.step.refs)
        return f"{self.space.bind(runner, 'k')}({partial}, {g}, {left}, {right})"

    def epilogue_adjoint_runner(self, step, reduction, first, targets):
        """`epilogue_adjoint`'s runner, beside the steps it fuses as they run alone: `product_sums`' runner (or its
        blocks on one thread), then the product's adjoints' runners."""
        product = step.region.product
        dtype = self.p.meta[step.out][1]
        shared = reduction.partial_shape(targets[0])
        left, right = map(self.p.shape_of, product.step.refs)
        wanted = tuple(i in product.step.active for i in (0, 1))
        sums = self.product_sums_runner(step, reduction, first, targets) or product_sums(shared, targets, dtype, 1)
        multiply = [self.product(product.step, i, *shapes) or np.matmul
                    for i, shapes in enumerate(((shared, right[::-1]), (left[::-1], shared)))]

        def separate(p, g, a, b):
            terms = sums(p, g)  # (p times g in place: the product's cotangent)
            return terms + (multiply[0](p, b.T) if wanted[0] else None, multiply[1](a.T, p) if wanted[1] else None)

        return epilogue_adjoint_runner(shared, reduction.kept, targets, dtype, left, right, wanted, separate)


class Folded:
    """A cotangent term computed while generating the code: the same operation on the same numbers."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


_NEGATED = re.compile(r"\(-(g\d+)\)")  # a cotangent negated, as `pullbacks.table_pullback_source` writes it


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
        negated = _NEGATED.fullmatch(term)  # ``(-g3)`` subtracted: one array less, the same numbers (IEEE's
        sign, term = ("-", negated.group(1)) if negated else ("+", term)  # x + (-y) is x - y, bit for bit)
        if current == "owned":
            return lines + [f"    g{i} {sign}= {term}"]
        self.state[i] = "owned" if self.p.meta[i][0] else "shared"
        return lines + [f"    g{i} = g{i} {sign} {term}"]

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
        this call (an "owned" one too: made by this call to be added to), or a float leaf's (the call makes it a
        float), as it is; any other copied."""
        if i in self.p.float_leaves and isinstance(self.known.get(i), (int, float, np.floating)):
            return self.space.bind(float(self.known[i]))
        fresh = i in new or self.state.get(i) == "owned"
        return f"g{i}" if fresh or i in self.p.float_leaves else f"{self.space.bind(np.array)}(g{i})"

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


def _finite_nonzero(number):
    """Whether a cotangent known while generating is a finite nonzero number: its product with any partial is
    then `derivatives.strong_product`'s (which differs from IEEE's only for a zero factor)."""
    return number is not None and np.isscalar(number) and number != 0 and bool(np.isfinite(number))


def _is_number(r):
    """A constant the generated code may compute with while it is written: a number, not an array or
    a list, which is read on every call as the forward step reads it (changed in place, both see it)."""
    return type(r) is Const and isinstance(r.value, (int, float, np.generic))
