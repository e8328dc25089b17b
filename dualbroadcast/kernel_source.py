"""Kernel code generation: a traced graph written as Python source, for each backend of `kernels`.

The operations a kernel needs (`needed_nodes`) become straight-line code over names
the library makes (`kernel_names`): ``i<k>`` the inputs, ``t<k>`` the intermediates,
``c<k>`` the literal constants and ``f_<name>`` each function called.  A function is
bound by name, never written ``np.<name>``: ``scipy.special.erf`` or a user's
`db.primitive` is no NumPy attribute, and a user's function may share a NumPy name.
Arithmetic and comparisons are written as Python operators where NumPy code would
write them (`numpy_facts.source_of`).

- Whole arrays (`whole_array_kernel`, the ``numpy`` backend): one statement per
  operation, NumPy allocating each result.  Given the input dtypes, each weak literal
  (``x + 1``) is a 0-d array of the dtype NumPy casts it to.  For inputs of one shape (the
  cached plan's kernel, `whole_in_place_kernel`) a dead intermediate's array is reused.
- Blocked (`blocked_kernel`, `single_block_kernel`): every operation writes ``out=``
  into a scratch buffer, reused once its value is dead, or into the output it computes;
  nodes that depend on no full-size input are computed once (hoisted).  One generator
  writes these operations (`_block_code`); the loop over cache-sized blocks and the
  single block differ only in how inputs and outputs are addressed and sums returned.
- numexpr (`numexpr_sources`): one expression per output, or None if an operation has
  no numexpr form (numexpr is then not a candidate backend).

The dtype of every node is the one NumPy computes, found by running the graph on one
element of each input kind (`infer_dtypes`).
"""

import re
from typing import NamedTuple

import numpy as np

from .derivatives import NUMEXPR_COMPLEX, NUMEXPR_FUNCTIONS, SPLATTED, one_like
from .expr import Sym, _is_literal
from .numpy_facts import COMPARISONS, INFIX, OPERATOR_FUNCTIONS, source_of

_NUMEXPR_OPERATORS = {**INFIX, **COMPARISONS, np.logical_and: "&", np.logical_or: "|"}
_OUT_BY_KEYWORD = (np.maximum, np.minimum)  # NumPy 2.4 deprecates their ``out`` given positionally


# --- names ---------------------------------------------------------------------
def needed_nodes(graph, outputs):
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


def kernel_names(inputs, order, outputs):
    """Library-made names: ``i<k>`` inputs and ``t<k>`` intermediates (by node index), ``c<k>`` literal
    constants (by ``("c", type, literal)``); also ``constants`` (name -> literal) and ``functions``
    (function -> ``f_<its name>``, numbered where two functions share a name)."""
    names = {x.index: f"i{k}" for k, x in enumerate(inputs)}
    names.update({n.index: f"t{n.index}" for n in order})
    constants = {}
    literals = [a for n in order for a in n.args if type(a) is not Sym] + [o for o in outputs if type(o) is not Sym]
    for lit in literals:
        key = ("c", type(lit), lit)
        if key not in names:
            names[key] = f"c{len(constants)}"
            constants[names[key]] = lit
    functions = {}
    for node in order:
        if node.op not in functions:
            base = "f_" + re.sub(r"\W", "_", getattr(node.op, "__name__", "function"))
            name, k, taken = base, 1, set(functions.values())
            while name in taken:
                name, k = f"{base}{k}", k + 1
            functions[node.op] = name
    return names, constants, functions


def _ref(names, a):
    return names[a.index] if type(a) is Sym else names[("c", type(a), a)]


def _namespace(kernel):
    """What generated code reads besides its arguments: the constants, the functions by their names, np."""
    namespace = dict(kernel.constants)
    namespace.update((name, function) for function, name in kernel.functions.items())
    namespace["np"], namespace["add_reduce"], namespace["one_like"] = np, np.add.reduce, one_like
    namespace["block_dot"] = block_dot
    return namespace


def _compile(lines, namespace, name):
    exec(compile("\n".join(lines), "<dualbroadcast kernel>", "exec"), namespace)
    return namespace[name]


def _call_source(kernel, op, refs):
    """``op(*refs)`` as source (``refs`` as source text): a Python operator for arithmetic, else the function."""
    return source_of(op, refs) or f"{kernel.functions[op]}({', '.join(refs)})"


