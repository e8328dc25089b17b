"""Cases for the linalg rules: scalar, vector, matrix and batched (broadcast) operands, well-conditioned matrices.

The decompositions and pinv, lstsq, cond are in decompositions.py."""

import warnings

import numpy as np
from hypothesis import strategies as st

from . import Arg, Case, X, Y, array_shape, broadcast_shapes, call, uniform


def side(draw):
    """One axis length, 1 to 4."""
    return draw(st.integers(1, 4))


def operands(draw, dtype, *shapes):
    """One random array per shape."""
    return [uniform(draw, s, dtype) for s in shapes]


# --- dot, inner, outer, vdot, tensordot ------------------------------------------------
def build_dot(ndims):
    """np.dot of a ``ndims[0]``-d and a ``ndims[1]``-d operand with matching contracted axes."""

    def build(draw, dtype):
        a, b = array_shape(draw, ndims[0], ndims[0]), list(array_shape(draw, ndims[1], ndims[1]))
        if ndims[0] and ndims[1]:
            b[max(ndims[1] - 2, 0)] = a[-1]
        return call(draw, np.dot, X, Y), operands(draw, dtype, a, tuple(b))

    return build


# every other pair of ranks up to 3, 0-d (a NumPy scalar) included: np.dot's pullback is chosen by the
# pair (vectors and matrices by formula, the rest as einsum), so each pair is a case of its own
OTHER_DOT_RANKS = [(a, b) for a in range(4) for b in range(4) if (a, b) not in {(1, 1), (2, 1), (1, 2), (2, 2), (3, 3)}]


def build_dot_with_scalar(draw, dtype):
    shapes = [(), array_shape(draw, min_dims=0)]
    return call(draw, np.dot, X, Y), operands(draw, dtype, *(shapes if draw(st.booleans()) else shapes[::-1]))


def build_inner(draw, dtype):
    n = side(draw)
    a, b = array_shape(draw, 0, 2), array_shape(draw, 0, 2)
    a, b = (a, b) if not a or not b else (a[:-1] + (n,), b[:-1] + (n,))
    return np.inner, operands(draw, dtype, a, b)


def build_outer(draw, dtype):
    built = call(draw, np.outer, X, Y)
    return built, operands(draw, dtype, array_shape(draw, min_dims=0, max_dims=2),
                           array_shape(draw, min_dims=0, max_dims=2))


def build_vdot(draw, dtype):
    """Operands of equal size and different shapes (vdot flattens both)."""
    n, m = side(draw), side(draw)
    return np.vdot, operands(draw, dtype, (n, m), draw(st.sampled_from([(n * m,), (m, n), (n, 1, m)])))


def build_tensordot_int(draw, dtype):
    """axes=N: the last N axes of a with the first N of b (N = 0 is the outer product)."""
    n = draw(st.integers(0, 2))
    shared = array_shape(draw, n, n) if n else ()
    a = array_shape(draw, 0, 2) + shared
    b = shared + array_shape(draw, 0, 2)
    return call(draw, np.tensordot, X, Y, axes=n), operands(draw, dtype, a, b)


def build_tensordot_pairs(draw, dtype):
    """axes=(axes of a, axes of b): any order, negative axes, a single int for one pair."""
    a = array_shape(draw, 2, 3)
    k = draw(st.integers(1, 2))
    axes_a = draw(st.permutations(range(len(a))))[:k]
    b_ndim = k + draw(st.integers(0, 1))
    axes_b = draw(st.permutations(range(b_ndim)))[:k]
    b = [side(draw) for _ in range(b_ndim)]
    for i, j in zip(axes_a, axes_b):
        b[j] = a[i]
    axes_a = [i - len(a) * draw(st.booleans()) for i in axes_a]
    axes = (axes_a[0], axes_b[0]) if k == 1 and draw(st.booleans()) else (axes_a, axes_b)
    return call(draw, np.tensordot, X, Y, axes=axes), operands(draw, dtype, a, tuple(b))


