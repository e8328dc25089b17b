"""The Hessian of a `db.sum` in scalar coefficients: its fast path against hand formulas and plain NumPy."""

import numpy as np

import dualbroadcast as db


def test_elements_of_a_zero_d_array_twice():
    """x[()] twice of a 0-d x: an empty index, no element, so not stacked (a ValueError in scatter before)."""
    def f(x0, x1):
        return np.sum(x1 * 2.0) + np.sum(x0[()] * 3.0) + np.sum(x0[()] * x0[()])

    x0, x1 = np.array(0.5), np.ones((1, 1))
    H = db.hessian(lambda x: f(x, x1), x0)
    assert float(H) == 2.0
    prog = db.prepare_hvp(f, x0, x1)
    hv = prog(x0, x1, vectors=(np.array(1.0), np.zeros((1, 1))))
    assert float(hv[0]) == 2.0 and not hv[1].any()