def _operand_refs(kernel, node, ref, dtype_of, namespace):
    """The arguments of an operation as source: a node by ``ref(node)``; a literal as a 0-d array where that
    computes the same (a ufunc takes a 0-d array ~250 ns faster than a Python or NumPy scalar).

    Only a ufunc's literals are typed (``np.round(x, 2)`` wants an integer).  A NumPy scalar literal keeps
    its dtype.  A Python int, float or complex is weak: NumPy casts it to the dtype of the other operands, so
    it is cast here once, when every other operand is a float (a complex literal: complex) array of one dtype
    (``dtype_of(node)``: its dtype if it is such an array, else None).  ``dtype_of`` None: no literal typed.
    """
    typing = dtype_of is not None and isinstance(node.op, np.ufunc)
    operands = {dtype_of(a) for a in node.args if type(a) is Sym} if typing else ()
    refs = []
    for k, a in enumerate(node.args):
        if type(a) is Sym:
            refs.append(ref(a))
            continue
        name = _ref(kernel.names, a)
        typed = _typed_literal(a, operands) if typing and not _takes_integer(node.op, k, operands) else None
        if typed is not None:
            name = f"{name}_{typed.dtype.char}"
            namespace[name] = typed
        refs.append(name)
    return refs


def _takes_integer(ufunc, k, dtypes):
    """Whether ``ufunc``'s loops for other inputs of the one dtype in ``dtypes`` take an integer at input ``k``
    (``np.ldexp(x, 3)``: its exponent stays an integer)."""
    if len(dtypes) != 1 or None in dtypes:
        return False
    (char,) = {d.char for d in dtypes}
    inputs = [t.partition("->")[0] for t in ufunc.types]
    codes = {t[k] for t in inputs if len(t) > k and all(c == char for i, c in enumerate(t) if i != k)}
    return bool(codes) and all(np.dtype(c).kind in "iu" for c in codes)


def _typed_literal(literal, dtypes):
    """``literal`` as a 0-d array of the dtype NumPy would compute it in, or None if unsure."""
    if isinstance(literal, np.generic) and literal.dtype.kind in "fiuc":
        return np.array(literal)
    if type(literal) not in (int, float, complex) or len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    if dtype is None or dtype.kind not in "fc" or (type(literal) is complex and dtype.kind != "c"):
        return None
    try:
        with np.errstate(all="ignore"):
            typed = np.array(literal, dtype)
    except OverflowError:
        return None
    return typed if np.isfinite(typed) else None


# --- whole arrays ----------------------------------------------------------------
def whole_array_kernel(kernel, kinds=None):
    """The kernel over whole arrays: ``kernel(*inputs) -> (value, *partials)``, NumPy allocating each result.

    With ``kinds`` (per input a dtype), each weak literal (``x + 1``) is a 0-d array of the dtype NumPy
    casts it to for inputs of those dtypes: a ufunc converts a Python scalar ~0.3 us slower.
    """
    names = kernel.names
    namespace = _namespace(kernel)
    dtype_of = None
    if kinds is not None:
        node_dtypes = infer_dtypes(kernel, kinds)

        def dtype_of(a):
            return np.dtype(node_dtypes[a.index])

    lines = [f"def kernel({', '.join(kernel.input_names)}):"]
    for node in kernel.order:
        refs = _operand_refs(kernel, node, lambda a: names[a.index], dtype_of, namespace)
        if _is_unit_power(node):  # a one of the node's dtype, known here or read off its argument
            one = _unit_literal(node, dtype_of(node), namespace) if dtype_of else f"one_like({refs[0]})"
            lines.append(f"    {names[node.index]} = {one}")
            continue
        lines.append(f"    {names[node.index]} = {_call_source(kernel, node.op, refs)}")
    lines.append("    return " + "".join(f"{_ref(names, o)}, " for o in kernel.outputs))
    return _compile(lines, namespace, "kernel")


