"""Reverse rules of linear algebra: products, contractions and the matrix functions.

dot, matmul, inner, outer, vdot, tensordot, einsum (subscripts and sublist forms), multi_dot, kron,
cross, trace, inv, solve, det, slogdet, matrix_power, tensorsolve, tensorinv, and NumPy 2's
np.linalg.matmul/outer/trace/diagonal/vecdot/cross/tensordot/matrix_transpose/vector_norm/matrix_norm
(and np.matrix_transpose) and the
gufuncs np.vecdot, np.matvec, np.vecmat (which reach the tape through ``__array_ufunc__``, as
np.matmul does).  The decompositions (svd, eigh, eig, cholesky, qr) and the functions NumPy computes
through the SVD (pinv, lstsq, cond) are in decompositions.py; np.linalg.norm is in reductions.py.

The contractions (einsum, and dot/inner/tensordot written as einsum subscripts)
share one rule: the cotangent of an operand is the einsum of ``g`` with the
other operands, producing that operand's subscripts.  matmul is written with
``@`` (C̄ = G Bᵀ, B̄ = Aᵀ G) so batched products stay on BLAS; broadcast batch
axes are summed back with `unbroadcast`.  The matrix functions use the
classical formulas (Ā = -A⁻ᵀ G A⁻ᵀ for inv, det · A⁻ᵀ for det, ...), so they
need invertible matrices.

Complex values (JAX's convention, rules/complex.py): the products and matrix functions are holomorphic and
their rules, written with plain transposes, hold as they are; np.vecdot/np.linalg.vecdot (Σ conj(x₁) x₂)
and np.vecmat (xᴴ A) conjugate their first argument and have complex rules of their own; vector_norm and
matrix_norm are np.linalg.norm's rule, written with conjugates (x / ‖x‖, u vᴴ), whose complex rule
conjugates the cotangents (`conjugate_cotangents`, also the decompositions').  slogdet is not done: its
sign, det / |det|, is not piecewise constant for complex matrices (an error on them).
"""
import functools
import math
import string

import numpy as np

from ..pullbacks import as_array, unbroadcast
from ..registry import (
    RULES,
    defjvp,
    deflinear,
    defmultilinear,
    defvjp,
    defvjp_argnum,
    defvjp_complex,
    defvjp_outputs,
    defvjp_sequence,
    holds_for_complex,
)
from .reductions import norm_vjp
from .shape import diagonal_vjp


def matrix_transpose(x):
    """Swap the last two axes (a stack of matrices transposed)."""
    return np.swapaxes(x, -1, -2)


def adjoint(x):
    """Xᴴ: the conjugate transpose of a stack of matrices (the transpose of a real one)."""
    return np.conjugate(np.swapaxes(x, -1, -2)) if np.iscomplexobj(x) else np.swapaxes(x, -1, -2)


def conjugate_cotangents(maker):
    """The complex rule (JAX's convention) of a rule written with conjugate transposes, as the literature
    writes complex matrix derivatives: for the pairing Re tr(Āᴴ dA) instead of JAX's Re tr(Āᵀ dA), so
    JAX's cotangents are the conjugates of its, on the way in and out: ``Ā = conj(rule(conj(G)))``.
    ``maker`` may take any arguments (a per-argument, argnum or output rule); a None pullback stays None."""
    @functools.wraps(maker)
    def complex_maker(*args, **kwargs):
        back = maker(*args, **kwargs)
        return None if back is None else (lambda g: np.conjugate(back(np.conjugate(g))))

    return complex_maker


# --- einsum and the contractions written as einsum ------------------------------
def explicit_subscripts(subscripts, operands):
    """``(input terms, output term)`` of einsum ``subscripts``: implicit output made
    explicit and every ``...`` spelled out in unused letters."""
    spec = subscripts.replace(" ", "")
    lhs, arrow, output = spec.partition("->")
    terms = lhs.split(",")
    if not arrow:  # implicit output: "..." first, then the letters used once, sorted
        letters = lhs.replace(".", "").replace(",", "")
        once = sorted(c for c in set(letters) if letters.count(c) == 1)
        output = ("..." if "..." in lhs else "") + "".join(once)
    widths = [np.ndim(op) - len(t) + 3 for t, op in zip(terms, operands) if "..." in t]
    spare = (c for c in string.ascii_letters if c not in spec)
    dots = "".join(next(spare) for _ in range(max(widths, default=0)))

    def spell(term, width):
        return term.replace("...", dots[len(dots) - width :])

    terms = [spell(t, np.ndim(op) - len(t) + 3) for t, op in zip(terms, operands)]
    return terms, spell(output, len(dots))


