"""A prepared program's first call: the recording's gradient on the recorded arrays, loop finding and compiling
left to the first replay (`prepared.Program._first`), and later calls replaying the loop."""

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import loops

U0 = np.array([1.0, 0.5])


def lotka_volterra_loss(p, u0=U0, steps=12, dt=0.05):
    """RK4 of Lotka-Volterra, the sum of |u|^2 over the steps: a loop of small steps."""
    def field(u):
        x, y = u[0], u[1]
        return np.stack([p[0] * x - p[1] * x * y, p[2] * x * y - p[3] * y])

    u, loss = u0, 0.0
    for _ in range(steps):
        k1 = field(u)
        k2 = field(u + 0.5 * dt * k1)
        k3 = field(u + 0.5 * dt * k2)
        k4 = field(u + dt * k3)
        u = u + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        loss = loss + np.sum(u**2)
    return loss


def central_differences(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)])


def only_program(prog):
    (program,) = {id(p): p for programs in prog.variants.values() for p in programs}.values()
    return program


P = np.array([1.1, 0.4, 0.1, 0.4])


def test_first_call_is_the_plain_gradient_and_finds_no_loop():
    prog = db.prepare_gradient(lotka_volterra_loss, P)
    program = only_program(prog)
    g = prog(P)
    np.testing.assert_allclose(g, db.gradient(lotka_volterra_loss, P), rtol=1e-13, atol=0)
    np.testing.assert_allclose(g, central_differences(lotka_volterra_loss, P), rtol=1e-6)
    assert "loop" not in vars(program)  # nothing found or compiled yet


def test_later_calls_find_the_loop_and_replay_it():
    prog = db.prepare_gradient(lotka_volterra_loss, P)
    prog(P)
    for p in (P, P * 1.3, P[::-1].copy()):
        np.testing.assert_allclose(prog(p), db.gradient(lotka_volterra_loss, p), rtol=1e-12, atol=1e-14)
    program = only_program(prog)
    assert program.loop is not None and program.loop.trips >= 10
    assert type(program.loop.tier) is loops.LoopTier and program.loop.tier.runners
    assert prog.recordings == 1


def test_an_argument_changed_in_place_is_replayed_not_returned_as_recorded():
    x = P.copy()
    prog = db.prepare_gradient(lotka_volterra_loss, x)
    x[0] = 0.7
    np.testing.assert_allclose(prog(x), db.gradient(lotka_volterra_loss, x), rtol=1e-12, atol=1e-14)


def test_a_changed_sign_of_zero_is_a_new_argument():
    def f(x):
        return np.sum(1.0 / x)

    prog = db.prepare_gradient(f, np.array([0.0, 1.0]))
    with np.errstate(divide="ignore"):
        g = prog(np.array([-0.0, 1.0]))
        np.testing.assert_array_equal(g, db.gradient(f, np.array([-0.0, 1.0])))


def test_the_first_gradient_is_the_callers_to_change():
    prog = db.prepare_gradient(lotka_volterra_loss, P)
    g = prog(P)
    g[:] = 0.0
    np.testing.assert_allclose(prog(P), db.gradient(lotka_volterra_loss, P), rtol=1e-12)


@pytest.mark.parametrize("with_value", [False, True])
def test_first_call_into_out(with_value):
    prog = db.prepare_gradient(lotka_volterra_loss, P)
    out = np.empty_like(P)
    result = prog.value_and_gradient(P, out=out) if with_value else (None, prog(P, out=out))
    assert result[1] is out
    np.testing.assert_allclose(out, db.gradient(lotka_volterra_loss, P), rtol=1e-13)
    if with_value:
        np.testing.assert_allclose(result[0], lotka_volterra_loss(P), rtol=1e-13)


def test_reading_the_program_before_a_call_attaches_it():
    prog = db.prepare_gradient(lotka_volterra_loss, P)
    program = only_program(prog)
    assert program.loop is not None  # read: found now
    np.testing.assert_allclose(prog(P), db.gradient(lotka_volterra_loss, P), rtol=1e-12)
    assert f"loop: {program.loop.trips} iterations" in str(db.explain(prog, P))
