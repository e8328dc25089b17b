"""The public API against hand-written gradients and finite differences.

Only elementwise ufuncs and ``np.sum`` are used inside differentiated functions,
so these tests do not depend on the reduction, linear-algebra and shape rules.
"""

import collections
import contextlib
import dataclasses
import gc
import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dualbroadcast as db
from dualbroadcast.registry import RULES
from dualbroadcast.tracked import Tracked

SETTINGS = settings(max_examples=25, deadline=None)
RTOL = {np.float64: 1e-12, np.float32: 1e-5}


# --- helpers ------------------------------------------------------------------------
def shapes(min_dims=0, max_dims=3):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=4)


def arrays(shape=None, dtype=np.float64, lo=-2.0, hi=2.0):
    width = 32 if dtype == np.float32 else 64
    elements = st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=width)
    return hnp.arrays(dtype, shape if shape is not None else shapes(), elements=elements)


def assert_same_kind(g, like):
    """``g`` is a gradient for ``like``: same type, shape and dtype."""
    if type(like) is float:
        assert type(g) is float, f"Python float in, {type(g).__name__} out"
        return
    assert type(g) is type(like), f"{type(like).__name__} in, {type(g).__name__} out"
    assert g.shape == like.shape
    assert g.dtype == like.dtype


def assert_close(g, expected, dtype=np.float64):
    rtol = RTOL[np.dtype(dtype).type]
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(expected, np.float64), rtol=rtol, atol=rtol)


@contextlib.contextmanager
def rule(func, *makers):
    """Register ``db.defvjp(func, *makers)`` for the duration of a ``with`` block."""
    had, old = func in RULES, RULES.get(func)
    db.defvjp(func, *makers)
    try:
        yield
    finally:
        if had:
            RULES[func] = old
        else:
            RULES.pop(func, None)


def counting_multiply():
    """A primitive ``mul(a, b) = a * b`` that counts how often each vjp maker runs."""
    calls = {"a": 0, "b": 0}

    @db.primitive
    def mul(a, b):
        return a * b

    def maker_a(ans, a, b):
        calls["a"] += 1
        return lambda g: g * b

    def maker_b(ans, a, b):
        calls["b"] += 1
        return lambda g: g * a

    return mul, (maker_a, maker_b), calls


# --- pytrees -----------------------------------------------------------------------
@dataclasses.dataclass
class Params:
    w: np.ndarray
    b: float


@dataclasses.dataclass(frozen=True)
class FrozenParams:
    w: np.ndarray
    b: float


Pair = collections.namedtuple("Pair", "w b")


@SETTINGS
@given(data=st.data())
def test_dict_argument(data):
    shape = data.draw(shapes())
    a, b = data.draw(arrays(shape)), data.draw(arrays(shape))
    c = data.draw(st.floats(-2, 2))
    params = {"a": a, "b": b, "c": c}

    def f(p):
        return np.sum(p["a"] ** 2 * p["b"]) + np.sin(p["c"])

    g = db.gradient(f, params)
    assert type(g) is dict and list(g) == ["a", "b", "c"]
    assert_same_kind(g["a"], a)
    assert_same_kind(g["b"], b)
    assert_same_kind(g["c"], c)
    assert_close(g["a"], 2 * a * b)
    assert_close(g["b"], a**2)
    assert_close(g["c"], math.cos(c))
    assert params["a"] is a and params["c"] == c  # the argument is not modified
    db.check_gradient(f, params)


@pytest.mark.parametrize("container", [list, tuple])
@SETTINGS
@given(x=arrays(), s=st.floats(0.1, 2))
def test_list_and_tuple_arguments(container, x, s):
    def f(xs):
        return xs[0] * np.sum(np.exp(xs[1]))

    g = db.gradient(f, container([s, x]))
    assert type(g) is container and len(g) == 2
    assert_same_kind(g[0], s)
    assert_same_kind(g[1], x)
    assert_close(g[0], np.sum(np.exp(x)))
    assert_close(g[1], s * np.exp(x))


@SETTINGS
@given(w=arrays(), b=st.floats(-2, 2))
def test_namedtuple_argument(w, b):
    g = db.gradient(lambda p: np.sum(p.w**3) * p.b, Pair(w, b))
    assert type(g) is Pair
    assert_same_kind(g.w, w)
    assert_same_kind(g.b, b)
    assert_close(g.w, 3 * w**2 * b)
    assert_close(g.b, np.sum(w**3))


@pytest.mark.parametrize("cls", [Params, FrozenParams])
@SETTINGS
@given(w=arrays(shapes(min_dims=1)), b=st.floats(-2, 2))
def test_dataclass_argument(cls, w, b):
    params = cls(w, b)
    g = db.gradient(lambda p: np.sum(np.tanh(p.w * p.b)), params)
    assert type(g) is cls and g is not params
    assert_same_kind(g.w, w)
    assert_same_kind(g.b, b)
    sech2 = 1 - np.tanh(w * b) ** 2
    assert_close(g.w, sech2 * b)
    assert_close(g.b, np.sum(sech2 * w))
    assert params.w is w and params.b == b  # the argument is not modified