def einsum_pullback(k, subscripts, operands):
    """The pullback of operand ``k`` of ``np.einsum(subscripts, *operands)``.

    x̄ = einsum(g, other operands -> subscripts of x).  A repeated index of x
    (a diagonal, a trace) gets a fresh letter tied to it by an identity matrix;
    an index summed in x alone gets a vector of ones; axes where x was
    broadcast are summed back.
    """
    terms, output = explicit_subscripts(subscripts, operands)
    x = operands[k]
    shape, dtype = np.shape(x), np.result_type(x)
    size = dict(zip(terms[k], shape))
    spare = (c for c in string.ascii_letters if c not in "".join(terms) + output)
    target, extra_terms, extras = "", [], []
    for c in terms[k]:
        if c in target:
            fresh = next(spare)
            extra_terms.append(c + fresh)
            extras.append(np.eye(size[c], dtype=dtype))
            c = fresh
        target += c
    others = [j for j in range(len(operands)) if j != k]
    known = output + "".join(terms[j] for j in others) + "".join(extra_terms)
    for c in dict.fromkeys(target):
        if c not in known:
            extra_terms.append(c)
            extras.append(np.ones(size[c], dtype=dtype))
    spec = ",".join([output] + [terms[j] for j in others] + extra_terms) + "->" + target
    rest = [operands[j] for j in others] + extras
    return lambda g: unbroadcast(np.einsum(spec, g, *rest, optimize=True), shape)


def sublist_subscripts(args):
    """The subscripts string and operands of ``np.einsum(op0, sublist0, op1, sublist1, ..., [output])``."""
    def term(sublist):
        return "".join("..." if i is Ellipsis else string.ascii_letters[i] for i in sublist)

    n = len(args) // 2
    terms = [term(sublist) for sublist in args[1 : 2 * n : 2]]
    output = "->" + term(args[-1]) if len(args) % 2 else ""
    return ",".join(terms) + output, args[0 : 2 * n : 2]


