"""Layer 3: a traced expression graph compiled to fused kernels, on the fastest backend.

A `Kernel` computes one broadcast's value and its partials (one per active
input) in one pass, on one of three backends:

- ``numpy``: whole arrays, generated straight-line NumPy code (best for small arrays);
- ``blocked``: the same code over cache-sized blocks, every operation ``out=`` into
  scratch buffers that stay in cache (no page faults, no memory traffic for temporaries);
- ``numexpr``: one fused numexpr expression per output (best on arithmetic-heavy
  kernels; its exp/sin are slower than NumPy's here, as it lacks VML).

The choice is made per kernel and per size (powers of two) by timing the
eligible backends on the first call of that size, or forced with `set_backend`
or ``backend=``.  Generated code only contains names the library made.
"""

import concurrent.futures
import contextvars
import functools
import math
import operator
import os
import re
import time

import numexpr
import numpy as np

from .expr import Sym
from .numpy_facts import COMPARISONS, INFIX, OPERATOR_FUNCTIONS, source_of
from .pullbacks import unbroadcast

BACKENDS = ("numpy", "blocked", "numexpr")
BLOCK = 16384  # elements per block: a few scratch buffers of this size stay in L2
NUMEXPR_BLOCK = 262144  # numexpr's own threads want larger blocks
THREADS = os.cpu_count() or 1
FORCED_BACKEND = contextvars.ContextVar("dualbroadcast_backend", default=None)

_NUMEXPR_NAMES = {**INFIX, **COMPARISONS, np.logical_and: "&", np.logical_or: "|"}
_NUMEXPR_FUNCTIONS = {
    np.absolute: "abs", np.negative: "-", np.logical_not: "~", np.where: "where",
    **{f: f.__name__ for f in (
        np.exp, np.expm1, np.log, np.log1p, np.log10, np.log2, np.sqrt, np.sin, np.cos, np.tan,
        np.arcsin, np.arccos, np.arctan, np.arctan2, np.sinh, np.cosh, np.tanh, np.arcsinh,
        np.arccosh, np.arctanh, np.hypot, np.maximum, np.minimum, np.floor, np.ceil, np.sign,
        np.isnan, np.isfinite, np.isinf, np.fmod, np.trunc,
    )},
}


