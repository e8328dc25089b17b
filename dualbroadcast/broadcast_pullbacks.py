"""The tape node of a `db.broadcast`/`db.sum` call in reverse mode: its pullbacks from the kernel's partials
(`tangent_on_tape`), the cotangent kernels deferred to the sweep where a partial is cheaper recomputed than
kept (`_deferred`), and the second-order kernels of a gradient of a gradient through a call (`run_second_order`)."""

import functools
import math
import operator
import threading
from typing import Any, NamedTuple

import numpy as np

from .derivatives import RECOMPUTED
from .expr import Graph, Sym, _is_boolean
from .forward import Dual
from .guards import Guarded, untracked
from .kernel_cache import CACHE_LOCK, CACHE_SIZE, CALL_LOG, KernelCall, cached_kernel
from .kernel_source import infer_dtypes, needed_nodes, scalar_nodes
from .kernels import Kernel, value_kind
from .numpy_facts import FLOAT_SCALARS, REAL_FLOATS, getitem
from .pullbacks import (
    FACTORS,
    Contracted,
    IndexPullback,
    Unbroadcast,
    finite_nonzero,
    fitting_kernel_pullback,
    kernel_product,
    kernel_pullback,
    unbroadcast,
)
from .sweeps import vector_elements
from .tracked import Tracked, edges_of


def unscaled_kernel(kernel):
    """``(kernel, scales)``: a sum's kernel whose partials are computed without their literal factors
    (`_literal_factor`), and per partial that factor (``scales`` None: no partial has one, the kernel as it
    is).  EAM's ``∂/∂x Σ exp(-3(x + 1))`` is ``-3 · r``: the kernel stores ``r``, the exp it sums, where it
    stored ``-3 · r`` in a pass of its own, and the pullback multiplies by ``ȳ · (-3)``, one number
    (`kernel_pullback`): the same passes as a hand-written gradient.  Only partials that remain an operation's
    result of their own are taken so (not an input, which a kernel copies; not shared)."""
    if kernel.unscaled is None:
        outputs = kernel.outputs
        factored = [_literal_factor(o.graph, o, ()) if type(o) is Sym else (o, 1) for o in outputs[1:]]
        factored = [(p, c) if c != 1 and type(p) is Sym and p.op is not None else (o, 1)
                    for o, (p, c) in zip(outputs[1:], factored)]
        unscaled = None
        if any(c != 1 for _, c in factored):
            graph = next(p.graph for p, c in factored if c != 1)
            unscaled = Kernel(graph, kernel.inputs, [outputs[0]] + [p for p, _ in factored], True, kernel.name,
                              kernel.complex)
            if unscaled.fresh != kernel.fresh:  # a partial now shared with another: copied, no pass saved
                unscaled = None
        kernel.unscaled = (kernel, None) if unscaled is None else (unscaled, [c for _, c in factored])
    return kernel.unscaled


