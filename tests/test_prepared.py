"""Prepared gradients: the replayed program gives what db.gradient gives, on new arguments too."""

import importlib
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dualbroadcast as db
from benchmarks.models import COEFFICIENTS, eam_dualbroadcast, eam_hand_gradient, eam_numpy, poly9_one_uncut

from .cases import reset_streams

CASES = [
    case
    for name in ("elementwise", "reductions", "linalg", "shape")
    for case in importlib.import_module(f".cases.{name}", __package__).CASES
]


def _close(a, b, dtype):
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_replay_equals_gradient_for_every_rule(case, data):
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    w_seed = data.draw(st.integers(0, 100))

    def f(*a):
        out = fn(*a)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return sum(np.sum(o * np.random.default_rng(w_seed + k).standard_normal(np.shape(o))) for k, o in enumerate(outs))

    prog = db.prepare_gradient(f, *args)
    moved = [a * (1 + 1e-3) if isinstance(a, np.ndarray) else type(a)(a * (1 + 1e-3)) for a in args]
    _close(prog(*moved), db.gradient(f, *moved), np.float64)
    _close(prog(*args), db.gradient(f, *args), np.float64)


@pytest.mark.parametrize("model", [eam_numpy, eam_dualbroadcast], ids=["plain", "sum"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eam_replayed_on_new_points_with_out(model, dtype):
    rng = np.random.default_rng(0)
    prog = db.prepare_gradient(model, rng.random(500).astype(dtype))
    out = np.empty(500, dtype)
    for _ in range(3):
        x = rng.random(500).astype(dtype)
        result = prog(x, out=out)
        assert result is out and out.dtype == dtype
        _close(out, eam_hand_gradient(x).astype(dtype), dtype)
        value, g = prog.value_and_gradient(x)
        assert value == pytest.approx(eam_numpy(x), rel=1e-5) and g is not out
    assert prog.recordings == 1


def test_branch_flip_re_records_and_both_paths_stay_cached():
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x**2)
        return np.sum(np.sin(x))

    prog = db.prepare_gradient(f, np.ones(3))
    np.testing.assert_allclose(prog(np.full(3, 2.0)), 4.0)
    assert prog.recordings == 1
    np.testing.assert_allclose(prog(np.full(3, -2.0)), np.cos(-2.0))  # the other branch: recorded anew
    assert prog.recordings == 2
    np.testing.assert_allclose(prog(np.full(3, 3.0)), 6.0)
    np.testing.assert_allclose(prog(np.full(3, -1.0)), np.cos(-1.0))
    assert prog.recordings == 2  # both variants are kept


def test_loop_count_decided_by_a_value_is_guarded():
    def newton_sqrt(a):
        x = a
        while np.abs(x * x - a) > 1e-12:
            x = 0.5 * (x + a / x)
        return x

    prog = db.prepare_gradient(newton_sqrt, 4.0)
    for a in (4.0, 9.0, 2.0, 100.0):
        assert prog(a) == pytest.approx(0.5 / np.sqrt(a), rel=1e-9)
    assert prog.recordings >= 2  # a different iteration count is a different path


def test_new_constant_data_and_shapes():
    loss = lambda w, data: np.sum((data @ w - 1.0) ** 2)
    rng = np.random.default_rng(1)
    prog = db.prepare_gradient(loss, np.ones(3), db.cut(rng.random((5, 3))))
    for rows in (5, 5, 7):
        w, data = rng.random(3), rng.random((rows, 3))
        gw, gdata = prog(w, db.cut(data))
        assert gdata is None
        np.testing.assert_allclose(gw, 2 * data.T @ (data @ w - 1.0))
    assert prog.recordings == 2  # 7 rows is a new signature


def test_cut_inside_f_is_replayed_as_a_constant_of_the_new_value():
    def f(x):
        scale = db.cut(np.sum(x))  # a stop-gradient of a value that changes between calls
        return np.sum(x * scale)

    prog = db.prepare_gradient(f, np.ones(3))
    x = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(prog(x), np.full(3, 7.0))
    np.testing.assert_allclose(prog(x), db.gradient(f, x))


@dataclass
class Params:
    a: np.ndarray
    b: float


def test_pytrees_and_uncut_leaves():
    f = lambda p, c: np.sum(p.a * c["w"]) * p.b + c["k"] ** 2
    p, c = Params(np.ones(2), 3.0), db.cut({"w": np.arange(2.0), "k": db.uncut(1.5)})
    prog = db.prepare_gradient(f, p, c)
    p2 = Params(np.array([2.0, 5.0]), 0.5)
    gp, gc = prog(p2, c)
    expected_p, expected_c = db.gradient(f, p2, c)
    np.testing.assert_allclose(gp.a, expected_p.a)
    assert gp.b == pytest.approx(expected_p.b) and gc["k"] == pytest.approx(expected_c["k"]) and gc["w"] is None


def test_poly9_kernel_replayed_with_new_coefficient_and_points():
    xs = np.linspace(-1, 1, 1000)
    prog = db.prepare_gradient(poly9_one_uncut, COEFFICIENTS[2], db.cut(xs))
    xs2 = np.linspace(-0.5, 1.5, 1000)
    assert prog(0.7, db.cut(xs2))[0] == pytest.approx(np.sum(xs2**2))
    assert prog.recordings == 1


def test_index_from_a_traced_value_is_guarded():
    def f(x):
        i = np.argmax(x)  # an index computed from the data
        return x[int(i)] * 2.0

    prog = db.prepare_gradient(f, np.array([1.0, 5.0, 2.0]))
    np.testing.assert_allclose(prog(np.array([1.0, 6.0, 2.0])), [0.0, 2.0, 0.0])
    np.testing.assert_allclose(prog(np.array([9.0, 6.0, 2.0])), [2.0, 0.0, 0.0])
    assert prog.recordings == 2


def _allocated_per_call(call):
    """Peak bytes a steady-state call allocates above what was allocated before it."""
    import tracemalloc

    for _ in range(3):
        call()
    tracemalloc.start()
    try:
        call()
        worst = 0
        for _ in range(5):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            call()
            worst = max(worst, tracemalloc.get_traced_memory()[1] - before)
        return worst
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("n", [100, 100_000])
def test_prepared_eam_with_out_allocates_nothing_that_grows_with_n(n):
    x = np.random.default_rng(3).random(n)
    out = np.empty(n)
    prog = db.prepare_gradient(eam_dualbroadcast, x)
    allocated = _allocated_per_call(lambda: prog(x, out=out))
    np.testing.assert_allclose(out, eam_hand_gradient(x), rtol=1e-12)
    assert allocated < 4096, f"a replayed call allocated {allocated} bytes"


def test_allocation_meter_sees_an_allocating_call():
    x = np.random.default_rng(3).random(100_000)
    assert _allocated_per_call(lambda: db.gradient(eam_dualbroadcast, x)) > x.nbytes