def set_backend(name: str | None) -> None:
    """Force every kernel onto backend ``name`` ("numpy", "blocked", "numexpr"), or None for automatic.

    The choice holds in the calling thread (a context variable); ``backend=`` on a call overrides it."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS} or None")
    FORCED_BACKEND.set(name)


class Kernel:
    """Value and partials of one traced function; ``reduce`` sums them (``db.sum``)."""

    def __init__(self, graph, inputs, outputs, reduce, name):
        self.inputs = inputs
        self.outputs = outputs  # [value, ∂value/∂active_0, ...]: Syms or literals
        self.reduce = reduce
        self.name = name
        self.order = _needed(graph, outputs)
        self.names, self.constants = _names(inputs, self.order, outputs)
        self.whole = _compile(_numpy_source(self), self.constants)
        self.fresh = _fresh_partials(outputs, reduce)
        self.numexpr_sources = _numexpr_sources(self)
        self.blocked = {}  # (input kinds, full-size inputs, stored outputs) -> compiled blocked kernel
        self.dtypes = {}  # input kinds -> dtype of the value
        self.typed = {}  # input dtypes -> whole-array kernel with typed literals (`typed_whole`)
        self.choice = {}  # size bucket (bit length of the size) -> backend measured fastest

    def __call__(self, values, active_shapes, backend=None):
        """Return ``(value, partials, backend, size)``; partials reduced to ``active_shapes`` if reducing."""
        shapes = [getattr(v, "shape", ()) for v in values]
        shape = shapes[0] if shapes and shapes.count(shapes[0]) == len(shapes) else np.broadcast_shapes(*shapes)
        size = math.prod(shape)
        backend = backend or FORCED_BACKEND.get() or self.choice.get(size.bit_length())
        if backend is None:
            candidates = self._candidates(values, size)
            if len(candidates) > 1:
                return self._measure(candidates, values, shape, size, active_shapes) + (size,)
            backend = self.choice[size.bit_length()] = "numpy"
        elif backend != "numpy" and backend not in self._candidates(values, size):
            backend = "numpy"  # not eligible for these shapes (or numexpr lacks an operation)
        return self.run(backend, values, shape, size, active_shapes) + (backend, size)

    def _candidates(self, values, size):
        found = ["numpy"]
        if size >= 2 * BLOCK and all(np.size(v) in (1, size) for v in values):
            found.append("blocked")
        if self.numexpr_sources is not None and size >= 1024:
            found.append("numexpr")
        return found

    def _measure(self, candidates, values, shape, size, active_shapes):
        """Time each candidate on this call's data (best of three: one slow run must not decide)
        and keep the fastest for this size."""
        timings = {}
        for backend in candidates:
            best = math.inf
            for _ in range(3):
                start = time.perf_counter()
                result = self.run(backend, values, shape, size, active_shapes)
                best = min(best, time.perf_counter() - start)
            timings[backend] = (best, result)
        winner = min(timings, key=lambda b: timings[b][0])
        self.choice[size.bit_length()] = winner
        return timings[winner][1] + (winner,)

    def run(self, backend, values, shape, size, active_shapes):
        """``(value, partials)`` on a given backend, for inputs whose broadcast shape is known.

        Every backend gives the dtypes NumPy's own evaluation would (numexpr computes
        float32 scalars in float64; a literal partial is in the value's dtype).
        """
        if backend == "numpy":
            value, partials = self._finish(self.whole(*values), shape, active_shapes)
        elif backend == "blocked":
            value, partials = self._run_blocked(values, shape, size, active_shapes)
        else:
            value, partials = self._run_numexpr(values, shape, size, active_shapes)
        dtype = self.value_dtype(values)
        if value.dtype != dtype:
            value = value.astype(dtype)
        return value, [p if getattr(p, "dtype", None) == dtype else np.asarray(p, dtype) for p in partials]

    def typed_whole(self, kinds):
        """The whole-array kernel for inputs of ``kinds`` (dtypes), its literals typed to match."""
        whole = self.typed.get(kinds)
        if whole is None:
            namespace = dict(self.constants)
            whole = self.typed[kinds] = _compile(_typed_numpy_source(self, kinds, namespace), namespace)
        return whole

    def value_dtype(self, values):
        """The dtype NumPy gives the value for inputs like ``values`` (its partials share it)."""
        return self.dtype_for(tuple(_kind(v) for v in values))

    def dtype_for(self, kinds):
        """The value's dtype for inputs of ``kinds`` (per input a dtype, or ``float`` for a Python float)."""
        dtype = self.dtypes.get(kinds)
        if dtype is None:
            output = self.outputs[0]
            dtype = self.dtypes[kinds] = (
                _infer_dtypes(self, kinds)[output.index] if type(output) is Sym else np.result_type(output)
            )
        return dtype

    def _finish(self, results, shape, active_shapes):
        """Whole-array results to the call's shapes: full value, partials as the pullback needs.

        Partials are returned as fresh arrays that nothing else holds (not an input,
        not the value), so a pullback may overwrite them.
        """
        value, partials = results[0], results[1:]
        if self.reduce:
            value = np.add.reduce(value if np.shape(value) == shape else np.broadcast_to(value, shape), axis=None)
            return value, [_reduce_to(p, shape, s, fresh) for p, s, fresh in zip(partials, active_shapes, self.fresh)]
        if np.shape(value) != shape or not isinstance(value, np.ndarray):
            value = np.array(np.broadcast_to(value, shape))
        return value, [p if fresh else np.array(p) for p, fresh in zip(partials, self.fresh)]

    # --- blocked NumPy --------------------------------------------------------
    def _run_blocked(self, values, shape, size, active_shapes):
        return self.blocked_runner(values, shape, size, active_shapes, owned=False)(*values)

    def blocked_runner(self, values, shape, size, active_shapes, owned=True):
        """A function of the input values running the blocked kernel for these shapes and dtypes.

        ``owned``: its output and scratch buffers are allocated once and reused by every
        call (a prepared program's zero-allocation replay); else fresh ones per call.
        A call that fits one block runs a kernel without a loop (see `_compile_single_block`).
        """
        full = tuple(np.ndim(v) > 0 and np.size(v) == size for v in values)
        stored = (not self.reduce,) + tuple(
            not self.reduce or (size > 1 and math.prod(s) == size) for s in active_shapes
        )
        signature = (tuple(_kind(v) for v in values), full, stored)
        if size <= BLOCK:
            return self._single_block_runner(signature, shape, active_shapes, owned)
        compiled = self.blocked.get(signature)
        if compiled is None:
            compiled = self.blocked[signature] = _compile_blocked(self, *signature)
        run, out_dtypes, scratch_dtypes = compiled
        shapes = [()] + list(active_shapes) if self.reduce else [shape] * len(stored)
        block = min(BLOCK, size)
        chunks = _chunks(size)

        def buffers():
            outs = [np.empty(s, d) for s, d, keep in zip(shapes, out_dtypes, stored) if keep]
            scratch = [[np.empty(block, d) for d in scratch_dtypes] for _ in range(len(chunks) - 1)]
            return outs, [o.reshape(-1) for o in outs], scratch

        kept = buffers() if owned else None

        def execute(*values):
            outs, flat_outs, scratch = kept or buffers()
            args = [np.ravel(v) if f else (v if type(v) is float else np.reshape(v, ())) for v, f in zip(values, full)]
            sums = iter(_in_threads(run, chunks, block, args + flat_outs, scratch))
            stores = iter(outs)
            results = [next(stores) if keep else np.reshape(next(sums), s) for s, keep in zip(shapes, stored)]
            return results[0][()] if self.reduce else results[0], results[1:]

        return execute

    def _single_block_runner(self, signature, shape, active_shapes, owned):
        """The one-block kernel bound to its buffers: ``kernel(*values) -> (value, partials)``.

        Buffers have the call's shape, so inputs enter as they are (no ravel, no reshape).
        """
        key = ("single",) + signature
        compiled = self.blocked.get(key)
        if compiled is None:
            compiled = self.blocked[key] = _compile_single_block(self, *signature)
        make, out_dtypes, scratch = compiled
        stored = signature[2]

        def bind():
            env = {"SHAPE": shape}
            partials = []
            for k, keep in enumerate(stored):
                target = active_shapes[k - 1] if self.reduce and k else shape
                if keep:
                    env[f"r{k}"] = result = np.empty(target, out_dtypes[k])
                    env[f"o{k}"] = result.reshape(shape)
                else:
                    env[f"s{k}"] = result = target
                if k:
                    partials.append(result)
            env["P"] = partials  # returned as is when every partial is stored
            env.update((name, np.empty(shape, dtype)) for name, dtype in scratch)
            return make(**env)

        if owned:
            return bind()
        return lambda *values: bind()(*values)

    # --- numexpr -----------------------------------------------------------------
    def _run_numexpr(self, values, shape, size, active_shapes):
        local = dict(zip(self.names_of_inputs(), values))
        dtype = np.result_type(*values) if values else np.float64
        for name, constant in self.constants.items():
            local[name] = dtype.type(constant) if isinstance(constant, float) else constant
        if not self.reduce:
            outs = [_evaluate(src, local, shape) for src in self.numexpr_sources]
            return outs[0], outs[1:]
        if not all(np.size(v) in (1, size) for v in values):
            results = [_evaluate(src, local, shape) for src in self.numexpr_sources]
            return self._finish(results, shape, active_shapes)
        return _reduce_numexpr_blocked(self.numexpr_sources, local, values, size, active_shapes)

    def names_of_inputs(self):
        return [self.names[x.index] for x in self.inputs]


