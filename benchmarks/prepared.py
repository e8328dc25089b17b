"""Prepared gradients against the primal: EAM with preallocated outputs, and tiny scalar functions.

The scalar primals are the models themselves evaluated on plain Python floats (the
definition behind the issue's peer figures: PyTorch 192x, autograd 181x on qux).

Run: python -m benchmarks.prepared
"""

import math

import numpy as np

import dualbroadcast as db

from .models import (
    eam_dualbroadcast,
    eam_hand_gradient,
    eam_hand_gradient_into,
    eam_numpy,
    foldminus,
    foldminus_hand_gradient,
    qux,
    qux_hand_gradient,
)
from .timing import ratio_table


def eam_rows(sizes):
    rows = {}
    for n in sizes:
        x = np.random.default_rng(0).random(n)
        hand_out, prog_out = np.empty(n), np.empty(n)
        prog = db.prepare_gradient(eam_dualbroadcast, x)
        np.testing.assert_allclose(prog(x, out=prog_out), eam_hand_gradient(x), rtol=1e-12)
        np.testing.assert_allclose(eam_hand_gradient_into(x, hand_out), eam_hand_gradient(x), rtol=1e-12)
        rows[f"N={n}"] = {
            "numpy primal": lambda x=x: eam_numpy(x),
            "hand, out=": lambda x=x, g=hand_out: eam_hand_gradient_into(x, g),
            "db.gradient": lambda x=x: db.gradient(eam_dualbroadcast, x),
            "prepared, out=": lambda x=x, g=prog_out, prog=prog: prog(x, out=g),
        }
    return rows


def scalar_rows():
    rows = {}
    for a, b in [(True, True), (True, False), (False, True), (False, False)]:
        f = lambda x, a=a, b=b: qux(a, b, x)  # noqa: E731
        prog = db.prepare_gradient(f, 1.0)
        assert math.isclose(prog(0.3), qux_hand_gradient(a, b, 0.3), rel_tol=1e-12)
        rows[f"qux {a:d}{b:d}"] = {
            "float primal": lambda a=a, b=b: qux(a, b, 0.3),  # the model on a plain Python float
            "db.gradient": lambda f=f: db.gradient(f, 0.3),
            "prepared": lambda prog=prog: prog(0.3),
        }
    xs = tuple(float(k) for k in range(16))
    prog = db.prepare_gradient(foldminus, xs)
    assert prog(xs) == db.gradient(foldminus, xs) == foldminus_hand_gradient(xs)
    rows["foldminus"] = {
        "float primal": lambda: foldminus(xs),
        "db.gradient": lambda: db.gradient(foldminus, xs),
        "prepared": lambda: prog(xs),
    }
    return rows


def main(quick=False):
    budget = 0.2 if quick else 1.0
    ratio_table("EAM gradient, ratio to the NumPy primal (float64)", eam_rows([100, 10**4]),
                ["numpy primal", "hand, out=", "db.gradient", "prepared, out="], budget)
    ratio_table("Tiny scalar functions, ratio to the plain-Python-float primal", scalar_rows(),
                ["float primal", "db.gradient", "prepared"], budget)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