def einsum_vjp(argnum, ans, subscripts, /, *operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    """np.einsum: in the subscripts-string form argument ``argnum`` is operand ``argnum - 1``; in the
    sublist form (``np.einsum(a, [0, 1], b, [1, 2], [0, 2])``) operand ``argnum // 2``.

    The keywords change no derivative (the tape keeps each cotangent in its value's dtype).
    """
    if isinstance(subscripts, str):
        return einsum_pullback(argnum - 1, subscripts, operands)
    spec, arrays = sublist_subscripts((subscripts, *operands))
    return einsum_pullback(argnum // 2, spec, arrays)


def contraction_subscripts(ndim_a, ndim_b, axes_a, axes_b):
    """einsum subscripts of ``np.tensordot(a, b, axes=(axes_a, axes_b))``."""
    axes_a = [i % ndim_a for i in axes_a]
    axes_b = [j % ndim_b for j in axes_b]
    a = list(string.ascii_letters[:ndim_a])
    b = list(string.ascii_letters[ndim_a : ndim_a + ndim_b])
    for i, j in zip(axes_a, axes_b):
        b[j] = a[i]
    out = [c for i, c in enumerate(a) if i not in axes_a] + [c for j, c in enumerate(b) if j not in axes_b]
    return "".join(a) + "," + "".join(b) + "->" + "".join(out)


def as_axis_list(axes):
    """One axis or a sequence of axes, as a list."""
    return [axes] if isinstance(axes, (int, np.integer)) else list(axes)


def tensordot_subscripts(ndim_a, ndim_b, axes=2):
    """``axes=N``: the last N axes of a with the first N of b; or a pair of axis sequences."""
    if isinstance(axes, (int, np.integer)):
        return contraction_subscripts(ndim_a, ndim_b, range(ndim_a - axes, ndim_a), range(axes))
    return contraction_subscripts(ndim_a, ndim_b, *map(as_axis_list, axes))


def dot_subscripts(ndim_a, ndim_b):
    """A scalar operand multiplies; otherwise the last axis of a with b's last (1-d) or second-to-last."""
    if ndim_a == 0 or ndim_b == 0:
        return contraction_subscripts(ndim_a, ndim_b, [], [])
    return contraction_subscripts(ndim_a, ndim_b, [-1], [max(ndim_b - 2, 0)])


# np.dot of vectors and matrices, by (a.ndim, b.ndim): ā from (b, g) and b̄ from (a, g).  Each keeps
# only the other operand.  Prepared programs write these same formulas inline (replay.py).
DOT_PULLBACKS = {
    (1, 1): (lambda b, g: g * b, lambda a, g: g * a),
    (2, 2): (lambda b, g: g @ b.T, lambda a, g: a.T @ g),
    (1, 2): (lambda b, g: b @ g, lambda a, g: np.outer(a, g)),
    (2, 1): (lambda b, g: np.outer(g, b), lambda a, g: g @ a),
}


def dot_vjp(k):
    """np.dot of vectors and matrices by its formulas (`DOT_PULLBACKS`); other ranks as einsum.

    Vectors and matrices are the hot path (a dot per column in a loop), where an
    einsum pullback would cost far more than the product itself.
    """
    general = contraction_vjp(k, dot_subscripts)

    def vjp(ans, a, b, out=None):
        formulas = DOT_PULLBACKS.get((_rank(a), _rank(b)))
        if formulas is None:
            return general(ans, a, b)
        return functools.partial(formulas[k], b if k == 0 else a)

    return vjp


def _rank(x):
    return x.ndim if type(x) is np.ndarray else np.ndim(x)


def inner_subscripts(ndim_a, ndim_b):
    """A scalar operand multiplies; otherwise the last axes of a and b."""
    if ndim_a == 0 or ndim_b == 0:
        return contraction_subscripts(ndim_a, ndim_b, [], [])
    return contraction_subscripts(ndim_a, ndim_b, [-1], [-1])


def contraction_vjp(k, subscripts_of):
    """vjp maker of operand ``k`` of ``f(a, b) = np.einsum(subscripts_of(a.ndim, b.ndim), a, b)``."""

    def vjp(ans, a, b):
        return einsum_pullback(k, subscripts_of(np.ndim(a), np.ndim(b)), (a, b))

    return vjp


def tensordot_vjp(k):
    """vjp maker of operand ``k`` of ``np.tensordot(a, b, axes)``, a contraction written as einsum."""

    def vjp(ans, a, b, axes=2):
        return einsum_pullback(k, tensordot_subscripts(np.ndim(a), np.ndim(b), axes), (a, b))

    return vjp


# --- matmul, outer, vdot ------------------------------------------------------------
def as_matrix(x, vector_axis):
    """A 1-d matmul operand as the matrix matmul treats it: a row (axis 0) for a, a column (axis 1) for b."""
    return np.expand_dims(x, vector_axis) if np.ndim(x) == 1 else x


def matmul_vjp(k):
    """C = A B over broadcast stacks: Ā = G Bᵀ, B̄ = Aᵀ G, batch axes summed back.

    The maker takes the ufunc keywords the tape lets through, which change no derivative, by name:
    any other (``axes=``, ...) is an error, not ignored.
    """

    def vjp(ans, a, b, /, *, casting="same_kind", order="K", subok=True):
        a_vector, b_vector = np.ndim(a) == 1, np.ndim(b) == 1

        def as_matrices(g):  # g with the axes matmul dropped for 1-d operands restored
            g = np.expand_dims(g, -1) if b_vector else g
            return np.expand_dims(g, -2) if a_vector else g

        if k == 0:
            shape, matrix_shape, b = np.shape(a), np.shape(as_matrix(a, 0)), as_matrix(b, 1)
            return lambda g: unbroadcast(as_matrices(g) @ matrix_transpose(b), matrix_shape).reshape(shape)
        shape, matrix_shape, a = np.shape(b), np.shape(as_matrix(b, 1)), as_matrix(a, 0)
        return lambda g: unbroadcast(matrix_transpose(a) @ as_matrices(g), matrix_shape).reshape(shape)

    return vjp


def outer_a(ans, a, b, out=None):
    """C = vec(a) vec(b)ᵀ: ā = G vec(b)."""
    shape, b = np.shape(a), np.ravel(b)
    return lambda g: (g @ b).reshape(shape)


def outer_b(ans, a, b, out=None):
    """C = vec(a) vec(b)ᵀ: b̄ = Gᵀ vec(a)."""
    shape, a = np.shape(b), np.ravel(a)
    return lambda g: (a @ g).reshape(shape)


def vdot_a(ans, a, b):
    """c = vec(a) · vec(b): ā = g b."""
    b = np.reshape(b, np.shape(a))
    return lambda g: g * b


def vdot_b(ans, a, b):
    """c = vec(a) · vec(b): b̄ = g a."""
    a = np.reshape(a, np.shape(b))
    return lambda g: g * a


# --- trace ------------------------------------------------------------------------
def trace_vjp(ans, a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """tr = Σᵢ a[i, i + offset]: ā = g on that diagonal, 0 elsewhere."""
    ndim = np.ndim(a)
    axis1, axis2 = axis1 % ndim, axis2 % ndim
    diagonal = np.eye(np.shape(a)[axis1], np.shape(a)[axis2], offset, dtype=np.result_type(a))
    if axis1 > axis2:  # expand_dims keeps the matrix axes in increasing order
        diagonal = diagonal.T
    diagonal = np.expand_dims(diagonal, tuple(i for i in range(ndim) if i not in (axis1, axis2)))
    return lambda g: np.expand_dims(g, (axis1, axis2)) * diagonal


# --- inv, solve, det, slogdet -----------------------------------------------------------
def inv_vjp(ans, a):
    """Ā = -A⁻ᵀ G A⁻ᵀ."""
    inverse_t = matrix_transpose(ans)
    return lambda g: -inverse_t @ g @ inverse_t


def solve_adjoint(a, g, b_vector):
    """b̄ = A⁻ᵀ g, the cotangent of b in x = solve(A, b), as a stack of columns (…, M, K)."""
    return np.linalg.solve(matrix_transpose(a), np.expand_dims(g, -1) if b_vector else g)


def solve_a(ans, a, b):
    """x = A⁻¹ b: Ā = -b̄ xᵀ."""
    shape, b_vector = np.shape(a), np.ndim(b) == 1
    x = np.expand_dims(ans, -1) if b_vector else ans
    return lambda g: unbroadcast(-solve_adjoint(a, g, b_vector) @ matrix_transpose(x), shape)


def solve_b(ans, a, b):
    """x = A⁻¹ b: b̄ = A⁻ᵀ g (b is a vector only when it is 1-d, as in NumPy 2)."""
    shape, b_vector = np.shape(b), np.ndim(b) == 1
    column_shape = shape + (1,) if b_vector else shape
    return lambda g: unbroadcast(solve_adjoint(a, g, b_vector), column_shape).reshape(shape)


def per_matrix(g):
    """A cotangent of one value per matrix, shaped to scale each matrix of a stack."""
    return np.expand_dims(g, (-2, -1))


def det_vjp(ans, a):
    """∂ det A / ∂A = det A · A⁻ᵀ."""
    return lambda g: per_matrix(g * ans) * matrix_transpose(np.linalg.inv(a))


def slogdet_vjp(j, ans, a):
    """(sign, log|det A|): sign is piecewise constant (zero cotangent); ∂ log|det A| / ∂A = A⁻ᵀ."""
    if j == 0:
        return None  # sign is a constant: not recorded
    return lambda g: per_matrix(g) * matrix_transpose(np.linalg.inv(a))


def matrix_power_vjp(ans, a, n):
    """Aⁿ: Ā = Σₖ (Aᵀ)ᵏ G (Aᵀ)ⁿ⁻¹⁻ᵏ; n < 0 as (A⁻¹)⁻ⁿ through inv's rule; n = 0 (I) has gradient 0."""
    base = np.linalg.inv(a) if n < 0 else as_array(a)
    powers = [np.broadcast_to(np.eye(base.shape[-1], dtype=base.dtype), base.shape)]
    for _ in range(abs(n) - 1):
        powers.append(powers[-1] @ matrix_transpose(base))

    def pullback(g):
        b_bar = sum((powers[k] @ g @ powers[-1 - k] for k in range(abs(n))), np.zeros_like(base))
        return inv_vjp(base, a)(b_bar) if n < 0 else b_bar

    return pullback


# --- tensorsolve, tensorinv: solve and inv of the tensors as matrices ---------------------------------------
def tensorsolve_matrix(a, b, axes):
    """NumPy's view of tensorsolve: ``a`` with ``axes`` moved to the end (the permutation), as a square
    matrix of b.size rows."""
    order = list(range(np.ndim(a)))
    for k in axes or ():
        order.remove(k)
        order.append(k)
    moved = np.transpose(a, order)
    return order, moved.shape, moved.reshape(np.size(b), -1)


def tensorsolve_a(ans, a, b, axes=None):
    """x = M⁻¹ b over the flattened tensors: M̄ = -b̄ xᵀ, back in a's axes."""
    order, moved_shape, matrix = tensorsolve_matrix(a, b, axes)
    x = np.ravel(ans)
    return lambda g: np.transpose(
        -np.outer(np.linalg.solve(matrix.T, np.ravel(g)), x).reshape(moved_shape), np.argsort(order))


def tensorsolve_b(ans, a, b, axes=None):
    """x = M⁻¹ b over the flattened tensors: b̄ = M⁻ᵀ x̄."""
    _, _, matrix = tensorsolve_matrix(a, b, axes)
    shape = np.shape(b)
    return lambda g: np.linalg.solve(matrix.T, np.ravel(g)).reshape(shape)


def tensorinv_vjp(ans, a, ind=2):
    """Y = inv(A as a matrix of prod(shape[:ind]) rows): Ā = -Yᵀ Ȳ Yᵀ, Y and Ȳ as matrices."""
    shape = np.shape(a)
    inverse_t = np.reshape(ans, (-1, math.prod(shape[:ind]))).T
    return lambda g: (-inverse_t @ np.reshape(g, inverse_t.shape[::-1]) @ inverse_t).reshape(shape)


# --- multi_dot, kron, cross ---------------------------------------------------------------------------------
def multi_dot_vjp(k, ans, arrays, *, out=None):
    """A₁ ⋯ Aₙ: Āₖ = Lᵀ G Rᵀ, L and R the products before and after Aₖ (a 1-d first array is a row, a
    1-d last array a column, as NumPy treats them)."""
    n = len(arrays)
    matrices = [as_matrix(arrays[0], 0), *arrays[1:-1], as_matrix(arrays[-1], 1)]
    left = functools.reduce(np.matmul, matrices[:k]) if k else None
    right = functools.reduce(np.matmul, matrices[k + 1:]) if k < n - 1 else None
    result_shape = (np.shape(matrices[0])[0], np.shape(matrices[-1])[1])
    shape = np.shape(arrays[k])

    def pullback(g):
        g = np.reshape(g, result_shape)
        g = g if left is None else matrix_transpose(left) @ g
        g = g if right is None else g @ matrix_transpose(right)
        return g.reshape(shape)

    return pullback


def kron_vjp(k):
    """C = kron(A, B), C[i·B.shape + j] = A[i] B[j] (shapes padded with leading 1s to one rank): the cotangent
    of one factor contracts G, seen with axes (i₀, j₀, i₁, j₁, ...), with the other factor."""

    def vjp(ans, a, b):
        ndim = max(np.ndim(a), np.ndim(b))
        shapes = [(1,) * (ndim - np.ndim(x)) + np.shape(x) for x in (a, b)]
        interleaved = [d for pair in zip(*shapes) for d in pair]
        letters = [string.ascii_letters[:ndim], string.ascii_letters[ndim:2 * ndim]]
        g_term = "".join(i + j for i, j in zip(*letters))
        other = np.reshape(b if k == 0 else a, shapes[1 - k])
        spec = f"{g_term},{letters[1 - k]}->{letters[k]}"
        shape = np.shape(a if k == 0 else b)
        return lambda g: np.einsum(spec, np.reshape(g, interleaved), other).reshape(shape)

    return vjp


def axis_moved_last(shape, axis):
    """``shape`` with ``axis`` moved last, as np.moveaxis(x, axis, -1) would give."""
    shape = list(shape)
    shape.append(shape.pop(axis))
    return tuple(shape)


def as_3_vectors(v):
    """Vectors along the last axis with z = 0 appended to 2-vectors."""
    return np.concatenate([v, np.zeros_like(v[..., :1])], axis=-1) if np.shape(v)[-1] == 2 else v


def cross_vjp(k):
    """c = cross(a, b) (a 2-vector has z = 0; two 2-vectors give c's z alone): ā = cross(b, c̄) and
    b̄ = cross(c̄, a), each summed over broadcast axes and cut to the argument's own 2 or 3 components."""

    def vjp(ans, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
        if axis is not None:
            axisa = axisb = axisc = axis
        x, x_axis = (a, axisa) if k == 0 else (b, axisb)
        other = as_3_vectors(np.moveaxis(b, axisb, -1) if k == 0 else np.moveaxis(a, axisa, -1))
        moved_shape = axis_moved_last(np.shape(x), x_axis)
        planar = np.shape(a)[axisa] == 2 and np.shape(b)[axisb] == 2

        def pullback(g):
            if planar:
                g = np.stack([np.zeros_like(g), np.zeros_like(g), g], axis=-1)
            else:
                g = np.moveaxis(g, axisc, -1)
            c = np.cross(other, g) if k == 0 else np.cross(g, other)
            return np.moveaxis(unbroadcast(c[..., : moved_shape[-1]], moved_shape), -1, x_axis)

        return pullback

    return vjp


def linalg_cross_vjp(k):
    """np.linalg.cross: np.cross of 3-vectors along ``axis``."""
    maker = cross_vjp(k)
    return lambda ans, x1, x2, /, *, axis=-1: maker(ans, x1, x2, axis=axis)


# --- NumPy 2's np.linalg names and the vector gufuncs ----------------------------------------------------------
def linalg_trace_vjp(ans, x, /, *, offset=0, dtype=None):
    """np.linalg.trace: np.trace over the last two axes."""
    return trace_vjp(ans, x, offset, -2, -1)


def linalg_diagonal_vjp(ans, x, /, *, offset=0):
    """np.linalg.diagonal: np.diagonal over the last two axes."""
    return diagonal_vjp(ans, x, offset, -2, -1)


def linalg_tensordot_vjp(k):
    """np.linalg.tensordot: np.tensordot with ``axes`` keyword-only."""
    maker = tensordot_vjp(k)
    return lambda ans, x1, x2, /, *, axes=2: maker(ans, x1, x2, axes)


def matrix_transpose_vjp(ans, x, /):
    """Ā = Gᵀ."""
    return matrix_transpose


def vecdot_vjp(k):
    """c = Σ x₁ x₂ along ``axis`` of each operand (broadcast): x̄₁ = c̄ x₂, x̄₂ = c̄ x₁.

    Also the maker of the gufunc np.vecdot, whose ufunc keywords (casting, ...) change no derivative.
    """

    def vjp(ans, x1, x2, /, *, axis=-1, casting="same_kind", order="K", subok=True):
        x, other = (x1, x2) if k == 0 else (x2, x1)
        moved_shape = axis_moved_last(np.shape(x), axis)
        other = np.moveaxis(other, axis, -1)
        return lambda g: np.moveaxis(unbroadcast(np.expand_dims(g, -1) * other, moved_shape), -1, axis)

    return vjp


def conjugated_vecdot_vjp(k):
    """Complex values: c = Σ conj(x₁) x₂, so x̄₁ = conj(c̄ x₂) and x̄₂ = c̄ conj(x₁) (as np.vdot's)."""
    maker = vecdot_vjp(k)

    def vjp(ans, x1, x2, /, *, axis=-1, casting="same_kind", order="K", subok=True):
        if k == 0:
            back = maker(ans, x1, x2, axis=axis)
            return lambda g: np.conjugate(back(g))
        return maker(ans, np.conjugate(x1), x2, axis=axis)

    return vjp


def matvec_matrix(ans, x1, x2, /, *, casting="same_kind", order="K", subok=True):
    """y = A x (np.matvec): Ā = ȳ xᵀ, summed over broadcast axes."""
    shape = np.shape(x1)
    return lambda g: unbroadcast(g[..., :, None] * x2[..., None, :], shape)


def matvec_vector(ans, x1, x2, /, *, casting="same_kind", order="K", subok=True):
    """y = A x (np.matvec): x̄ = Aᵀ ȳ."""
    shape = np.shape(x2)
    return lambda g: unbroadcast(np.matvec(matrix_transpose(x1), g), shape)


def vecmat_vector(ans, x1, x2, /, *, casting="same_kind", order="K", subok=True):
    """y = xᵀ A (np.vecmat): x̄ = A ȳ."""
    shape = np.shape(x1)
    return lambda g: unbroadcast(np.matvec(x2, g), shape)


def vecmat_matrix(ans, x1, x2, /, *, casting="same_kind", order="K", subok=True):
    """y = xᵀ A (np.vecmat): Ā = x ȳᵀ."""
    shape = np.shape(x2)
    return lambda g: unbroadcast(x1[..., :, None] * g[..., None, :], shape)


def conjugated_vecmat_vector(ans, x1, x2, /, *, casting="same_kind", order="K", subok=True):
    """Complex values: y = xᴴ A, so x̄ = conj(A ȳ)."""
    back = vecmat_vector(ans, x1, x2)
    return lambda g: np.conjugate(back(g))


def conjugated_vecmat_matrix(ans, x1, x2, /, *, casting="same_kind", order="K", subok=True):
    """Complex values: y = xᴴ A, so Ā = conj(x) ȳᵀ."""
    return vecmat_matrix(ans, np.conjugate(x1), x2)


def vector_norm_vjp(ans, x, /, *, axis=None, keepdims=False, ord=2):
    """np.linalg.vector_norm: np.linalg.norm's vector norm of the ``axis`` axes (all when None) as one axis."""
    ndim = np.ndim(x)
    axes = tuple(range(ndim)) if axis is None else tuple(i % ndim for i in as_axis_list(axis))
    last = tuple(range(ndim - len(axes), ndim))
    moved = np.moveaxis(x, axes, last)
    kept = moved.shape[: ndim - len(axes)]
    back = norm_vjp(np.reshape(ans, kept), moved.reshape(kept + (-1,)), ord, -1)
    return lambda g: np.moveaxis(back(np.reshape(g, kept)).reshape(moved.shape), last, axes)


def matrix_norm_vjp(ans, x, /, *, keepdims=False, ord="fro"):
    """np.linalg.matrix_norm: np.linalg.norm over the last two axes."""
    return norm_vjp(ans, x, ord, (-2, -1), keepdims)


defvjp(np.dot, dot_vjp(0), dot_vjp(1))
RULES[np.dot].bilinear = True  # a scalar dot (vectors or scalars): each argument's partial is the other
defvjp(np.inner, contraction_vjp(0, inner_subscripts), contraction_vjp(1, inner_subscripts))
defvjp(np.tensordot, tensordot_vjp(0), tensordot_vjp(1))
defvjp_argnum(np.einsum, einsum_vjp)
defvjp(np.matmul, matmul_vjp(0), matmul_vjp(1))
defvjp(np.outer, outer_a, outer_b)
defvjp(np.vdot, vdot_a, vdot_b)
defvjp(np.trace, trace_vjp)
defvjp(np.linalg.inv, inv_vjp)
defvjp(np.linalg.solve, solve_a, solve_b)
defvjp(np.linalg.det, det_vjp)
defvjp_outputs(np.linalg.slogdet, slogdet_vjp)
defvjp(np.linalg.matrix_power, matrix_power_vjp)
defvjp(np.linalg.tensorsolve, tensorsolve_a, tensorsolve_b)
defvjp(np.linalg.tensorinv, tensorinv_vjp)
defvjp_sequence(np.linalg.multi_dot, multi_dot_vjp)
defvjp(np.kron, kron_vjp(0), kron_vjp(1))
defvjp(np.cross, cross_vjp(0), cross_vjp(1))
defvjp(np.linalg.cross, linalg_cross_vjp(0), linalg_cross_vjp(1))
defvjp(np.linalg.matmul, matmul_vjp(0), matmul_vjp(1))
defvjp(np.linalg.outer, outer_a, outer_b)
defvjp(np.linalg.trace, linalg_trace_vjp)
defvjp(np.linalg.diagonal, linalg_diagonal_vjp)
defvjp(np.linalg.matrix_transpose, matrix_transpose_vjp)
defvjp(np.matrix_transpose, matrix_transpose_vjp)
defvjp(np.linalg.tensordot, linalg_tensordot_vjp(0), linalg_tensordot_vjp(1))
defvjp(np.linalg.vecdot, vecdot_vjp(0), vecdot_vjp(1))
defvjp(np.vecdot, vecdot_vjp(0), vecdot_vjp(1))
defvjp(np.matvec, matvec_matrix, matvec_vector)
defvjp(np.vecmat, vecmat_vector, vecmat_matrix)
defvjp(np.linalg.vector_norm, vector_norm_vjp)
defvjp(np.linalg.matrix_norm, matrix_norm_vjp)

# Complex values (JAX's convention): vecdot and vecmat conjugate their first argument; the norms' rules, as
# np.linalg.norm's, are written with conjugates (∂‖z‖ = Re(conj(z/‖z‖) dz), u vᴴ, ...), so JAX's cotangent is
# their conjugate.  Products, inverses, solves, determinants and powers are holomorphic, traces and transposes
# linear, with plain transposes: their rules hold as they are.
for _func in (np.vecdot, np.linalg.vecdot):
    defvjp_complex(_func, conjugated_vecdot_vjp(0), conjugated_vecdot_vjp(1))
defvjp_complex(np.vecmat, conjugated_vecmat_vector, conjugated_vecmat_matrix)
for _func in (np.linalg.vector_norm, np.linalg.matrix_norm):
    defvjp_complex(_func, *map(conjugate_cotangents, RULES[_func].makers))
holds_for_complex(
    np.dot, np.inner, np.outer, np.tensordot, np.einsum, np.matmul, np.trace, np.kron, np.matvec, np.cross,
    np.linalg.inv, np.linalg.solve, np.linalg.det, np.linalg.matrix_power, np.linalg.tensorsolve, np.linalg.tensorinv,
    np.linalg.matmul, np.linalg.outer, np.linalg.tensordot, np.linalg.trace, np.linalg.diagonal,
    np.linalg.matrix_transpose, np.linalg.multi_dot, np.linalg.cross,
)

def inv_jvp(tangents, ans, a):
    """d(A⁻¹) = -A⁻¹ dA A⁻¹."""
    return -ans @ tangents[0] @ ans


def solve_jvp(tangents, ans, a, b):
    """x = A⁻¹ b: dx = A⁻¹ (db - dA x) (b a vector only when it is 1-d, as in NumPy 2)."""
    ta, tb = (*tangents, None)[:2]  # b may come by name: a constant
    vector = np.ndim(b) == 1
    x = np.expand_dims(ans, -1) if vector else ans
    rhs = 0 if tb is None else (np.expand_dims(tb, -1) if vector else tb)
    if ta is not None:
        rhs = rhs - ta @ x
    dx = np.linalg.solve(a, np.broadcast_to(rhs, np.shape(x)))
    return dx[..., 0] if vector else dx


defjvp(np.linalg.inv, inv_jvp)
defjvp(np.linalg.solve, solve_jvp)
# Forward mode: products are linear in each factor (the product rule), traces and transposes linear.
defmultilinear(np.dot, np.inner, np.tensordot, np.einsum, np.matmul, np.outer, np.vdot, np.kron, np.cross,
               np.linalg.cross, np.linalg.matmul, np.linalg.outer, np.linalg.tensordot, np.linalg.vecdot, np.vecdot,
               np.matvec, np.vecmat, np.linalg.multi_dot)
deflinear(np.trace, np.linalg.trace, np.linalg.diagonal, np.linalg.matrix_transpose)
