"""The entry points built on the reverse-mode driver (`reverse`) and forward mode: cut/uncut, jvp, jacobian,
hessian, hvp, check_gradient."""

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import pytree
from .context import ACTIVE_TAPE, JVP_DEPTH
from .errors import (
    ArgumentTypeError,
    GradientMismatchError,
    KernelError,
    ShapeMismatchError,
    StaleValueError,
    UnsupportedFunctionError,
    ValueConversionError,
)
from .expr import TRACING, Sym
from .forward import Dual, check_tangent, end_level, new_level, primal
from .guards import RECORDER, Guarded
from .operands import complex_valued
from .pullbacks import plain
from .pytree import Cut, Uncut
from .reverse import (
    FLOAT_TYPES,
    check_keys,
    float_value,
    gradient,
    pullback,
    trace_call,
)
from .sweeps import RowsTooLarge, backward, backward_rows, rows_at_a_time
from .tracked import Tracked, unwrap_tracked


# --- cut / uncut -------------------------------------------------------------
def cut(x: Any) -> Any:
    """Mark ``x`` (an array, a scalar or any container or callable) as a constant.

    Inside a differentiated function the result is ``x`` with every tracked leaf
    replaced by its plain value, except leaves wrapped in `uncut`: a stop-gradient.
    As an argument of `gradient`, `pullback`, `broadcast` or `sum` it means "do not
    differentiate": the gradient for it is ``None``.

    >>> db.gradient(lambda x, y: np.sum(x * y), np.ones(2), db.cut(np.arange(2.0)))
    (array([0., 1.]), None)
    """
    if ACTIVE_TAPE.get() is None and TRACING.get() is None and not JVP_DEPTH.get():
        return Cut(x)
    return strip(x)


def uncut(x: Any) -> Any:
    """Inside a `cut` container, keep ``x`` a variable (its gradient is computed).

    >>> db.gradient(lambda p: p["a"] * p["b"], db.cut({"a": 2.0, "b": db.uncut(3.0)}))
    {'a': None, 'b': 2.0}
    """
    return Uncut(x)


def strip(x):
    """``x`` with every leaf that is not under `uncut` made constant, markers removed."""
    recorder = RECORDER.get()
    constant = _cut_value if recorder is None else (lambda v: recorder.alias(v) if type(v) is Tracked else v)
    if type(x) is Tracked:
        return constant(x)
    if type(x) is Dual:
        return constant(primal(x))  # its value may be tracked by a gradient (reverse over forward)
    if isinstance(x, FLOAT_TYPES):
        return x
    if type(x) is Sym:  # inside a kernel: a constant of it
        return x.graph.cut(x)
    leaves, treedef = pytree.flatten(x)
    flags = pytree.leaf_activity(treedef, active=False)
    cut_leaves = [leaf if on else _cut_leaf(leaf, constant) for leaf, on in zip(leaves, flags)]
    if not pytree.has_markers(treedef) and all(new is leaf for new, leaf in zip(cut_leaves, leaves)):
        return x
    return pytree.unflatten(treedef, cut_leaves)


def _cut_leaf(leaf, constant):
    """One leaf of a cut value made constant: a tracked value's value, a kernel symbol's cut node, the
    attributes of a plain object made constant (a copy of it, where one was tracked)."""
    if type(leaf) is Tracked:
        return constant(leaf)
    if type(leaf) is Dual:
        return constant(primal(leaf))
    if type(leaf) is Sym:
        return leaf.graph.cut(leaf)
    if pytree.has_plain_attributes(leaf):
        return pytree.with_attributes(leaf, strip)
    return leaf


def _cut_value(x):
    """The plain value of a possibly tracked ``x`` (tracked by nested gradients: by none of them), kept
    read-only while its tape's pullbacks may read it."""
    while type(x) is Tracked:
        if type(x.value) is np.ndarray:
            x.tape.keep(x.value)
        x = x.value
    return x