# --- matmul -------------------------------------------------------------------------------
def build_matmul(draw, dtype):
    """Stacks of matrices with broadcast batch axes (size-1 and missing axes)."""
    batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2)
    n, k, m = side(draw), side(draw), side(draw)
    return np.matmul, operands(draw, dtype, batch_a + (n, k), batch_b + (k, m))


def build_matmul_vector(draw, dtype):
    """A 1-d operand on the left, the right or both, the other possibly batched."""
    k = side(draw)
    matrix = array_shape(draw, 0, 2) + (k, side(draw))
    kind = draw(st.sampled_from(["vector @ matrix", "matrix @ vector", "vector @ vector"]))
    if kind == "vector @ matrix":
        return np.matmul, operands(draw, dtype, (k,), matrix)
    if kind == "matrix @ vector":
        return np.matmul, operands(draw, dtype, matrix[:-2] + (matrix[-1], k), (k,))
    return (lambda x, y: x @ y), operands(draw, dtype, (k,), (k,))


# --- einsum -------------------------------------------------------------------------------
def einsum_case(subscripts, name, ellipsis_dims=0):
    """np.einsum(subscripts, ...) with one drawn size per letter; ``...`` draws broadcast batch shapes."""
    terms = subscripts.split("->")[0].split(",")

    def build(draw, dtype):
        letters = sorted(set(subscripts) - set(".,->"))
        size = {c: side(draw) for c in letters}
        batches = broadcast_shapes(draw, len(terms), max_dims=ellipsis_dims) if ellipsis_dims else [()] * len(terms)
        shapes = []
        for term, batch in zip(terms, batches):
            before, dots, after = term.partition("...")
            shapes.append(tuple(size[c] for c in before) + (batch if dots else ()) + tuple(size[c] for c in after))
        einsum = call(draw, np.einsum, subscripts, *[Arg(k) for k in range(len(terms))])
        return einsum, operands(draw, dtype, *shapes)

    return Case(np.einsum, build, name=f"einsum_{name}")


# --- trace --------------------------------------------------------------------------------
def build_trace(draw, dtype):
    return call(draw, np.trace, X), operands(draw, dtype, array_shape(draw, 2, 2))


def build_trace_options(draw, dtype):
    """offset of either sign, axes anywhere (negative, axis1 > axis2) in a 3-d or 4-d array."""
    s = array_shape(draw, 3, 4)
    axis1, axis2 = draw(st.lists(st.integers(0, len(s) - 1), min_size=2, max_size=2, unique=True))
    axis1 -= len(s) * draw(st.booleans())
    offset = draw(st.integers(-2, 2))
    return call(draw, np.trace, X, offset, axis1, axis2), operands(draw, dtype, s)


# --- inv, solve, det, slogdet ----------------------------------------------------------------
def well_conditioned(draw, dtype, batch=(), n=None, negative_det=False):
    """A stack of diagonally dominant matrices: small off-diagonal noise plus 3 I.

    ``negative_det`` flips the sign of each matrix's first row, so det < 0.
    """
    n = n or side(draw)
    a = uniform(draw, batch + (n, n), dtype, -0.5, 0.5) + 3 * np.eye(n, dtype=dtype)
    if negative_det:
        a[..., 0, :] *= -1
    return a


def build_matrix_function(func, negative_det=False):
    def build(draw, dtype):
        batch = array_shape(draw, 0, 1)
        return func, [well_conditioned(draw, dtype, batch, negative_det=negative_det)]

    return build


def build_solve(b_kind):
    """b a vector, a matrix of k columns, or a batch broadcast against a's batch."""

    def build(draw, dtype):
        n = side(draw)
        batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2) if b_kind == "batched" else ((), ())
        a = well_conditioned(draw, dtype, batch_a, n)
        b_shape = (n,) if b_kind == "vector" else batch_b + (n, side(draw))
        return np.linalg.solve, [a, uniform(draw, b_shape, dtype)]

    return build