def whole_in_place_kernel(kernel, kinds):
    """`whole_array_kernel` for array inputs of one shape and of dtypes ``kinds`` (a cached plan's call): an
    intermediate of that shape, once dead, is the ``out=`` of a later ufunc of its dtype, so that a call
    allocates about as many arrays as it returns.  (Each large array freed and allocated again can be
    page-faulted in anew: a float32 arctan2 kernel of 1e5 elements took 5x its operations' time so.)"""
    names = kernel.names
    namespace = _namespace(kernel)
    node_dtypes = infer_dtypes(kernel, kinds)

    def dtype_of(a):
        return np.dtype(node_dtypes[a.index])

    last_use = {}
    for k, node in enumerate(kernel.order):
        for a in node.args:
            if type(a) is Sym:
                last_use[a.index] = k
    full = {x.index for x in kernel.inputs}  # values of the call's shape
    returned = {o.index for o in kernel.outputs if type(o) is Sym}
    made, free = set(), {}  # nodes whose array this call allocated; dtype -> names of dead ones
    lines = [f"def kernel({', '.join(kernel.input_names)}):"]
    for k, node in enumerate(kernel.order):
        refs = _operand_refs(kernel, node, lambda a: names[a.index], dtype_of, namespace)
        if _is_unit_power(node):
            lines.append(f"    {names[node.index]} = {_unit_literal(node, dtype_of(node), namespace)}")
            continue
        for i in {a.index for a in node.args if type(a) is Sym}:
            if i in made and last_use[i] == k and i not in returned:  # dead from here: this result may take it
                made.discard(i)
                free.setdefault(np.dtype(node_dtypes[i]), []).append(names[i])
        elementwise = isinstance(node.op, np.ufunc) and node.op.nout == 1 and any(
            type(a) is Sym and a.index in full for a in node.args) and all(
            a.index in full if type(a) is Sym else np.ndim(a) == 0 for a in node.args)
        spare = free.get(dtype_of(node)) if elementwise else None
        if spare:
            lines.append(f"    {names[node.index]} = {_in_place_source(kernel, node.op, refs, spare.pop())}")
        else:
            lines.append(f"    {names[node.index]} = {_call_source(kernel, node.op, refs)}")
        if elementwise:
            full.add(node.index)
            made.add(node.index)
    lines.append("    return " + "".join(f"{_ref(names, o)}, " for o in kernel.outputs))
    return _compile(lines, namespace, "kernel")


def whole_into_kernel(kernel, kinds, written):
    """`whole_array_kernel` writing its outputs at positions ``written`` (the value 0, partials from 1) into buffers:
    ``kernel(*inputs, *buffers)``, a buffer per written output, in order; an output node's ufunc computes straight
    into its buffer (a matrix product's epilogue over a block of rows: no copy of each result into place), anything
    else is copied there.  Nothing is returned."""
    names = kernel.names
    namespace = _namespace(kernel)
    node_dtypes = infer_dtypes(kernel, kinds)

    def dtype_of(a):
        return np.dtype(node_dtypes[a.index])

    out_dtypes = output_dtypes(kernel, node_dtypes)
    into = {}  # output node -> the buffer its ufunc writes into (its first written position's)
    for k in written:
        o = kernel.outputs[k]
        if type(o) is Sym and o.index not in into and isinstance(o.op, np.ufunc) and o.op.nout == 1 \
                and dtype_of(o) == np.dtype(out_dtypes[k]):
            into[o.index] = f"o{k}"
    lines = [f"def kernel({', '.join(kernel.input_names + [f'o{k}' for k in written])}):"]
    for node in kernel.order:
        refs = _operand_refs(kernel, node, lambda a: names[a.index], dtype_of, namespace)
        if _is_unit_power(node):
            lines.append(f"    {names[node.index]} = {_unit_literal(node, dtype_of(node), namespace)}")
        elif node.index in into:
            lines.append(f"    {names[node.index]} = {_in_place_source(kernel, node.op, refs, into[node.index])}")
        else:
            lines.append(f"    {names[node.index]} = {_call_source(kernel, node.op, refs)}")
    for k in written:
        o = kernel.outputs[k]
        if type(o) is not Sym or into.get(o.index) != f"o{k}" or _is_unit_power(o):
            lines.append(f"    np.copyto(o{k}, {_ref(names, o)})")
    lines.append("    return None")
    return _compile(lines, namespace, "kernel")


