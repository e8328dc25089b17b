"""A prepared program is checked against the steps its forward regions replace (`replay.compile_plans`).

Where a region has `region_runners.CHOSEN_MIN` elements or more, the program is compiled fused, as recorded, and (two
to `replay.PLAN_REGIONS` such regions) once without each region; a `kernels.BackendChoice` runs one plan a
call and corrects a wrong choice.  Time is controlled, never measured: the choice reads `kernels.clock`, which
these tests replace by a fake clock that each plan's run advances by a cost the test scripts.  The computations
are real, so every call's gradient is checked against `db.gradient`.
"""

import importlib
import itertools

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels

replay = importlib.import_module("dualbroadcast.replay")
replay_forward = importlib.import_module("dualbroadcast.replay_forward")
ROWS = 128  # 128 x 128 = 16384 elements: a region of `CHOSEN_MIN` elements
PLANS = ("fused", "as recorded", "region 1 as recorded", "region 2 as recorded")


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, 16))
    params = {"W1": rng.standard_normal((16, 128)) * 0.25, "b1": rng.standard_normal(128),
              "W2": rng.standard_normal((128, 128)) * 0.09, "b2": rng.standard_normal(128)}
    return x, params


X, PARAMS = _data()


def mlp(p):
    """Two large regions: ``tanh(X @ W1 + b1)`` (read by a matmul), and ``tanh(h @ W2 + b2) ** 2`` summed."""
    h = np.tanh(X @ p["W1"] + p["b1"])
    return np.sum(np.tanh(h @ p["W2"] + p["b2"]) ** 2)


class FakeClock:
    """``kernels.clock``: seconds pass when a plan runs, by ``cost(plan)``, and a nanosecond at each read (the
    regions' own choices of backend, inside a plan, time their kernels by it)."""

    def __init__(self):
        self.now = 0.0
        self.runs = []  # the plan of every run, in order
        self.cost = None

    def __call__(self):
        self.now += 1e-9
        return self.now


@pytest.fixture
def clock(monkeypatch):
    assert replay.CHOSEN_MIN <= ROWS * 128
    fake = FakeClock()
    monkeypatch.setattr(kernels, "clock", fake)
    original = replay.Runners.run

    def run(self, backend, values, shape, size, active_shapes):
        result = original(self, backend, values, shape, size, active_shapes)
        if backend in PLANS:  # (a region's own choice of backend, inside a plan: the clock's reads)
            fake.runs.append(backend)
            fake.now += fake.cost(backend)
        return result

    monkeypatch.setattr(replay.Runners, "run", run)
    return fake


def _program(prog):
    (programs,) = prog.variants.values()
    return programs[0]


def _check(gradient, expected):
    for k in expected:
        np.testing.assert_allclose(gradient[k], expected[k], rtol=1e-12, atol=1e-13)


def test_every_plan_gives_the_gradient():
    """Each plan, called directly, gives `db.gradient`'s gradient (and value) up to rounding."""
    prog = db.prepare_gradient(mlp, PARAMS)
    program = _program(prog)
    assert len(program.regions) == 2
    value, expected = db.value_and_gradient(mlp, PARAMS)
    leaves = [PARAMS[k] for k in sorted(PARAMS)]
    names = sorted(PARAMS)
    for variant, choice in program.plans.items():
        functions = choice.kernel.runners
        assert tuple(functions) == PLANS
        for function in functions.values():
            v, grads = function(leaves)
            _check(dict(zip(names, grads)), expected)
            if variant == "value":
                np.testing.assert_allclose(v, value, rtol=1e-12)


@pytest.mark.parametrize("fastest", PLANS[1:])
def test_a_slower_fused_plan_is_left_within_the_bound(clock, fastest):
    """The fused plan costs 3x a plan that leaves a region (or every region) as recorded: by the call at which every
    other plan was timed once, ``fastest`` is chosen, and it stays so; every call's gradient is right."""
    clock.cost = lambda plan: 1.0 if plan == fastest else 3.0
    prog = db.prepare_gradient(mlp, PARAMS)
    choice = _program(prog).plans["gradient alone"]
    expected = db.gradient(mlp, PARAMS)
    bound = (len(PLANS) - 1) * (kernels.RETIME_FIRST + 1)  # the last other plan's first re-timing
    for call in range(1, 200):
        _check(prog(PARAMS), expected)
        if call >= bound:
            assert choice.chosen(1) == fastest, call
    assert clock.runs[-50:].count(fastest) >= 48
    assert db.explain(prog, PARAMS).plan == fastest


