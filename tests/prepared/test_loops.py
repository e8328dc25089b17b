"""Loops of small steps in prepared programs (`dualbroadcast.loops`): the repeated block found in RK4, Euler and a
recurrence; its scalar code (Python, and Numba where installed) gives the straight-line replay's gradient, which
finite differences and JAX confirm; a block that is not the same each iteration is not looped, or its differing
constants are read per iteration, and the gradient stays right."""

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import loops

from ..tape.test_fast_paths import central as central_differences

RUNNERS = ["python"] + (["now"] if loops.NUMBA_INSTALLED else [])


def lotka_volterra(u, p):
    x, y = u[0], u[1]
    return np.stack([p[0] * x - p[1] * x * y, p[2] * x * y - p[3] * y])


def rk4_loss(p, u0, data, dt=0.1):
    u, total = u0, 0.0
    for k in range(len(data)):
        k1 = lotka_volterra(u, p)
        k2 = lotka_volterra(u + dt / 2 * k1, p)
        k3 = lotka_volterra(u + dt / 2 * k2, p)
        k4 = lotka_volterra(u + dt * k3, p)
        u = u + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        total = total + np.sum((u - data[k]) ** 2)
    return total


def euler_loss(p, steps=40, dt=0.05):
    u = p[:2] * 1.0
    for _ in range(steps):
        u = u + dt * np.stack([-p[2] * u[1], np.sin(u[0]) * p[3]])
    return np.sum(u ** 2)


def recurrence(x, steps=30):
    h = x[0]
    for _ in range(steps):
        h = np.tanh(x[1] * h + x[2]) + 0.1 * np.exp(-h * h)
    return h * h


P = np.array([1.5, 1.0, 1.0, 3.0])
U0 = np.array([1.0, 1.0])
DATA = np.random.default_rng(0).random((20, 2))


def prepared(f, x, mode):
    token = loops.COMPILE.set(mode)
    try:
        return db.prepare_gradient(f, x)
    finally:
        loops.COMPILE.reset(token)


def program_of(prog):
    (program,) = {id(p): p for variants in prog.variants.values() for p in variants}.values()  # (keyed twice)
    return program


def straight_line(f, x):
    """The gradient of the straight-line replay (no loop runs)."""
    return prepared(f, x, "off")(x)


CASES = [
    (lambda p: rk4_loss(p, U0, DATA), P, 19),  # iteration 0 reads u0, a constant: peeled
    (euler_loss, np.array([0.3, -0.2, 0.7, 1.3]), 40),
    (recurrence, np.array([0.2, 0.9, -0.3]), 30),
]


@pytest.mark.parametrize("mode", RUNNERS)
@pytest.mark.parametrize("f, x, trips", CASES)
def test_loop_found_and_gradient_as_straight_line(f, x, trips, mode):
    prog = prepared(f, x, mode)
    program = program_of(prog)
    assert program.loop is not None and program.loop.trips == trips
    tier = program.loop.tier
    names = [name for name in tier.runners if mode == "now" or name == "python"]
    assert names
    expected = straight_line(f, x)
    for name in names:
        value, (g,) = tier._scalar(name, [x])
        np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(value, f(x), rtol=1e-13)
    for _ in range(3 * len(tier.seconds) + 2):  # measured in turns, then the fastest: the same gradient
        np.testing.assert_allclose(prog(x), expected, rtol=1e-12, atol=1e-12)
    assert tier.chosen is not None
    np.testing.assert_allclose(expected, central_differences(f, x), rtol=1e-6, atol=1e-7)


def test_straight_line_compiled_in_the_background_meanwhile_python():
    x = np.array([0.2, 0.9, -0.3])
    expected = straight_line(recurrence, x)
    prog = db.prepare_gradient(recurrence, x)  # (the default: the straight-line replay compiled in the background)
    np.testing.assert_allclose(prog(x), expected, rtol=1e-12)
    tier = program_of(prog).loop.tier
    tier.wait()
    for _ in range(8):
        np.testing.assert_allclose(prog(x), expected, rtol=1e-12)
    assert tier.chosen is not None and "straight-line" in tier.status()
    assert "loop: 30 iterations" in str(db.explain(prog, x))


