"""EAM and Poly9: db.sum against the NumPy primal, the hand gradient and the plain reverse tape.

Run: python -m benchmarks.broadcast
"""

import numpy as np

import dualbroadcast as db

from .models import (
    COEFFICIENTS,
    eam_dualbroadcast,
    eam_hand_gradient,
    eam_numpy,
    poly9_all_uncut,
    poly9_hand_gradient,
    poly9_numpy,
    poly9_one_uncut,
)
from .timing import ratio_table


def eam_rows(sizes, dtype=np.float64):
    rows = {}
    for n in sizes:
        x = np.random.default_rng(0).random(n).astype(dtype)
        check = np.max(np.abs(db.gradient(eam_dualbroadcast, x) / eam_hand_gradient(x) - 1))
        assert check < 1e-10, f"EAM gradient wrong at N={n}: {check}"
        rows[f"N={n:.0e}"] = {
            "numpy primal": lambda x=x: eam_numpy(x),
            "hand gradient": lambda x=x: eam_hand_gradient(x),
            "db.sum": lambda x=x: db.gradient(eam_dualbroadcast, x),
            "numpy on tape": lambda x=x: db.gradient(eam_numpy, x),
        }
    return rows


def poly9_rows(sizes):
    rows = {}
    c = np.array(COEFFICIENTS)
    for n in sizes:
        xs = np.random.default_rng(1).uniform(-1, 1, n)
        expected = poly9_hand_gradient(xs)
        assert np.allclose(db.gradient(poly9_all_uncut, c, db.cut(xs))[0], expected, rtol=1e-10)
        assert np.isclose(db.gradient(poly9_one_uncut, c[2], db.cut(xs))[0], expected[2], rtol=1e-10)
        rows[f"N={n:.0e}"] = {
            "numpy primal": lambda xs=xs: poly9_numpy(c, xs),
            "hand gradient": lambda xs=xs: poly9_hand_gradient(xs),
            "db.sum 1 uncut": lambda xs=xs: db.gradient(poly9_one_uncut, c[2], db.cut(xs)),
            "db.sum 10 uncut": lambda xs=xs: db.gradient(poly9_all_uncut, c, db.cut(xs)),
            "numpy on tape": lambda xs=xs: db.gradient(poly9_numpy, c, db.cut(xs)),
        }
    return rows


def main(quick=False):
    budget = 0.2 if quick else 1.0
    eam_sizes = [100, 1000, 10**5] if quick else [100, 1000, 10**5, 10**6]
    ratio_table("EAM gradient, ratio to the NumPy primal (float64)", eam_rows(eam_sizes),
                ["numpy primal", "hand gradient", "db.sum", "numpy on tape"], budget)
    ratio_table("Poly9 gradient, ratio to the NumPy primal (float64)", poly9_rows([1000] if quick else [1000, 10**6]),
                ["numpy primal", "hand gradient", "db.sum 1 uncut", "db.sum 10 uncut", "numpy on tape"], budget)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