def build_solve_batched_a_vector_b(draw, dtype):
    n = side(draw)
    return np.linalg.solve, [well_conditioned(draw, dtype, array_shape(draw, 1, 1), n), uniform(draw, (n,), dtype)]


CASES = [
    Case(np.dot, build_dot_with_scalar, name="dot_scalar"),
    Case(np.dot, build_dot((1, 1)), name="dot_vector_vector"),
    Case(np.dot, build_dot((2, 1)), name="dot_matrix_vector"),
    Case(np.dot, build_dot((1, 2)), name="dot_vector_matrix"),
    Case(np.dot, build_dot((2, 2)), name="dot_matrix_matrix"),
    Case(np.dot, build_dot((3, 3)), name="dot_nd_md"),
    *[Case(np.dot, build_dot(ndims), name=f"dot_{ndims[0]}d_{ndims[1]}d") for ndims in OTHER_DOT_RANKS],
    Case(np.inner, build_inner),
    Case(np.outer, build_outer),
    Case(np.vdot, build_vdot),
    Case(np.tensordot, build_tensordot_int, name="tensordot_axes_int"),
    Case(np.tensordot, build_tensordot_pairs, name="tensordot_axes_pairs"),
    Case(np.matmul, build_matmul, name="matmul_batched_broadcast"),
    Case(np.matmul, build_matmul_vector, name="matmul_1d_operands"),
    einsum_case("ij,jk->ik", "matmul_explicit"),
    einsum_case("ij,jk", "matmul_implicit"),
    einsum_case("ij,jk,kl->il", "three_operands"),
    einsum_case("ba,b,a", "implicit_scalar"),
    einsum_case("ii->", "trace"),
    einsum_case("ii->i", "diagonal"),
    einsum_case("iij,j->ij", "diagonal_times_vector"),
    einsum_case("ij->", "sum_all"),
    einsum_case("ijk->kj", "sum_and_transpose"),
    einsum_case("i,j->ij", "outer"),
    einsum_case("i,i", "inner_implicit"),
    einsum_case("...ij,...jk->...ik", "ellipsis_batched_matmul", ellipsis_dims=2),
    einsum_case("...i,i...", "ellipsis_implicit", ellipsis_dims=1),
    Case(np.trace, build_trace),
    Case(np.trace, build_trace_options, name="trace_offset_axes"),
    Case(np.linalg.inv, build_matrix_function(np.linalg.inv), name="inv"),
    Case(np.linalg.solve, build_solve("vector"), name="solve_vector_b"),
    Case(np.linalg.solve, build_solve("matrix"), name="solve_matrix_b"),
    Case(np.linalg.solve, build_solve("batched"), name="solve_batched_broadcast"),
    Case(np.linalg.solve, build_solve_batched_a_vector_b, name="solve_batched_a_vector_b"),
    Case(np.linalg.det, build_matrix_function(np.linalg.det), name="det"),
    Case(np.linalg.det, build_matrix_function(np.linalg.det, negative_det=True), name="det_negative"),
    Case(np.linalg.slogdet, build_matrix_function(np.linalg.slogdet), name="slogdet"),
    Case(np.linalg.slogdet, build_matrix_function(np.linalg.slogdet, negative_det=True), name="slogdet_negative"),
]


# --- matrix_power, tensorsolve, tensorinv ----------------------------------------------------------------------
def build_matrix_power(draw, dtype):
    """n negative (through inv), 0 (the identity: gradient 0) and positive, batched."""
    a = well_conditioned(draw, dtype, array_shape(draw, 0, 2, max_side=3)) / 3
    return call(draw, np.linalg.matrix_power, X, draw(st.integers(-3, 4))), [a]