def test_nested_pytree_keeps_structure_and_dtypes():
    w32 = np.array([0.5, -1.0], np.float32)
    params = {
        "layers": [Params(np.array([[1.0, 2.0]]), 0.5), FrozenParams(w32, 2.0)],
        "scale": (np.float32(1.5), np.array(2.0)),
    }

    def f(p):
        l0, l1 = p["layers"]
        s32, s0d = p["scale"]
        return np.sum(l0.w * l0.b) + np.sum(l1.w * l1.b) * s32 + s0d**2

    g = db.gradient(f, params)
    assert list(g) == ["layers", "scale"]
    l0, l1 = g["layers"]
    assert type(l0) is Params and type(l1) is FrozenParams
    assert_same_kind(l0.w, params["layers"][0].w)
    assert_same_kind(l1.w, w32)
    assert type(l0.b) is float and type(l1.b) is float
    assert type(g["scale"]) is tuple
    s32, s0d = g["scale"]
    assert type(s32) is np.float32
    assert_same_kind(s0d, params["scale"][1])
    assert_close(l0.w, [[0.5, 0.5]])
    assert_close(l0.b, 3.0)
    assert_close(l1.w, [3.0, 3.0], np.float32)
    assert_close(l1.b, -0.75, np.float32)
    assert_close(s32, -1.0, np.float32)
    assert_close(s0d, 4.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@SETTINGS
@given(data=st.data())
def test_dtype_and_shape_preserved(dtype, data):
    x = data.draw(arrays(dtype=dtype))
    g = db.gradient(lambda x: np.sum(np.sin(x) * x), x)
    assert_same_kind(g, x)
    assert_close(g, np.cos(x) * x + np.sin(x), dtype)
    db.check_gradient(lambda x: np.sum(np.sin(x) * x), x)


@pytest.mark.parametrize(
    "x",
    [2.5, np.float64(2.5), np.float32(2.5), np.array(2.5), np.array(2.5, np.float32)],
    ids=["float", "float64", "float32", "0d-float64", "0d-float32"],
)
def test_scalar_kinds_preserved(x):
    g = db.gradient(lambda x: x**3 - 2 * x, x)
    assert_same_kind(g, x)
    assert_close(g, 3 * 2.5**2 - 2, np.asarray(x).dtype)


def test_one_argument_gives_one_gradient_several_give_a_tuple():
    x, y, z = np.array([1.0, 2.0]), 3.0, np.array([[0.5]])
    g = db.gradient(lambda x: np.sum(x**2), x)
    assert type(g) is np.ndarray
    gs = db.gradient(lambda x, y, z: np.sum(x * y * z), x, y, z)
    assert type(gs) is tuple and len(gs) == 3
    assert_close(gs[0], y * z[0, 0] * np.ones(2))
    assert_close(gs[1], np.sum(x) * 0.5)
    assert_close(gs[2], [[np.sum(x) * y]])
    assert_same_kind(gs[1], y)
    assert_same_kind(gs[2], z)


@SETTINGS
@given(x=arrays(shapes(min_dims=1)), y=arrays(shapes(min_dims=1)))
def test_cut_argument_is_none_and_constant_inside(x, y):
    seen = []

    def f(x, y):
        seen.append(type(y))
        return np.sum(np.exp(x)) * np.sum(y)

    gx, gy = db.gradient(f, x, db.cut(y))
    assert gy is None
    assert seen == [np.ndarray]  # the function sees the plain array, untracked
    assert_close(gx, np.exp(x) * np.sum(y))
    db.check_gradient(f, x, db.cut(y))


def test_cut_argument_costs_no_backward_work():
    mul, makers, calls = counting_multiply()
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    with rule(mul, *makers):
        gx, gy = db.gradient(lambda a, b: np.sum(mul(a, b)), x, db.cut(y))
        assert gy is None and calls == {"a": 1, "b": 0}
        assert_close(gx, y)
        gx, gy = db.gradient(lambda a, b: np.sum(mul(a, b)), db.cut(x), y)
        assert gx is None and calls == {"a": 1, "b": 1}
        assert_close(gy, x)
        assert db.gradient(lambda a: np.sum(mul(a, y)), db.cut(x)) is None
        assert calls == {"a": 1, "b": 1}
        # an argument not derived from any differentiated input is constant automatically
        db.gradient(lambda a: np.sum(mul(a, y)), x)
        assert calls == {"a": 2, "b": 1}


@SETTINGS
@given(data=st.data())
def test_cut_container_with_uncut_leaf(data):
    shape = data.draw(shapes())
    A, B = data.draw(arrays(shape)), data.draw(arrays(shape))
    mul, makers, calls = counting_multiply()
    with rule(mul, *makers):
        g = db.gradient(lambda p: np.sum(mul(p["a"], np.sin(p["b"]))), db.cut({"a": A, "b": db.uncut(B)}))
    assert type(g) is dict and g["a"] is None
    assert_same_kind(g["b"], B)
    assert_close(g["b"], A * np.cos(B))
    assert calls == {"a": 0, "b": 1}


@SETTINGS
@given(x=arrays(shapes(min_dims=1), lo=-1, hi=1))
def test_cut_inside_function_is_a_stop_gradient(x):
    # d/dx sum(sin(x) * stop(exp(x))) = cos(x) * exp(x): the cut path contributes nothing
    g = db.gradient(lambda x: np.sum(np.sin(x) * db.cut(np.exp(x))), x)
    assert_close(g, np.cos(x) * np.exp(x))
    g = db.gradient(lambda x: np.sum(x * db.cut(x)), x)
    assert_close(g, x)

    def f(x):
        p = db.cut({"a": 2 * x, "b": db.uncut(3 * x)})
        assert type(p["a"]) is np.ndarray and type(p["b"]) is Tracked
        return np.sum(p["a"] * p["b"])

    assert_close(db.gradient(f, x), 6 * x)


@pytest.mark.parametrize("f, df", [(np.sin, np.cos), (np.exp, np.exp), (np.tanh, lambda v: 1 - np.tanh(v) ** 2)])
@SETTINGS
@given(x=st.floats(-2, 2, width=32), c=st.floats(-3, 3))
def test_scalar_chain_mixing_float32_and_float64(f, df, x, c):
    """A float32 scalar's pullback receives a float64 cotangent (and the reverse): NumPy's promotion,
    not the partial's own type, decides the product."""
    x32 = np.float32(x)
    g = db.gradient(lambda v: np.float64(c) * f(v), x32)
    assert type(g) is np.float32
    np.testing.assert_allclose(g, c * df(np.float64(x32)), rtol=1e-5, atol=1e-6)
    g = db.gradient(lambda v: f(np.float32(0.5) * v), np.float64(x))
    np.testing.assert_allclose(g, 0.5 * df(np.float64(np.float32(0.5) * x)), rtol=1e-6, atol=1e-7)


def test_ndarray_subclass_values_keep_their_gradient(tmp_path):
    """Slices and products of an np.memmap are ndarray subclasses: still recorded, never dropped."""
    x = np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="w+", shape=(4,))
    x[:] = [1.0, 2.0, 3.0, 4.0]
    plain = np.array(x)
    expected = db.gradient(lambda v: np.sum(v[:3] * v[1:] * np.exp(v[1:])), plain)
    np.testing.assert_allclose(db.gradient(lambda v: np.sum(v[:3] * v[1:] * np.exp(v[1:])), x), expected, rtol=1e-14)
    assert np.all(expected != 0)


