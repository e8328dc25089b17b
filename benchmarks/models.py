"""The benchmark models, each with its NumPy primal and hand-written gradient."""

from dataclasses import dataclass

import numpy as np

import dualbroadcast as db

# --- EAM: p = sum(rho(x)), f = p^2 + p^3 + p^4/4 (the demo's model, under the benchmarks' names) ---
from dualbroadcast.demo import eam as eam_numpy  # noqa: F401 - the primal, and plain NumPy on the tape
from dualbroadcast.demo import eam_fused as eam_dualbroadcast  # noqa: F401 - the density sum by db.sum
from dualbroadcast.demo import eam_hand_gradient, rho  # noqa: F401
from dualbroadcast.demo import energy as eam_energy  # noqa: F401

# --- Poly9: sum over points of c0 + c1 x + ... + c9 x^9 ----------------------------------------
COEFFICIENTS = tuple(1.0 / (k + 1) for k in range(10))


@dataclass
class Poly9:
    c: tuple  # c0..c9

    def __call__(self, x):
        return sum(ck * x**k for k, ck in enumerate(self.c))


def poly9_numpy(c, xs):
    return np.sum(Poly9(tuple(c))(xs))


def poly9_one_uncut(c2, xs):
    """Only c2 is a variable: dual width 1."""
    c = list(COEFFICIENTS)
    c[2] = db.uncut(c2)
    return db.sum(db.cut(Poly9(tuple(c))), db.cut(xs))


def poly9_all_uncut(c, xs):
    """All ten coefficients are variables: dual width 10."""
    return db.sum(Poly9(tuple(c[k] for k in range(10))), db.cut(xs))


def poly9_hand_gradient(xs):
    """∂/∂c_k of sum(poly) is sum(x^k): powers by repeated multiplication."""
    grads = np.empty(10)
    power = np.ones_like(xs)
    for k in range(10):
        grads[k] = np.sum(power)
        power *= xs
    return grads


# --- constant arrays: the backward pass must not grow with a constant's size -----------------
def constant_index_model(c):
    """p -> c[0] * p with a large constant c."""
    return lambda p: c[0] * p


def constant_projection_model(c, proj):
    """p -> (c @ proj) * p with a one-hot constant proj."""
    return lambda p: (c @ proj) * p


# --- slices in a loop: a dense layer over T inputs, then column inner products --------------
def dense_layer(W, b, xs):
    """ys[t] = W @ xs[t] + b[:, None] for every input."""
    return [W @ x + b[:, None] for x in xs]


def slices_diag(W, b, xs):
    """Variant A: sum over t of diag(ys[0].T @ ys[t])."""
    ys = dense_layer(W, b, xs)
    total = 0.0
    for y in ys:
        total = total + np.sum(np.diag(ys[0].T @ y))
    return total


def slices_columns(W, b, xs):
    """Variant B: dot(ys[0][:, j], ys[t][:, j]) for every column j and input t."""
    ys = dense_layer(W, b, xs)
    total = 0.0
    for y in ys:
        for j in range(y.shape[1]):
            total = total + np.dot(ys[0][:, j], y[:, j])
    return total


def slices_einsum(W, b, xs):
    """Variant C: one batched einsum over a stacked (T, out, batch) array."""
    ys = np.einsum("oi,tib->tob", W, xs) + b[None, :, None]
    return np.einsum("ob,tob->", ys[0], ys)


def slices_hand_gradient(W, b, xs):
    """∂/∂W and ∂/∂b of the slice workload: z = sum_t <y0, yt> = <y0, S> with S = sum_t yt."""
    ys = np.einsum("oi,tib->tob", W, xs) + b[None, :, None]
    S = ys.sum(axis=0)
    gy = np.broadcast_to(ys[0], ys.shape).copy()  # ∂z/∂yt = y0 for every t ...
    gy[0] += S  # ... and y0 also appears as the first factor
    return np.einsum("tob,tib->oi", gy, xs), gy.sum(axis=(0, 2))


# --- elementwise reductions over a float32 image batch ---------------------------------------
IMAGE_SHAPE = (128, 1, 28, 28)


def sum_of_squares(x):
    return np.sum(x**2)


def sum_of_squares_dualbroadcast(x):
    return db.sum(_square, x)


def _square(v):
    return v * v


def sum_of_squares_hand_gradient(x):
    return 2 * x


def sum_arctan2(x):
    return np.sum(np.arctan2(x, 2))


def sum_arctan2_dualbroadcast(x):
    return db.sum(_arctan2_by_two, x)


def _arctan2_by_two(v):
    return np.arctan2(v, 2)


def sum_arctan2_hand_gradient(x):
    """d/dx arctan2(x, 2) = 2 / (x^2 + 4), in the dtype of x."""
    return (2 / (x * x + 4)).astype(x.dtype, copy=False)


# --- tiny scalar workloads -------------------------------------------------------------------
def qux(a, b, x):
    """(sech if b else tanh)(sin(x) if a else cos(x)), with NumPy functions on a Python float."""
    y = np.sin(x) if a else np.cos(x)
    return 1 / np.cosh(y) if b else np.tanh(y)


def qux_hand_gradient(a, b, x):
    import math

    y, dy = (math.sin(x), math.cos(x)) if a else (math.cos(x), -math.sin(x))
    if b:
        s = 1 / math.cosh(y)
        return -s * math.tanh(y) * dy
    t = math.tanh(y)
    return (1 - t * t) * dy


def foldminus(xs):
    """xs[0] - xs[1] - ... - xs[-1], as a left fold in plain Python."""
    total = xs[0]
    for v in xs[1:]:
        total = total - v
    return total


def foldminus_hand_gradient(xs):
    return (1.0,) + (-1.0,) * (len(xs) - 1)


def eam_hand_gradient_into(x, g):
    """The hand gradient written into a preallocated ``g`` with in-place NumPy (no allocation)."""
    np.multiply(x, -3.0, out=g)
    g -= 3.0
    np.exp(g, out=g)  # g = rho(x)
    p = np.add.reduce(g)
    g *= -3.0 * (2 * p + 3 * p**2 + p**3)
    return g


# --- second derivatives (issue 16) -------------------------------------------------------------
def eam_hvp_hand(x, v):
    """H·v of E = P² + P³ + P⁴/4, P = Σr(x), r = exp(-3(x+1)): H = E''(P) ∇P ∇Pᵀ + E'(P) diag(9r)."""
    r = np.exp(-3 * (x + 1))
    p = np.sum(r)
    return (2 + 6 * p + 3 * p**2) * (-3 * r) * np.dot(-3 * r, v) + (2 * p + 3 * p**2 + p**3) * 9 * r * v


def exp_poly(c, xs):
    """E(c) = sum(exp(c0 + c1 x + ... + c9 x^9)) over the points ``xs``: plain NumPy."""
    return np.sum(np.exp(np.polyval(c[::-1], xs)))


def exp_poly_db(c, xs):
    """The same with db.sum over the points, the ten coefficients its variables (Horner's rule)."""
    def term(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
        inner = c5 + x * (c6 + x * (c7 + x * (c8 + x * c9)))
        return np.exp(c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * inner)))))

    return db.sum(term, db.cut(xs), *[c[k] for k in range(10)])


def exp_poly_hessian_hand(c, xs):
    """∂²E/∂c_j∂c_k = Σ x^j x^k exp(p(x)): the powers weighted by the summands, one matrix product."""
    e = np.exp(np.polyval(c[::-1], xs))
    powers = xs[None, :] ** np.arange(10)[:, None]
    return (powers * e) @ powers.T