def build_tensorsolve(draw, dtype):
    """a of shape b.shape + x.shape (a square matrix as NumPy sees it), with or without ``axes`` moved last."""
    b_shape, x_shape = draw(st.sampled_from([((6,), (2, 3)), ((2, 3), (6,)), ((2, 2), (4,)), ((2, 2), (2, 2)),
                                             ((3,), (3,)), ((1,), (1, 1))]))
    moved = well_conditioned(draw, dtype, (), int(np.prod(b_shape))).reshape(b_shape + x_shape)
    axes = None
    if draw(st.booleans()):
        ndim = moved.ndim
        axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=2, unique=True))
        order = [i for i in range(ndim) if i not in axes] + axes
        moved = np.transpose(moved, np.argsort(order)).copy()
    solve = call(draw, np.linalg.tensorsolve, X, Y, axes) if axes else call(draw, np.linalg.tensorsolve, X, Y)
    return solve, [moved, uniform(draw, b_shape, dtype)]


def build_tensorinv(draw, dtype):
    front, back = draw(st.sampled_from([((4,), (2, 2)), ((2, 3), (6,)), ((2, 2), (2, 2)), ((3,), (3,))]))
    a = well_conditioned(draw, dtype, (), int(np.prod(front))).reshape(front + back)
    return call(draw, np.linalg.tensorinv, X, ind=len(front)), [a]


# --- multi_dot, kron, cross ---------------------------------------------------------------------------------------
def build_multi_dot(draw, dtype):
    """2 to 4 arrays (the first three differentiated), a 1-d first or last array a row or column vector."""
    n = draw(st.integers(2, 4))
    sides = [side(draw) for _ in range(n + 1)]
    shapes = [(sides[i], sides[i + 1]) for i in range(n)]
    if draw(st.booleans()):
        shapes[0] = shapes[0][1:]
    if draw(st.booleans()):
        shapes[-1] = shapes[-1][:1]
    arrays = operands(draw, dtype, *shapes)
    held = [Arg(i) if i < 3 else arrays[i] for i in range(n)]
    return call(draw, np.linalg.multi_dot, held), arrays[: min(n, 3)]


def build_kron(draw, dtype):
    """Any ranks 0 to 3 (NumPy pads the lower rank with leading 1s)."""
    shapes = [array_shape(draw, 0, 3, max_side=3) for _ in range(2)]
    return np.kron, operands(draw, dtype, *shapes)


def build_cross(draw, dtype):
    """2- and 3-vectors (two 2-vectors give a scalar), broadcast batches, the vector axis anywhere."""
    da, db_ = draw(st.sampled_from([(3, 3), (3, 2), (2, 3)]))
    batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2, max_side=3)
    axisa = draw(st.integers(-len(batch_a) - 1, len(batch_a)))
    axisb = draw(st.integers(-len(batch_b) - 1, len(batch_b)))
    a = np.moveaxis(uniform(draw, batch_a + (da,), dtype), -1, axisa)
    b = np.moveaxis(uniform(draw, batch_b + (db_,), dtype), -1, axisb)
    out_ndim = len(np.broadcast_shapes(batch_a, batch_b)) + 1
    axisc = draw(st.integers(-out_ndim, out_ndim - 1))
    return quietly(call(draw, np.cross, X, Y, axisa, axisb, axisc)), [a, b]


def build_cross_one_axis(draw, dtype):
    """``axis=`` for every operand, and the result (3-vectors)."""
    batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2, max_side=3)
    ndim = max(len(batch_a), len(batch_b)) + 1
    axis = draw(st.integers(-ndim, -1))
    a = np.moveaxis(uniform(draw, (1,) * (ndim - 1 - len(batch_a)) + batch_a + (3,), dtype), -1, axis)
    b = np.moveaxis(uniform(draw, (1,) * (ndim - 1 - len(batch_b)) + batch_b + (3,), dtype), -1, axis)
    func = draw(st.sampled_from([np.cross, np.linalg.cross]))
    return call(draw, func, X, Y, axis=axis), [a, b]


def quietly(cross):
    """``cross`` without NumPy 2's DeprecationWarning for 2-vectors (which it still computes)."""

    def quiet(*args):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Arrays of 2-dimensional vectors", DeprecationWarning)
            return cross(*args)

    return quiet