def test_rk4_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jax_loss(p):
        def f(u):
            return jnp.stack([p[0] * u[0] - p[1] * u[0] * u[1], p[2] * u[0] * u[1] - p[3] * u[1]])

        def step(carry, d):
            u, total = carry
            k1 = f(u)
            k2 = f(u + 0.1 / 2 * k1)
            k3 = f(u + 0.1 / 2 * k2)
            k4 = f(u + 0.1 * k3)
            u = u + 0.1 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return (u, total + jnp.sum((u - d) ** 2)), None

        return jax.lax.scan(step, (jnp.asarray(U0), 0.0), jnp.asarray(DATA))[0][1]

    prog = prepared(lambda p: rk4_loss(p, U0, DATA), P, "python")
    expected = np.asarray(jax.jit(jax.grad(jax_loss))(jnp.asarray(P)))
    for _ in range(5):
        np.testing.assert_allclose(prog(P), expected, rtol=1e-12)


def test_explain_shows_the_loop():
    prog = prepared(recurrence, np.array([0.2, 0.9, -0.3]), "python")
    text = str(db.explain(prog, np.array([0.2, 0.9, -0.3])))
    assert "loop: 30 iterations of" in text and "np.tanh" in text.splitlines()[-1]


def test_constant_changing_each_iteration_is_read_per_iteration():
    def f(x):
        h = x[0]
        for k in range(12):
            h = np.sin(h) * x[1] + 0.1 * k
        return h * h

    x = np.array([0.4, 0.8])
    prog = prepared(f, x, "python")
    program = program_of(prog)
    assert program.loop is not None and program.loop.rows == 1
    expected = straight_line(f, x)
    np.testing.assert_allclose(expected, central_differences(f, x), rtol=1e-6, atol=1e-8)
    for _ in range(8):
        np.testing.assert_allclose(prog(x), expected, rtol=1e-12, atol=1e-15)


def test_an_iteration_reading_an_older_value_is_not_looped_over():
    """Iteration 6 reads h of two iterations before, not of the last: no block's carry.  Recorded where every h is
    0 and every factor 1, so that the check against the recording cannot tell them apart; another x can."""
    def f(x):
        hs = [x[0]]
        for k in range(12):
            hs.append(np.sin(hs[-2 if k == 6 else -1]) * x[1])
        return hs[-1] * hs[-1]

    prog = prepared(f, np.array([0.0, 1.0]), "python")
    y = np.array([0.4, 0.8])
    expected = db.gradient(f, y)
    np.testing.assert_allclose(expected, central_differences(f, y), rtol=1e-6, atol=1e-8)
    for _ in range(8):  # every runner in turn
        np.testing.assert_allclose(prog(y), expected, rtol=1e-12, atol=1e-15)


def test_guard_inside_the_block_is_not_looped_and_replays_right():
    def f(x):
        h = x[0]
        for _ in range(10):
            h = np.sin(h) * x[1] if h > 0 else np.cos(h) * x[1]
        return h * h

    for x in (np.array([0.4, 0.8]), np.array([-0.4, 0.8]), np.array([0.4, -0.8])):
        prog = prepared(f, x, "python")
        loop = program_of(prog).loop
        assert loop is None or loop.period * loop.trips < 10  # a guard is never inside the block
        for y in (x, -x):
            np.testing.assert_allclose(prog(y), central_differences(f, y), rtol=1e-6)


def test_a_constant_array_changed_in_place_is_read_anew():
    weights = np.array([0.5, -0.25])

    def f(x):
        h = x
        for _ in range(10):
            h = np.sin(h * weights) + x
        return np.sum(h ** 2)

    x = np.array([0.3, 0.7])
    prog = prepared(f, x, "python")
    assert program_of(prog).loop is not None
    for _ in range(8):
        prog(x)
    weights[:] = [1.5, 0.75]  # as `db.gradient` and the straight-line replay read it
    np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-12)


def test_shape_changing_each_iteration_is_not_looped():
    def f(x):
        u = x[:1]
        for _ in range(6):
            u = np.concatenate([u, np.sin(u[-1:]) * x[1]])
        return np.sum(u ** 2)

    x = np.array([0.4, 0.8])
    prog = prepared(f, x, "python")
    loop = program_of(prog).loop
    assert loop is None or loop.tier is None or loop.period * loop.trips < 6 * 4
    for _ in range(8):
        np.testing.assert_allclose(prog(x), central_differences(f, x), rtol=1e-6)


@pytest.mark.parametrize("mode", RUNNERS)
def test_float32_stays_float32(mode):
    x = np.array([0.2, 0.9, -0.3], np.float32)
    prog = prepared(recurrence, x, mode)
    expected = straight_line(recurrence, x)
    for _ in range(8):
        g = prog(x)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, expected, rtol=1e-5)


