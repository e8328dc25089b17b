"""Prepared gradients: the replayed program gives what db.gradient gives, on new arguments too."""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from benchmarks.models import COEFFICIENTS, eam_dualbroadcast, eam_hand_gradient, eam_numpy, poly9_one_uncut

from ..cases import all_cases, complex_cases, reset_streams

CASES = all_cases()


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
        return sum(np.sum(o * np.random.default_rng(w_seed + k).standard_normal(np.shape(o)))
                   for k, o in enumerate(outs))

    prog = db.prepare_gradient(f, *args)
    moved = [a * (1 + 1e-3) if isinstance(a, np.ndarray) else type(a)(a * (1 + 1e-3)) for a in args]
    _close(prog(*moved), db.gradient(f, *moved), np.float64)
    _close(prog(*args), db.gradient(f, *args), np.float64)


@pytest.mark.parametrize("case", complex_cases(CASES), ids=str)
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_prepared_gradient_of_complex_values_is_replayed_and_equals_gradient(case, data):
    """Every case of a rule for complex values, in complex128: replayed (never left to db.gradient), on the
    recorded arguments and on new ones, giving what db.gradient gives."""
    reset_streams()
    fn, args = case.build(data.draw, np.complex128)
    w_seed = data.draw(st.integers(0, 100))

    def f(*a):
        out = fn(*a)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return sum(np.real(np.sum(o * np.random.default_rng(w_seed + k).standard_normal(np.shape(o)) * (1 - 0.5j)))
                   for k, o in enumerate(outs))

    prog = db.prepare_gradient(f, *args)
    moved = [a * (1 + 1e-3j) if isinstance(a, np.ndarray) else type(a)(a * (1 + 1e-3j)) for a in args]
    _close(prog(*moved), db.gradient(f, *moved), np.float64)
    _close(prog(*args), db.gradient(f, *args), np.float64)
    assert not prog.unreplayable and prog.variants, f"{case} was left to db.gradient"


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
    """The meter itself, on a call that allocates a result of x's size every time (plain db.gradient may
    recycle its kernel buffers depending on the backend measured fastest, so it is not a fixed reference)."""
    x = np.random.default_rng(3).random(100_000)
    assert _allocated_per_call(lambda: np.exp(x)) >= x.nbytes


# --- plain arguments: floats, arrays, and flat tuples and lists of floats ------------------------
def _fold(xs):
    total = xs[0]
    for v in xs[1:]:
        total = total - 2.0 * v
    return total


@pytest.mark.parametrize("container", [tuple, list])
def test_float_sequences_give_what_gradient_gives(container):
    xs = container(float(k) + 0.5 for k in range(16))
    prog = db.prepare_gradient(_fold, xs)
    for ys in (xs, container(-v for v in xs)):
        value, g = prog.value_and_gradient(ys)
        expected_value, expected = db.value_and_gradient(_fold, ys)
        assert type(g) is container and all(type(v) is float for v in g) and g == expected
        assert type(value) is type(expected_value) and value == expected_value
    assert prog.recordings == 1