def build_cross_planar(draw, dtype):
    """Two 2-vectors: the z component alone."""
    batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2, max_side=3)
    return quietly(np.cross), [uniform(draw, batch_a + (2,), dtype), uniform(draw, batch_b + (2,), dtype)]


# --- einsum's sublist form ---------------------------------------------------------------------------------------
def sublist_case(sublists, output, name):
    """np.einsum(a, sublist_a, b, sublist_b, ..., [output]), the first three operands differentiated."""

    def build(draw, dtype):
        size = {i: side(draw) for sub in sublists for i in sub if i is not Ellipsis}
        batch = array_shape(draw, 0, 2, max_side=3)
        shapes = [tuple(d for i in sub for d in (batch if i is Ellipsis else (size[i],))) for sub in sublists]
        arrays = operands(draw, dtype, *shapes)
        args = [x for k, sub in enumerate(sublists) for x in (Arg(k) if k < 3 else arrays[k], list(sub))]
        args += [list(output)] if output is not None else []
        return call(draw, np.einsum, *args), arrays[:3]

    return Case(np.einsum, build, name=f"einsum_sublist_{name}")


def build_einsum_five_operands(draw, dtype):
    """A chain of five matrices, the first three differentiated and two constants."""
    sizes = [side(draw) for _ in range(6)]
    arrays = operands(draw, dtype, *[(sizes[i], sizes[i + 1]) for i in range(5)])
    einsum = call(draw, np.einsum, "ab,bc,cd,de,ef->af", X, Y, Arg(2), arrays[3], arrays[4])
    return einsum, arrays[:3]


# --- NumPy 2's np.linalg names and the gufuncs np.vecdot, np.matvec, np.vecmat ---------------------------------------
def build_linalg_matmul(draw, dtype):
    batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2)
    n, k, m = side(draw), side(draw), side(draw)
    return np.linalg.matmul, operands(draw, dtype, batch_a + (n, k), batch_b + (k, m))


def build_linalg_outer(draw, dtype):
    return np.linalg.outer, operands(draw, dtype, (side(draw),), (side(draw),))


def build_linalg_trace_or_diagonal(func):
    def build(draw, dtype):
        s = array_shape(draw, 2, 4)
        return call(draw, func, X, offset=draw(st.integers(-2, 2))), [uniform(draw, s, dtype)]

    return build


def build_matrix_transpose(func):
    return lambda draw, dtype: (func, [uniform(draw, array_shape(draw, 2, 4), dtype)])


def build_linalg_tensordot(draw, dtype):
    """axes an int (the last N of x1 with the first N of x2) or a pair of axis lists."""
    n = draw(st.integers(0, 2))
    shared = array_shape(draw, n, n) if n else ()
    a, b = array_shape(draw, 0, 2) + shared, shared + array_shape(draw, 0, 2)
    axes = n
    if n and draw(st.booleans()):
        axes = (list(range(len(a) - n, len(a))), list(range(n)))
    return call(draw, np.linalg.tensordot, X, Y, axes=axes), operands(draw, dtype, a, b)


def build_vecdot(func):
    """Broadcast batches, the vector axis given (negative) or the default last one."""

    def build(draw, dtype):
        n = side(draw)
        batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2, max_side=3)
        a, b = uniform(draw, batch_a + (n,), dtype), uniform(draw, batch_b + (n,), dtype)
        if func is np.linalg.vecdot and draw(st.booleans()):
            axis = -1 - draw(st.integers(0, min(len(batch_a), len(batch_b))))
            a, b = np.moveaxis(a, -1, axis), np.moveaxis(b, -1, axis)
            return call(draw, func, X, Y, axis=axis), [a, b]
        return func, [a, b]

    return build


def build_matvec(func):
    def build(draw, dtype):
        n, m = side(draw), side(draw)
        batch_a, batch_b = broadcast_shapes(draw, 2, max_dims=2, max_side=3)
        if func is np.matvec:
            return func, operands(draw, dtype, batch_a + (m, n), batch_b + (n,))
        return func, operands(draw, dtype, batch_a + (n,), batch_b + (n, m))

    return build


