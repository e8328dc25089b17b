"""Gradients of gradients: nesting at any depth, no perturbation confusion, hessian and hvp, kernels, slices,
pytrees, cut, float32, prepared gradients and threads inside a gradient, and the errors."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dualbroadcast as db


# --- perturbation confusion (Siskind & Pearlmutter): each gradient sees only its own variable ---------------
def test_inner_derivative_of_a_closure_over_the_outer_variable():
    """d/dx (x · d/dy (x + y)) = d/dx (x · 1) = 1; confusing the two perturbations gives 2."""
    assert db.gradient(lambda x: x * db.gradient(lambda y: x + y, 3.0), 2.0) == 1.0


def test_inner_derivative_that_depends_on_the_outer_variable():
    """d/dx (d/dy (x · y)) at any point is 1: the inner derivative is x."""
    assert db.gradient(lambda x: db.gradient(lambda y: x * y, 5.0), 2.0) == 1.0
    x = np.array([0.5, -1.5])
    got = db.gradient(lambda x: np.sum(db.gradient(lambda y: np.sum(x * y ** 2), x) * x), x)
    np.testing.assert_allclose(got, 6 * x ** 2)  # Σ 2x·x·x = 2Σx³


def test_outer_value_unused_by_the_inner_result_is_a_constant_of_it():
    """An inner function returning only an outer value: its gradient is zero, the outer one still flows."""
    got = db.gradient(lambda x: x * db.gradient(lambda y: x ** 2 + 0 * y, 1.0), 3.0)
    assert got == 0.0


# --- orders and the API ---------------------------------------------------------------------------
def test_third_and_fourth_derivatives():
    d3 = db.gradient(lambda x: db.gradient(lambda y: db.gradient(lambda z: z ** 4, y), x), 1.5)
    assert d3 == pytest.approx(24 * 1.5)
    d4 = db.gradient(lambda w: db.gradient(lambda x: db.gradient(lambda y: db.gradient(np.sin, y), x), w), 0.4)
    assert d4 == pytest.approx(np.sin(0.4))


def rosenbrock(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosenbrock_hessian(x):
    """Written out by hand."""
    n = len(x)
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i + 1, i + 1] += 200
        h[i, i + 1] -= 400 * x[i]
        h[i + 1, i] -= 400 * x[i]
    return h


@settings(max_examples=20, deadline=None)
@given(hnp.arrays(np.float64, st.integers(2, 6), elements=st.floats(-2, 2)))
def test_hessian_and_hvp_match_a_hand_written_hessian(x):
    h = rosenbrock_hessian(x)
    np.testing.assert_allclose(db.hessian(rosenbrock, x), h, rtol=1e-12, atol=1e-9)
    v = np.linspace(-1, 1, len(x))
    np.testing.assert_allclose(db.hvp(rosenbrock, x, v), h @ v, rtol=1e-12, atol=1e-9)


def test_hessian_of_a_pytree_is_a_pytree_of_pytrees():
    f = lambda p: np.sum(p["a"] ** 2 * p["b"] ** 3)
    p = {"a": 1.5, "b": np.array([2.0, -1.0])}
    h = db.hessian(f, p)
    np.testing.assert_allclose(h["a"]["a"], 2 * np.sum(p["b"] ** 3))
    np.testing.assert_allclose(h["a"]["b"], 6 * p["a"] * p["b"] ** 2)
    np.testing.assert_allclose(h["b"]["a"], 6 * p["a"] * p["b"] ** 2)
    np.testing.assert_allclose(h["b"]["b"], np.diag(6 * p["a"] ** 2 * p["b"]))


def test_hvp_of_several_arguments_with_a_cut_one():
    f = lambda x, y, c: np.sum(x ** 2 * y ** 2 * c)
    x, y, c = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.5, 2.0])
    hx, hy, hc = db.hvp(f, x, y, db.cut(c), vectors=(np.ones(2), np.zeros(2), np.ones(2)))
    np.testing.assert_allclose(hx, 2 * y ** 2 * c)  # ∂²f/∂x² · 1
    np.testing.assert_allclose(hy, 4 * x * y * c)  # ∂²f/∂y∂x · 1
    assert hc is None


def test_check_gradient_order_2_catches_a_wrong_second_derivative():
    @db.primitive
    def cube(x):
        return x ** 3

    db.defvjp(cube, lambda ans, x: lambda g: g * 3 * x * x)
    assert db.check_gradient(lambda x: np.sum(cube(x)), np.array([0.5, 1.5]), order=2) < 1

    @db.primitive
    def wrong(x):
        return x ** 3

    db.defvjp(wrong, lambda ans, x: lambda g: g * 3 * db.cut(x) * x)  # first derivative right, second half
    assert db.check_gradient(lambda x: np.sum(wrong(x)), np.array([0.5, 1.5])) < 1
    with pytest.raises(db.GradientMismatchError, match="second derivatives"):
        db.check_gradient(lambda x: np.sum(wrong(x)), np.array([0.5, 1.5]), order=2)


# --- kernels, slices, control flow, cut, float32 ---------------------------------------------------------
def test_hessian_through_a_sum_kernel_against_its_formula():
    """E(a, b) = Σ a exp(-b r): ∂²E/∂a² = 0, ∂²E/∂a∂b = -Σ r e, ∂²E/∂b² = Σ a r² e."""
    r = np.linspace(1.0, 3.0, 50)
    energy = lambda c: db.sum(lambda r, a, b: a * np.exp(-b * r), r, c[0], c[1])
    c = np.array([1.3, 0.7])
    e = np.exp(-c[1] * r)
    want = np.array([[0.0, -np.sum(r * e)], [-np.sum(r * e), np.sum(c[0] * r * r * e)]])
    np.testing.assert_allclose(db.hessian(energy, c), want, rtol=1e-12)


def test_kernel_inside_the_inner_gradient_over_values_of_both():
    """A kernel whose arguments are the outer variable and the inner one: each gradient sees its own."""
    x = np.array([0.3, 0.9])

    def outer(x):
        inner = db.gradient(lambda y: db.sum(lambda x, y: np.sin(x * y), x, y), np.array([1.0, 2.0]))
        return np.sum(inner)  # Σ x cos(x y) at y = (1, 2)

    y = np.array([1.0, 2.0])
    want = np.cos(x * y) - x * y * np.sin(x * y)
    np.testing.assert_allclose(db.gradient(outer, x), want, rtol=1e-12)


def test_slices_in_a_loop_and_control_flow():
    def f(x):
        s = 0.0
        for i in range(len(x) - 1):
            s = s + (x[i] * x[i + 1] if x[i] > 0 else x[i] ** 3)
        return s

    x = np.array([0.5, -1.0, 2.0, 0.25])
    want = np.zeros((4, 4))
    for i in range(3):
        if x[i] > 0:
            want[i, i + 1] += 1
            want[i + 1, i] += 1
        else:
            want[i, i] += 6 * x[i]
    np.testing.assert_allclose(db.hessian(f, x), want)


def test_cut_inside_a_nested_gradient_stops_every_level():
    x = np.array([0.1, 0.2])
    got = db.gradient(lambda x: db.gradient(lambda y: np.sum(db.cut(x) * y ** 2), x)[0] * x[0], x)
    np.testing.assert_allclose(got, [4 * x[0] ** 2, 0.0])  # (2 cut(x₀) x₀) x₀: cut(x₀) constant


def test_float32_stays_float32():
    x = np.array([0.5, 1.5], dtype=np.float32)
    h = db.hessian(lambda x: np.sum(np.exp(x) * x[0]), x)
    assert h.dtype == np.float32
    v = db.hvp(lambda x: np.sum(x ** 3), x, np.ones(2, np.float32))
    assert v.dtype == np.float32


def test_prepared_gradient_inside_a_gradient():
    f = lambda x: np.sum(np.sin(x) * x)
    prog = db.prepare_gradient(f, np.ones(3))
    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(db.jacobian(lambda x: prog(x), x), db.hessian(f, x))


def test_threads_each_nest_their_own_gradients():
    results = {}

    def work(k):
        x = np.linspace(0.1, 1.0, 5) * (k + 1)
        results[k] = (db.hessian(rosenbrock, x), rosenbrock_hessian(x))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in results.values():
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


# --- errors ----------------------------------------------------------------------------------------
def test_a_rule_whose_pullback_cannot_run_on_tracked_values_is_named():
    @db.primitive
    def opaque(x):
        return x ** 2

    db.defvjp(opaque, lambda ans, x: lambda g: g * 2 * np.asarray(x))
    assert db.gradient(lambda x: np.sum(opaque(x)), np.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(db.UnsupportedFunctionError, match="opaque cannot be differentiated again"):
        db.hessian(lambda x: np.sum(opaque(x)), np.ones(2))


def test_values_of_a_finished_inner_gradient_are_stale():
    kept = []

    def outer(x):
        db.gradient(lambda y: kept.append(y) or np.sum(y * x), np.ones(2))
        return np.sum(kept[0] * x)

    with pytest.raises(db.StaleValueError):
        db.gradient(outer, np.ones(2))


# --- second-order kernels: a db.sum inside a gradient of a gradient, in one fused pass -------------------
def exp_poly(c, xs):
    def term(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
        inner = c5 + x * (c6 + x * (c7 + x * (c8 + x * c9)))
        return np.exp(c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * inner)))))

    return db.sum(term, db.cut(xs), *[c[k] for k in range(10)])


@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
def test_hessian_of_ten_coefficients_is_one_pass_of_width_10_and_55(backend):
    xs = np.random.default_rng(0).uniform(-1, 1, 5000)
    c = np.linspace(-0.1, 0.1, 10)
    db.set_backend(backend)  # a backend that cannot run the call runs it on NumPy
    try:
        with db.kernel_log() as calls:
            h = db.hessian(lambda c: exp_poly(c, xs), c)
    finally:
        db.set_backend(None)
    assert [(k.width, k.second) for k in calls] == [(10, 55)]
    e = np.exp(np.polyval(c[::-1], xs))
    powers = xs[None, :] ** np.arange(10)[:, None]
    np.testing.assert_allclose(h, (powers * e) @ powers.T, rtol=1e-11)


KERNELS = [
    lambda x, a, b: a * np.exp(-b * x) + np.sin(a * x) * b,
    lambda x, a, b: np.log1p(x * x * a) / (1 + b * b) - np.sqrt(1 + a * a * x * x),
    lambda x, a, b: np.where(x > 0, a * x ** 3, b * np.tanh(x)) + a * b * x,
]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(range(len(KERNELS))), st.integers(1, 40), st.floats(-1.5, 1.5), st.floats(-1.5, 1.5),
       st.booleans(), st.sampled_from([np.float64, np.float32]))
def test_second_order_kernels_match_the_same_function_op_by_op(k, n, a, b, x_active, dtype):
    """Hessians with respect to scalars and a full-size array (its diagonal terms, its cross terms with the
    scalars), through the fused second-order kernel and through the NumPy operations one by one."""
    f = KERNELS[k]
    x = np.linspace(-1.3, 1.7, n).astype(dtype)
    params = {"x": x if x_active else db.cut(x), "a": dtype(a), "b": dtype(b)}

    def fused(p):
        return db.sum(f, p["x"], p["a"], p["b"])

    def plain(p):
        return np.sum(f(p["x"], p["a"], p["b"]))

    with db.kernel_log() as calls:
        got = db.hessian(fused, params)
    assert calls and calls[-1].second == (6 if x_active else 3)
    want = db.hessian(plain, params)
    rtol = 1e-4 if dtype is np.float32 else 1e-10
    for i in want:
        for j in want[i]:
            if want[i][j] is None:
                assert got[i][j] is None
                continue
            assert np.result_type(got[i][j]) == dtype
            np.testing.assert_allclose(got[i][j], want[i][j], rtol=rtol, atol=rtol)


def test_hvp_of_the_eam_model_against_its_hand_written_hessian():
    from dualbroadcast.demo import eam_fused

    x = np.random.default_rng(0).random(50)
    v = np.random.default_rng(1).standard_normal(50)
    r = np.exp(-3 * (x + 1))
    p = np.sum(r)
    want = (2 + 6 * p + 3 * p ** 2) * (-3 * r) * np.dot(-3 * r, v) + (2 * p + 3 * p ** 2 + p ** 3) * 9 * r * v
    with db.kernel_log() as calls:
        got = db.hvp(eam_fused, x, v)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert [(c.width, c.second) for c in calls] == [(1, 1)]


def test_explain_of_a_function_taking_a_gradient_shows_the_second_order_kernel():
    xs = np.linspace(-1, 1, 100)
    c = np.full(10, 0.1)
    report = db.explain(lambda c: np.sum(db.gradient(lambda c: exp_poly(c, xs), c)), c)
    forward = [op for op in report.operations if op.mode == "forward"]
    assert forward and all(op.width == 10 and "second order: 55 second partials" in op.name for op in forward)
    assert "second order: 55" in str(report)


def test_forward_over_reverse_is_the_hessian_vector_product():
    """``jvp(grad f)``, JAX's hvp: the gradient's tape records value and tangent, one sweep each (forward over
    reverse); against db.hvp (reverse over forward) and the hand-written H·v."""
    f = lambda x: np.sum(np.sin(x) * x)
    x, v = np.array([0.1, 0.5]), np.array([1.0, -0.3])
    g, hv = db.jvp(lambda x: db.gradient(f, x), (x,), (v,))
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-14)
    np.testing.assert_allclose(hv, (2 * np.cos(x) - x * np.sin(x)) * v, rtol=1e-14)
    np.testing.assert_allclose(hv, db.hvp(f, x, v), rtol=1e-14)


Y0 = np.array([2.0, 1.5, -0.5])
CLOSURES = {  # a gradient begun inside db.jvp, of a function closing over its dual value x
    "gradient": lambda x: db.gradient(lambda y: np.sum(y * x), Y0),
    "scalar gradient": lambda x: x[0] * db.gradient(lambda y: x[1] * y, 2.0),
    "value_and_gradient": lambda x: db.value_and_gradient(lambda y: np.sum(y ** 2 * x), Y0)[1],
    "pullback": lambda x: db.pullback(lambda y: y * x, Y0)[1](np.ones(3)),
    "jacobian": lambda x: db.jacobian(lambda y: y * x, Y0, mode="reverse"),
    "hessian": lambda x: db.hessian(lambda y: np.sum(y ** 3 * x), Y0),
    "hvp": lambda x: db.hvp(lambda y: np.sum(y ** 3 * x), Y0, np.ones(3)),
    "prepare_gradient": lambda x: db.prepare_gradient(lambda y: np.sum(y * x), Y0)(Y0),
    "slice": lambda x: db.gradient(lambda y: np.sum(y[1:] * x[:2]), Y0),
    "matmul": lambda x: db.gradient(lambda y: y @ x, Y0),
    "db.sum": lambda x: db.gradient(lambda y: db.sum(lambda a, b: a * b, y, x), Y0),
    "db.broadcast": lambda x: db.pullback(lambda y: db.broadcast(lambda a, b: np.sin(a * b), y, x), Y0)[1](Y0),
}


@pytest.mark.parametrize("name", CLOSURES)
def test_a_gradient_of_a_closure_over_a_jvp_dual_carries_its_tangent(name):
    """Forward over reverse through a closure: the inner gradient's tape records what the dual's tangent computes,
    so each form's tangent is the derivative of its result (the pullback and db.broadcast forms once gave zeros,
    silently; then an error); against central differences.  A prepared gradient's replay could not see the
    tangent: a clear error."""
    x, v = np.array([0.3, 0.7, 1.1]), np.array([1.0, -0.5, 0.25])
    if name == "prepare_gradient":
        with pytest.raises(db.UnsupportedFunctionError, match=r"prepared gradient.*db\.jvp.*db\.gradient"):
            db.jvp(CLOSURES[name], (x,), (v,))
        return
    value, tangent = db.jvp(CLOSURES[name], (x,), (v,))
    h = 1e-6
    want = (np.asarray(CLOSURES[name](x + h * v)) - np.asarray(CLOSURES[name](x - h * v))) / (2 * h)
    np.testing.assert_allclose(value, CLOSURES[name](x), rtol=1e-13)
    np.testing.assert_allclose(tangent, want, rtol=1e-7, atol=1e-8)


def test_reverse_over_forward_through_a_closure_stays_right():
    """The other order, a jvp inside a gradient closing over its tracked value, is no error: against central
    differences of the jvp."""
    x, v = np.array([0.3, 0.7, 1.1]), np.array([1.0, -0.5, 0.25])
    f = lambda x: np.sum(db.jvp(lambda z: np.sin(z) * x ** 2, (x,), (v,))[1])
    want = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(db.gradient(f, x), want, rtol=1e-7, atol=1e-9)


def test_a_view_a_nested_gradient_froze_is_thawed_with_its_base():
    """The inner gradient of an hvp keeps a view made before the outer gradient froze its base; when the inner
    one ends the base is still frozen, so the view waits and is thawed with it (db.hvp raised 'cannot set
    WRITEABLE flag'; found by the 10^4 random programs)."""
    from dualbroadcast import tape

    x = np.array([0.3, -0.2])

    def g(x):
        v = x[:1]
        return np.sum(np.clip(v, -0.5, 0.75) ** 2) + np.sum(np.sin(x))

    np.testing.assert_allclose(db.hvp(g, x, np.ones(2)), [2 - np.sin(0.3), -np.sin(-0.2)], rtol=1e-14)
    assert x.flags.writeable and not tape._DEFERRED