def test_python_floats_are_converted_before_operations_not_exact_on_them():
    def f(xs):
        a = xs[0] - xs[1]  # stays a Python float in the program
        return np.sin(a) * xs[2] + a / xs[1] + a**2

    xs = (0.3, 0.0, 2.0)
    prog = db.prepare_gradient(f, (0.3, 1.0, 2.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        g = prog(xs)  # division by zero: inf/nan like NumPy, not ZeroDivisionError
        expected = db.gradient(f, xs)
    np.testing.assert_array_equal(g, expected)
    assert np.isinf(g[0]) and type(g[0]) is float


def test_float_sequence_branch_flip_and_length_change_re_record():
    def f(xs):
        if xs[0] - xs[1] > 0:
            return xs[0] * xs[1]
        return xs[0] - xs[1] * xs[-1]

    prog = db.prepare_gradient(f, (2.0, 1.0, 5.0))
    assert prog((3.0, 1.0, 5.0)) == db.gradient(f, (3.0, 1.0, 5.0))
    assert prog.recordings == 1
    assert prog((1.0, 3.0, 5.0)) == db.gradient(f, (1.0, 3.0, 5.0))  # the other branch
    assert prog.recordings == 2
    assert prog([1.0, 3.0, 5.0, 7.0]) == db.gradient(f, [1.0, 3.0, 5.0, 7.0])  # a list, one longer
    assert prog.recordings == 3
    assert prog((4.0, 3.0, 5.0)) == (3.0, 4.0, 0.0) and prog((1.0, 3.0, 6.0)) == (1.0, -6.0, -3.0)
    assert prog.recordings == 3  # every variant stays cached


def test_sequences_floats_and_arrays_together():
    f = lambda xs, s, a: (xs[0] - xs[1]) * s + np.sum(a * xs[1])
    args = ([1.0, 2.0], 3.0, np.arange(3.0))
    prog = db.prepare_gradient(f, *args)
    new = ([4.0, -1.0], 0.5, np.ones(3))
    gxs, gs, ga = prog(*new)
    expected = db.gradient(f, *new)
    assert gxs == expected[0] and type(gxs) is list and gs == expected[1] and type(gs) is float
    np.testing.assert_array_equal(ga, expected[2])
    assert prog(*new)[2] is not ga  # a fresh array each call


def test_sequences_that_are_not_plain_take_the_pytree_path():
    f = lambda xs: xs[0] * xs[1] if isinstance(xs[1], float) else xs[0] * np.sum(xs[1])
    prog = db.prepare_gradient(f, (2.0, 3.0))
    assert prog((2.0, 3.0)) == (3.0, 2.0)
    gx, gy = prog((2.0, np.ones(2)))  # an array in the tuple: another signature, recorded anew
    assert gx == 2.0 and np.array_equal(gy, [2.0, 2.0]) and prog.recordings == 2


# --- out=: the program writes the gradient into the caller's arrays ------------------------------
def test_out_for_several_arguments_and_cut_ones():
    f = lambda x, y, c: np.sum(db.sum(lambda a, b: np.exp(a * b), x, y) * x) + np.sum(c * y)
    x, y, c = np.linspace(0.0, 1.0, 50), np.linspace(1.0, 2.0, 50), np.ones(50)
    prog = db.prepare_gradient(f, x, y, db.cut(c))
    gx, gy = np.empty(50), np.empty(50)
    result = prog(x, y, db.cut(c), out=(gx, gy, None))
    assert result[0] is gx and result[1] is gy
    expected = db.gradient(f, x, y, db.cut(c))
    np.testing.assert_allclose(gx, expected[0], rtol=1e-12)
    np.testing.assert_allclose(gy, expected[1], rtol=1e-12)
    with pytest.raises(ValueError, match="out= has 1 arrays but the gradient has 2"):
        prog(x, y, db.cut(c), out=(gx, None, None))


def test_out_may_be_the_argument_itself():
    x = np.random.default_rng(5).random(100)
    prog = db.prepare_gradient(eam_dualbroadcast, x)
    expected = eam_hand_gradient(x)
    y = x.copy()
    assert prog(y, out=y) is y
    np.testing.assert_allclose(y, expected, rtol=1e-12)


def test_kernel_partial_and_other_contributions_to_one_leaf():
    def f(x):
        return db.sum(lambda r: np.exp(-3 * (r + 1)), x) ** 2 + np.sum(x * x) + db.sum(np.sin, x)

    x = np.linspace(0.0, 1.0, 100)
    prog = db.prepare_gradient(f, x)
    out = np.empty(100)
    for z in (x, 2 * x):
        np.testing.assert_allclose(prog(z, out=out), db.gradient(f, z), rtol=1e-12)
        np.testing.assert_allclose(prog(z), db.gradient(f, z), rtol=1e-12)


@pytest.mark.parametrize("n", [100, 16384, 16385])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eam_prepared_around_the_block_size(n, dtype):
    x = np.random.default_rng(2).random(n).astype(dtype)
    prog = db.prepare_gradient(eam_dualbroadcast, x)
    out = np.empty(n, dtype)
    prog(x, out=out)
    _close(out, db.gradient(eam_dualbroadcast, x), dtype)
    _close(prog(x), db.gradient(eam_dualbroadcast, x), dtype)


def test_a_python_float_meeting_a_float32_array_is_float64_first():
    f = lambda s, a: np.sum((s - 1.0) * a)  # np.float64 * float32 array is float64; a Python float would give float32
    a = np.linspace(0.0, 1.0, 7, dtype=np.float32) + np.float32(1e-3)
    prog = db.prepare_gradient(f, 0.1, a)
    value, (gs, ga) = prog.value_and_gradient(0.3, a)
    expected_value, (es, ea) = db.value_and_gradient(f, 0.3, a)
    assert np.result_type(value) == np.result_type(expected_value) == np.float64 and value == expected_value
    assert gs == es and type(gs) is float and ga.dtype == np.float32
    np.testing.assert_array_equal(ga, ea)


def test_constant_cotangents_folded_while_generating_give_the_same_numbers():
    def f(x, ys):
        a = x * 2.5 - x * 0.1  # two constant contributions to x's cotangent
        b = -(ys[0] * 3.0) + ys[0] * ys[1]  # a constant and a variable contribution to ys[0]'s
        return a * 1.5 - b - b

    prog = db.prepare_gradient(f, 1.0, (2.0, 3.0))
    for x, ys in [(1.5, (0.7, -2.0)), (-3.0, (1e10, 1e-10))]:
        got, expected = prog(x, ys), db.gradient(f, x, ys)
        assert got == expected and type(got[0]) is float and type(got[1]) is tuple


@pytest.mark.parametrize("scale", [np.float32(0.1), np.float64(0.1)], ids=["float32", "float64"])
def test_last_product_with_a_cotangent_of_another_dtype_than_recorded_for_the_value(scale):
    def f(x):  # float32 density; its cotangent is float64 when scaled by a float64 number
        return db.sum(lambda r: np.exp(-3 * (r + 1)), x) * scale

    x = np.random.default_rng(4).random(1000).astype(np.float32)
    prog = db.prepare_gradient(f, x)
    expected = db.gradient(f, x)
    out = np.empty_like(x)
    np.testing.assert_array_equal(prog(x, out=out), expected)
    np.testing.assert_array_equal(prog(x), expected)


def test_value_and_gradient_of_plain_arguments_with_out_returns_the_value():
    """Plain array arguments, two gradients written into ``out=``: the value returned is f's, and replaying
    records nothing again."""
    def f(x, y):
        return np.sum(x * y + np.sin(x))

    x, y = np.linspace(0.1, 1.0, 5), np.linspace(-1.0, 1.0, 5)
    prog = db.prepare_gradient(f, x, y)
    for scale in (1.0, 2.0, 3.0):
        out = (np.empty(5), np.empty(5))
        value, written = prog.value_and_gradient(x * scale, y, out=out)
        assert written is out
        np.testing.assert_allclose(value, f(x * scale, y), rtol=1e-14)
        want = db.gradient(f, x * scale, y)
        np.testing.assert_allclose(out[0], want[0], rtol=1e-14)
        np.testing.assert_allclose(out[1], want[1], rtol=1e-14)
    assert prog.recordings == 1


# --- complex values: replayed, as db.gradient differentiates them ---------------------------------------
def _replays_like_gradient(f, *args, changes=(1.0, 0.5 - 0.25j)):
    prog = db.prepare_gradient(f, *args)
    for c in changes:
        moved = [a * c if np.iscomplexobj(a) else a * abs(c) for a in args]
        got, expected = prog(*moved), db.gradient(f, *moved)
        for g, e in zip(got if len(args) > 1 else (got,), expected if len(args) > 1 else (expected,)):
            assert type(g) is type(e) and np.result_type(g) == np.result_type(e)
            np.testing.assert_allclose(g, e, rtol=1e-5 if np.result_type(g) == np.complex64 else 1e-12, atol=1e-14)
    assert prog.recordings == 1 and not prog.unreplayable
    return prog


@pytest.mark.parametrize("n", [7, 40_000])
@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
def test_a_complex_kernel_is_replayed_with_real_and_complex_arguments(n, reduce):
    """A real argument's cotangent is the real part of its complex partial's product (never written into
    out= as a complex product); a complex one's is the product.  40,000 elements: the blocked runner."""
    rng = np.random.default_rng(8)
    z, x = rng.uniform(0.5, 2, n) + 1j * rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    kernel = db.sum if reduce else db.broadcast
    f = lambda z, x: np.sum(np.abs(kernel(lambda a, r: np.exp(a * r) + 1j * r * r, z, x)) ** 2)
    prog = _replays_like_gradient(f, z, x)
    out = (np.empty(n, complex), np.empty(n))
    assert prog(z, x, out=out) is out
    for o, e in zip(out, db.gradient(f, z, x)):
        np.testing.assert_allclose(o, e, rtol=1e-12)
    real_only = lambda x: np.real(kernel(lambda r: np.exp(1j * r) * r, x) * (2 - 1j)).sum()
    out = np.empty(n)
    assert db.prepare_gradient(real_only, x)(x, out=out) is out
    np.testing.assert_allclose(out, db.gradient(real_only, x), rtol=1e-12)


def test_complex_steps_of_every_kind_are_replayed():
    """Inline holomorphic steps, rules of their own (abs, real, conj, vdot), a real argument of a complex
    step, indexing, a matrix product, a reduction; complex64 stays complex64."""
    def f(z, x, m):
        w = np.exp(z * x) / (1 + z * z) + np.conj(z[::-1]) * 0.5j
        v = m @ w + np.vdot(w, z) * x[0]
        return np.sum(np.abs(v) ** 2) + np.real(np.sum(w * np.sin(x))) - np.imag(w[1]) * x[2]

    rng = np.random.default_rng(9)
    z = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    x, m = rng.standard_normal(3), rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    _replays_like_gradient(f, z, x, m)
    _replays_like_gradient(f, z.astype(np.complex64), x.astype(np.float32), m.astype(np.complex64))


def test_python_complex_arguments_are_replayed_and_cut_ones_are_read_anew():
    f = lambda w, c, x: np.abs(np.sum(np.exp(w * x) * c)) ** 2
    x = np.linspace(0.0, 1.0, 5)
    prog = db.prepare_gradient(f, 0.5 + 1j, db.cut(2.0 - 1j), x)
    for w, c in [(0.5 + 1j, 2.0 - 1j), (-1.0 + 0.5j, 2.0 - 1j), (-1.0 + 0.5j, 1j)]:
        got, expected = prog(w, db.cut(c), x), db.gradient(f, w, db.cut(c), x)
        assert type(got[0]) is complex and got[1] is None
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(got[2], expected[2], rtol=1e-12)
    assert prog.recordings == 2  # a cut Python complex is baked in: a new value is a new recording


def test_a_step_with_no_result_is_replayed():
    """`np.unstack` of an empty axis gives no value: replay writes the step without reading a result it lacks."""
    def f(x, y):
        return sum(np.sum(u) for u in np.unstack(x, axis=0)) + np.sum(np.tanh(y) ** 2)

    x, y = np.zeros((0, 3)), np.linspace(-1.0, 1.0, 5)
    prog = db.prepare_gradient(f, x, y)
    for _ in range(3):  # the recorded gradient, then replays
        got = prog(x, y)
        want = db.gradient(f, x, y)
        assert got[0].shape == (0, 3)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-15)
        np.testing.assert_allclose(got[1], 2 * np.tanh(y) / np.cosh(y) ** 2, rtol=1e-13)
