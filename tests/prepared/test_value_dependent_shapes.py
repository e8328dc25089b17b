"""Prepared programs over values whose shape depends on the data (a selection): another shape is recorded anew."""

import importlib

import numpy as np
import pytest

import dualbroadcast as db

replay = importlib.import_module("dualbroadcast.replay")


C3 = np.array([1.0, 2.0, 3.0])
SELECTIONS = {  # values chosen by data, broadcast against C3 when one is chosen
    "x[x > 0]": lambda x: np.sum(np.sin(x[x > 0] * C3)),
    "np.compress": lambda x: np.sum(np.sin(np.compress(x > 0, x) * C3)),
    "np.extract": lambda x: np.sum(np.sin(np.extract(x > 0, x) * C3)),
    "np.take of np.flatnonzero": lambda x: np.sum(np.sin(np.take(x, np.flatnonzero(x > 0)) * C3)),
    "a mask of db.cut(x)": lambda x: np.sum(np.sin(x[db.cut(x) > 0] * C3)),
    "x[np.nonzero(x > 0)]": lambda x: np.sum(np.sin(x[np.nonzero(x > 0)] * C3)),
}
ONE, THREE = np.array([0.5, -1.0, -1.0]), np.array([0.5, 0.7, 0.2])


@pytest.mark.parametrize("name", list(SELECTIONS))
@pytest.mark.parametrize("recorded, replayed", [(ONE, THREE), (THREE, ONE)], ids=["one then three", "three then one"])
def test_a_selection_whose_size_changes_is_recorded_anew(name, recorded, replayed):
    """A prepared program is compiled for the shapes it recorded.  Recorded where one element is selected (so
    broadcast against C3, its pullback a sum over that axis) and replayed where three are, the gradient was
    silently that sum in each selected element; the other way round a ValueError.  A result whose shape
    depends on values is now guarded: another shape is a new case, recorded anew."""
    f = SELECTIONS[name]
    prog = db.prepare_gradient(f, recorded)
    for x in (replayed, recorded, replayed):
        np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-13, atol=1e-15)
        out = np.empty(3)
        prog(x, out=out)
        np.testing.assert_allclose(out, db.gradient(f, x), rtol=1e-13, atol=1e-15)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(db.prepare_hvp(f, recorded)(replayed, v), db.hvp(f, replayed, v), rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("n", [6, replay.CHOSEN_MIN + 1000])
def test_a_region_over_a_selection_whose_size_changes(n):
    """A forward region over ``x[x > 0]`` is a kernel bound to the recorded size: a replay selecting another
    number of elements raised a ValueError (operands could not be broadcast); now it is recorded anew."""
    def f(x):
        return np.sum(x[x > 0] ** 2) + np.sum(np.exp(-x[x > 0]))

    rng = np.random.default_rng(6)
    x0 = rng.standard_normal(n)
    prog = db.prepare_gradient(f, x0)
    for _ in range(3):
        x = rng.standard_normal(n)
        np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-12, atol=1e-15)