def run_second_order(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, levels, backend, recorder=None):
    """``sum(f, ...)`` whose inputs two nested gradients track (``levels``, see `_two_levels`), in one fused pass
    (None where complex values take part: the caller runs ``f`` operation by operation)
    of second-order dual numbers: the value, a partial per input either gradient tracks and their second
    partials.  The outer tape records the value (pullbacks: the partials) and each partial of an inner input
    (pullbacks: the second partials), the inner tape the value with pullbacks ``g · partial``, those
    partials the outer tape's values: so the inner gradient's pullback is differentiable in one pass.  While a
    prepared program records the outer tape, ``recorder`` gets the step (`prepared.Recorder.second_order`)."""
    inner, outer, inner_positions, outer_parents = levels
    active = sorted(set(inner_positions) | set(outer_parents))
    key = (structure, tuple(kinds), ("second order", tuple(active)), True)
    kernel = cached_kernel(key, f, treedef, leaves, len(values), active, True, input_kinds, order=2)
    if kernel.complex or (recorder is not None and not outer_parents):
        return None  # complex values take part (their rules, operation by operation: `_evaluated`), or a constant
    shapes = {p: np.shape(values[p]) for p in active}
    scalars = not any(shapes.values())  # then so are their second partials: no broadcast shape needed
    outer_at = list(outer_parents)
    if outer_at and scalars and recorder is None:
        return _second_order_of_scalars(kernel, levels, active, inputs, values, input_kinds, backend)
    pairs = [(a, b) for i, a in enumerate(active) for b in active[i:]]
    shape = () if scalars else np.broadcast_shapes(*[np.shape(v) for v in values])
    pair_shapes = [() if shapes[a] == shapes[b] == () else shape for a, b in pairs]
    value, results, used, size = kernel(values, [shapes[p] for p in active] + pair_shapes, backend)
    partial = dict(zip(active, results))
    call = KernelCall(kernel.name, len(active), used, size, True, len(pairs))
    calls = CALL_LOG.get()
    if calls is not None:
        calls.append(call)
    if outer_at:
        value = outer.record(value, edges_of([outer_parents[p] for p in outer_at],
                                           [kernel_pullback(partial[p], shapes[p], (), False) for p in outer_at]), call)
    second = {}  # each partial its own value (a prepared program's recording replays them one by one)
    for (a, b), h in zip(pairs, results[len(active):]):
        second[a, b] = second[b, a] = h
    ds = []
    for p in inner_positions:
        d = partial[p]
        if outer_at:  # the partial as the outer tape's value: its pullbacks are the second partials
            d = outer.record(d, edges_of([outer_parents[q] for q in outer_at],
                                       [_second_partial_pullback(second[p, q], shapes[q], shapes[p])
                                        for q in outer_at]), call)
        ds.append(d)
    if recorder is not None:
        recorder.second_order(kernel, inputs, values, used, value, active, pairs, outer_at,
                              dict(zip(inner_positions, ds)), [shapes[p] for p in active] + pair_shapes)
    backs = [kernel_pullback(d, shapes[p], (), False) for p, d in zip(inner_positions, ds)]
    return inner.record(value, edges_of([inputs[p] for p in inner_positions], backs), call)


