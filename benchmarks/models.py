"""The benchmark models, each with its NumPy primal and hand-written gradient."""

from dataclasses import dataclass

import numpy as np

import dualbroadcast as db


# --- EAM: p = sum(rho(x)), f = p^2 + p^3 + p^4/4 -----------------------------------------
def rho(r):
    return np.exp(-3 * (r + 1))


def eam_energy(p):
    return p**2 + p**3 + 0.25 * p**4


def eam_numpy(x):
    """The primal, and the same model as plain NumPy through the reverse tape."""
    return eam_energy(np.sum(rho(x)))


def eam_dualbroadcast(x):
    """The model with the fused forward-mode sum."""
    return eam_energy(db.sum(rho, x))


def eam_hand_gradient(x):
    r = rho(x)
    p = np.sum(r)
    return -3 * r * (2 * p + 3 * p**2 + p**3)


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
