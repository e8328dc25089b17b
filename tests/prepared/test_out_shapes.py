"""``out=`` arrays of another shape than the gradient's: a clear error on every path of a prepared program."""

import re

import numpy as np
import pytest

import dualbroadcast as db


@pytest.mark.parametrize("shape", [(7,), (6, 1), (1, 6), (6, 6), ()])
def test_out_of_another_shape_is_a_clear_error(shape):
    """``out=`` arrays of another shape than the gradient's: one NumPy could broadcast into ((1, 6), (6, 6)) was
    silently filled, another failed inside the replay ("operands could not be broadcast together with shapes
    (6,) () (7,)"); now every path says which array has which shape and what it must have."""
    def f(x):
        return np.sum(np.sin(x) * 2.0)

    def g(x, y):
        return np.sum(np.sin(x) * y)

    x = np.linspace(0, 1, 6)
    wrong = np.zeros(shape)
    message = rf"out= array \d has shape {re.escape(str(shape))} but its gradient has shape \(6,\)"
    prog, two, hvp = db.prepare_gradient(f, x), db.prepare_gradient(g, x, x), db.prepare_hvp(f, x)
    calls = [lambda: prog(x, out=wrong), lambda: prog(x, out=(wrong,)), lambda: prog.value_and_gradient(x, out=wrong),
             lambda: db.prepare_gradient(f, x)(x.astype(np.float32), out=wrong),  # a new variant, recorded by this call
             lambda: two(x, x, out=(np.zeros(6), wrong)),
             lambda: two.value_and_gradient(x, x, out=(wrong, np.zeros(6))),
             lambda: hvp(x, x, out=wrong)]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert not wrong.any()