def summed_whole_array_kernel(kernel, full):
    """The whole-array kernel of a `sum` whose outputs are all summed whole (the partials of scalar arguments),
    for inputs of which those marked ``full`` have the call's shape: ``kernel(SHAPE, *inputs) -> (the sum of
    the value, the sums of the partials as one vector)``.  Each output node is summed once, however often it
    is returned (a second-order kernel's first partials are second partials too).  An output ``a · b`` of
    two full-size factors is summed as their dot product, and computed only where another node uses it: the
    products of a second-order kernel are entries of one matrix product of the factors stacked (`gram`;
    ten coefficients at N=1e3: 63 products, 10 + 9 factors, one 10x1000x9 product, no 1000-element array
    per product).  Elsewhere (a factor of another shape or dtype at run time) each product is summed alone
    (`sum_of_product`)."""
    names = kernel.names
    namespace = _namespace(kernel)
    namespace.update(sum_of_product=sum_of_product, summed=summed, gram=gram, gram_fits=gram_fits)
    scalar = scalar_nodes(kernel, full)
    full_inputs = {x.index for x, f in zip(kernel.inputs, full) if f}

    def full_size(a):
        return type(a) is Sym and (a.index in full_inputs or (a.op is not None and a.index not in scalar))

    unique = list({_ref(names, o): o for o in kernel.outputs}.values())  # each output node once
    products = [o for o in unique if type(o) is Sym and o.op is np.multiply and len(o.args) == 2
                and all(map(full_size, o.args))]
    left, right = _factor_sides([o.args for o in products])
    if len(left) * len(right) > 4 * len(products) + 16:  # a matrix product mostly of entries nobody wants
        left = right = ()
    used = {a.index for node in kernel.order for a in node.args if type(a) is Sym}
    skipped = {o.index for o in products if o.index not in used}  # only its sum is wanted
    lines = [f"def kernel(SHAPE, {', '.join(kernel.input_names)}):"]
    for node in kernel.order:
        if node.index in skipped:
            continue
        args = _operand_refs(kernel, node, lambda a: names[a.index], None, namespace)
        if _is_unit_power(node):
            lines.append(f"    {names[node.index]} = one_like({args[0]})")
            continue
        lines.append(f"    {names[node.index]} = {_call_source(kernel, node.op, args)}")
    others = [o for o in unique if all(o is not p for p in products)]
    sums = [f"summed({_ref(names, o)}, SHAPE)" for o in others]
    product_sums = [f"sum_of_product({names[a.index]}, {names[b.index]}, SHAPE)" for a, b in (o.args for o in products)]
    if left:
        left_names = ", ".join(names[a] for a in left) + ","
        right_names = ", ".join(names[b] for b in right) + ","
        rows = [left.index(a.index) if a.index in left and b.index in right else left.index(b.index)
                for a, b in (o.args for o in products)]
        columns = [right.index(b.index) if a.index in left and b.index in right else right.index(a.index)
                   for a, b in (o.args for o in products)]
        namespace["ROWS"], namespace["COLUMNS"] = np.array(rows, np.intp), np.array(columns, np.intp)
        lines.append(f"    if gram_fits(SHAPE, ({left_names} {right_names})):")
        lines.append(f"        products = gram(({left_names}), ({right_names}))[ROWS, COLUMNS]")
        lines.append("    else:")
        lines.append(f"        products = np.array([{', '.join(product_sums)}])")
    else:
        lines.append(f"    products = np.array([{', '.join(product_sums)}])")
    lines.append(f"    rest = np.array([{', '.join(sums)}])")
    slots = {_ref(names, o): k for k, o in enumerate(products + others)}  # the order of the sums computed
    namespace["ORDER"] = np.array([slots[_ref(names, o)] for o in kernel.outputs], np.intp)
    lines.append("    total = np.concatenate((products, rest))[ORDER]")
    lines.append("    return total[0], total[1:]")
    return _compile(lines, namespace, "kernel")


def _factor_sides(pairs):
    """Two lists of node indices, ``left`` and ``right``, such that each pair of nodes ``(a, b)`` has one node in
    each: the rows of the two factors of `gram`'s matrix product (few, shared: x^j · e^p and x^i · (x^j e^p)
    put the powers x^i on one side)."""
    left, right = [], []
    for a, b in pairs:
        a, b = a.index, b.index
        if (a in left and b in right) or (b in left and a in right):
            continue
        if a in left:
            right.append(b)
        elif b in left:
            right.append(a)
        elif a in right:
            left.append(b)
        elif b in right:
            left.append(a)
        else:
            left.append(a)
            right.append(b)
    return left, right


