"""Writes into values computed from cut arguments alone, in prepared programs."""

import numpy as np
import pytest

import dualbroadcast as db

from ..tape.test_in_place_updates import T, X

# --- writes into values computed from cut arguments alone ----------------------------------------------
# Plain NumPy in db.gradient; a prepared recording traces them (a replay recomputes them), and refused the
# writes: "x[...] = v would mutate a tracked array in place and drop its gradient", a misleading error for
# a value with no gradient.  Now such a recording is left to db.gradient (NotReplayableError).
C = np.linspace(0.5, 1.5, 6)


def set_in_constant(x, c):
    y = c * 2.0
    y[0] = 5.0
    return np.sum(x * y) + np.sum(x ** 3)


def update_a_view_of_a_constant(x, c):
    y = c * 2.0
    v = y[:2]
    v += 1.0
    return np.sum(x * y) + np.sum(x ** 3)


@pytest.mark.parametrize("f", [set_in_constant, update_a_view_of_a_constant], ids=lambda f: f.__name__)
def test_writes_into_values_of_cut_arguments_in_prepared_programs(f):
    prepared, prepared_hvp = db.prepare_gradient(f, X, db.cut(C)), db.prepare_hvp(f, X, db.cut(C))
    for x, c in [(X, C), (X * 2, C * 3), (X, C)]:
        y = c * 2.0  # the constant as NumPy writes it
        if f is set_in_constant:
            y[0] = 5.0
        else:
            y[:2] += 1.0
        np.testing.assert_allclose(db.gradient(f, x, db.cut(c))[0], y + 3 * x ** 2, rtol=1e-13)
        np.testing.assert_allclose(prepared(x, db.cut(c))[0], y + 3 * x ** 2, rtol=1e-13)
        np.testing.assert_allclose(prepared_hvp(x, db.cut(c), vectors=(T, None))[0], 6 * x * T, rtol=1e-13)
