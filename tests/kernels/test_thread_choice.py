"""The kernels' thread count is under the self-correcting backend choice: `kernels.ONE_THREAD`, the blocked
kernel on the calling thread alone, is a candidate beside ``blocked`` wherever that splits a call across
threads, so a loaded machine, where a chunk handed to a second thread waits for a busy core, does not keep two
threads slower than one.

Time is controlled, never measured: the choice reads `kernels.clock`, which these tests replace by a fake clock
that each backend's run advances by a cost per element the test scripts.  The computations are real, so every
call's gradient is checked.
"""

import importlib
import math

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels

replay = importlib.import_module("dualbroadcast.replay")
N = 200_000  # float64: several chunks of `CHUNK_BLOCKS` blocks on two threads
BOUND = 1 + 3 * (kernels.RETIME_FIRST + 1)  # the call by which a wrong first choice is undone (three runner-ups)


def energy(x):
    return np.exp(-3.0 * (x + 1.0)) * x


class FakeClock:
    """``kernels.clock``: seconds pass when a backend runs (``cost(backend) * size``), a nanosecond at each read."""

    def __init__(self):
        self.now = 0.0
        self.runs = []
        self.cost = None

    def __call__(self):
        self.now += 1e-9
        return self.now

    def advance(self, backend, size):
        self.runs.append(backend)
        self.now += self.cost(backend) * size


@pytest.fixture
def clock(monkeypatch):
    """Two cores, a fake clock, and every backend of a kernel (and a prepared program's runners) advancing it."""
    db.clear_cache()
    monkeypatch.setattr(kernels, "THREADS", 2)
    fake = FakeClock()
    monkeypatch.setattr(kernels, "clock", fake)
    for cls in (kernels._WholeArrays, kernels._Blocked, kernels._Numexpr):
        def run(self, values, shape, size, active_shapes, original=cls.run):
            result = original(self, values, shape, size, active_shapes)
            name = next(k for k, b in self.kernel.backends.items() if b is self)
            fake.advance(name, size)
            return result

        monkeypatch.setattr(cls, "run", run)
    original = replay.Runners.run

    def runners(self, backend, values, shape, size, active_shapes):
        result = original(self, backend, values, shape, size, active_shapes)
        fake.advance(backend, size)
        return result

    monkeypatch.setattr(replay.Runners, "run", runners)
    yield fake
    db.clear_cache()


def costs(truth, first=None):
    """A cost per element: ``first`` for each backend's first three runs (`BackendChoice.measure`'s), then the truth."""
    runs = {}

    def cost(name):
        runs[name] = runs.get(name, 0) + 1
        return (first if first is not None and runs[name] <= 3 else truth).get(name, 1e-9)

    return cost


TRUTH = {"numpy": 4e-9, "blocked": 2e-9, "numexpr": 3e-9, kernels.ONE_THREAD: 1e-9}  # a loaded machine
FIRST = dict(TRUTH, blocked=0.5e-9)  # two threads timed on a quiet moment


def test_one_thread_is_a_candidate_only_where_blocked_runs_on_several(monkeypatch):
    """Two threads split a call of `N` float64 elements: one thread is a candidate; not for one chunk's size, in a
    Dask task (`KERNEL_THREADS` 1) or on one core."""
    monkeypatch.setattr(kernels, "THREADS", 2)
    db.clear_cache()
    x = np.random.default_rng(0).random(N)
    db.gradient(lambda x: db.sum(energy, x), x)
    (kernel,) = importlib.import_module("dualbroadcast.kernel_cache").KERNEL_CACHE.values()
    assert kernels.ONE_THREAD in kernel._candidates([x], N)
    assert kernels.ONE_THREAD not in kernel._candidates([x[:90_000]], 90_000)  # one chunk
    token = kernels.KERNEL_THREADS.set(1)  # a Dask task's
    try:
        assert kernels.ONE_THREAD not in kernel._candidates([x], N)
    finally:
        kernels.KERNEL_THREADS.reset(token)
    monkeypatch.setattr(kernels, "THREADS", 1)
    assert kernels.ONE_THREAD not in kernel._candidates([x], N)


def test_db_sum_leaves_two_threads_slower_than_one_within_the_bound(clock):
    """Two threads win the first timing, one is truly twice as fast: by the bound's call one thread runs, and
    every gradient is the one computed on whole arrays (forced numpy) up to rounding."""
    clock.cost = costs(TRUTH, FIRST)
    x = np.random.default_rng(0).uniform(-1, 1, N)
    expected = db.gradient(lambda x: db.sum(energy, x, backend="numpy"), x)
    clock.runs.clear()

    def loss(x):
        return db.sum(energy, x)

    ran = []
    for _ in range(60):
        with db.kernel_log() as log:
            np.testing.assert_allclose(db.gradient(loss, x), expected, rtol=1e-12, atol=1e-15)
        ran.append(log[-1].backend)
    assert ran[0] == "blocked"  # the bad first timing took effect
    after = ran[BOUND:]
    assert after.count(kernels.ONE_THREAD) >= len(after) - 3, ran  # (a runner-up re-timed now and then)


@pytest.mark.parametrize("fused", [False, True], ids=["recorded db.sum", "forward region"])
def test_prepared_kernels_choose_their_threads(clock, monkeypatch, fused):
    """A prepared program's recorded ``db.sum`` and its forward region (the plan kept fused) run blocked on two
    threads or one under a choice: first timed wrongly, one thread runs by the bound's call."""
    monkeypatch.setattr(replay, "PLAN_MARGIN", math.inf)
    clock.cost = costs(TRUTH)
    x = np.random.default_rng(1).uniform(-1, 1, N)

    def f(x):
        return np.sum(energy(x)) if fused else db.sum(energy, x)

    expected = db.gradient(lambda x: db.sum(energy, x, backend="numpy"), x)
    clock.cost = costs(TRUTH, FIRST)
    prog = db.prepare_gradient(f, x)
    (programs,) = prog.variants.values()
    program = programs[0]
    if fused:
        assert len(program.regions) == 1
        choice = program.regions[0].choices["gradient alone"]
    else:
        assert program.loop is None  # read: the program compiled now (else at its first replay)
        (choice,) = [v.choice for v in program.gradient.__globals__.values() if hasattr(v, "choice")]
    assert set(choice.kernel.runners) == {"blocked", kernels.ONE_THREAD}
    for call in range(1, 40):
        np.testing.assert_allclose(prog(x), expected, rtol=1e-12, atol=1e-15)
        if call >= BOUND:
            assert choice.chosen(N) == kernels.ONE_THREAD, call