_GRAM_DTYPE = np.dtype(np.float64)  # float32: sums by pairs (np.add.reduce), more accurate than BLAS's


def gram_fits(shape, factors):
    """Whether every factor is a float64 array of the call's ``shape`` (then `gram` sums their products)."""
    return all(type(a) is np.ndarray and a.shape == shape and a.dtype == _GRAM_DTYPE for a in factors)


def gram(left, right):
    """``G[i, j] = sum(left[i] * right[j])``: one matrix product of the factors stacked as rows."""
    return np.array(left).reshape(len(left), -1) @ np.array(right).reshape(len(right), -1).T


def sum_of_product(a, b, shape):
    """``sum(a * b)`` over ``shape``: the dot product of two float64 arrays of that shape, never their product."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.shape == shape == b.shape and a.dtype == b.dtype \
            and a.dtype == _GRAM_DTYPE:
        return np.dot(a.reshape(-1), b.reshape(-1))
    return summed(a * b, shape)


def summed(a, shape):
    """``a`` broadcast to ``shape`` and summed (a literal or a scalar node counts once per element)."""
    return np.add.reduce(a if np.shape(a) == shape else np.broadcast_to(a, shape), axis=None)


# --- blocked ---------------------------------------------------------------------
class _BlockCode(NamedTuple):
    """The operations of a blocked kernel over one block (`_block_code`); lines without indentation."""

    hoisted: list  # lines computing the nodes that depend on no full-size input, once per call
    operations: list  # the in-place operations, then the stored outputs not written in place
    sums: dict  # per output not stored, by position: (source of its sum over the block, whether it has its dtype)
    scratch: list  # (name, dtype, fill) of the scratch buffers: ``fill`` a constant they hold (`_splatted`), or None
    out_dtypes: list
    namespace: dict


def _block_code(kernel, kinds, full, stored):
    """The in-place operations of a blocked kernel, written once for the loop over blocks and the single block.

    ``kinds``: per input a dtype, or ``float`` for a (weakly typed) Python float;
    ``full``: per input, whether it has the call's full size (else it is one element);
    ``stored``: per output, whether it is written out in full (else summed).
    The code reads ``i<k>`` (an input's block, or its one element), ``o<k>`` (a stored output's block),
    the scratch buffers ``w<k>`` and ``SHAPE`` (the block's shape).  An operation computing a stored
    output writes it into ``o<k>`` itself: no copy (EAM N=1e6 on the blocked backend ~2% faster).
    """
    names = kernel.names
    node_dtypes = infer_dtypes(kernel, kinds)
    out_dtypes = output_dtypes(kernel, node_dtypes)
    hoisted = scalar_nodes(kernel, full)
    owners = {}
    for k, (o, keep) in enumerate(zip(kernel.outputs, stored)):
        if keep and type(o) is Sym and o.op is not None and o.index not in hoisted and o.index not in owners:
            owners[o.index] = f"o{k}"
    dots = _summed_products(kernel, node_dtypes, hoisted, stored, full)
    buffers = _assign_buffers(kernel, node_dtypes, hoisted | set(dots), owners)  # a dot product needs no buffer
    namespace = _namespace(kernel)
    array_inputs = {x.index for x, kind in zip(kernel.inputs, kinds) if kind is not float}

    def ref(a):
        return buffers[a.index][0] if a.index in buffers else names[a.index]

    def dtype_of(a):  # a buffer or an input array: strong; a Python float or a hoisted value: unsure
        return np.dtype(node_dtypes[a.index]) if a.index in buffers or a.index in array_inputs else None

    hoisted_lines, operations = [], []
    splats = {}  # typed literal's name -> (its block buffer's name, dtype, the literal)
    for node in kernel.order:
        if node.index in dots:  # Σ a·b of two float64 blocks: a dot product, no pass writing a·b
            operations.append(f"{dots[node.index]} = block_dot({', '.join(ref(a) for a in node.args)})")
        elif _is_unit_power(node):
            hoisted_lines.append(f"{names[node.index]} = {_unit_literal(node, node_dtypes[node.index], namespace)}")
        elif node.index in hoisted:  # depends on no full-size input: computed once, as Python would
            refs = [_ref(names, a) for a in node.args]
            hoisted_lines.append(f"{names[node.index]} = {_call_source(kernel, node.op, refs)}")
        else:
            refs = _operand_refs(kernel, node, ref, dtype_of, namespace)
            if node.op in SPLATTED:
                refs = [_splatted(r, namespace, splats) for r in refs]
            operations.append(_in_place_source(kernel, node.op, refs, buffers[node.index][0]))
    sums = {}
    for k, (o, keep) in enumerate(zip(kernel.outputs, stored)):
        source = ref(o) if type(o) is Sym else _ref(names, o)
        if keep and source != f"o{k}":
            operations.append(f"o{k}[...] = {source}")
        elif not keep and type(o) is Sym and o.index in dots:
            sums[k] = (dots[o.index], True)
        elif not keep and type(o) is Sym and o.index in buffers:
            sums[k] = (f"add_reduce({source}, None)", True)
        elif not keep and type(o) is not Sym and not isinstance(o, np.ndarray) and o == 0:  # (a value not computed)
            sums[k] = (f"z{k}", True)
        elif not keep:  # a literal, input or hoisted node: summed as often as the block has elements
            sums[k] = (f"add_reduce(np.broadcast_to({source}, SHAPE), None)", False)
        if not keep:
            namespace[f"z{k}"] = np.dtype(out_dtypes[k]).type(0)
    scratch = sorted(b for b in set(buffers.values()) if b[0] not in owners.values())
    scratch = [(n, np.dtype(d), None) for n, d in scratch]
    scratch += sorted(splats.values(), key=lambda splat: splat[0])
    return _BlockCode(hoisted_lines, operations, sums, scratch, out_dtypes, namespace)


def _splatted(ref, namespace, splats):
    """``ref``, or where it names a typed literal (a 0-d array), a scratch buffer filled with it once, when the
    kernel's buffers are made (`_BlockCode.scratch`)."""
    literal = namespace.get(ref)
    if type(literal) is not np.ndarray or literal.ndim:
        return ref
    if ref not in splats:
        splats[ref] = (f"k{len(splats)}", literal.dtype, literal)
    return splats[ref][0]


def blocked_kernel(kernel, kinds, full, stored):
    """The blocked kernel over the chunk ``start:stop`` of a call, in blocks of ``B`` elements (see `_block_code`).

    Its arguments are ``start, stop, B``, the inputs (flat if full-size), the stored outputs (flat) and the
    scratch buffers (``B`` elements each); it returns the sums of the outputs not stored.  Returns it, the
    outputs' dtypes and the scratch buffers' names and dtypes.
    """
    code = _block_code(kernel, kinds, full, stored)
    block_inputs = [name for name, is_full in zip(kernel.input_names, full) if is_full]
    block_outputs = [f"o{k}" for k, keep in enumerate(stored) if keep]
    scratch = [name for name, _, _ in code.scratch]
    inputs = [f"{name}_all" if name in block_inputs else name for name in kernel.input_names]
    parameters = ["start", "stop", "B", *inputs, *(f"{name}_all" for name in block_outputs + scratch)]
    lines = [f"def kernel({', '.join(parameters)}):"]
    lines += [f"    s{k} = z{k}" for k in code.sums]
    lines += ["    " + line for line in code.hoisted]
    lines += ["    for lo in range(start, stop, B):", "        hi = min(lo + B, stop)", "        SHAPE = (hi - lo,)"]
    lines += [f"        {name} = {name}_all[lo:hi]" for name in block_inputs + block_outputs]
    lines += [f"        {name} = {name}_all[:hi - lo]" for name in scratch]
    lines += ["        " + line for line in code.operations]
    lines += [f"        s{k} += {total}" for k, (total, _) in code.sums.items()]
    lines.append("    return (" + "".join(f"s{k}, " for k in code.sums) + ")")
    return _compile(lines, code.namespace, "kernel"), code.out_dtypes, code.scratch


def single_block_kernel(kernel, kinds, full, stored):
    """The blocked kernel for a call that fits one block and one chunk: the operations once over buffers of
    the call's shape, without a loop or slices, inputs entering as they are.

    Returns ``make(**buffers) -> kernel`` (the buffers are closure cells: ``SHAPE``, ``P``, ``o<k>``/``r<k>``
    the stored outputs in the call's and in the returned shape, ``s<k>`` a summed partial's shape, the
    scratch ``w<k>``; ``P`` the list of partials, returned as is when every partial is stored), the
    outputs' dtypes and the scratch buffers' names and dtypes.
    """
    code = _block_code(kernel, kinds, full, stored)
    cells = ["SHAPE", "P"] + [f"{p}{k}" for k, keep in enumerate(stored) for p in (("o", "r") if keep else ("s",))]
    lines = [f"def make({', '.join(cells + [name for name, _, _ in code.scratch])}):"]
    lines.append(f"    def kernel({', '.join(kernel.input_names)}):")
    lines += ["        " + line for line in code.hoisted + code.operations]
    results = []
    for k, keep in enumerate(stored):
        if keep:
            results.append(f"r{k}")
            continue
        total, typed = code.sums[k]
        total = total if typed else f"z{k} + {total}"
        results.append(f"np.reshape({total}, s{k})" if k else total)
    partials = "P" if all(stored[1:]) else f"[{', '.join(results[1:])}]"
    lines.append(f"        return {results[0]}, {partials}")
    lines.append("    return kernel")
    return _compile(lines, code.namespace, "make"), code.out_dtypes, code.scratch


def scratch_buffer(shape, dtype, fill):
    """A scratch buffer of a blocked kernel (`_BlockCode.scratch`): uninitialised, or holding ``fill``."""
    return np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)