@pytest.mark.parametrize("mode", RUNNERS)
def test_a_call_of_another_dtype_is_not_the_looped_programs_case(mode):
    """Prepared at float64, called with float32 (and back): each call gets its own dtype's gradient, never the
    float64 program's (`loops` program `_one` checks the dtype as well as the shape)."""
    x = np.array([0.2, 0.9, -0.3])
    prog = prepared(recurrence, x, mode)
    for _ in range(3):
        np.testing.assert_allclose(prog(x), straight_line(recurrence, x), rtol=1e-12)
        g = prog(x.astype(np.float32))
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, straight_line(recurrence, x.astype(np.float32)), rtol=1e-5)


def test_python_raising_falls_back_to_the_straight_line_replay():
    def f(x):
        h = x[0]
        for _ in range(8):
            h = np.log(h) * x[1] + 2.0
        return h * h

    x = np.array([-1.0, 0.5])  # log of a negative number: NaN in NumPy, ValueError in math.log
    with np.errstate(all="ignore"):
        prog = prepared(f, x, "python")
        assert program_of(prog).loop.tier is not None
        expected = straight_line(f, x)
        for _ in range(8):
            np.testing.assert_array_equal(prog(x), expected)


def test_calls_are_measured_and_run_as_scalar_code_without_waiting_for_the_straight_line_replay():
    """Regression: every call waited for the straight-line replay, compiled in a background thread (seconds on
    thousands of steps), before any runner was measured or Numba tiered up; `db.explain` of the RK4 program after
    20 calls with a cut second argument still said 'being measured (a call: not called yet)'."""
    def f(p, u0):
        return rk4_loss(p, u0, DATA)

    prog = db.prepare_gradient(f, P, db.cut(U0))
    tier = program_of(prog).loop.tier
    expected = straight_line(lambda p: f(p, U0), P)
    for _ in range(2 * loops.MEASURED):
        np.testing.assert_allclose(prog(P, db.cut(U0))[0], expected, rtol=1e-12)
    assert tier.chosen == "python" and len(tier.seconds["python"]) >= loops.MEASURED
    assert tier.straight is None and tier.compiling_straight is None  # Python is faster than it could be: not needed
    text = str(db.explain(prog, P, db.cut(U0)))
    assert "runs: python (a call: python" in text


@pytest.mark.skipif(not loops.NUMBA_INSTALLED, reason="Numba is not installed")
def test_numba_tiers_up_in_the_background_and_runs_once_checked(monkeypatch):
    monkeypatch.setattr(loops, "TIER_UP", 0.0)
    x, scale = np.array([0.2, 0.9, -0.3]), np.array([1.0, 0.5, 2.0])

    def f(x, scale):
        return recurrence(x * scale)

    prog = db.prepare_gradient(f, x, db.cut(scale))
    tier = program_of(prog).loop.tier
    expected = straight_line(lambda x: f(x, scale), x)
    np.testing.assert_allclose(prog(x, db.cut(scale))[0], expected, rtol=1e-12)
    tier.compiling.join()  # (started by that call: the program had spent more than TIER_UP in calls)
    for _ in range(3 * loops.MEASURED):
        np.testing.assert_allclose(prog(x, db.cut(scale))[0], expected, rtol=1e-12)
    assert len(tier.seconds["numba"]) >= loops.MEASURED and tier.chosen in ("numba", "python")


@pytest.mark.skipif(not loops.NUMBA_INSTALLED, reason="Numba is not installed")
def test_the_check_of_a_runner_compiled_later_reads_the_recording_not_the_callers_arrays(monkeypatch):
    """A float32 program (Numba its only scalar runner) is checked against the recording when Numba has compiled,
    calls later: the recorded arguments are copied, so an optimiser changing its array in place meanwhile does not
    make the compiled runner disagree (and be dropped)."""
    monkeypatch.setattr(loops, "TIER_UP", 0.0)
    x = np.array([0.2, 0.9, -0.3], np.float32)
    prog = db.prepare_gradient(recurrence, x)
    tier = program_of(prog).loop.tier
    x -= np.float32(0.1) * prog(x)  # (this call starts the compile: the program spent more than TIER_UP in calls)
    tier.compiling.join()
    for _ in range(3 * loops.MEASURED):
        np.testing.assert_allclose(prog(x), straight_line(recurrence, x), rtol=1e-5)
    assert "numba" in tier.runners and tier.failed is None
