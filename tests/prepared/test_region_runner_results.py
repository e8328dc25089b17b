"""A forward region's runner on whole arrays gives its results as the blocked one does (found by comparing every
mode on small user programs: gradient, prepared replay and its ``out=``, jvp, hvp, prepare_hvp, hessian)."""

import importlib
import math

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels

replay = importlib.import_module("dualbroadcast.replay")


class FakeClock:
    """``kernels.clock``: seconds pass only when a region's runner runs, by the scripted cost per element."""

    def __init__(self, cost):
        self.now, self.cost = 0.0, cost

    def __call__(self):
        return self.now


@pytest.fixture
def whole_arrays_win(monkeypatch):
    """Every prepared region with two candidate runners (blocked, whole arrays) chooses whole arrays (the
    program's plan kept fused: tests/prepared/test_plan_choice.py tests that choice)."""
    monkeypatch.setattr(replay, "PLAN_MARGIN", math.inf)
    fake = FakeClock({"numpy": 1e-9, "blocked": 4e-9, kernels.ONE_THREAD: 4e-9})
    monkeypatch.setattr(kernels, "clock", fake)
    original = replay.Runners.run

    def run(self, backend, values, shape, size, active_shapes):
        result = original(self, backend, values, shape, size, active_shapes)
        fake.now += fake.cost.get(backend, 0.0) * size  # (a plan's run: the regions it runs cost)
        return result

    monkeypatch.setattr(replay.Runners, "run", run)
    monkeypatch.setattr(kernels, "THREADS", 2)


def _programs(n):
    rng = np.random.default_rng(0)
    w, c = rng.standard_normal(n), rng.uniform(0.5, 1.5, n)
    return {  # each a region not feeding a whole sum (a db.broadcast kernel of its own), read by a dot
        "one input": (lambda x: np.dot(np.exp(x * 0.3) * 2.0, w), 1),
        "read twice": (lambda x: (lambda r: np.sum(r) * np.dot(r, c))(np.exp(-x * 0.3)), 1),
        "two inputs": (lambda x, y: np.dot(np.exp(x * 0.3) * y, w) + np.dot(x, w), 2),
        "hvp's region": (lambda x: np.sum(-1 * np.exp(x * 0.1)), 1),
    }


def _chosen_backends(prog, n):
    """The backends the regions of a prepared program run calls of ``n`` elements on now."""
    regions = [r for program in next(iter(prog.variants.values())) for r in program.regions]
    return [choice.chosen(n) for r in regions for choice in r.choices.values()]


@pytest.mark.parametrize("name", list(_programs(1)))
def test_a_broadcast_region_run_on_whole_arrays(whole_arrays_win, name):
    """A forward region of at least `regions.BROADCAST_MIN` elements that is not summed, on one chunk, where whole
    arrays time fastest: its runner returned NumPy's flat ``(value, partial, ...)``, read as ``(value, partials)``;
    one active input's partials were then the partial array itself and ``partials[0]`` its first element, so the
    gradient was that number times the cotangent (silently, through ``out=``) or a TypeError."""
    n = replay.CHOSEN_MIN + 1000  # one chunk of two threads: whole arrays are a candidate
    f, arity = _programs(n)[name]
    rng = np.random.default_rng(1)
    args = [rng.uniform(-1, 1, n) for _ in range(arity)]
    expected = db.gradient(f, *args)
    expected = expected if arity > 1 else (expected,)
    prog = db.prepare_gradient(f, *args)
    assert "numpy" in _chosen_backends(prog, n)
    got = prog(*args)
    out = [np.empty(n) for _ in range(arity)]
    prog(*args, out=out if arity > 1 else out[0])
    value, again = prog.value_and_gradient(*args)
    np.testing.assert_allclose(value, f(*args), rtol=1e-12)
    for g in zip(expected, got if arity > 1 else (got,), out, again if arity > 1 else (again,)):
        for a in g[1:]:
            np.testing.assert_allclose(a, g[0], rtol=1e-12, atol=1e-15)
    v = rng.standard_normal(n)
    if arity == 1:
        np.testing.assert_allclose(db.prepare_hvp(f, *args)(args[0], v), db.hvp(f, args[0], v), rtol=1e-10,
                                   atol=1e-15)