def _in_place_source(kernel, op, refs, buf):
    """``op(*refs)`` written into the buffer ``buf``: a ufunc's ``out`` positional (keyword parsing costs
    ~60 ns a call); a function without ``out=`` (a user's primitive) copied in."""
    function, args = kernel.functions[op], ", ".join(refs)
    if op is np.where:  # np.where has no out=: copy the second choice, then the first where chosen
        return f"np.copyto({buf}, {refs[2]}); np.copyto({buf}, {refs[1]}, where={refs[0]})"
    if op in _OUT_BY_KEYWORD:
        return f"{function}({args}, out={buf})"
    if isinstance(op, np.ufunc):
        return f"{function}({args}, {buf})"
    return f"np.copyto({buf}, {function}({args}))"


def scalar_nodes(kernel, full):
    """Nodes that depend on no full-size input (one value for the whole call), and the ones ``x ** 0``."""
    full_inputs = {x.index for x, f in zip(kernel.inputs, full) if f}
    scalar = set()
    for node in kernel.order:
        if _is_unit_power(node) or not any(
                type(a) is Sym and (a.index in full_inputs or (a.op is not None and a.index not in scalar))
                for a in node.args):
            scalar.add(node.index)
    return scalar


def _is_unit_power(node):
    """Whether ``node`` is ``x ** 0``: 1 for every x (NaN and inf too), of x's dtype.  The derivative table
    types a number so (the ½ of a tie, `derivatives.share`); a kernel writes it as a 0-d one, no pass over x."""
    exponent = node.args[1] if node.op is np.power and len(node.args) == 2 else None
    return _is_literal(exponent) and not isinstance(exponent, (bool, np.bool_)) and exponent == 0