def _second_order_of_scalars(kernel, levels, active, inputs, values, kinds, backend):
    """`run_second_order` where every argument either gradient tracks is a scalar and the outer tape tracks one
    at least (not recorded by a prepared program): the kernel's results as one vector (`Kernel.partial_sums`),
    the inner partials one vector of the outer tape (`_scalar_partials`).  Arguments that are the elements
    ``c[0], c[1], ...`` of one vector (`sweeps.vector_elements`: coefficients) are reached along one edge into
    that vector, on either tape: a Hessian in k coefficients then sweeps two edges, not 2k."""
    inner, outer, inner_positions, outer_parents = levels
    value, results, used, size = kernel.partial_sums(values, backend, tuple(kinds))
    k = len(active)
    call = KernelCall(kernel.name, k, used, size, True, k * (k + 1) // 2)
    calls = CALL_LOG.get()
    if calls is not None:
        calls.append(call)
    dtype = results.dtype
    parents = list(outer_parents.values())
    columns = [active.index(q) for q in outer_parents]
    vector = _elements_of(parents, dtype)
    if vector is None:
        edges = edges_of(parents, [fitting_kernel_pullback(results[j], False) for j in columns])
    else:  # ∂f/∂v: the partials at the elements' places
        p, ks, n = vector
        dv = np.zeros(n, dtype)
        np.add.at(dv, ks, results[columns])
        edges = ((p, fitting_kernel_pullback(dv, False)),)
    value = outer.record(value, edges, call)
    arguments = [inputs[p] for p in inner_positions]
    stacked = _scalar_partials(outer, results, active, inner_positions, parents, columns, vector, call)
    inner_vector = _elements_of(arguments, dtype)
    if inner_vector is not None and inner_vector[1] == list(range(inner_vector[2])):  # c[0], ..., c[n-1] of c
        return inner.record(value, ((inner_vector[0], fitting_kernel_pullback(stacked, False)),), call)
    shape = stacked.value.shape  # its elements as `Tracked.__getitem__` records them, without a call each
    ds = [outer.record(d, ((stacked.index, IndexPullback(i, shape, dtype)),), getitem)
          for i, d in enumerate(stacked.value)]
    backs = [fitting_kernel_pullback(d, False) for d in ds]  # each d a scalar, as its argument
    return inner.record(value, edges_of(arguments, backs), call)


def _elements_of(values, dtype):
    """``(p, ks, n)`` where ``values`` are elements ``v[k]`` of one vector ``v`` of ``dtype`` (`vector_elements`)
    that are most of v, else None (a few of a long vector: an edge each, not a pullback of v's size per row)."""
    vector = vector_elements(values)
    if vector is None or vector[3] != dtype or vector[2] > 2 * len(values) + 8:
        return None
    return vector[:3]


def _scalar_partials(outer, results, active, inner_positions, parents, columns, vector, call):
    """The partials of the inner inputs of a second-order kernel of scalars (``results``: its partials of the
    ``active`` inputs, then their second partials, the upper triangle row by row) as one vector of the outer
    tape, whose pullback into each outer input ``parents[j]`` contracts the cotangent with that input's
    second partials (`Contracted`, column ``columns[j]`` of the Hessian); where those inputs are the elements
    ``v[k]`` of one vector (``vector``: ``(p, ks, n)``), into v at once.  A Hessian of k coefficients so
    sweeps one edge or k, not k²."""
    k = len(active)
    dtype = results.dtype
    hessian = np.empty((k, k), dtype)
    upper = _upper_triangle(k)
    hessian[upper] = hessian.T[upper] = results[k:]
    rows = [active.index(p) for p in inner_positions]
    partials = results[:k][rows]
    block = hessian[columns][:, rows]  # row j: the second partials of the outer input j (the Hessian is symmetric)
    if vector is None:
        return outer.record(partials, edges_of(parents, [Contracted(row) for row in block]), call)
    p, ks, n = vector
    into = np.zeros((len(rows), n), dtype)
    np.add.at(into.T, ks, block)  # (an element twice, c[0] and c[0]: both its columns)
    return outer.record(partials, ((p, Contracted(into)),), call)


@functools.cache
def _upper_triangle(k):
    """The indices of a k-by-k matrix's upper triangle, row by row (the order of a kernel's second partials)."""
    return np.triu_indices(k)


def tangent_on_tape(f, treedef, leaves, structure, kinds, input_kinds, inputs, values, active, reduce, backend):
    """``sum``/``broadcast`` of duals of a `jvp` whose values or tangents a gradient tracks (reverse over forward,
    as `db.hvp`), in one fused pass: the value ``y``, the tangent ``ẏ = Σ ∂f/∂dᵢ · tᵢ`` over the dual arguments,
    and per argument ``a`` the tape tracks ``∂y/∂a`` and ``∂ẏ/∂a`` (the second partials contracted with the
    tangents).  The tape records ``y`` and ``ẏ``: ``a``'s cotangent is ``ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` in one pass
    (`_tangent_pullback`), a tracked tangent ``tᵢ``'s is ``ẏ̄ · ∂f/∂dᵢ``.  A sum over full-size tracked
    arguments keeps no per-element partial: their cotangents come from a second kernel (`_Deferred`).  None
    where this kernel cannot serve (values of two tapes or levels, complex values): the caller runs ``f``
    operation by operation."""
    duals = [p for p in active if type(inputs[p]) is Dual]
    tracked = [p for p in active if type(inputs[p]) is Tracked or type(inputs[p].value) is Tracked]
    moving = [p for p in duals if type(inputs[p].tangent) is Tracked]  # tangents the tape tracks
    parents = [inputs[p].value if type(inputs[p]) is Dual else inputs[p] for p in tracked]
    tangent_parents = [inputs[p].tangent for p in moving]
    tape = (parents or tangent_parents)[0].tape
    if any(p.tape is not tape or type(p.value) is Tracked for p in parents + tangent_parents) or tape.closed \
            or len({inputs[p].level for p in duals}) > 1 \
            or any(isinstance(inputs[p].tangent, Guarded) for p in duals if p not in moving):
        return None
    tangents = [untracked(inputs[p].tangent) for p in duals]
    differentiated = tracked + [p for p in moving if p not in tracked]  # the partials ∂y/∂a the tape needs
    kinds = kinds + [value_kind(t) if type(t) is not float else np.dtype(np.float64) for t in tangents]
    key = (structure, tuple(kinds), tuple(duals), reduce, "tangent on tape", tuple(differentiated), len(tracked))
    input_kinds = input_kinds + kinds[-len(duals):]
    kernel = cached_kernel(key, f, treedef, leaves, len(values), duals, reduce, input_kinds,
                     tangents=len(duals), tracked=(differentiated, tracked))
    if kernel.complex or len(kernel.outputs) == 1:  # complex values, or no real value: operation by operation
        return None
    shapes = {p: np.shape(values[p]) for p in differentiated}
    values = values + tangents
    partial_shapes = [() if reduce else np.shape(values[0])] + [shapes[p] for p in differentiated + tracked]
    deferred = _deferred(kernel, key, input_kinds, values, shapes, tracked) if reduce and not moving else None
    if deferred is not None:
        value, results, used, size = deferred.forward(values, deferred.shapes(shapes), backend)
        if deferred.scale != 1:
            results[0] = results[0] * deferred.scale
    else:
        value, results, used, size = kernel(values, partial_shapes, backend)
    call = KernelCall(kernel.name, len(differentiated), used, size, reduce, len(tracked))
    calls = CALL_LOG.get()
    if calls is not None:
        calls.append(call)
    out_shape = () if reduce else np.shape(value)
    tangent = fitted_tangent(results[0], value)
    if deferred is not None:
        held = _HeldCotangent(_zero_cotangent(value))
        kept = results[1 + 2 * len(deferred.small):]
        every_partial = lambda: kernel(values, partial_shapes, backend)[1]  # noqa: E731 - if a sweep needs them
        small = dict(zip(deferred.small, zip(results[1:], results[1 + len(deferred.small):])))
        backs = [_tangent_pullback(held, *small[p], shapes[p], out_shape, tape.single_sweep, p == tracked[-1],
                                   kernel.singular)
                 if p in small else
                 _deferred_pullback(held, deferred, p, values, kept, every_partial, tape.single_sweep, p == tracked[-1],
                                    backend, kernel.singular)
                 for p in tracked]
        value = tape.record(value, edges_of(parents, backs), call)
        return Dual(value, tape.record(tangent, ((value.index, held.hold),), call), inputs[duals[0]].level)
    partial = dict(zip(differentiated, results[1:]))
    tangent_partial = dict(zip(tracked, results[1 + len(differentiated):]))
    edges = edges_of(tangent_parents, [kernel_pullback(partial[p], shapes[p], out_shape, False) for p in moving])
    if tracked:
        held = _HeldCotangent(_zero_cotangent(value))
        value = tape.record(value, edges_of(parents, [
            _tangent_pullback(held, partial[p], tangent_partial[p], shapes[p], out_shape, tape.single_sweep,
                              p == tracked[-1], kernel.singular) for p in tracked]), call)
        edges = ((value.index, held.hold),) + edges
    return Dual(value, tape.record(tangent, edges, call), inputs[duals[0]].level)


MAX_KEPT = 2  # full-size nodes a forward pass keeps for its cotangent kernels: the two partials it used to keep
DEFERRED_KERNELS = {}  # (kernel key, which inputs have the call's full size) -> its `_Deferred`, or None


class _Deferred(NamedTuple):
    """A reverse-over-forward `db.sum` whose tracked arguments include full-size ones (``full``): its forward
    kernel computes ``y``, ``ẏ``, the summed partials of the ``small`` tracked arguments and the ``kept`` nodes
    (full-size values its cotangent kernels read instead of recomputing them), but no per-element partial; a
    full-size argument's cotangent ``ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` is one pass of its cotangent kernel
    (``combines``), once the scalars ``ȳ``, ``ẏ̄`` are known.  EAM's hvp at N=1e6: one exp pass with two sums,
    then ``x̄`` from the kept ``exp`` and ``v`` in one pass written over the kept array."""

    forward: Kernel
    small: list
    kept: int
    combines: dict  # tracked position -> its cotangent kernels (inputs: the call's, ȳ, ẏ̄, the kept nodes), the
    # second without ȳ's term (for ȳ that is no cotangent: `_HeldCotangent.zero`, db.hvp's, where ∂y/∂a may be ∞)
    index: dict  # tracked position -> its place among the tracked (for the whole kernel's partials)
    scale: Any  # the tangent's literal factor, taken out of its sum (`_literal_factor`)

    def shapes(self, shapes):
        """The forward kernel's output shapes after the value: ``ẏ``, the small partials, the kept nodes."""
        full = shapes[next(iter(self.combines))]
        return [()] + [shapes[p] for p in self.small] * 2 + [full] * self.kept


def _deferred(kernel, key, kinds, values, shapes, tracked):
    """The `_Deferred` form of a reverse-over-forward kernel of a sum, or None if no tracked argument has the
    call's full size (the kernel's summed partials serve) or a partial of one is a constant."""
    shapes_of = [np.shape(v) for v in values]
    shape = shapes_of[0] if shapes_of.count(shapes_of[0]) == len(shapes_of) else np.broadcast_shapes(*shapes_of)
    size = math.prod(shape)
    if size <= 1 or not any(shapes[p] == shape for p in tracked):
        return None
    full = tuple(np.ndim(v) > 0 and np.size(v) == size for v in values)
    cache_key = (key, full, tuple(shapes[p] == shape for p in tracked))
    try:
        return DEFERRED_KERNELS[cache_key]
    except KeyError:
        pass
    deferred = _build_deferred(kernel, tracked, [p for p in tracked if shapes[p] == shape], full, kinds)
    with CACHE_LOCK:
        if len(DEFERRED_KERNELS) > CACHE_SIZE:
            DEFERRED_KERNELS.clear()
        DEFERRED_KERNELS[cache_key] = deferred
    return deferred


def _build_deferred(kernel, tracked, full_tracked, full, kinds):
    outputs, n = kernel.outputs, len(tracked)
    value, partials, tangent_partials = outputs[0], dict(zip(tracked, outputs[2:2 + n])), \
        dict(zip(tracked, outputs[2 + n:]))
    wanted = [partials[p] for p in full_tracked] + [tangent_partials[p] for p in full_tracked]
    if any(type(o) is not Sym for o in [value, outputs[1]] + wanted):
        return None
    small = [p for p in tracked if p not in full_tracked]
    dtypes = infer_dtypes(kernel, kinds)
    scalar = scalar_nodes(kernel, full)
    tangent, scale = _literal_factor(value.graph, outputs[1], scalar)
    first = [value, tangent] + [partials[p] for p in small] + [tangent_partials[p] for p in small]
    needed = {node.index for node in needed_nodes(value.graph, wanted)}
    kept = [node for node in needed_nodes(value.graph, first) if node.index in needed and node.index not in scalar
            and node.op not in RECOMPUTED and dtypes[node.index] == dtypes[value.index]]
    kept = kept if len(kept) <= MAX_KEPT else []
    forward = Kernel(value.graph, kernel.inputs, first + kept, True, kernel.name)
    combines = {p: (_cotangent_kernel(kernel.inputs, full, kept, partials[p], tangent_partials[p], kernel.name),
                    _cotangent_kernel(kernel.inputs, full, kept, None, tangent_partials[p], kernel.name))
                for p in full_tracked}
    return _Deferred(forward, small, len(kept), combines, {p: k for k, p in enumerate(tracked)}, scale)


def _literal_factor(graph, node, scalar):
    """``(p, c)`` with ``node = c · p``: ``c`` the product of its Python-number factors, ``p`` that of the rest,
    so that a sum is ``c · Σ p`` (EAM's tangent ``Σ r · (-3v)`` is ``-3 · Σ r · v``, one dot product per
    block); ``(node, 1)`` where it has no such factor or a node of no full-size input is a factor."""
    scalars, full = _product_factors(node, scalar)
    if not full or any(type(a) not in (int, float) for a in scalars) or len(scalars) == 0:
        return node, 1
    product = full[0]
    for a in full[1:]:
        product = graph.apply(np.multiply, (product, a))
    return product, math.prod(scalars)


def _cotangent_kernel(inputs, full, kept, d, dt, name):
    """The kernel of ``ȳ · d + ẏ̄ · dt`` (``d``, ``dt`` nodes of a traced graph; ``d`` None: of ``ẏ̄ · dt``
    alone), in a graph of its own whose inputs are the traced function's, then ``ȳ`` and ``ẏ̄``, then the
    ``kept`` nodes (read, not recomputed)."""
    graph = Graph()
    new = {x.index: graph.input() for x in inputs}
    g, gt = graph.input(), graph.input()
    new.update((node.index, graph.input()) for node in kept)
    partials = [dt] if d is None else [d, dt]
    for node in needed_nodes(dt.graph, partials):
        if node.index not in new:
            new[node.index] = graph.node(node.op, tuple(new[a.index] if type(a) is Sym else a for a in node.args))
    scalar = scalar_nodes(_Nodes(graph.nodes[:len(inputs) + 2 + len(kept)],
                                  needed_nodes(graph, [new[q.index] for q in partials])),
                           list(full) + [False, False] + [True] * len(kept))
    terms = [(gt, new[dt.index])] if d is None else [(g, new[d.index]), (gt, new[dt.index])]
    total = _factored(graph, terms, scalar)
    return Kernel(graph, graph.nodes[:len(inputs) + 2 + len(kept)], [total], False, f"{name} cotangent")


class _Nodes(NamedTuple):
    """What `scalar_nodes` reads of a kernel: its inputs and operations."""

    inputs: list
    order: list


def _factored(graph, terms, scalar):
    """``Σ c · p`` over ``terms`` (scalar ``c``, a node ``p``) with each product's factors regrouped: the
    scalars (``scalar``: nodes of no full-size input, literals) multiplied first, once per call, and the
    full-size factors common to every term taken out, so that EAM's ``ȳ · (-3r) + ẏ̄ · (-3v)(-3r)`` is
    ``r · (-3ȳ + 9ẏ̄ · v)``: three passes over the elements instead of six."""
    factors = [_product_factors(p, scalar) for _, p in terms]
    common = []
    for node in factors[0][1]:
        if all(any(f is node for f in full) for _, full in factors[1:]):
            common.append(node)
            for _, full in factors[1:]:
                full.pop(next(k for k, f in enumerate(full) if f is node))
    for node in common:
        factors[0][1].remove(node)
    total = 0
    for (c, _), (scalars, full) in zip(terms, factors):
        python = [a for a in scalars if type(a) in (int, float)]  # folded weakly, as NumPy types a literal
        term = graph.apply(np.multiply, (c, math.prod(python))) if python else c
        for a in [a for a in scalars if type(a) not in (int, float)] + full:
            term = graph.apply(np.multiply, (term, a))
        total = term if type(total) is int else graph.apply(np.add, (total, term))
    for node in common:
        total = graph.apply(np.multiply, (total, node))
    return total


def _product_factors(node, scalar):
    """``(scalar factors, full-size factors)`` of ``node`` read as a product through ``*`` and unary ``-``."""
    if type(node) is not Sym or node.index in scalar:
        return [node], []
    if node.op is np.multiply and not any(map(_is_boolean, node.args)):  # bool·bool is `and`
        (s0, f0), (s1, f1) = (_product_factors(a, scalar) for a in node.args)
        return s0 + s1, f0 + f1
    if node.op is np.negative:
        s, f = _product_factors(node.args[0], scalar)
        return s + [-1], f
    return [], [node]


def _deferred_pullback(held, deferred, p, values, kept, partials, in_place, last, backend, singular):
    """The pullback ``ȳ ↦ ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` into the full-size argument at ``p`` of a `_Deferred` kernel
    (``ẏ̄`` held by ``held``): scalar cotangents run its cotangent kernel on the call's ``values`` and the
    ``kept`` arrays, over the first kept array where ``in_place`` (the tape is swept once) and it is this
    kernel's alone; other cotangents (a sweep recorded on a tape), and a zero one of a ``singular`` kernel
    (`_products`), take the partials of the whole kernel (``partials()``, computed again)."""
    (combine, tangent_only), typed = deferred.combines[p], type(held.zero)  # ȳ, ẏ̄ in the value's dtype
    dtype = np.dtype(combine.value_dtype(values + [held.zero] * 2 + kept)) if kept else None
    over = kept[0] if in_place and kept and len(deferred.combines) == 1 and type(kept[0]) is np.ndarray \
        and kept[0].base is None and kept[0].flags.c_contiguous and kept[0].dtype == dtype \
        and not any(np.may_share_memory(kept[0], v) for v in values) else None  # the kernel's own array
    shape, k, n = np.shape(values[p]), deferred.index[p], len(deferred.index)

    def back(g):
        gt = held.take(last)
        times = _products(singular, g, gt, held.zero)
        if type(g) in REAL_FLOATS and type(gt) in REAL_FLOATS and times is operator.mul:
            kernel = tangent_only if g is held.zero else combine  # ȳ no cotangent: no 0 · ∞ from its term
            args = values + [typed(g), typed(gt)] + kept
            return kernel(args, [], backend)[0] if over is None else kernel.into(over, args, backend)
        results = partials()
        d, dt = results[1 + k], results[1 + n + k]
        ct = times(g, d) if gt is None else times(gt, dt) if g is held.zero else times(g, d) + times(gt, dt)
        if np.shape(ct) == shape:
            return ct
        return unbroadcast(np.broadcast_to(ct, np.broadcast_shapes(np.shape(ct), ())), shape)

    return back


class _HeldCotangent:
    """The cotangent ``ẏ̄`` of a reverse-over-forward kernel's tangent ``ẏ``, held for the pullbacks of its
    value ``y`` (`_tangent_pullback`), so that each argument's cotangent ``ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` is one
    pass.  ``ẏ`` is recorded after ``y`` with one edge into ``y``, `hold`, which keeps ``ẏ̄`` and gives ``y``
    a zero cotangent: the sweep, which goes from the last record down, reaches ``y`` after ``ẏ`` and always
    when ``ẏ`` had a cotangent.  Per thread: two threads may sweep one tape."""

    __slots__ = ("local", "zero")

    def __init__(self, zero):
        self.local = threading.local()
        self.zero = zero

    def hold(self, g):
        self.local.g = g
        return self.zero

    def take(self, last):
        """``ẏ̄`` of this sweep (None if ``ẏ`` had none), forgotten by the last pullback of ``y``."""
        g = getattr(self.local, "g", None)
        if last:
            self.local.g = None
        return g


def _zero_cotangent(value):
    """A zero of ``value``'s shape and dtype, what `_HeldCotangent.hold` gives ``y`` (a pullback's cotangent has its
    argument's shape: a sweep adds into it at a view's index); an array's a read-only broadcast, no allocation."""
    if type(value) in FLOAT_SCALARS:
        return type(value)(0)
    zero = np.result_type(value).type(0)
    return zero if np.ndim(value) == 0 else np.broadcast_to(zero, np.shape(value))


def _tangent_pullback(held, d, dt, shape, out_shape, in_place, last, singular):
    """The pullback ``ȳ ↦ ȳ · ∂y/∂a + ẏ̄ · ∂ẏ/∂a`` (``d``, ``dt``) of a reverse-over-forward kernel into its
    argument ``a`` of ``shape`` (``ẏ̄`` held by ``held``, forgotten by the ``last`` argument's); ``in_place``: the
    partials are the kernel's own buffers and the tape is swept once, so the cotangent is computed into ``d``
    without allocating (three NumPy passes: one numexpr pass or a loop over blocks measured no faster on two
    loaded cores).  The products are `_products`' (strong for a ``singular`` kernel's zero cotangent).  A
    closure, so that `explain` counts the partials it keeps."""
    owned = in_place and type(d) is np.ndarray and type(dt) is np.ndarray and d.shape == dt.shape == shape \
        and d.base is None and dt.base is None and d is not dt and out_shape == ()  # the kernel's own buffers

    def back(g):
        gt = held.take(last)
        alone = g is held.zero and gt is not None  # ȳ is no cotangent (db.hvp's): no 0 · ∞ from its term
        times = _products(singular, g, gt, held.zero)
        if owned and type(g) in REAL_FLOATS and type(gt) in REAL_FLOATS and times is operator.mul:
            np.multiply(dt, gt, out=dt)
            return dt if alone else np.add(np.multiply(d, g, out=d), dt, out=d)
        ct = times(gt, dt) if alone else times(g, d) if gt is None else times(g, d) + times(gt, dt)
        if np.shape(ct) == shape:
            return ct
        return unbroadcast(np.broadcast_to(ct, np.broadcast_shapes(np.shape(ct), out_shape)), shape)

    return back


def _products(singular, g, gt, zero):
    """How a reverse-over-forward kernel's pullback multiplies its cotangents ``g`` and ``gt`` (None: none; ``g``
    ``zero``: not one) by its partials: IEEE's product, or for a ``singular`` kernel where a cotangent is not one
    finite nonzero number, `pullbacks.kernel_product` (0 where it is 0 and the partial is not finite: a guard
    written after the kernel, as a first-order kernel's `pullbacks.kernel_pullback`)."""
    if not singular or ((g is zero or finite_nonzero(g)) and (gt is None or finite_nonzero(gt))):
        return operator.mul
    return kernel_product


def _second_partial_pullback(h, shape, partial_shape):
    """The pullback, into an argument of ``shape``, of a partial of ``partial_shape`` whose derivative in it is
    ``h``: ``h`` itself, a factor the sweep multiplies by, where ``g · h`` has the argument's shape (a Hessian
    of k coefficients: k² of them per sweep), else ``g · h`` summed back to the argument's shape."""
    if type(h) in FACTORS and np.shape(h) == shape and partial_shape in ((), shape):
        return h
    return Unbroadcast(h, shape)


def fitted_tangent(tangent, value):
    """The kernel's tangent output with the value's shape and dtype (a literal one broadcast)."""
    if type(tangent) is type(value) and (type(value) is not np.ndarray or tangent.shape == value.shape) \
            and tangent.dtype == value.dtype:
        return tangent  # of the value's shape and dtype: an array, or a NumPy scalar of a sum
    dtype = np.result_type(value)
    t = np.broadcast_to(np.asarray(tangent, dtype), np.shape(value))
    return t.copy() if isinstance(value, np.ndarray) else t[()]