def jvp(f: Callable[..., Any], primals: Any, tangents: Any) -> tuple[Any, Any]:
    """``(f(*primals), J·t)``: forward mode through the whole program, as JAX's ``jvp``.

    ``primals`` is the tuple of ``f``'s arguments, ``tangents`` the same structure with a tangent of
    each differentiated leaf's shape (cast to its dtype; None, or anything, for a `cut` argument).
    ``f`` may return any shape or pytree; the tangent has its structure (zeros for a float result
    that does not depend on the arguments, None for an integer or boolean one).

    >>> db.jvp(lambda x: np.sin(x) * 2, (np.zeros(2),), (np.array([1.0, 3.0]),))
    (array([0., 0.]), array([2., 6.]))
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise ArgumentTypeError("jvp takes the tuple of f's arguments and the tuple of their tangents, as "
                                "JAX's: db.jvp(f, (x,), (t,))")
    if len(primals) != len(tangents):
        raise ShapeMismatchError(f"{len(primals)} primal argument(s) but {len(tangents)} tangent(s): give one "
                                 "tangent per argument")
    level = new_level()
    call_args = []
    for position, (arg, tangent) in enumerate(zip(primals, tangents)):
        leaves, treedef = pytree.flatten(arg)
        flags = pytree.leaf_activity(treedef)
        if not any(flags) or all(leaf is None for leaf in leaves):
            call_args.append(pytree.without_markers(arg))
            continue
        t_leaves, t_def = pytree.flatten(tangent)
        if len(t_leaves) != len(leaves):
            raise ShapeMismatchError(f"the tangent of argument {position} has {len(t_leaves)} leaves, its primal "
                                     f"{len(leaves)}; give the tangents the primals' structure")
        check_keys(t_def, treedef, f"the tangent of argument {position}", "its primal's")
        k_of = None if len(leaves) == 1 and treedef is pytree.LEAF else True
        new_leaves = []
        for k, (leaf, on, t) in enumerate(zip(leaves, flags, t_leaves)):
            if not on or leaf is None:
                new_leaves.append(leaf)
                continue
            value = leaf if type(leaf) is Dual else float_value(leaf, position, None if k_of is None else k)
            new_leaves.append(Dual(value, check_tangent(value, t, position, None if k_of is None else k), level))
        call_args.append(new_leaves[0] if treedef is pytree.LEAF else pytree.unflatten(treedef, new_leaves))
    token = JVP_DEPTH.set(JVP_DEPTH.get() + 1)  # db.cut inside f is a stop-gradient
    try:
        out = f(*call_args)
    finally:
        JVP_DEPTH.reset(token)
        end_level(level)
    out_leaves, out_def = pytree.flatten(out)
    values, out_tangents = [], []
    for leaf in out_leaves:
        if type(leaf) is Dual and leaf.level == level:
            values.append(leaf.value)
            out_tangents.append(leaf.tangent)
        elif type(leaf) is Dual and leaf.level > level:
            raise StaleValueError("f returned a dual value of another db.jvp call (one kept from an inner or earlier "
                                  "call); return values computed from f's own arguments")
        else:  # a constant (a value of an outer jvp included): its tangent is zero
            values.append(leaf)
            bare = plain(leaf)  # a value a gradient tracks (reverse over forward) included
            kind = getattr(getattr(bare, "dtype", None), "kind", "")
            float_leaf = isinstance(bare, (float, complex)) or kind in ("f", "c")
            out_tangents.append(None if not float_leaf else np.zeros_like(bare) if isinstance(bare, np.ndarray)
                                else np.zeros_like(bare)[()])
    if out_def is pytree.LEAF:
        return values[0], out_tangents[0]
    return pytree.unflatten(out_def, values), pytree.unflatten(out_def, out_tangents)


_JACOBIAN_MODES = ("auto", "forward", "reverse")


def jacobian(
    f: Callable[[Any], ArrayLike], x: NDArray[np.floating] | float, mode: str = "auto"
) -> NDArray[np.floating]:
    """Dense Jacobian of ``f`` at ``x``: shape ``f(x).shape + x.shape``.

    ``mode="reverse"``: one `pullback` per output element; ``"forward"``: one `jvp` per input
    element; ``"auto"``: forward when ``x`` has fewer elements than ``f(x)``, else reverse.

    >>> db.jacobian(lambda x: x ** 2, np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    if mode not in _JACOBIAN_MODES:
        raise ValueError(f"jacobian's mode is one of {_JACOBIAN_MODES}, not {mode!r}")
    if not isinstance(plain(x), (np.ndarray, float, complex, np.floating, np.complexfloating)):
        raise ArgumentTypeError("jacobian takes one array or scalar argument; for pytrees use db.pullback")
    if mode == "auto":
        mode = "forward" if np.size(plain(x)) < np.size(plain(f(x))) else "reverse"
    if mode == "forward":
        return _forward_jacobian(f, x)
    y, back = pullback(f, x)
    if isinstance(y, Guarded) or isinstance(x, Guarded):  # inside a jvp or a gradient: rows stacked by NumPy calls
        shape = np.shape(plain(y))
        rows = [back(np.eye(1, math.prod(shape), k, np.result_type(plain(y))).reshape(shape)) for k in
                range(math.prod(shape))]
        return np.reshape(np.stack(rows), shape + np.shape(plain(x)))
    y = np.asarray(y)
    x_shape = np.shape(x)
    jac = np.zeros(y.shape + x_shape, dtype=np.result_type(y, x))
    seed = np.zeros(y.shape, y.dtype)
    for i in np.ndindex(y.shape):
        seed[i] = 1
        jac[i] = back(seed)
        seed[i] = 0
    return jac


def jacfwd(f: Callable[[Any], ArrayLike], x: NDArray[np.floating] | float) -> NDArray[np.floating]:
    """``jacobian(f, x, mode="forward")``, JAX's name: one `jvp` per element of ``x``.

    >>> db.jacfwd(lambda x: np.sin(x) * x[0], np.array([0.0, 1.0]))
    array([[0.        , 0.        ],
           [0.84147098, 0.        ]])
    """
    return jacobian(f, x, mode="forward")


def jacrev(f: Callable[[Any], ArrayLike], x: NDArray[np.floating] | float) -> NDArray[np.floating]:
    """``jacobian(f, x, mode="reverse")``, JAX's name: one pullback per element of ``f(x)``; either composes with
    the other (``jacfwd(lambda x: jacrev(f, x), x)`` is the Hessian of a scalar ``f``).

    >>> db.jacrev(lambda x: np.sin(x) * x[0], np.array([0.0, 1.0]))
    array([[0.        , 0.        ],
           [0.84147098, 0.        ]])
    """
    return jacobian(f, x, mode="reverse")


def _forward_jacobian(f, x):
    """The Jacobian column by column: ``jvp`` with each unit tangent."""
    x_shape = np.shape(plain(x))
    x_dtype = np.result_type(plain(x))
    columns = []
    y = None
    for k in range(int(np.prod(x_shape))):
        e = np.zeros(x_shape, x_dtype)
        e.reshape(-1)[k] = 1
        y, column = jvp(f, (x,), (e if isinstance(plain(x), np.ndarray) else e[()],))
        columns.append(column)
    if isinstance(y, Guarded) or any(isinstance(c, Guarded) for c in columns):  # inside a jvp or a gradient
        return np.reshape(np.stack(columns, axis=-1), np.shape(plain(y)) + x_shape)
    columns = [np.asarray(c) for c in columns]
    if y is None:  # x is empty
        y = np.asarray(unwrap_tracked(f(x)))
        return np.zeros(y.shape + x_shape, np.result_type(y, x))
    y = np.asarray(y)
    jac = np.stack(columns, axis=-1).astype(np.result_type(y, x), copy=False)
    return jac.reshape(y.shape + x_shape)


def hessian(f: Callable[..., Any], x: Any) -> Any:
    """Dense Hessian of the real scalar ``f`` at ``x``: shape ``x.shape + x.shape``; for a pytree ``x``, a
    pytree of pytrees (``H[i][j]`` of shape ``x_i.shape + x_j.shape``), as JAX's.  A pullback of the gradient
    (reverse over reverse): the gradient is recorded once, and its tape swept once for all the rows, each a
    one-hot cotangent of the gradient (`sweeps.backward_rows`).

    >>> db.hessian(lambda x: x[0] ** 2 * x[1], np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])
    """
    tape, g, arguments = trace_call(hessian_recording(f, x), (x,))
    leaves, treedef = pytree.flatten(x)
    inputs = arguments[0].inputs  # per leaf: its tape input, None where cut
    g_leaves = pytree.flatten(g)[0] if treedef is not pytree.LEAF else [g]  # None at a cut leaf
    leaves = [primal(leaf) for leaf in leaves]
    sizes = [0 if t is None else math.prod(np.shape(leaf)) for t, leaf in zip(inputs, leaves)]
    columns = _hessian_columns(tape, g_leaves, inputs, sizes)
    tape.thaw()
    blocks = []  # blocks[i][j]: ∂²f/∂x_i∂x_j, None where either leaf is cut
    start = 0
    for leaf_i, size_i, t_i in zip(leaves, sizes, inputs):
        blocks.append([None if t_i is None or t_j is None else
                       _block(column, start, size_i, np.shape(leaf_i), leaf_j)
                       for column, t_j, leaf_j in zip(columns, inputs, leaves)])
        start += size_i
    if treedef is pytree.LEAF:
        return float(blocks[0][0]) if type(x) is float else blocks[0][0]
    return pytree.unflatten(treedef, [pytree.unflatten(treedef, row) for row in blocks])


def hessian_recording(f, x):
    """The function whose recording `hessian` sweeps once per block of rows (reverse over reverse): the gradient
    of ``f``, the `cut`/`uncut` markers of ``x`` put back.  `explain` of `hessian` lists it."""
    return lambda y: gradient(f, *_marked_like((x,), (y,)))


def _hessian_columns(tape, g_leaves, inputs, sizes):
    """Per leaf of x, the cotangents of every row of the Hessian, from the gradient's leaves ``g_leaves``; where
    they are duals (a Hessian inside a jvp: forward over reverse), the columns of their values, with the columns of
    their tangents as tangents."""
    level = next((g.level for g in g_leaves if type(g) is Dual), None)
    if level is not None:
        values = _hessian_columns(tape, [g.value if type(g) is Dual else g for g in g_leaves], inputs, sizes)
        tangents = _hessian_columns(tape, [g.tangent if type(g) is Dual else None for g in g_leaves], inputs, sizes)
        return [v if v is None and t is None else
                Dual(np.zeros_like(plain(t)) if v is None else v, np.zeros_like(plain(v)) if t is None else t, level)
                for v, t in zip(values, tangents)]
    if tape.level:  # inside another gradient: its cotangents are tracked there, one row at a time
        return _rows_one_by_one(tape, g_leaves, inputs, sizes)
    return _rows_at_once(tape, g_leaves, inputs, sizes)


def _seeds(g_leaves, sizes, start, stop):
    """The one-hot cotangents of the gradient's leaves for rows ``start`` to ``stop`` of the Hessian: ``{tape
    index: seed}``, each seed with a leading axis of those rows (a leaf's rows are ``sizes[i]`` of them)."""
    seeds = {}
    offset = 0
    for g_leaf, size in zip(g_leaves, sizes):
        lo, hi = max(start, offset), min(stop, offset + size)
        if lo < hi and type(g_leaf) is Tracked:  # else its rows are zeros (a gradient that is a constant)
            seed = np.zeros((stop - start, *g_leaf.shape), g_leaf.dtype)
            rows = np.arange(lo, hi)
            seed.reshape(stop - start, -1)[rows - start, rows - offset] = 1
            seeds[g_leaf.index] = seeds[g_leaf.index] + seed if g_leaf.index in seeds else seed
        offset += size
    return seeds


def _rows_at_once(tape, g_leaves, inputs, sizes):
    """Per leaf of x, the cotangents of every row of the Hessian (an array with a leading axis of rows), or None
    (a cut leaf, or one no row reaches): one sweep for all rows (`backward_rows`), or for as many as keep
    each cotangent within `sweeps.ROW_ELEMENTS` elements; one row at a time where only one fits (large arrays:
    per element the same work, and no Python overhead to share)."""
    rows = sum(sizes)
    step = min(rows, rows_at_a_time(sum(g.size for g in g_leaves if type(g) is Tracked)))
    parts, counts, start = [], [], 0
    while start < rows:
        if step == 1:
            return _rows_one_by_one(tape, g_leaves, inputs, sizes)
        stop = min(rows, start + step)
        seeds = _seeds(g_leaves, sizes, start, stop)
        try:
            grads = backward_rows(tape, seeds) if seeds else None
        except RowsTooLarge as large:  # a cotangent of these rows would be too large: fewer at a time
            step = large.rows
            continue
        parts.append([None if t is None or grads is None else grads[t.index] for t in inputs])
        counts.append(stop - start)
        start = stop
    if len(parts) == 1:
        return parts[0]
    return [None if t is None or all(part[j] is None for part in parts) else
            np.concatenate([np.zeros((count, *t.shape), t.dtype) if part[j] is None else part[j]
                            for part, count in zip(parts, counts)])
            for j, t in enumerate(inputs)]


def _rows_one_by_one(tape, g_leaves, inputs, sizes):
    """`_rows_at_once` by one sweep per row (`backward`): for a tape whose sweep records on an outer one
    (``tape.level``), or cotangents of which one row fills `sweeps.ROW_ELEMENTS`."""
    columns = [[] for _ in inputs]
    for row in range(sum(sizes)):
        seeds = {index: seed[0] for index, seed in _seeds(g_leaves, sizes, row, row + 1).items()}
        grads = backward(tape, seeds) if seeds else None
        for column, t in zip(columns, inputs):
            if t is not None:
                column.append(None if grads is None else grads[t.index])
    return [None if t is None or all(c is None for c in column) else
            np.stack([np.zeros(t.shape, t.dtype) if c is None else c for c in column])
            for column, t in zip(columns, inputs)]


def _block(column, start, size, row_shape, leaf):
    """``∂²f/∂x_i∂x_j``: the rows ``start : start + size`` (those of leaf i, of ``row_shape``) of leaf j's
    ``column`` of cotangents (None: zeros), of leaf j's dtype, shape ``row_shape + leaf_j.shape``."""
    shape = row_shape + np.shape(leaf)
    dtype = np.result_type(leaf)
    if column is None:
        return np.zeros(shape, dtype)
    rows = column[start : start + size]
    if type(rows) is Dual:  # a Hessian inside a jvp
        return np.reshape(rows, shape)
    if type(rows) is Tracked:  # tracked by the gradient this Hessian is taken in: recorded there
        return np.reshape(rows if rows.dtype == dtype else rows.astype(dtype), shape)
    return np.array(rows, dtype=dtype).reshape(shape)


def hvp(f: Callable[..., Any], *args: Any, vectors: Any = None) -> Any:
    """Hessian-vector product of the real scalar ``f``: ``hvp(f, x, v)`` is ``H(x) · v``; ``hvp(f, *args,
    vectors=(v1, ...))`` the products with respect to several arguments (pytrees, `cut` as in `gradient`).
    Reverse over forward: the gradient of the directional derivative ``jvp(f, x, v)``, one evaluation of f
    and one sweep, a `db.sum` in it one fused pass; where forward mode cannot go (a rule without a tangent on
    tracked values, complex arguments, a gradient taken inside f), the gradient of ``⟨∇f, v⟩`` (reverse over
    reverse).  No dense Hessian.

    >>> db.hvp(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    """
    args, vectors = hvp_arguments(args, vectors)
    for _, scalar, refusals in hvp_compositions(f, args, vectors):
        try:
            return gradient(scalar, *args)
        except refusals:
            pass  # the next composition: as exact, slower


def hvp_compositions(f, args, vectors):
    """The compositions `hvp` tries, fastest first: (name, the real scalar function of ``args`` whose gradient is
    H·v, the errors on which the next is tried).  `explain` of `hvp` names the one that ran."""
    if not any(np.iscomplexobj(leaf) for a in args for leaf in pytree.flatten(a)[0]):
        yield ("reverse over forward (the gradient of jvp(f, x, v)'s tangent)",
               lambda *xs: _tangent_of(jvp(f, tuple(_marked_like(args, xs)), vectors)[1]), _FORWARD_REFUSES)
    yield "reverse over reverse (the gradient of ⟨∇f, v⟩)", lambda *xs: directional_derivative(f, args, xs, vectors), ()


def hvp_arguments(args, vectors):
    """``(args, vectors)`` of a call ``hvp(f, x, v)`` or ``hvp(f, *args, vectors=...)``: one vector per argument."""
    if vectors is None:
        if len(args) != 2:
            raise TypeError("hvp(f, x, v) takes one argument and its vector; for several arguments write "
                            "hvp(f, *args, vectors=(v1, v2, ...))")
        return args[:1], args[1:]
    vectors = (vectors,) if len(args) == 1 else tuple(vectors)
    if len(vectors) != len(args):
        raise ShapeMismatchError(f"hvp got {len(vectors)} vectors for {len(args)} arguments; pass one per argument")
    return args, vectors


def directional_derivative(f, originals, xs, vectors):
    """``⟨∇f(xs), vectors⟩``, the `cut`/`uncut` markers of ``originals`` put back on ``xs``: its gradient is the
    Hessian-vector product, reverse over reverse (a 1-d leaf's term one dot product, no array of terms)."""
    grads = gradient(f, *_marked_like(originals, xs))
    total = 0.0
    for g, v in zip(grads if len(xs) > 1 else (grads,), vectors):
        for gl, vl in zip(pytree.flatten(g)[0] if g is not None else (), pytree.flatten(v)[0]):
            if gl is not None:
                term = np.dot(gl, vl) if np.ndim(gl) == 1 and np.ndim(vl) == 1 else np.sum(gl * vl)
                if complex_valued(term):  # a complex leaf: Re Σ g·v, JAX pairing (its dtype: a recorded value unread)
                    term = np.real(term)
                total = term if type(total) is float and total == 0.0 else total + term
    return total


class _NotScalar(Exception):
    """`hvp`'s ``f`` gave no real scalar: reverse over reverse says what is wrong (`gradient`'s errors)."""


_FORWARD_REFUSES = (UnsupportedFunctionError, KernelError, ValueConversionError, _NotScalar)


def _tangent_of(tangent):
    """The tangent of ``f``'s result in `hvp`, a real scalar."""
    value = plain(tangent)
    if not isinstance(value, (float, np.floating, np.ndarray)) or np.ndim(value) or np.result_type(value).kind != "f":
        raise _NotScalar
    return tangent


def _marked_like(originals, values):
    """``values`` (arguments as a differentiated function receives them: markers removed) with the `cut` and
    `uncut` markers of ``originals`` put back, so that a gradient inside it differentiates what the outer one
    does."""
    marked = []
    for original, value in zip(originals, values):
        treedef = pytree.flatten(original)[1]
        marked.append(pytree.unflatten(treedef, pytree.flatten(value)[0], strip_markers=False)
                      if pytree.has_markers(treedef) else value)
    return marked


def check_gradient(
    f: Callable[..., Any], *args: Any, rtol: float | None = None, atol: float | None = None, step: float | None = None,
    order: int = 1,
) -> float:
    """Compare `gradient` with central finite differences, element by element.

    Finite differences are taken in float64 (float32 arguments are upcast), so
    the check measures the gradient's error, not the step's.  A complex element
    ``z = x + iy`` is moved in x and in y separately, and its gradient compared
    with ``∂f/∂x - i ∂f/∂y`` (JAX's convention).  Raises
    `GradientMismatchError` naming the worst element; returns the largest
    error relative to the tolerance (< 1 means it passed).  At a kink it also
    accepts a gradient that matches the one-sided differences of either side.

    ``order=2`` checks the second derivatives (nested gradients) against central differences of the
    gradient instead, real arguments only.

    >>> print(db.check_gradient(lambda x: np.sum(np.sin(x)), np.array([0.5, 1.0])) < 1)
    True
    """
    if order == 2:
        return _check_second_derivatives(f, args, rtol, atol, step)
    if order != 1:
        raise ValueError(f"check_gradient checks order 1 or 2, not {order!r}")
    grads = gradient(f, *args)
    grads = (grads,) if len(args) == 1 else grads
    low_precision = any(
        getattr(leaf, "dtype", None) in (np.float32, np.complex64) for a in args for leaf in pytree.flatten(a)[0]
    )
    rtol = rtol if rtol is not None else (2e-3 if low_precision else 1e-6)
    atol = atol if atol is not None else (2e-3 if low_precision else 1e-7)
    step = step if step is not None else 1e-6
    args64 = [_to_float64(a) for a in args]
    scale = max(1.0, abs(float(unwrap_tracked(f(*[pytree.without_markers(a) for a in args64])))))
    worst = (0.0, None)
    failures = 0
    for position, (arg, g) in enumerate(zip(args64, grads)):
        if g is None:
            continue
        leaves, treedef = pytree.flatten(arg)
        g_leaves = [g] if treedef is None else pytree.flatten(g)[0]
        flags = pytree.leaf_activity(treedef)
        for k, (leaf, on, g_leaf) in enumerate(zip(leaves, flags, g_leaves)):
            if not on or leaf is None:
                continue
            is_complex = np.iscomplexobj(leaf)
            g_leaf = np.asarray(g_leaf, dtype=np.complex128 if is_complex else np.float64)
            for index in np.ndindex(np.shape(leaf)):
                def error(fd, g=g_leaf[index]):
                    err = abs(g - fd) / (atol * scale + rtol * abs(fd))
                    return err if np.isfinite(err) else np.inf  # a NaN or infinite gradient never passes

                moved = functools.partial(_moved_value, f, args64, position, leaves, treedef, k, index)
                h = step * max(1.0, abs(np.asarray(leaf)[index]))
                fd = (moved(h) - moved(-h)) / (2 * h)
                if is_complex:  # ∂f/∂x - i ∂f/∂y
                    fd = complex(fd, -(moved(1j * h) - moved(-1j * h)) / (2 * h))
                err, sides = error(fd), None
                if err > 1 and not is_complex:  # where f'' jumps (a kink, or x**2 glued to 0) judge against each side
                    sides = _one_sided_differences(moved, h)
                    err = min(err, *map(error, sides))
                failures += err > 1
                if err > worst[0]:
                    worst = (err, (position, k, index, g_leaf[index], fd, sides))
    if worst[0] > 1:
        position, k, index, g_value, fd, sides = worst[1]
        kink = "" if sides is None or _close(*sides, rtol, atol * scale) else (
            f"; the point is a kink (one-sided differences {sides[0]!r} and {sides[1]!r}) and the gradient "
            "matches neither side")
        raise GradientMismatchError(
            f"gradient disagrees with finite differences at {failures} element(s); worst: argument "
            f"{position}, leaf {k}, index {index}: gradient {g_value!r}, finite difference {fd!r}{kink} "
            f"(error {worst[0]:.3g}x the tolerance rtol={rtol}, atol={atol})"
        )
    return worst[0]


_WIDER = {np.dtype(np.float32): np.float64, np.dtype(np.complex64): np.complex128}


def _check_second_derivatives(f, args, rtol, atol, step):
    """`check_gradient(order=2)`: every ∂²f/∂a_i∂a_j of the active elements, a row of the Hessian per pullback
    of the gradient, against central differences of the gradient (taken in float64)."""
    if any(np.iscomplexobj(leaf) for a in args for leaf in pytree.flatten(a)[0]):
        raise ArgumentTypeError("check_gradient(order=2) checks real arguments; pass the real and imaginary "
                                "parts as separate real arguments")
    low_precision = any(getattr(leaf, "dtype", None) == np.float32 for a in args for leaf in pytree.flatten(a)[0])
    rtol = rtol if rtol is not None else (2e-3 if low_precision else 1e-5)
    atol = atol if atol is not None else (2e-3 if low_precision else 1e-6)
    step = step if step is not None else 1e-5
    args64 = [_to_float64(a) for a in args]

    def flat_gradient(*xs):
        grads = gradient(f, *_marked_like(args64, xs))
        pieces = [np.ravel(leaf) for g in (grads if len(xs) > 1 else (grads,)) if g is not None
                  for leaf in pytree.flatten(g)[0] if leaf is not None]
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    g, back = pullback(flat_gradient, *args64)
    n = np.size(g)
    if n == 0:
        return 0.0
    rows = []
    for j in range(n):
        seed = np.zeros(n)
        seed[j] = 1.0
        cotangents = back(seed)
        rows.append(np.concatenate([np.ravel(leaf) for c in (cotangents if len(args) > 1 else (cotangents,))
                                    if c is not None for leaf in pytree.flatten(c)[0] if leaf is not None]))
    hess = np.array(rows).reshape(n, -1)
    scale = max(1.0, float(np.max(np.abs(g), initial=0.0)))
    worst, column, failures = (0.0, None), 0, 0
    for position, arg in enumerate(args64):
        leaves, treedef = pytree.flatten(arg)
        for k, (leaf, on) in enumerate(zip(leaves, pytree.leaf_activity(treedef))):
            if not on or leaf is None:
                continue
            for index in np.ndindex(np.shape(leaf)):
                h = step * max(1.0, abs(np.asarray(leaf)[index]))
                at = functools.partial(_moved_args, args64, position, leaves, treedef, k, index)
                fd = (flat_gradient(*at(h)) - flat_gradient(*at(-h))) / (2 * h)

                def error(fd, column=column):
                    errors = np.abs(hess[:, column] - fd) / (atol * scale + rtol * np.abs(fd))
                    errors[~np.isfinite(errors)] = np.inf  # a NaN or infinite derivative never passes
                    return errors

                errors = error(fd)
                if np.any(errors > 1):  # where the gradient has a kink (a tie, |x|), judge against each side
                    sides = _one_sided_differences(lambda t, at=at: flat_gradient(*at(t)), h)
                    errors = np.minimum(errors, np.minimum(*map(error, sides)))
                failures += int(np.sum(errors > 1))
                j = int(np.argmax(errors))
                if errors[j] > worst[0]:
                    worst = (float(errors[j]), (position, k, index, j, hess[j, column], fd[j]))
                column += 1
    if worst[0] > 1:
        position, k, index, j, value, fd = worst[1]
        raise GradientMismatchError(
            f"second derivatives disagree with finite differences of the gradient at {failures} element(s); "
            f"worst: ∂(gradient element {j})/∂(argument {position}, leaf {k}, index {index}) is {value!r}, "
            f"finite difference {fd!r} (error {worst[0]:.3g}x the tolerance rtol={rtol}, atol={atol})")
    return worst[0]


def _moved_args(args, position, leaves, treedef, k, index, h):
    """The arguments with element ``index`` of leaf ``k`` of argument ``position`` moved by ``h``."""
    leaf = leaves[k]
    x = np.asarray(leaf)[index] + h
    x = complex(x) if np.iscomplexobj(leaf) else float(x)
    if np.ndim(leaf) == 0:
        moved = type(leaf)(x) if not isinstance(leaf, np.ndarray) else np.asarray(x)
    else:
        moved = np.array(leaf, dtype=np.result_type(leaf, np.float64))
        moved[index] = x
    call = list(args)
    call[position] = pytree.unflatten(treedef, leaves[:k] + [moved] + leaves[k + 1 :], strip_markers=False)
    return call


def _to_float64(x):
    leaves, treedef = pytree.flatten(x)
    leaves = [np.asarray(v, _WIDER[v.dtype]) if getattr(v, "dtype", None) in _WIDER else v for v in leaves]
    return pytree.unflatten(treedef, leaves, strip_markers=False)


def _moved_value(f, args, position, leaves, treedef, k, index, h):
    """``f`` at the arguments with element ``index`` of leaf ``k`` of argument ``position`` moved by ``h``
    (an imaginary ``h`` moves a complex element's imaginary part)."""
    call = [pytree.without_markers(a) for a in _moved_args(args, position, leaves, treedef, k, index, h)]
    return float(np.asarray(unwrap_tracked(f(*call))))


def _close(a, b, rtol, atol):
    """Whether a and b agree within the tolerances."""
    return abs(a - b) <= atol + rtol * abs(b)


def _one_sided_differences(moved, h):
    """The right and left derivatives of ``moved(t)`` at 0, second-order accurate."""
    centre = moved(0.0)
    right = (-3 * centre + 4 * moved(h) - moved(2 * h)) / (2 * h)
    left = (3 * centre - 4 * moved(-h) + moved(-2 * h)) / (2 * h)
    return right, left