def build_vector_norm(ord):
    """axis None (every axis as one vector), an int or a tuple; keepdims; nonzero elements (no kink)."""

    def build(draw, dtype):
        s = array_shape(draw, 1, 3)
        axis = draw(st.one_of(st.none(), st.integers(-len(s), len(s) - 1),
                              st.lists(st.integers(0, len(s) - 1), min_size=1, max_size=len(s), unique=True)
                              .map(tuple)))
        x = uniform(draw, s, dtype, 0.2, 2) * np.sign(uniform(draw, s, dtype))
        return call(draw, np.linalg.vector_norm, X, axis=axis, keepdims=draw(st.booleans()), ord=ord), [x]

    return build


def build_matrix_norm(ord):
    def build(draw, dtype):
        from .decompositions import with_singular_values  # well-separated singular values for 2, -2, 'nuc'

        a = with_singular_values(draw, dtype, array_shape(draw, 0, 2, max_side=3), side(draw), side(draw))
        return call(draw, np.linalg.matrix_norm, X, keepdims=draw(st.booleans()), ord=ord), [a]

    return build


MATRIX_ORDS = ("fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf)

CASES += [
    Case(np.linalg.matrix_power, build_matrix_power, name="matrix_power"),
    Case(np.linalg.tensorsolve, build_tensorsolve, name="tensorsolve"),
    Case(np.linalg.tensorinv, build_tensorinv, name="tensorinv"),
    Case(np.linalg.multi_dot, build_multi_dot, name="multi_dot"),
    Case(np.kron, build_kron, name="kron"),
    Case(np.cross, build_cross, name="cross_axes"),
    Case(np.cross, build_cross_one_axis, name="cross_axis"),
    Case(np.cross, build_cross_planar, name="cross_planar"),
    Case(np.linalg.cross, build_cross_one_axis, name="linalg_cross"),
    sublist_case([[0, 1], [1, 2]], [0, 2], "matmul"),
    sublist_case([[0, 1], [1, 2]], None, "matmul_implicit"),
    sublist_case([[0, 0]], [], "trace"),
    sublist_case([[Ellipsis, 0, 1], [Ellipsis, 1, 2], [2]], [Ellipsis, 0], "ellipsis_three"),
    sublist_case([[0, 1], [1, 2], [2, 3], [3, 0], [1]], [], "five_operands"),
    Case(np.einsum, build_einsum_five_operands, name="einsum_five_operands"),
    Case(np.linalg.matmul, build_linalg_matmul, name="linalg_matmul"),
    Case(np.linalg.outer, build_linalg_outer, name="linalg_outer"),
    Case(np.linalg.trace, build_linalg_trace_or_diagonal(np.linalg.trace), name="linalg_trace"),
    Case(np.linalg.diagonal, build_linalg_trace_or_diagonal(np.linalg.diagonal), name="linalg_diagonal"),
    *[Case(f, build_matrix_transpose(f), name=n) for f, n in [(np.linalg.matrix_transpose, "linalg_matrix_transpose"),
                                                                (np.matrix_transpose, "matrix_transpose")]],
    Case(np.linalg.tensordot, build_linalg_tensordot, name="linalg_tensordot"),
    Case(np.linalg.vecdot, build_vecdot(np.linalg.vecdot), name="linalg_vecdot"),
    Case(np.vecdot, build_vecdot(np.vecdot), name="vecdot"),
    Case(np.matvec, build_matvec(np.matvec), name="matvec"),
    Case(np.vecmat, build_matvec(np.vecmat), name="vecmat"),
    *[Case(np.linalg.vector_norm, build_vector_norm(ord), name=f"vector_norm_ord_{ord}")
      for ord in (2, 1, 3, 0.5, -1, np.inf, -np.inf, 0)],
    *[Case(np.linalg.matrix_norm, build_matrix_norm(ord), name=f"matrix_norm_ord_{ord}") for ord in MATRIX_ORDS],
]