@SETTINGS
@given(xs=st.lists(st.floats(-2, 2), min_size=1, max_size=6), container=st.sampled_from([tuple, list]))
def test_container_of_floats_gives_floats_in_the_same_container(xs, container):
    """The last element is unused: its gradient is 0.0; the others follow a hand-written product rule."""
    args = container(xs)

    def f(v):
        total = v[0] * 1.5
        for k in range(1, len(v) - 1):
            total = total - v[k] * v[k - 1]
        return total

    g = db.gradient(f, args)
    expected = [1.5] + [0.0] * (len(xs) - 1)
    for k in range(1, len(xs) - 1):
        expected[k] -= xs[k - 1]
        expected[k - 1] -= xs[k]
    assert type(g) is container and all(type(v) is float for v in g)
    np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-12)
    general, empty = db.gradient(lambda v, empty: f(v), args, ())  # two arguments: the argument-tree path
    assert empty is None and general == g  # one sequence of floats takes its own path: the same floats


@pytest.mark.parametrize("container", [tuple, list])
def test_sequence_of_floats_with_a_constant_or_a_non_scalar_result(container):
    xs = container([1.0, 2.0, 3.0])
    assert db.value_and_gradient(lambda v: 2.5, xs) == (2.5, container([0.0, 0.0, 0.0]))
    assert db.gradient(lambda v: db.cut(v[0]) * 2.0, xs) == container([0.0, 0.0, 0.0])
    with pytest.raises(db.NonScalarOutputError):
        db.gradient(lambda v: np.stack(list(v)), xs)
    with pytest.raises(TypeError, match="integer"):
        db.gradient(lambda v: v[0] * 2.0, container([1.0, 2]))  # not all floats: the general path's error


def test_value_and_gradient():
    x = np.array([0.5, -1.0, 2.0])
    value, g = db.value_and_gradient(lambda x: np.sum(np.exp(x) * x), x)
    assert type(value) is not Tracked
    assert_close(value, np.sum(np.exp(x) * x))
    assert_close(g, np.exp(x) * (x + 1))
    value, (gx, gy) = db.value_and_gradient(lambda x, y: np.sum(x * y), x, db.cut(2 * x))
    assert_close(value, 2 * np.sum(x * x))
    assert_close(gx, 2 * x)
    assert gy is None


@SETTINGS
@given(x=arrays(shapes(min_dims=1)))
def test_value_and_gradient_matches_separate_calls(x):
    def f(x):
        return np.sum(np.cosh(x) / (1 + x**2))

    value, g = db.value_and_gradient(f, x)
    assert value == f(x)
    np.testing.assert_array_equal(g, db.gradient(f, x))


# --- Python control flow -------------------------------------------------------------------
def newton_sqrt(a):
    """sqrt(a) by Newton's iteration, until converged: the tape has as many steps as ran."""
    y = a + 1.0  # (a + 1)**2 > a: at least one step
    steps = 0
    while np.abs(y * y - a) > 1e-13 * a:
        y = 0.5 * (y + a / y)
        steps += 1
    assert steps >= 1
    return y


