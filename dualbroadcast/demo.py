"""The embedded-atom (EAM) toy model used by the demo and the benchmarks.

``rho(r) = exp(-3 (r + 1))``, ``p = sum(rho(x))`` and
``f(x) = p**2 + p**3 + 0.25 p**4``, with its hand-written gradient
``-3 rho(x) (2p + 3p**2 + p**3)``.
"""

import numpy as np

import dualbroadcast as db


def rho(r):
    """The embedding density of one distance ``r`` (elementwise)."""
    return np.exp(-3 * (r + 1))


def energy(p):
    """The embedding energy of the total density ``p``."""
    return p**2 + p**3 + 0.25 * p**4


def eam(x):
    """The EAM energy of the distances ``x``, plain NumPy: reverse mode over every operation."""
    return energy(np.sum(rho(x)))


def eam_fused(x):
    """The same energy with ``db.sum``: the density sum is one forward-mode kernel."""
    return energy(db.sum(rho, x))


def eam_hand_gradient(x):
    """The gradient of `eam`, derived by hand."""
    r = rho(x)
    p = np.sum(r)
    return -3 * r * (2 * p + 3 * p**2 + p**3)


def max_relative_difference(a, b):
    """``max |a - b| / |b|`` elementwise (``b`` must have no zeros)."""
    return float(np.max(np.abs(a - b) / np.abs(b)))