def test_value_and_gradient_choose_on_their_own(clock):
    """``value_and_gradient`` runs the plans' ``run`` under a choice of its own, which corrects itself alike."""
    clock.cost = lambda plan: 1.0 if plan == "as recorded" else 2.0
    prog = db.prepare_gradient(mlp, PARAMS)
    program = _program(prog)
    value, expected = db.value_and_gradient(mlp, PARAMS)
    for _ in range(30):
        v, g = prog.value_and_gradient(PARAMS)
        np.testing.assert_allclose(v, value, rtol=1e-12)
        _check(g, expected)
    assert program.plans["value"].chosen(1) == "as recorded"
    assert program.plans["gradient alone"].buckets[1].recent == float("inf")  # never called


def test_a_correct_fused_choice_stays_put_under_jitter(clock):
    """Every run slower than its true cost by up to 4% (below the margin) and every fifth 10x slower: the fused
    plan, 10% faster than the others, stays chosen over 1000 calls, and the others run rarely."""
    jitter = np.random.default_rng(1)
    count = itertools.count(1)

    def cost(plan):
        spike = 10 if next(count) % 5 == 0 else 1
        return (1.0 if plan == "fused" else 1.1) * jitter.uniform(1.0, 1.04) * spike

    clock.cost = cost
    prog = db.prepare_gradient(mlp, PARAMS)
    choice = _program(prog).plans["gradient alone"]
    for call in range(1000):
        prog(PARAMS)
        assert choice.chosen(1) == "fused", call
    assert 0 < sum(r != "fused" for r in clock.runs) <= 0.03 * len(clock.runs)


def test_small_regions_are_not_chosen_per_call():
    """Regions below `CHOSEN_MIN` elements stay fused, with no plan choice (its ~0.5 us a call would cost more)."""
    x = np.random.default_rng(0).random(1000)

    def f(x):
        return np.sum(np.exp(-3.0 * (x + 1.0)) * x)

    prog = db.prepare_gradient(f, x)
    program = _program(prog)
    assert len(program.regions) == 1 and program.plans is None and program.one is not None
    assert db.explain(prog, x).plan is None
    np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-12)


def test_a_region_whose_runner_is_slower_than_its_steps_is_left_as_recorded(clock, monkeypatch):
    """The second region's runner is made slow (each call 5 s of the fake clock); the first region's fused runner
    saves half a second against its steps: the plan with the second region alone as recorded is chosen, for
    ``value_and_gradient`` and for the gradient alone, and every gradient is right."""
    original = replay_forward.region_runner

    def runner(kernel, valueless, examples, shape, size, active_shapes, blockable):
        run, name, fresh = original(kernel, valueless, examples, shape, size, active_shapes, blockable)
        if not kernel.reduce:  # region 1: tanh(X @ W1 + b1), read by a matmul
            return run, name, fresh

        def slow(*values):
            clock.now += 5.0
            return run(*values)

        return slow, name, fresh

    monkeypatch.setattr(replay_forward, "region_runner", runner)
    clock.cost = lambda plan: 1.5 if plan in ("as recorded", "region 1 as recorded") else 1.0
    prog = db.prepare_gradient(mlp, PARAMS)
    program = _program(prog)
    value, expected = db.value_and_gradient(mlp, PARAMS)
    for _ in range(40):
        _check(prog(PARAMS), expected)
        v, g = prog.value_and_gradient(PARAMS)
        np.testing.assert_allclose(v, value, rtol=1e-12)
        _check(g, expected)
    for choice in program.plans.values():
        assert choice.chosen(1) == "region 2 as recorded"
    assert db.explain(prog, PARAMS).plan == "region 2 as recorded"