@SETTINGS
@given(a=st.floats(0.05, 1e4))
def test_newton_iteration_until_convergence(a):
    value, g = db.value_and_gradient(newton_sqrt, a)
    assert math.isclose(value, math.sqrt(a), rel_tol=1e-12)
    assert type(g) is float
    assert math.isclose(g, 0.5 / math.sqrt(a), rel_tol=1e-9)


def piecewise(x):
    if x > 1.0:
        return x**3
    elif x > 0.0:
        return 2.0 * x + 1.0
    return np.sin(x)


@SETTINGS
@given(x=st.floats(-3, 3).filter(lambda v: abs(v) > 1e-3 and abs(v - 1) > 1e-3))
def test_piecewise_gradient_is_the_branch_that_ran(x):
    expected = 3 * x**2 if x > 1 else 2.0 if x > 0 else math.cos(x)
    assert math.isclose(db.gradient(piecewise, x), expected, rel_tol=1e-12)
    db.check_gradient(piecewise, x)


@SETTINGS
@given(x=st.floats(0.01, 20.0))
def test_while_loop_on_a_tracked_value(x):
    def f(x):
        y = x
        while y < 10.0:
            y = y * 2.0
        return y

    doublings = 0
    while x * 2.0**doublings < 10.0:
        doublings += 1
    assert db.gradient(f, x) == 2.0**doublings


@SETTINGS
@given(x=st.floats(-3, 3))
def test_for_loop_with_break_on_a_tracked_value(x):
    def exp_series(x):
        total, term = 1.0, 1.0
        for n in range(1, 200):
            term = term * x / n
            total = total + term
            if np.abs(term) < 1e-17:
                break
        else:
            raise AssertionError("series did not converge")
        return total

    assert math.isclose(db.gradient(exp_series, x), math.exp(x), rel_tol=1e-12)


@SETTINGS
@given(x=arrays(shapes(min_dims=1)))
def test_branch_on_array_comparison(x):
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x**2)
        return np.sum(np.sin(x))

    expected = 2 * x if np.sum(x) > 0 else np.cos(x)
    assert_close(db.gradient(f, x), expected)


def test_truthiness_of_a_tracked_value():
    def f(x):
        return x * 2.0 if x else x * 3.0  # bool(x) on a tracked scalar

    assert db.gradient(f, 0.0) == 3.0
    assert db.gradient(f, 0.5) == 2.0
    g = db.gradient(lambda x: np.sum(x * 2.0) if np.any(x != 0) else np.sum(x * 3.0), np.zeros(2))
    assert g.tolist() == [3.0, 3.0]


# --- jacobian -------------------------------------------------------------------------------
@SETTINGS
@given(x=arrays())
def test_jacobian_of_elementwise_function(x):
    jac = db.jacobian(lambda x: np.sin(x) * x, x)
    assert jac.shape == x.shape + x.shape and jac.dtype == x.dtype
    expected = np.diag((np.cos(x) * x + np.sin(x)).ravel()).reshape(x.shape + x.shape)
    assert_close(jac, expected)


@SETTINGS
@given(m=st.integers(1, 4), n=st.integers(1, 4), data=st.data())
def test_jacobian_of_matrix_vector_product(m, n, data):
    W = data.draw(arrays((m, n)))
    x = data.draw(arrays((n,)))
    jac = db.jacobian(lambda x: np.sum(W * x, axis=1), x)
    assert jac.shape == (m, n)
    assert_close(jac, W)
    jac = db.jacobian(lambda x: np.tanh(np.sum(W * x, axis=1)), x)
    assert_close(jac, (1 - np.tanh(W @ x) ** 2)[:, None] * W)


def test_jacobian_shapes_and_dtypes():
    x32 = np.array([[1.0, 2.0, 3.0]], np.float32)
    jac = db.jacobian(lambda x: np.exp(x), x32)
    assert jac.shape == (1, 3, 1, 3) and jac.dtype == np.float32
    jac = db.jacobian(lambda x: np.sum(x**2), np.array([1.0, 2.0]))  # scalar output: the gradient
    assert jac.shape == (2,)
    assert_close(jac, [2.0, 4.0])
    jac = db.jacobian(lambda x: x * np.array([1.0, 2.0, 3.0]), 2.0)  # scalar input
    assert jac.shape == (3,)
    assert_close(jac, [1.0, 2.0, 3.0])


# --- pullback ---------------------------------------------------------------------------------
@SETTINGS
@given(m=st.integers(1, 4), n=st.integers(1, 4), data=st.data())
def test_pullback_of_non_scalar_output(m, n, data):
    W, x, ybar = data.draw(arrays((m, n))), data.draw(arrays((n,))), data.draw(arrays((m,)))
    y, back = db.pullback(lambda x: np.sum(W * np.sin(x), axis=1), x)
    assert type(y) is np.ndarray
    assert_close(y, W @ np.sin(x))
    ybar_before = ybar.copy()
    first = back(ybar)
    second = back(ybar)
    assert_close(first, (ybar @ W) * np.cos(x))
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(ybar, ybar_before)  # the cotangent is not modified
    first += 1.0
    assert not np.array_equal(first, second)  # two calls give two arrays