def _unit_literal(node, dtype, namespace):
    """The name of a 0-d one of ``dtype`` in ``namespace``: ``x ** 0`` for an ``x`` of that dtype."""
    name = f"u{node.index}"
    namespace[name] = np.ones((), dtype)
    return name


def _summed_products(kernel, node_dtypes, hoisted, stored, full):
    """Per summed output ``a · b`` of two float64 blocks (full-size nodes or inputs) that nothing else reads,
    the name of its block's dot product (`block_dot`): one pass reading a and b where the product and its sum
    were a pass writing a·b and one reading it (EAM's hvp tangent ``Σ r·v``).  float32 sums stay pairwise
    (``add_reduce``): a dot product accumulates in float32."""
    full_inputs = {x.index for x, f in zip(kernel.inputs, full) if f}
    uses = {}
    for a in [a for node in kernel.order for a in node.args] + list(kernel.outputs):
        if type(a) is Sym:
            uses[a.index] = uses.get(a.index, 0) + 1
    dots = {}
    for k, (o, keep) in enumerate(zip(kernel.outputs, stored)):
        if not keep and type(o) is Sym and o.op is np.multiply and o.index not in hoisted and uses[o.index] == 1 \
                and all(type(a) is Sym and np.dtype(node_dtypes[a.index]) == np.float64 and a.index not in hoisted
                        and (a.op is not None or a.index in full_inputs) for a in o.args):
            dots[o.index] = f"d{k}"
    return dots


