"""dualbroadcast.scipy.integrate keeps the prepared programs of a right-hand side across solves: a second
gradient records nothing, and a changed closure constant or global records anew (the gradient against
central differences)."""

import gc
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast.scipy import integrate

from ..tape.test_fast_paths import central as central_differences

T = np.linspace(0.0, 2.0, 5)
Y0 = np.array([1.0, 0.5])
P = np.array([1.5, 1.0, 3.0, 1.0])
SCALE = 1.0  # a global the right-hand side reads


@pytest.fixture
def recordings(monkeypatch):
    """The number of prepared programs recorded by the solver since the test began (from an empty cache): a list
    of one count."""
    count = [0]
    monkeypatch.setattr(integrate, "_PROGRAMS", type(integrate._PROGRAMS)())
    record = integrate.prepare_gradient

    def counted(*args):
        count[0] += 1
        return record(*args)

    monkeypatch.setattr(integrate, "prepare_gradient", counted)
    return count


def make_loss(method, sensitivity, factor):
    """A Lotka-Volterra loss whose right-hand side closes over ``factor`` and reads the global ``SCALE``."""
    def loss(p):
        def rhs(t, y, p):
            u, v = y[0], y[1]
            return factor * SCALE * np.stack([p[0] * u - p[1] * u * v, -p[2] * v + p[3] * u * v])

        result = integrate.solve_ivp(rhs, (T[0], T[-1]), Y0, method=method, t_eval=T, args=(p,), rtol=1e-9,
                                     atol=1e-9, sensitivity=sensitivity)
        return np.sum(result.y ** 2)
    return loss


CASES = [("RK45", "adjoint"), ("RK45", "forward"), ("BDF", "adjoint")]


@pytest.mark.parametrize("method, sensitivity", CASES)
def test_a_second_solve_records_nothing(recordings, method, sensitivity):
    loss = make_loss(method, sensitivity, 0.75)
    first = db.gradient(loss, P)
    assert recordings[0] > 0
    recorded = recordings[0]
    second = db.gradient(loss, P)
    assert recordings[0] == recorded
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("method, sensitivity", CASES)
def test_a_changed_closure_constant_records_anew(recordings, method, sensitivity):
    db.gradient(make_loss(method, sensitivity, 0.75), P)
    recorded = recordings[0]
    loss = make_loss(method, sensitivity, 0.5)
    g = db.gradient(loss, P)
    assert recordings[0] > recorded
    np.testing.assert_allclose(g, central_differences(loss, P), rtol=1e-5)


@pytest.mark.parametrize("method, sensitivity", CASES)
def test_a_changed_global_records_anew(recordings, method, sensitivity, monkeypatch):
    loss = make_loss(method, sensitivity, 0.75)
    db.gradient(loss, P)
    recorded = recordings[0]
    monkeypatch.setitem(globals(), "SCALE", 0.5)
    g = db.gradient(loss, P)
    assert recordings[0] > recorded
    np.testing.assert_allclose(g, central_differences(loss, P), rtol=1e-5)


def test_kept_programs_hold_no_tracked_value():
    """A kept program must not keep the gradient's tape alive (through a tracked parameter)."""
    seen = []

    def loss(p):
        seen.append(weakref.ref(p))
        return make_loss("RK45", "adjoint", 0.75)(p)

    db.gradient(loss, P)
    gc.collect()
    assert seen and seen[0]() is None


def test_threads_share_the_kept_programs():
    """Solves in threads, of one right-hand side at different parameters, give the serial gradients."""
    loss = make_loss("RK45", "adjoint", 0.75)
    points = [P * (1 + 0.1 * k) for k in range(6)]
    serial = [db.gradient(loss, p) for p in points]
    with ThreadPoolExecutor(3) as pool:
        threaded = list(pool.map(lambda p: db.gradient(loss, p), points))
    for expected, got in zip(serial, threaded):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