def test_pullback_of_tuple_and_dict_outputs():
    x = np.array([0.5, 1.0, -2.0])
    y, back = db.pullback(lambda x: (x * 2.0, np.sum(x**2)), x)
    assert type(y) is tuple
    assert_close(y[0], 2 * x)
    assert_close(y[1], np.sum(x**2))
    u = np.array([1.0, -1.0, 3.0])
    for _ in range(2):  # calling back twice gives the same answer
        assert_close(back((u, 0.5)), 2 * u + 2 * x * 0.5)
    assert_close(back((np.zeros(3), 1.0)), 2 * x)

    y, back = db.pullback(lambda x: {"double": 2 * x, "sin": np.sin(x)}, x)
    assert list(y) == ["double", "sin"]
    assert_close(back({"double": u, "sin": u}), 2 * u + np.cos(x) * u)


def test_pullback_of_several_arguments():
    x, w = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    _, back = db.pullback(lambda x, w: x * w, x, w)
    gx, gw = back(np.array([1.0, 10.0]))
    assert_close(gx, [3.0, -10.0])
    assert_close(gw, [1.0, 20.0])
    _, back = db.pullback(lambda x, w: x * w, x, db.cut(w))
    gx, gw = back(np.array([1.0, 10.0]))
    assert gw is None
    assert_close(gx, [3.0, -10.0])


def test_pullback_result_does_not_alias_the_cotangent():
    x = np.array([1.0, 2.0])
    _, back = db.pullback(lambda x: x + 0.0, x)
    ybar = np.array([1.0, 1.0])
    g = back(ybar)
    ybar[0] = 100.0  # the caller reuses its buffer
    np.testing.assert_array_equal(g, [1.0, 1.0])


# --- custom rules ---------------------------------------------------------------------------
def dsinc(x):
    return (np.cos(np.pi * x) - np.sinc(x)) / x


def test_primitive_with_defvjp():
    @db.primitive
    def softplus(x):
        return np.logaddexp(0.0, x)

    calls = []

    def softplus_vjp(ans, x):
        calls.append(ans)
        return lambda g: g / (1 + np.exp(-x))

    x = np.array([-2.0, 0.0, 0.5, 3.0])
    with rule(softplus, softplus_vjp):
        assert type(softplus(x)) is np.ndarray  # undifferentiated: the plain function
        g = db.gradient(lambda x: np.sum(softplus(x) * x), x)
        assert len(calls) == 1  # the registered rule ran, once
        sig = 1 / (1 + np.exp(-x))
        assert_close(g, sig * x + np.logaddexp(0.0, x))
        db.check_gradient(lambda x: np.sum(softplus(x) * x), x)


def test_defvjp_on_a_function_without_a_rule():
    special = pytest.importorskip("scipy.special")  # ber, a Kelvin function: no rule in the library
    x = np.array([0.3, -0.7, 1.2, 2.5])
    with pytest.raises(db.UnsupportedFunctionError, match=r"scipy\.special\.ber has no derivative rule"):
        db.gradient(lambda x: np.sum(special.ber(x)), x)
    with rule(special.ber, lambda ans, x: lambda g: g * special.berp(x)):
        g = db.gradient(lambda x: np.sum(special.ber(x) ** 2), x)
        assert_close(g, 2 * special.ber(x) * special.berp(x))
        assert db.check_gradient(lambda x: np.sum(special.ber(x) ** 2), x) < 1
    with pytest.raises(db.UnsupportedFunctionError):  # removed again
        db.gradient(lambda x: np.sum(special.ber(x)), x)


def test_wrong_rule_is_caught_by_check_gradient():
    x = np.array([0.3, -0.7, 1.2, 2.5])
    error = np.array([0.0, 0.0, 0.5, 0.0])  # wrong at index 2 only
    with rule(np.sinc, lambda ans, x: lambda g: g * (dsinc(x) + error)):
        assert_close(db.gradient(lambda x: np.sum(np.sinc(x)), x), dsinc(x) + error)
        with pytest.raises(db.GradientMismatchError, match=r"1 element.*index \(2,\)") as info:
            db.check_gradient(lambda x: np.sum(np.sinc(x)), x)
    assert isinstance(info.value, AssertionError)
    message = str(info.value)
    assert repr(np.float64(dsinc(x)[2] + 0.5)) in message  # the wrong gradient value


@pytest.mark.parametrize("a,b", [(1.0, 0.3), (np.array([1.0, 2.0]), np.array([0.3, 0.6]))], ids=["scalars", "arrays"])
def test_check_gradient_catches_a_wrong_rule_in_a_partly_cut_pytree(a, b):
    with rule(np.sinc, lambda ans, x: lambda g: g * 100.0), pytest.raises(db.GradientMismatchError):
        db.check_gradient(lambda p: np.sum(p["a"] * np.sinc(p["b"])), db.cut({"a": a, "b": db.uncut(b)}))


