"""Reverse rules of linear algebra: dot, matmul, inner, outer, vdot, tensordot, einsum, trace, inv, solve, det, slogdet.

The contractions (einsum, and dot/inner/tensordot written as einsum subscripts)
share one rule: the cotangent of an operand is the einsum of ``g`` with the
other operands, producing that operand's subscripts.  matmul is written with
``@`` (C̄ = G Bᵀ, B̄ = Aᵀ G) so batched products stay on BLAS; broadcast batch
axes are summed back with `unbroadcast`.  The matrix functions use the
classical formulas (Ā = -A⁻ᵀ G A⁻ᵀ for inv, det · A⁻ᵀ for det, ...), so they
need invertible matrices.
"""

import functools
import string

import numpy as np

from ..errors import UnsupportedFunctionError
from ..pullbacks import unbroadcast
from ..registry import RULES, defvjp, defvjp_argnum, defvjp_outputs


def matrix_transpose(x):
    """Swap the last two axes (a stack of matrices transposed)."""
    return np.swapaxes(x, -1, -2)


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


def einsum_vjp(argnum, ans, subscripts, /, *operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    """np.einsum in the subscripts-string form; argument ``argnum`` is operand ``argnum - 1``.

    The keywords change no derivative (the tape keeps each cotangent in its value's dtype).
    """
    if not isinstance(subscripts, str):
        raise UnsupportedFunctionError(
            "the gradient of np.einsum needs the subscripts-string form, "
            "np.einsum('ij,jk->ik', a, b), not the sublist form"
        )
    return einsum_pullback(argnum - 1, subscripts, operands)


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