DOT_PIECE = 8192  # elements per BLAS dot product: OpenBLAS splits a longer one among its threads


def block_dot(a, b):
    """``Σ a·b`` of two float64 blocks of one size (flat, or of the call's shape in a single-block kernel), in
    pieces BLAS computes on the calling thread (its threads would wait on a kernel's own): the whole pieces as
    the rows of one ``np.vecdot`` call, one BLAS dot each (a Python-level call per piece cost a third more:
    65536 elements in 15 us against 21 us here)."""
    a, b = a.reshape(-1), b.reshape(-1)
    whole = a.shape[0] - a.shape[0] % DOT_PIECE
    if not whole:
        return np.vdot(a, b)
    total = np.add.reduce(np.vecdot(a[:whole].reshape(-1, DOT_PIECE), b[:whole].reshape(-1, DOT_PIECE)))
    return total + np.vdot(a[whole:], b[whole:]) if whole < a.shape[0] else total


def _assign_buffers(kernel, node_dtypes, hoisted, owners):
    """Per node not hoisted, its buffer ``(name, dtype)``: a scratch buffer, reused once its node's last
    use has passed (same dtype only; by a ufunc, whose elements are read before written, already at that
    use: ``(c * w0) -> w0``, one buffer fewer in cache), or ``owners[node]``, the output it computes (never
    reused)."""
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
        dead = sorted(a for a in {a.index for a in node.args if type(a) is Sym and a.index in buffers}
                      if last_use.get(a) == position and a not in owners)
        if isinstance(node.op, np.ufunc):
            for a in dead:
                free.setdefault(buffers[a][1], []).append(buffers[a][0])
        pool = free.setdefault(dtype, [])
        if node.index in owners:
            name = owners[node.index]
        elif pool:
            name = pool.pop()
        else:
            name, count = f"w{count}", count + 1
        buffers[node.index] = (name, dtype)
        if not isinstance(node.op, np.ufunc):  # (np.where's two copies: its out may not be an argument)
            for a in dead:
                free.setdefault(buffers[a][1], []).append(buffers[a][0])
    return buffers


# --- dtypes ------------------------------------------------------------------------
def infer_dtypes(kernel, kinds):
    """The dtype of every node, by running the graph on one element of each input kind."""
    values = {x.index: (1.0 if k is float else np.ones(1, k)) for x, k in zip(kernel.inputs, kinds)}
    with np.errstate(all="ignore"):
        for node in kernel.order:
            args = [values[a.index] if type(a) is Sym else a for a in node.args]
            values[node.index] = OPERATOR_FUNCTIONS.get(node.op, node.op)(*args)  # Python floats stay weak
    return {k: np.result_type(v) for k, v in values.items()}


def output_dtypes(kernel, node_dtypes):
    """Per output (value, then partials), its dtype: a literal partial takes the value's dtype."""
    first = kernel.outputs[0]
    value_dtype = node_dtypes[first.index] if type(first) is Sym else np.result_type(first)
    return [value_dtype] + [node_dtypes[o.index] if type(o) is Sym else value_dtype for o in kernel.outputs[1:]]


# --- numexpr -----------------------------------------------------------------------
def numexpr_sources(kernel):
    """One numexpr expression per output, or None if some operation has no numexpr form (for complex
    numbers where they take part: `derivatives.Facts.numexpr_complex`)."""
    if kernel.complex and any(node.op not in NUMEXPR_COMPLEX for node in kernel.order):
        return None
    text = {}
    names = kernel.names
    for x in kernel.inputs:
        text[x.index] = names[x.index]
    for node in kernel.order:
        args = [text[a.index] if type(a) is Sym else _numexpr_literal(names, a) for a in node.args]
        if _is_unit_power(node):  # numexpr types an integer by what it meets (the value's dtype casts it)
            text[node.index] = "1"
        elif node.op in _NUMEXPR_OPERATORS:
            text[node.index] = f"({args[0]} {_NUMEXPR_OPERATORS[node.op]} {args[1]})"
        elif node.op in NUMEXPR_FUNCTIONS:
            fname = NUMEXPR_FUNCTIONS[node.op]
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