# --- threads, long tapes, constants ---------------------------------------------------------------
def test_concurrent_gradients_in_threads():
    n_threads = 8
    barrier = threading.Barrier(n_threads)
    results, errors = {}, []

    def f(x, c):
        y = 0.0 * x
        for _ in range(300):
            y = y + c * x**3
        return np.sum(y)

    def work(k):
        try:
            x = np.linspace(-1.0, 1.0, 5) + k
            barrier.wait()
            results[k] = [db.gradient(f, x, db.cut(float(k + 1))) for _ in range(3)]
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(n_threads):
        x = np.linspace(-1.0, 1.0, 5) + k
        for gx, g_cut in results[k]:
            assert g_cut is None
            assert_close(gx, 300 * (k + 1) * 3 * x**2, np.float32)  # 300 rounded sums


def test_tape_of_100000_operations():
    n = 100_000

    def f(x):
        y = 0.0
        for _ in range(n):
            y = y * 0.9999 + x
        return y

    value, g = db.value_and_gradient(f, 1.5)
    expected = (1 - 0.9999**n) / (1 - 0.9999)
    assert math.isclose(g, expected, rel_tol=1e-9)
    assert math.isclose(value, 1.5 * expected, rel_tol=1e-9)


@pytest.mark.parametrize(
    "f",
    [lambda x: 3.0, lambda x: np.float32(2.0), lambda x: np.sum(db.cut(x) ** 2), lambda x: np.sum(x > 0) * 1.0],
    ids=["python-float", "constant", "cut", "comparison"],
)
@pytest.mark.parametrize(
    "x", [np.ones((2, 3), np.float32), np.ones(4), 2.0, np.array(1.0)], ids=["float32", "float64", "float", "0d"]
)
def test_output_independent_of_input_gives_zeros(f, x):
    g = db.gradient(f, x)
    assert_same_kind(g, x)
    assert np.all(np.asarray(g) == 0)


def test_independent_argument_gives_zeros_in_a_pytree():
    x, y = np.array([1.0, 2.0], np.float32), {"unused": np.ones(3), "used": 2.0}
    gx, gy = db.gradient(lambda x, y: y["used"] ** 2, x, y)
    assert_same_kind(gx, x)
    assert not np.any(gx)
    assert_same_kind(gy["unused"], y["unused"])
    assert not np.any(gy["unused"])
    assert gy["used"] == 4.0


# --- the demo ------------------------------------------------------------------------------------
def test_demo_model_gradients_match_the_hand_gradient():
    from dualbroadcast.demo import eam, eam_fused, eam_hand_gradient, max_relative_difference

    x = np.random.default_rng(1).uniform(0.0, 1.0, 200)
    hand = eam_hand_gradient(x)
    for model in (eam, eam_fused):
        g = db.gradient(model, x)
        assert_same_kind(g, x)
        assert max_relative_difference(g, hand) < 1e-12
    db.check_gradient(eam, x[:5])


def test_demo_exit_status(capsys):
    from dualbroadcast import __main__ as demo_main

    assert demo_main.main(n=50) == 0
    assert "OK" in capsys.readouterr().out
    real = demo_main.eam_hand_gradient
    demo_main.eam_hand_gradient = lambda x: real(x) * (1 + 1e-9)
    try:
        assert demo_main.main(n=50) == 1
    finally:
        demo_main.eam_hand_gradient = real
    assert "FAIL" in capsys.readouterr().err


def test_predicates_and_indices_of_tracked_values_are_plain():
    def f(x):
        assert np.any(x > 0) and np.all(x > -10) and np.argmax(x) == 2 and np.count_nonzero(x) == 3
        assert type(np.any(x > 0)) is np.bool_ and np.shape(x) == (3,)
        return np.sum(x * x)

    np.testing.assert_allclose(db.gradient(f, np.array([1.0, 2.0, 3.0])), [2.0, 4.0, 6.0])


def test_check_gradient_fails_on_a_non_finite_gradient():
    with pytest.raises(db.GradientMismatchError, match="index"):
        db.check_gradient(lambda x: np.sum(np.sqrt(x)), np.array([0.0, 1.0]))


def test_unknown_keyword_of_a_rule_is_a_clear_error():
    """Every built-in rule takes its function's keywords (tests/rules/test_rule_signatures.py); a user's may not."""

    @db.primitive
    def scaled(x, factor=1.0):
        return x * factor

    db.defvjp(scaled, lambda ans, x: lambda g: g)  # forgets factor=
    with pytest.raises(db.UnsupportedFunctionError, match=r"scaled.*keyword.*factor"):
        db.gradient(lambda x: np.sum(scaled(x, factor=2.0)), np.arange(3.0))