def _chunks(size):
    """Bounds of the contiguous chunks a blocked kernel runs in parallel, one per core."""
    chunks = min(THREADS, size // (4 * BLOCK)) or 1
    return [size * c // chunks for c in range(chunks + 1)]


def _in_threads(run, bounds, block, args, scratch):
    """Run a blocked kernel over its chunks on the pool's threads (NumPy releases the GIL)."""
    if len(bounds) == 2:
        return run(0, bounds[1], block, *args, *scratch[0])
    futures = [
        _pool().submit(run, bounds[c], bounds[c + 1], block, *args, *scratch[c]) for c in range(1, len(bounds) - 1)
    ]
    results = [run(0, bounds[1], block, *args, *scratch[0])] + [f.result() for f in futures]
    return tuple(functools.reduce(operator.add, sums) for sums in zip(*results))


@functools.cache
def _pool():
    return concurrent.futures.ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="dualbroadcast")


def _evaluate(source, local, shape):
    result = numexpr.evaluate(source, local_dict=local)
    return np.array(np.broadcast_to(result, shape)) if result.shape != shape else result


def _reduce_numexpr_blocked(sources, local, values, size, active_shapes):
    """Sum each output over blocks, never materialising more than a block."""
    full = [k for k, v in local.items() if np.size(v) == size and np.ndim(v) > 0]
    flat = {k: np.ravel(local[k]) for k in full}
    local = {k: np.reshape(v, ()) if np.size(v) == 1 and np.ndim(v) > 0 else v for k, v in local.items()}
    # ^ blocks are flat: a (1, 1) constant would broadcast them to (1, block)
    reads_full = [bool(set(re.findall(r"\bi\d+\b", source)) & set(full)) for source in sources]
    totals = [0.0] * len(sources)
    partials_full = {}
    for s, shape in enumerate(active_shapes, start=1):
        if math.prod(shape) == size and size > 1:
            partials_full[s] = np.empty(size, np.result_type(*values))
    for lo in range(0, size, NUMEXPR_BLOCK):
        hi = min(lo + NUMEXPR_BLOCK, size)
        block = dict(local)
        for k in full:
            block[k] = flat[k][lo:hi]
        for s, source in enumerate(sources):
            if s in partials_full and reads_full[s]:
                numexpr.evaluate(source, local_dict=block, out=partials_full[s][lo:hi])
            elif s in partials_full:  # a constant partial (x + c): numexpr gives one number
                partials_full[s][lo:hi] = numexpr.evaluate(source, local_dict=block)
            else:
                part = numexpr.evaluate(source, local_dict=block)
                totals[s] += np.sum(part) * ((hi - lo) // max(part.size, 1))
    value = np.result_type(*values).type(totals[0])
    partials = []
    for s, shape in enumerate(active_shapes, start=1):
        if s in partials_full:
            partials.append(partials_full[s].reshape(shape))
        else:
            partials.append(np.reshape(np.result_type(*values).type(totals[s]), shape))
    return value, partials


def _reduce_to(p, shape, target, fresh):
    """A partial summed over the axes its argument (of shape ``target``) was broadcast along."""
    if np.shape(p) == shape == target:
        return p if fresh else np.array(p)
    return np.array(unbroadcast(np.broadcast_to(p, shape), target))


def _fresh_partials(outputs, reduce):
    """Per partial: whether the whole-array kernel computes it as an array of its own.

    Inputs, literals and nodes returned twice are shared; but a summed value is
    dropped once summed, so ``exp``'s partial (its value) is its own under ``db.sum``.
    """
    seen = set()
    fresh = []
    for k, o in enumerate(outputs):
        own = type(o) is Sym and o.op is not None and o.index not in seen
        if type(o) is Sym and (k or not reduce):
            seen.add(o.index)
        if k:
            fresh.append(own)
    return fresh


# --- code generation -----------------------------------------------------------
def _needed(graph, outputs):
    """Non-input nodes the outputs depend on, in topological order."""
    keep = set()
    stack = [o for o in outputs if type(o) is Sym]
    while stack:
        node = stack.pop()
        if node.index in keep:
            continue
        keep.add(node.index)
        stack.extend(a for a in node.args if type(a) is Sym)
    return [n for n in graph.nodes if n.index in keep and n.op is not None]


def _names(inputs, order, outputs):
    """Library-made names: i<k> inputs, t<k> intermediates, c<k> literal constants."""
    names = {x.index: f"i{k}" for k, x in enumerate(inputs)}
    names.update({n.index: f"t{n.index}" for n in order})
    constants = {}
    literals = [a for n in order for a in n.args if type(a) is not Sym] + [o for o in outputs if type(o) is not Sym]
    for lit in literals:
        key = ("c", type(lit), lit)
        if key not in names:
            names[key] = f"c{len(constants)}"
            constants[names[key]] = lit
    return names, constants


def _ref(names, a):
    return names[a.index] if type(a) is Sym else names[("c", type(a), a)]


def _compile(source, namespace):
    env = dict(namespace)
    env["np"] = np
    exec(compile(source, "<dualbroadcast kernel>", "exec"), env)
    return env["kernel"]


def _numpy_source(kernel):
    names = kernel.names
    lines = [f"def kernel({', '.join(kernel.names_of_inputs())}):"]
    for node in kernel.order:
        lines.append(f"    {names[node.index]} = {_call_source(names, node)}")
    lines.append("    return " + ", ".join(_ref(names, o) for o in kernel.outputs) + ",")
    return "\n".join(lines)


def _typed_numpy_source(kernel, kinds, namespace):
    """`_numpy_source` with each weak literal (``x + 1``) a 0-d array of the dtype NumPy casts it
    to for inputs of ``kinds``: a ufunc converts a Python scalar ~0.3 us slower."""
    node_dtypes = _infer_dtypes(kernel, kinds)
    names = kernel.names
    lines = [f"def kernel({', '.join(kernel.names_of_inputs())}):"]
    for node in kernel.order:
        operands = {np.dtype(node_dtypes[a.index]) for a in node.args if type(a) is Sym}
        refs = []
        for a in node.args:
            typed = None if type(a) is Sym or node.op is np.where else _typed_literal(a, operands)
            refs.append(_ref(names, a) if typed is None else f"{_ref(names, a)}_{typed.dtype.char}")
            if typed is not None:
                namespace[refs[-1]] = typed
        lines.append(f"    {names[node.index]} = {_op_source(node.op, refs)}")
    lines.append("    return " + ", ".join(_ref(names, o) for o in kernel.outputs) + ",")
    return "\n".join(lines)


def _call_source(names, node, ref=_ref):
    """``op(*args)`` as source: a Python operator for arithmetic, else the NumPy function."""
    return _op_source(node.op, [ref(names, a) for a in node.args])


def _op_source(op, args):
    """``op(*args)`` as source, ``args`` given as source text."""
    return source_of(op, args) or f"np.{op.__name__}({', '.join(args)})"


def _compile_blocked(kernel, kinds, full, stored):
    """Generate the blocked, in-place kernel; return it, its outputs' and its scratch buffers' dtypes.

    ``kinds``: per input a dtype, or ``float`` for a (weakly typed) Python float;
    ``full``: per input, whether it has the call's full size (else it is one element);
    ``stored``: per output, whether it is written out in full (else summed).
    """
    names = kernel.names
    node_dtypes = _infer_dtypes(kernel, kinds)
    out_dtypes = _out_dtypes(kernel, node_dtypes)
    inputs = kernel.names_of_inputs()
    stores = [f"o{k}" for k, keep in enumerate(stored) if keep]
    hoisted = _scalar_nodes(kernel, full)
    buffers = _assign_buffers(kernel, node_dtypes, hoisted)
    scratch = sorted(set(buffers.values()))
    namespace = dict(kernel.constants)
    parameters = ["start", "stop", "B"] + inputs + stores + [f"{buf}_all" for buf, _ in scratch]
    lines = [f"def kernel({', '.join(parameters)}):"]
    for k, keep in enumerate(stored):
        if not keep:
            lines.append(f"    s{k} = np.dtype('{np.dtype(out_dtypes[k]).str}').type(0)")
    for node in kernel.order:
        if node.index in hoisted:  # depends on no full-size input: computed once, as Python would
            lines.append(f"    {names[node.index]} = {_call_source(names, node)}")
    lines.append("    for lo in range(start, stop, B):")
    lines.append("        hi = min(lo + B, stop)")
    lines.append("        m = hi - lo")
    for name, is_full in zip(inputs, full):
        lines.append(f"        b{name} = {name}[lo:hi]" if is_full else f"        b{name} = {name}")
    for node in kernel.order:
        if node.index in hoisted:
            continue
        buf = buffers[node.index][0]
        lines.append(f"        {buf} = {buf}_all[:m]")
        refs = _operand_refs(kernel, node, "b", buffers, kinds, node_dtypes, namespace)
        lines.append("        " + _in_place_source(node.op, refs, buf, namespace))
    for k, (o, keep) in enumerate(zip(kernel.outputs, stored)):
        ref = _block_ref(names, buffers, o, "b")
        if keep:
            lines.append(f"        o{k}[lo:hi] = {ref}")
        elif type(o) is Sym and o.index in buffers:
            lines.append(f"        s{k} += np.add.reduce({ref})")
        else:
            lines.append(f"        s{k} += np.add.reduce(np.broadcast_to({ref}, (m,)))")
    sums = [f"s{k}" for k, keep in enumerate(stored) if not keep]
    lines.append("    return (" + "".join(f"{s}, " for s in sums) + ")")
    return _compile("\n".join(lines), namespace), out_dtypes, [np.dtype(d) for _, d in scratch]


def _compile_single_block(kernel, kinds, full, stored):
    """Generate the blocked kernel for a call that fits one block and one chunk.

    The same operations as `_compile_blocked`, once over whole buffers of the call's
    shape: no loop and no slices, ``out`` given positionally, a stored output written
    by the operation that computes it (no copy).  Returns ``make(**buffers) -> kernel``
    (the buffers are closure cells: ``SHAPE``, ``P``, ``o<k>``/``r<k>`` the stored
    outputs in the call's and the returned shape, ``s<k>`` a summed partial's shape,
    the scratch ``w<k>``), the outputs' dtypes and the scratch buffers' names and dtypes.
    """
    names = kernel.names
    node_dtypes = _infer_dtypes(kernel, kinds)
    out_dtypes = _out_dtypes(kernel, node_dtypes)
    hoisted = _scalar_nodes(kernel, full)
    owners = {}
    for k, (o, keep) in enumerate(zip(kernel.outputs, stored)):
        if keep and type(o) is Sym and o.op is not None and o.index not in hoisted and o.index not in owners:
            owners[o.index] = f"o{k}"
    buffers = _assign_buffers(kernel, node_dtypes, hoisted, owners)
    scratch = sorted(b for b in set(buffers.values()) if b[0] not in owners.values())
    namespace = dict(kernel.constants)
    cells = ["SHAPE", "P"] + [f"{p}{k}" for k, keep in enumerate(stored) for p in (("o", "r") if keep else ("s",))]
    lines = [f"def make({', '.join(cells + [buf for buf, _ in scratch])}):"]
    lines.append(f"    def kernel({', '.join(kernel.names_of_inputs())}):")
    for node in kernel.order:
        if node.index in hoisted:
            lines.append(f"        {names[node.index]} = {_call_source(names, node)}")
        else:
            refs = _operand_refs(kernel, node, "", buffers, kinds, node_dtypes, namespace)
            lines.append("        " + _in_place_source(node.op, refs, buffers[node.index][0], namespace))
    results = []
    for k, (o, keep) in enumerate(zip(kernel.outputs, stored)):
        ref = _block_ref(names, buffers, o, "")
        if keep:
            if ref != f"o{k}":
                lines.append(f"        o{k}[...] = {ref}")
            results.append(f"r{k}")
        elif type(o) is Sym and o.index in buffers:
            results.append(f"add_reduce({ref}, None)")
        else:  # a literal, input or hoisted node: summed as often as the call has elements
            namespace[f"z{k}"] = np.dtype(out_dtypes[k]).type(0)
            results.append(f"z{k} + add_reduce(np.broadcast_to({ref}, SHAPE), None)")
        if not keep and k:
            results[k] = f"np.reshape({results[k]}, s{k})"
    partials = "P" if all(stored[1:]) else f"[{', '.join(results[1:])}]"
    lines.append(f"        return {results[0]}, {partials}")
    lines.append("    return kernel")
    namespace["np"], namespace["add_reduce"] = np, np.add.reduce
    exec(compile("\n".join(lines), "<dualbroadcast kernel>", "exec"), namespace)
    return namespace["make"], out_dtypes, scratch


def _out_dtypes(kernel, node_dtypes):
    """Per output (value, then partials), its dtype: a literal partial takes the value's dtype."""
    first = kernel.outputs[0]
    value_dtype = node_dtypes[first.index] if type(first) is Sym else np.result_type(first)
    return [value_dtype] + [node_dtypes[o.index] if type(o) is Sym else value_dtype for o in kernel.outputs[1:]]


def _in_place_source(op, refs, buf, namespace):
    """``op(*refs)`` written into the buffer ``buf``: a ufunc bound by name, ``out`` positional
    (each saves a lookup or keyword parsing, ~60 ns a call)."""
    if op is np.where:  # np.where has no out=: copy the second choice, then the first where chosen
        return f"np.copyto({buf}, {refs[2]}); np.copyto({buf}, {refs[1]}, where={refs[0]})"
    if isinstance(op, np.ufunc) and op not in (np.maximum, np.minimum):  # NumPy 2.4 deprecates those
        namespace[f"u_{op.__name__}"] = op
        return f"u_{op.__name__}({', '.join(refs)}, {buf})"
    return f"np.{op.__name__}({', '.join(refs)}, out={buf})"


def _operand_refs(kernel, node, prefix, buffers, kinds, node_dtypes, namespace):
    """The arguments of a blocked operation as source; a literal becomes a 0-d array where that
    computes the same (a ufunc takes a 0-d array ~250 ns faster than a Python or NumPy scalar).

    A NumPy scalar literal keeps its dtype.  A Python int or float is weak: NumPy casts it to
    the dtype of the other operands, so it is cast here once, when every other operand is a
    float array of one dtype (a buffer or an input array; not a Python float input).
    """
    strong = set()
    for a in node.args:
        if type(a) is Sym and (a.index in buffers or (a.op is None and kinds[_input_position(kernel, a)] is not float)):
            strong.add(np.dtype(node_dtypes[a.index]))
        elif type(a) is Sym:
            strong.add(None)
    refs = []
    for a in node.args:
        typed = None
        if type(a) is not Sym and node.op is not np.where:
            typed = _typed_literal(a, strong)
        if typed is None:
            refs.append(_block_ref(kernel.names, buffers, a, prefix))
        else:
            name = f"a_{_block_ref(kernel.names, buffers, a, prefix)}_{typed.dtype.char}"
            namespace[name] = typed
            refs.append(name)
    return refs


def _typed_literal(literal, dtypes):
    """``literal`` as a 0-d array of the dtype NumPy would compute it in, or None if unsure."""
    if isinstance(literal, np.generic) and literal.dtype.kind in "fiu":
        return np.array(literal)
    if type(literal) not in (int, float) or len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    if dtype is None or dtype.kind != "f":
        return None
    try:
        with np.errstate(all="ignore"):
            typed = np.array(literal, dtype)
    except OverflowError:
        return None
    return typed if np.isfinite(typed) else None


def _input_position(kernel, sym):
    return next(k for k, x in enumerate(kernel.inputs) if x.index == sym.index)


def _kind(v):
    """A value's dtype, or ``float`` for a Python float (weakly typed, like a literal)."""
    return float if type(v) is float else np.result_type(v)


def _block_ref(names, buffers, a, prefix):
    """A node as a blocked kernel refers to it: literal, input (its block: ``prefix``), buffer or hoisted."""
    if type(a) is not Sym:
        return names[("c", type(a), a)]
    if a.op is None:
        return prefix + names[a.index]
    return buffers[a.index][0] if a.index in buffers else names[a.index]


def _scalar_nodes(kernel, full):
    """Nodes that depend on no full-size input (one value for the whole call)."""
    full_inputs = {x.index for x, f in zip(kernel.inputs, full) if f}
    scalar = set()
    for node in kernel.order:
        if not any(type(a) is Sym and (a.index in full_inputs or (a.op is not None and a.index not in scalar))
                   for a in node.args):
            scalar.add(node.index)
    return scalar



def _assign_buffers(kernel, node_dtypes, hoisted, owners=None):
    """Reuse a scratch buffer once its node's last use has passed (same dtype only).

    ``owners``: nodes written straight into an output buffer (by name); those are never reused.
    """
    owners = owners or {}
    last_use = {}
    for position, node in enumerate(kernel.order):
        for a in node.args:
            if type(a) is Sym:
                last_use[a.index] = position
    for o in kernel.outputs:
        if type(o) is Sym:
            last_use[o.index] = len(kernel.order)
    free, buffers, count = {}, {}, 0
    for position, node in enumerate(kernel.order):
        if node.index in hoisted:
            continue
        dtype = np.dtype(node_dtypes[node.index]).str
        pool = free.setdefault(dtype, [])
        if node.index in owners:
            name = owners[node.index]
        elif pool:
            name = pool.pop()
        else:
            name, count = f"w{count}", count + 1
        buffers[node.index] = (name, dtype)
        for a in {a.index for a in node.args if type(a) is Sym and a.index in buffers}:
            if last_use.get(a) == position and a not in owners:
                free.setdefault(buffers[a][1], []).append(buffers[a][0])
    return buffers


def _infer_dtypes(kernel, kinds):
    """The dtype of every node, by running the graph on one element of each input kind."""
    values = {x.index: (1.0 if k is float else np.ones(1, k)) for x, k in zip(kernel.inputs, kinds)}
    with np.errstate(all="ignore"):
        for node in kernel.order:
            args = [values[a.index] if type(a) is Sym else a for a in node.args]
            values[node.index] = OPERATOR_FUNCTIONS.get(node.op, node.op)(*args)  # Python floats stay weak
    return {k: np.result_type(v) for k, v in values.items()}


def _numexpr_sources(kernel):
    """One numexpr expression per output, or None if some operation has no numexpr form."""
    text = {}
    names = kernel.names
    for x in kernel.inputs:
        text[x.index] = names[x.index]
    for node in kernel.order:
        args = [text[a.index] if type(a) is Sym else _numexpr_literal(names, a) for a in node.args]
        if node.op in _NUMEXPR_NAMES:
            text[node.index] = f"({args[0]} {_NUMEXPR_NAMES[node.op]} {args[1]})"
        elif node.op in _NUMEXPR_FUNCTIONS:
            fname = _NUMEXPR_FUNCTIONS[node.op]
            text[node.index] = f"({fname}{args[0]})" if fname in "-~" else f"{fname}({', '.join(args)})"
        else:
            return None
        if len(text[node.index]) > 20000:
            return None
    return [text[o.index] if type(o) is Sym else _numexpr_literal(names, o) for o in kernel.outputs]


def _numexpr_literal(names, a):
    """Integers inline (numexpr expands integer powers); other literals as named constants."""
    if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)):
        return str(int(a))
    return names[("c", type(a), a)]
