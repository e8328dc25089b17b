"""The automatic backend choice corrects itself (issue 18): `kernels.BackendChoice`.

Time is controlled, never measured: the choice reads `kernels.clock`, which these tests replace by a
fake clock, and each backend's run advances it by a cost per element the test scripts (the true
costs, a bad first measurement, jitter).  The computations themselves are real, so the results of
every call are checked too.
"""

import importlib
import itertools
import math

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels

N = 70_000  # every backend is eligible (blocked from two blocks, numexpr from 1,024 elements)
broadcast_module = importlib.import_module("dualbroadcast.broadcast")  # `db.broadcast` is the function
BACKENDS = ("numpy", "blocked", "numexpr")
BOUND = 1 + 2 * (kernels.RETIME_FIRST + 1)  # the call by which a wrong first choice is undone (two runner-ups)


def energy(x):
    return np.exp(-3.0 * (x + 1.0)) * x  # every operation numexpr has: three candidates


def loss(x):
    return db.sum(energy, x)


class FakeClock:
    """``kernels.clock``: seconds that pass only when a backend runs (`slowed`)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """A fake clock, and every backend (the cached plan's whole-array kernel too) advancing it by
    ``clock.cost(backend)`` seconds per element each run."""
    db.clear_cache()  # fresh kernels: no choice made before this test
    fake = FakeClock()
    fake.runs = []  # the backend of every run, in order
    monkeypatch.setattr(kernels, "clock", fake)

    def advance(name, size):
        fake.runs.append(name)
        fake.now += fake.cost(name) * size

    for name, cls in (("numpy", kernels._WholeArrays), ("blocked", kernels._Blocked),
                      ("numexpr", kernels._Numexpr)):
        def run(self, values, shape, size, active_shapes, original=cls.run, name=name):
            result = original(self, values, shape, size, active_shapes)
            advance(name, size)
            return result

        monkeypatch.setattr(cls, "run", run)
    typed_whole = kernels._WholeArrays.typed_whole

    def timed_whole(self, kinds, same_shape=False):  # the whole-array kernel a `_Plan` calls without `run`
        whole = typed_whole(self, kinds, same_shape)

        def run(*values):
            result = whole(*values)
            advance("numpy", np.size(values[0]))
            return result

        return run

    monkeypatch.setattr(kernels._WholeArrays, "typed_whole", timed_whole)
    yield fake
    db.clear_cache()


def gradients(calls, x):
    """Per call, the backend that ran it (from `db.kernel_log`)."""
    ran = []
    for _ in range(calls):
        with db.kernel_log() as log:
            db.gradient(loss, x)
        ran.append(log[-1].backend)
    return ran


def chosen(x):
    """The backend the automatic choice holds now for ``x``'s size."""
    (kernel,) = [k for k in _kernels() if k.choice.buckets]
    return kernel.choice.fastest[x.size.bit_length()]


def _kernels():
    """The cached kernels, and the variants a gradient runs: a sum's without literal factors (`unscaled_kernel`), and
    without its value where it leaves that pending (`Kernel.without_value`)."""
    cached = list(broadcast_module.KERNEL_CACHE.values())
    cached += [k.unscaled[0] for k in cached if k.unscaled and k.unscaled[0] is not k]
    return cached + [k.split for k in cached if k.split]


TRUE_COSTS = {"numpy": 4e-9, "blocked": 1e-9, "numexpr": 2e-9}


@pytest.mark.parametrize("fastest", BACKENDS)
def test_a_bad_first_measurement_is_corrected_within_the_bound(clock, fastest):
    """The truly fastest backend runs 20x slower in the first timing (a busy machine): another wins it.
    By call ``BOUND`` the choice is the fastest, and it stays so."""
    costs = dict(TRUE_COSTS, **{fastest: min(TRUE_COSTS.values()) / 2})
    runs_of = dict.fromkeys(BACKENDS, 0)

    def cost(name):
        runs_of[name] += 1
        first_timing = runs_of[name] <= 3  # `measure` times each candidate three times
        return costs[name] * (40 if name == fastest and first_timing else 1)

    clock.cost = cost
    x = np.random.default_rng(0).random(N)
    with db.kernel_log() as log:
        db.gradient(loss, x)
    wrong = log[0].backend
    assert wrong != fastest  # the induced bad measurement took effect
    switched = None
    for call in range(2, 301):
        db.gradient(loss, x)
        if switched is None and chosen(x) == fastest:
            switched = call
        if switched is not None:
            assert chosen(x) == fastest, f"left {fastest} at call {call}"
    assert switched is not None and switched <= BOUND, (switched, BOUND)


def test_a_correct_choice_stays_put_under_jitter(clock):
    """Every run slower than its true cost by up to 20% (below the margin), and every fifth run 10x
    slower (a preemption): over 2000 calls the fastest stays chosen, and runner-ups run rarely."""
    jitter = np.random.default_rng(1)
    count = itertools.count(1)

    def cost(name):
        spike = 10 if next(count) % 5 == 0 else 1
        return TRUE_COSTS[name] * jitter.uniform(1.0, 1.2) * spike

    clock.cost = cost
    x = np.random.default_rng(0).random(N)
    ran = []
    for call in range(2000):
        with db.kernel_log() as log:
            db.gradient(loss, x)
        ran.append(log[-1].backend)
        if call:  # after the first call's timings
            assert chosen(x) == "blocked", f"flipped to {chosen(x)} at call {call}"
    runner_ups = sum(b != "blocked" for b in ran[1:])
    assert 0 < runner_ups <= 0.02 * len(ran)  # re-timed now and then, at a small cost


def test_results_agree_whichever_backend_runs(clock):
    """Through switches and re-timings, every call's value and gradient are the forced backends' (up to
    rounding: the blocked kernel sums in another order)."""
    calls = itertools.count()
    order = list(BACKENDS)

    def cost(name):  # the fastest backend changes every 40 runs: the choice follows it
        fastest = order[(next(calls) // 40) % 3]
        return 1e-9 if name == fastest else 3e-9

    clock.cost = cost
    x = np.random.default_rng(2).random(N)
    expected = {}
    for backend in BACKENDS:
        expected[backend] = db.value_and_gradient(lambda x: db.sum(energy, x, backend=backend), x)
    for backend in BACKENDS[1:]:
        np.testing.assert_allclose(expected[backend][0], expected["numpy"][0], rtol=1e-12)
        np.testing.assert_allclose(expected[backend][1], expected["numpy"][1], rtol=1e-12)
    value, gradient = expected["numpy"]
    ran = set()
    for _ in range(200):
        with db.kernel_log() as log:
            v, g = db.value_and_gradient(loss, x)
        ran.add(log[-1].backend)
        np.testing.assert_allclose(v, value, rtol=1e-12)
        np.testing.assert_allclose(g, gradient, rtol=1e-12)
    assert ran == set(BACKENDS)  # every backend took calls


@pytest.mark.parametrize("how", ["set_backend", "backend="])
def test_a_forced_backend_is_never_second_guessed(clock, how):
    """Forced onto the slowest backend, every call runs it, and nothing is timed or remembered."""
    clock.cost = lambda name: 100e-9 if name == "numpy" else 1e-9
    x = np.random.default_rng(0).random(N)
    f = loss if how == "set_backend" else (lambda x: db.sum(energy, x, backend="numpy"))
    try:
        if how == "set_backend":
            db.set_backend("numpy")
        with db.kernel_log() as log:
            for _ in range(50):
                db.gradient(f, x)
    finally:
        db.set_backend(None)
    assert {c.backend for c in log} == {"numpy"}
    assert set(clock.runs) == {"numpy"} and len(clock.runs) == 50
    assert not any(k.choice.buckets for k in _kernels())


def test_a_size_with_one_candidate_is_never_timed(clock):
    """Below numexpr's threshold only NumPy can run a kernel: no timing, no re-timing."""
    clock.cost = lambda name: 1e-9
    x = np.random.default_rng(0).random(kernels.NUMEXPR_MIN - 1)
    ran = gradients(20, x)
    assert set(ran) == set(clock.runs) == {"numpy"}
    (kernel,) = [k for k in _kernels() if k.choice.buckets]
    assert kernel.choice.buckets == {x.size.bit_length(): "numpy"}  # a name, not a timed `Bucket`


# --- A prepared program's forward region: its backends under the same self-correcting choice -------------------


def test_prepared_region_corrects_a_bad_first_choice(monkeypatch):
    """A region with two candidates (blocked, whole arrays) timed wrongly when the program is compiled (blocked
    seems 4x faster, whole arrays are 3x faster) runs whole arrays by the bound's call, with the gradients of
    the general path on every call (the program's plan kept fused: `test_plan_choice` tests that choice)."""
    replay = importlib.import_module("dualbroadcast.replay")
    monkeypatch.setattr(replay, "PLAN_MARGIN", math.inf)
    fake = FakeClock()
    fake.runs = []
    fake.cost = {"numpy": 4e-9, "blocked": 1e-9}.get  # the bad first measurement
    monkeypatch.setattr(kernels, "clock", fake)
    original = replay.Runners.run

    def run(self, backend, values, shape, size, active_shapes):
        result = original(self, backend, values, shape, size, active_shapes)
        fake.runs.append(backend)
        fake.now += fake.cost(backend, 0) * size  # (a plan's run: the regions it runs cost)
        return result

    monkeypatch.setattr(replay.Runners, "run", run)
    n = replay.CHOSEN_MIN + 1000  # one chunk: whole arrays are a candidate
    x = np.random.default_rng(0).uniform(-1, 1, n)

    def f(x):
        return np.sum(np.exp(-3.0 * (x + 1.0)) * x)

    prog = db.prepare_gradient(f, x)
    (program,) = next(iter(prog.variants.values()))
    choice = program.regions[0].choices["gradient alone"]  # what ``prog(x)`` runs
    assert choice.chosen(n) == "blocked"
    fake.cost = {"numpy": 1e-9, "blocked": 3e-9}.get  # the truth
    expected = db.gradient(f, x)
    for call in range(1, BOUND + 20):
        np.testing.assert_allclose(prog(x), expected, rtol=1e-12, atol=1e-14 * np.max(np.abs(expected)))
        if call >= BOUND:
            assert choice.chosen(n) == "numpy", call
    assert [r for r in fake.runs if r in ("numpy", "blocked")][-10:].count("numpy") >= 9  # (not the plans' runs)