def test_garbage_collector_is_restored_after_gradients_in_threads():
    import gc

    assert gc.isenabled()
    results = []

    def work(k):
        results.append(db.gradient(lambda x: np.sum(x * float(k)), np.ones(3)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.isenabled() and len(results) == 8
    with pytest.raises(ZeroDivisionError):
        db.gradient(lambda x: x * (1 / 0), 1.0)
    assert gc.isenabled(), "an error inside the function must not leave the collector off"


def test_long_tape_pauses_the_collector_while_recording_and_restores_it():
    import gc

    seen = {}

    def f(x):
        y = x
        for _ in range(db.tracked.LONG_TAPE + 10):
            y = y * 1.0
        seen["during"] = gc.isenabled()
        return y

    assert db.gradient(f, 2.0) == 1.0
    assert seen["during"] is False and gc.isenabled()
    seen.clear()
    db.gradient(lambda x: (seen.setdefault("during", gc.isenabled()), x * 2.0)[1], 1.0)
    assert seen["during"] is True, "a short tape must not pay for a pause"


def _long_chain(x, seen):
    """``x`` through 2 LONG_TAPE recorded multiplications by 1: a tape that pauses the collector halfway,
    then records more than a collection's threshold of objects."""
    for _ in range(2 * db.tracked.LONG_TAPE):
        x = x * 1.0
    seen["long"] = True
    return x


MODELS_OF_A_LONG_TAPE = {
    "float": (2.0, lambda x, seen: np.sum(spy(_long_chain(x, seen))), 1.0),
    "array": (np.ones(3), lambda x, seen: np.sum(spy(_long_chain(x, seen))), np.ones(3)),
    "dict": (
        {"a": np.ones(3), "b": np.ones(2)},
        lambda p, seen: np.sum(spy(_long_chain(p["a"], seen))) + np.sum(p["b"]),
        {"a": np.ones(3), "b": np.ones(2)},
    ),
}


@pytest.mark.parametrize("name", list(MODELS_OF_A_LONG_TAPE))
def test_long_tape_keeps_the_collector_paused_through_the_backward_pass(name):
    """The pause lasts until the gradient is taken and its records dropped: the collector never scans them."""
    import gc

    argument, model, expected = MODELS_OF_A_LONG_TAPE[name]
    seen = {}

    def record_pause(g):
        seen["sweep"] = gc.isenabled()
        return g

    db.defvjp(spy, lambda ans, x: record_pause)
    collections = []
    watch = lambda phase, info: collections.append(phase) if "long" in seen else None
    gc.collect()
    gc.callbacks.append(watch)
    try:
        g = db.gradient(lambda x: model(x, seen), argument)
    finally:
        gc.callbacks.remove(watch)
    for part, want in [(g["a"], expected["a"]), (g["b"], expected["b"])] if name == "dict" else [(g, expected)]:
        np.testing.assert_array_equal(part, want)
    assert seen["sweep"] is False and gc.isenabled()
    assert collections == [], "the collector ran over the long tape's records once it was long"


@pytest.mark.parametrize("argument", [2.0, np.ones(3)], ids=["float", "array"])
def test_long_tape_restores_the_collector_after_an_error_or_a_pullback(argument):
    import gc

    with pytest.raises(db.NonScalarOutputError):
        db.gradient(lambda x: _long_chain(x, {}) * np.ones((2,) + np.shape(x)), argument)
    assert gc.isenabled(), "an error after recording must not leave the collector off"
    y, back = db.pullback(lambda x: _long_chain(x, {}), argument)
    assert gc.isenabled(), "a pullback's tape outlives the call: its pause must not"
    np.testing.assert_array_equal(back(np.ones_like(y)), np.ones_like(argument))


@db.primitive
def spy(x):
    """The identity, as a primitive whose pullback a test replaces."""
    return x


@pytest.mark.parametrize("name", ["floats", "kernel", "pytree", "views", "prepared"])
def test_a_gradient_leaves_no_garbage_cycles(name):
    """Everything a gradient builds is freed by reference counting: no cycles (a self-calling nested
    function, a pullback holding its tape) left for the collector to find on every call."""
    from benchmarks.models import eam_dualbroadcast, foldminus

    x, X = np.linspace(0.1, 1.0, 100), np.arange(30.0).reshape(6, 5)
    prepared = db.prepare_gradient(eam_dualbroadcast, x)
    call = {
        "floats": lambda: db.gradient(foldminus, tuple(float(k) for k in range(16))),
        "kernel": lambda: db.gradient(eam_dualbroadcast, x),
        "pytree": lambda: db.gradient(lambda d: d["a"] * np.sum(d["b"][1] * d["b"][0]), {"a": 1.0, "b": [2.0, X]}),
        "views": lambda: db.gradient(lambda X: sum(np.dot(X[:, j], X[:, j - 1]) for j in range(1, 5)), X),
        "prepared": lambda: prepared(x),
    }[name]
    call()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        for _ in range(20):
            call()
        assert gc.collect() == 0
    finally:
        if was_enabled:
            gc.enable()


# --- paths the mutation run found untested -------------------------------------------------------
@pytest.mark.parametrize("container", ["list", "dict"])
def test_cut_of_a_container_without_tracked_leaves_drops_its_markers(container):
    """db.cut of plain values only, one of them under uncut: outside a gradient it is the marker, which
    behaves as its content; inside one it is the container itself, every marker removed."""
    ones = np.array([1.0, 1.0])
    make = {"list": lambda: db.cut([db.uncut(ones), 2.0]),
            "dict": lambda: db.cut({0: db.uncut(ones), 1: 2.0})}[container]
    outside = make()
    assert type(outside[0]) is np.ndarray and type(outside[1]) is float
    seen = []

    def f(x):
        c = make()
        seen.append(c)
        return np.sum(x * c[0] * c[1])

    g = db.gradient(f, np.array([0.5, -3.0]))
    (inside,) = seen
    assert type(inside) is {"list": list, "dict": dict}[container]
    assert type(inside[0]) is np.ndarray and type(inside[1]) is float
    np.testing.assert_array_equal(inside[0], ones)
    assert_close(g, 2.0 * ones)  # d/dx sum(x * 1 * 2)


@pytest.mark.parametrize("argument", [np.ones(2), 1.0, (1.0, 2.0)], ids=["array", "float", "tuple"])
def test_returning_a_tracked_scalar_of_an_earlier_gradient_is_a_stale_value_error(argument):
    leaked = []
    db.gradient(lambda x: leaked.append(np.sum(x * x)) or leaked[-1], np.array([1.0, 2.0]))
    with pytest.raises(db.StaleValueError, match="another gradient evaluation"):
        db.gradient(lambda x: leaked[0], argument)
    with pytest.raises(db.StaleValueError):
        db.value_and_gradient(lambda x: leaked[0], argument)


def test_pullback_of_one_value_returned_twice_adds_its_cotangents():
    """f returns the same tracked value twice: its cotangent is the sum of both, Jᵀ(a + b)."""
    x = np.array([0.3, -1.2, 2.0])

    def twice(x):
        y = np.sin(x)
        return y, y

    y, back = db.pullback(twice, x)
    assert_close(y[0], np.sin(x))
    assert_close(y[1], np.sin(x))
    a, b = np.array([1.0, 2.0, -0.5]), np.array([0.5, 3.0, 2.0])
    for _ in range(2):  # twice: the first call must not change what the second sees
        assert_close(back((a, b)), np.cos(x) * (a + b))  # J = diag(cos x)
    def both(x):
        s = np.sum(x * x)
        return {"first": s, "again": s}

    _, back = db.pullback(both, x)
    assert_close(back({"first": 2.0, "again": 3.0}), 2 * x * (2.0 + 3.0))


def test_check_gradient_judges_float64_arguments_at_float64_tolerance():
    """A float64 gradient off by 1e-4 relative is wrong; float32's loose tolerance is for float32 only."""
    x = np.array([0.3, 1.0, 2.5])
    with rule(np.sinc, lambda ans, x: lambda g: g * dsinc(x) * (1 + 1e-4)):
        with pytest.raises(db.GradientMismatchError, match=r"3 element.*rtol=1e-06, atol=1e-07"):
            db.check_gradient(lambda x: np.sum(np.sinc(x)), x)
        with pytest.raises(db.GradientMismatchError):  # with a Python float argument too
            db.check_gradient(lambda x, c: np.sum(np.sinc(x)) * c, x, 1.0)
        assert db.check_gradient(lambda x: np.sum(np.sinc(x)), x.astype(np.float32)) < 1


def test_check_gradient_returns_the_worst_error_over_the_tolerance():
    """At a kink the central difference sees neither side: the returned ratio is the central one's
    |g - fd| / (atol + rtol |fd|) when that passes, not the better of the one-sided ones."""
    c, h, rtol, atol = 5e-7, 1e-6, 1e-6, 1e-7

    def plain(x):
        return x + c * np.abs(x)  # a bend of c at 0: right derivative 1 + c, left 1 - c

    bent = db.primitive(plain)
    x = np.array([0.0, 0.5])
    with rule(bent, lambda ans, x: lambda g: g * (1 + c * np.where(x >= 0, 1.0, -1.0))):
        ratio = db.check_gradient(lambda x: np.sum(bent(x)), x, rtol=rtol, atol=atol, step=h)
    e = np.array([h, 0.0])
    central = (np.sum(plain(x + e)) - np.sum(plain(x - e))) / (2 * h)  # ~1: the bend cancels
    expected = abs((1 + c) - central) / (atol + rtol * abs(central))  # the element at 0 is the worst
    assert 0.3 < expected < 1
    assert ratio == pytest.approx(expected, rel=1e-6)


def test_check_gradient_does_not_call_a_smooth_extremum_a_kink():
    """A wrong rule at a smooth point where f' = 0: both one-sided differences are ~0 and agree."""

    @db.primitive
    def mysin(x):
        return np.sin(x)

    with rule(mysin, lambda ans, x: lambda g: g * (np.cos(x) + 0.5)):
        for x in (np.pi / 2, np.array([np.pi / 2, 1.0])):
            with pytest.raises(db.GradientMismatchError, match="finite difference") as error:
                db.check_gradient(lambda x: np.sum(mysin(x)), x)
            assert "kink" not in str(error.value)


def test_median_time_is_the_time_of_one_call():
    import time

    from dualbroadcast.__main__ import median_time

    t = median_time(lambda: time.sleep(0.002), repeat=5)
    assert 0.002 <= t < 0.02  # time.sleep sleeps at least as long as asked


def test_the_demo_says_whether_the_fast_path_is_on_or_how_to_get_it(monkeypatch):
    from dualbroadcast import __main__, loops

    for installed in (True, False):
        monkeypatch.setattr(loops, "NUMBA_INSTALLED", installed)
        line = __main__.fast_path()
        assert line.startswith("fast path: on") is installed
        assert installed or "pip install 'dualbroadcast[fast]'" in line
