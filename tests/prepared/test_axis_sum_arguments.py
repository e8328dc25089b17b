"""An axis sum's axis written by position (``np.sum(v, 1)``, ``np.mean(v, 0)``) is fused as ``axis=`` is:
`regions._axis_sum` reads a constant second argument as the axis, and only a constant one."""

import numpy as np
import pytest

import dualbroadcast as db

from .test_axis_regions import COLUMNS, ROWS, _arrays, _axes


@pytest.mark.parametrize(("reduce", "axis", "scale"), [(np.sum, 1, 1.0), (np.mean, 1, 1.0 / COLUMNS)])
def test_an_axis_given_by_position_is_an_axis_sum(reduce, axis, scale):
    """Σᵢ (reduceⱼ exp aᵢⱼ)² has the gradient 2 rᵢ exp aᵢⱼ · scale (rᵢ the row's reduction)."""
    (a,) = _arrays(np.float64, (ROWS, COLUMNS))

    def f(a):
        return np.sum(reduce(np.exp(a), axis) ** 2)

    prog = db.prepare_gradient(f, a)
    grad = prog(a)
    (program,) = {id(v): v for v in prog.variants.values()}.values()
    assert _axes(program[-1]) == [(axis,), None]
    rows = reduce(np.exp(a), axis=axis, keepdims=True)
    np.testing.assert_allclose(grad, 2 * rows * np.exp(a) * scale, rtol=1e-12)
