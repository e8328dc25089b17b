"""Hessian-vector products by reverse over forward: the gradient of a `db.jvp`'s tangent.

`db.hvp` differentiates ``x ↦ jvp(f, x, v)``'s tangent ``⟨∇f(x), v⟩``: a `db.jvp` inside a gradient, whose duals
carry values the gradient's tape tracks, so each operation's tangent is recorded there (`forward.py`), and a
`db.sum`/`db.broadcast` is one fused pass computing the value, the tangent and both partials for the tape
(`broadcast_pullbacks.tangent_on_tape`).  Checked here against the reverse-over-reverse hvp (the gradient of
``⟨∇f, v⟩`` written out), hand-written Hessians, central differences of the gradient and ``jax.jvp(jax.grad)``;
on every kernel backend; with `cut`/`uncut`, pytrees, float32; and for perturbation confusion (closures over the
gradient's variable inside the jvp)."""

import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.pullbacks import plain

from .. import programs
from ..cases import all_cases, reset_streams
from ..modes.test_second_order import AT_A_TIE, NOT_TWICE

FORWARD_REFUSES = (db.UnsupportedFunctionError, db.ValueConversionError, db.KernelError)


def reverse_over_forward(f, args, vectors):
    """The composition `db.hvp` takes: the gradient of the jvp's tangent."""
    return db.gradient(lambda *xs: db.jvp(f, xs, vectors)[1], *args)


def reverse_over_reverse(f, args, vectors):
    """The gradient of ``⟨∇f, v⟩``: the hvp as it was before (two sweeps)."""
    def directional(*xs):
        grads = db.gradient(f, *xs)
        grads = grads if len(xs) > 1 else (grads,)
        return sum(np.sum(g * v) for g, v in zip(grads, vectors))

    return db.gradient(directional, *args)


def gradient_differences(f, args, vectors, h=1e-6):
    """Central differences of the gradient along the vectors."""
    def at(t):
        g = db.gradient(f, *[a + t * v for a, v in zip(args, vectors)])
        return g if len(args) > 1 else (g,)

    return tuple((np.asarray(a, np.float64) - np.asarray(b, np.float64)) / (2 * h) for a, b in zip(at(h), at(-h)))


def eam_hand(x, v):
    """H·v of E = P² + P³ + P⁴/4, P = Σ exp(-3(x+1)): E''(P) ∇P ∇Pᵀ v + E'(P) diag(9r) v."""
    r = np.exp(-3 * (x + 1))
    p = np.sum(r)
    return (2 + 6 * p + 3 * p ** 2) * (-3 * r) * np.dot(-3 * r, v) + (2 * p + 3 * p ** 2 + p ** 3) * 9 * r * v


def projected(out, seed):
    """A real scalar that depends on every float element of ``out`` (tracked, dual, or tuples of them)."""
    total = 0.0
    for k, o in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        value = plain(o)
        if np.result_type(value).kind != "f":
            continue
        w = np.random.default_rng(seed + k).standard_normal(np.shape(value))
        total = total + np.sum(o * w.astype(np.result_type(value)))
    return total


CASES = [c for c in all_cases() if str(c) not in AT_A_TIE]


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=1, deadline=None)
@given(data=st.data())
def test_every_rule_case_agrees_with_reverse_over_reverse(case, data):
    """Each rule case's hvp by reverse over forward agrees with reverse over reverse to rounding, where both
    run; where forward mode refuses, it is a clear error and `db.hvp` falls back; where reverse over reverse
    refuses (a pullback that cannot run on tracked values), reverse over forward agrees with differences."""
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    if any(np.iscomplexobj(a) for a in args):
        return
    seed = data.draw(st.integers(0, 1000))
    f = lambda *a: projected(fn(*a), seed)
    rng = np.random.default_rng(seed)
    vectors = tuple(rng.standard_normal(np.shape(a)) if isinstance(a, np.ndarray) else float(rng.standard_normal())
                    for a in args)
    try:
        got = reverse_over_forward(f, args, vectors)
    except FORWARD_REFUSES:
        got = None
    try:
        want = reverse_over_reverse(f, args, vectors)
    except (db.UnsupportedFunctionError, db.ValueConversionError):
        assert str(case) in NOT_TWICE
        if got is not None:  # the new composition reaches a second derivative the old one could not
            got = got if len(args) > 1 else (got,)
            for g, d in zip(got, gradient_differences(f, args, vectors)):
                np.testing.assert_allclose(g, d, rtol=1e-4, atol=1e-4 * max(1.0, np.max(np.abs(d), initial=0)))
        return
    hvp = db.hvp(f, *args, vectors=vectors)
    for result in ([got] if got is not None else []) + [hvp]:
        result, expected = (result, want) if len(args) > 1 else ((result,), (want,))
        for r, w in zip(result, expected):
            scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
            np.testing.assert_allclose(r, w, rtol=1e-7, atol=1e-9 * scale)


# --- random programs: the two compositions agree to rounding -------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_programs_agree_with_reverse_over_reverse(data):
    program = data.draw(programs.programs(), label="program")
    if "db.cut(" in program.function_source():  # a cut derived value: see programs.check_second_order
        return
    values = programs.build_inputs(program)
    f = programs.compile_program(program)
    rng = np.random.default_rng(program.seed)
    vectors = tuple(np.zeros(np.shape(v)) if x.cut else rng.standard_normal(np.shape(v))
                    for x, v in zip(program.inputs, values))
    args = programs.wrap(program, values)
    with np.errstate(all="ignore"):
        try:
            want = programs.as_tuple(reverse_over_reverse(f, args, vectors), len(values))
        except (db.DifferentiationError, ValueError, FloatingPointError):
            return  # refused (a clear error) or not defined here: programs.check_second_order covers it
        try:
            got = programs.as_tuple(reverse_over_forward(f, args, vectors), len(values))
            hvp = programs.as_tuple(db.hvp(f, *args, vectors=vectors), len(values))
        except FORWARD_REFUSES:
            got = None
            hvp = programs.as_tuple(db.hvp(f, *args, vectors=vectors), len(values))
        except db.InPlaceMutationError:
            # f writes into an array a product read: a clear refusal, as db.gradient's. Reverse over reverse may
            # accept it where that product's other factor has a zero partial (a kernel of np.floor)
            with pytest.raises(db.InPlaceMutationError):
                db.gradient(f, *args)
            return
    for result in ([got] if got is not None else []) + [hvp]:
        for x, r, w in zip(program.inputs, result, want):
            if x.cut:
                assert r is None
                continue
            scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
            np.testing.assert_allclose(r, w, rtol=1e-7, atol=1e-9 * scale)


# --- the EAM model: one fused kernel per db.sum, every backend ------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eam_hvp_is_one_kernel_call_on_every_backend(backend, dtype):
    n = 40_000  # two blocks and more: every backend is eligible
    x = np.random.default_rng(0).random(n).astype(dtype)
    v = np.random.default_rng(1).standard_normal(n).astype(dtype)
    with db.kernel_log() as calls:
        got = db.hvp(lambda x: eam_fused(x, backend), x, v)
    assert [(c.width, c.second, c.backend, c.reduce) for c in calls] == [(1, 1, backend, True)]
    assert got.dtype == dtype
    want = eam_hand(x.astype(np.float64), v.astype(np.float64))
    rtol = 1e-4 if dtype is np.float32 else 1e-11
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.max(np.abs(want)))


def eam_fused(x, backend=None):
    p = db.sum(lambda r: np.exp(-3 * (r + 1)), x, backend=backend)
    return p ** 2 + p ** 3 + 0.25 * p ** 4


def test_eam_hvp_against_jax_jvp_of_grad():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def eam_jax(x):
        p = jnp.sum(jnp.exp(-3 * (x + 1)))
        return p ** 2 + p ** 3 + 0.25 * p ** 4

    x = np.random.default_rng(2).random(300)
    v = np.random.default_rng(3).standard_normal(300)
    want = np.asarray(jax.jvp(jax.grad(eam_jax), (jnp.asarray(x),), (jnp.asarray(v),))[1])
    np.testing.assert_allclose(db.hvp(eam_fused, x, v), want, rtol=1e-12, atol=1e-12 * np.max(np.abs(want)))


def test_a_constant_scalar_tangent_of_a_tracked_array_is_broadcast_to_its_shape():
    """x[0] + zeros(3): a tracked array whose tangent is v[0], a constant float (`forward._like`); summed, it counts
    three times, as JAX's jvp of grad says (a scalar tangent left as it is counted once)."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def f(x, xp):
        return xp.sum(x[0] + xp.zeros(3)) ** 2 + xp.sum(xp.sin(x[1] * xp.ones((2, 2))) * x[2])

    x = np.array([0.3, -1.2, 0.7])
    v = np.array([0.5, 2.0, -1.0])
    want = np.asarray(jax.jvp(jax.grad(lambda x: f(x, jnp)), (jnp.asarray(x),), (jnp.asarray(v),))[1])
    np.testing.assert_allclose(db.hvp(lambda x: f(x, np), x, v), want, rtol=1e-12, atol=1e-12)


def test_functions_of_numpy_calls_against_jax_and_differences():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    a = np.random.default_rng(4).standard_normal((4, 4))

    def f(x, xp):
        y = xp.tanh(x[1:] * x[:-1]) @ (a[:3, :3] @ x[:3] ** 2)
        return xp.sum(xp.sin(x) * xp.exp(-x ** 2)) + y + xp.linalg.det(a + xp.outer(x, x)) + xp.max(x) ** 3

    x = np.array([0.3, -0.7, 1.1, 0.2])
    v = np.array([0.5, 1.0, -2.0, 0.25])
    got = db.hvp(lambda x: f(x, np), x, v)
    want = np.asarray(jax.jvp(jax.grad(lambda x: f(x, jnp)), (jnp.asarray(x),), (jnp.asarray(v),))[1])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(reverse_over_forward(lambda x: f(x, np), (x,), (v,)), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, gradient_differences(lambda x: f(x, np), (x,), (v,))[0], rtol=1e-5, atol=1e-6)


# --- kernels: sums and broadcasts, cut and uncut, pytrees, tracked arguments that are not duals ----------------
def test_broadcast_and_sum_with_pytrees_and_cut_leaves_agree_with_reverse_over_reverse():
    xs = np.linspace(-1, 1, 50)

    def f(params, x):
        s = db.sum(lambda x, p: p["a"] * np.sin(p["b"] * x) + p["c"] * x ** 2, x, params)
        b = db.broadcast(lambda x, a: np.tanh(a * x), x, params["a"])
        return s * np.sum(b ** 2) + np.sum(b * xs)

    params = {"a": 0.7, "b": np.float64(1.3), "c": db.cut(0.2)}
    x = np.cos(3 * xs)
    vp = {"a": 0.5, "b": np.float64(-1.0), "c": 9.0}  # the cut leaf's direction is ignored
    vx = np.sin(5 * xs)
    with db.kernel_log() as calls:
        got_p, got_x = db.hvp(f, params, x, vectors=(vp, vx))
    assert len(calls) == 2 and all(c.second == c.width for c in calls)
    assert got_p["c"] is None and type(got_p["a"]) is float
    plain_params = {"a": 0.7, "b": np.float64(1.3), "c": 0.2}

    def directional(a, b, x):
        g = db.gradient(f, {"a": a, "b": b, "c": db.cut(0.2)}, x)
        return g[0]["a"] * vp["a"] + g[0]["b"] * vp["b"] + np.sum(g[1] * vx)

    want_a, want_b, want_x = db.gradient(directional, plain_params["a"], plain_params["b"], x)
    np.testing.assert_allclose([got_p["a"], got_p["b"]], [want_a, want_b], rtol=1e-10)
    np.testing.assert_allclose(got_x, want_x, rtol=1e-10, atol=1e-12)


def test_a_kernel_reading_the_gradients_variable_that_is_not_a_dual():
    """d/dc of jvp(x ↦ Σ c x³, x, v)'s tangent is Σ 3x² v: c is tracked by the gradient, not a dual."""
    x = np.linspace(0.1, 1, 7)
    v = np.cos(x)
    with db.kernel_log() as calls:
        got = db.gradient(lambda c: db.jvp(lambda x: db.sum(lambda x, c: c * x ** 3, x, c), (x,), (v,))[1], 2.0)
    assert got == pytest.approx(np.sum(3 * x ** 2 * v), rel=1e-13)
    assert [(c.width, c.second) for c in calls] == [(1, 1)]


def test_perturbation_confusion_of_a_jvp_inside_a_gradient():
    """d/dx (d/dy (x · y)) at any y is 1; through a kernel too."""
    for inner in (lambda x, y: x * y, lambda x, y: db.sum(lambda y, x: x * y, y, x)):
        got = db.gradient(lambda x: db.jvp(lambda y: inner(x, y), (3.0,), (1.0,))[1], 2.0)
        assert got == 1.0
    # and x inside: d/dx (x · d/dy (x + y)) = 1
    assert db.gradient(lambda x: x * db.jvp(lambda y: x + y, (1.0,), (1.0,))[1], 5.0) == 1.0


def test_cut_inside_the_jvp_stops_the_gradient_too():
    """jvp(x ↦ x · cut(x), v) = cut(x) v: its gradient in x is 0, as JAX's stop_gradient at every level."""
    got = db.gradient(lambda x: db.jvp(lambda y: y * db.cut(y), (x,), (1.0,))[1], 3.0)
    assert got == 0.0


def test_a_selection_rule_runs_reverse_over_forward():
    """np.pad's mode='maximum' (a forward rule that takes the tangent at the chosen elements) on tracked values:
    reverse over forward agrees with reverse over reverse."""
    x = np.array([0.3, 1.2, -0.4])
    v = np.array([1.0, -1.0, 0.5])
    f = lambda x: np.sum(np.pad(x, 2, mode="maximum") ** 3)
    want = reverse_over_reverse(f, (x,), (v,))
    np.testing.assert_allclose(reverse_over_forward(f, (x,), (v,)), want, rtol=1e-12)
    np.testing.assert_allclose(db.hvp(f, x, v), want, rtol=1e-12)


def test_reverse_over_forward_names_hvp_where_a_rule_cannot_run_on_tracked_values():
    """A user's jvp rule that converts with np.asarray cannot run on tracked values: reverse over forward is a
    clear error naming db.hvp, which then takes reverse over reverse (every built-in rule runs both ways)."""
    @db.primitive
    def cube(x):
        return x ** 3

    db.defvjp(cube, lambda ans, x: lambda g: 3 * g * x ** 2)
    db.defjvp(cube, lambda tangents, ans, x: 3 * np.asarray(x) ** 2 * tangents[0])
    f = lambda x: np.sum(cube(x) * np.sin(x))
    x, v = np.array([0.3, 1.2, -0.4]), np.array([1.0, -1.0, 0.5])
    with pytest.raises(db.UnsupportedFunctionError, match=r"reverse over forward.*db\.hvp"):
        reverse_over_forward(f, (x,), (v,))
    hand = (6 * x * np.sin(x) + 6 * x ** 2 * np.cos(x) - x ** 3 * np.sin(x)) * v  # (x³ sin x)'' v
    np.testing.assert_allclose(db.hvp(f, x, v), hand, rtol=1e-12)
    np.testing.assert_allclose(reverse_over_reverse(f, (x,), (v,)), hand, rtol=1e-12)


# --- a db.sum over full-size tracked arguments: kept nodes and a cotangent kernel (`broadcast_pullbacks._Deferred`) ---
broadcast = sys.modules["dualbroadcast.broadcast"]  # the module, not db.broadcast
broadcast_pullbacks = sys.modules["dualbroadcast.broadcast_pullbacks"]
kernel_cache = sys.modules["dualbroadcast.kernel_cache"]
BIG = 40_000  # more than two blocks: the blocked backend is eligible, and its cotangent runs over the kept array


def general_path(monkeypatch, f, args, vectors):
    """The same hvp with the kernel writing both per-element partials (the path before `_Deferred`)."""
    with monkeypatch.context() as patch:
        patch.setattr(broadcast_pullbacks, "_deferred", lambda *_: None)
        return reverse_over_forward(f, args, vectors)


def full_size_sums(backend):
    """Sums whose cotangents take each form: one kept node written over (EAM; a log beside a scalar), several
    full-size arguments beside a scalar, more nodes than are kept (recomputed), a row broadcast along a grid
    and no kept node, and a column times a row (no argument of the call's size: the whole kernel's partials)."""
    def eam(x):
        p = db.sum(lambda r: np.exp(-3 * (r + 1)), x, backend=backend)
        return p ** 2 + p ** 3 + 0.25 * p ** 4

    def several(x, y, c):
        return db.sum(lambda x, y, c: np.sin(x * y) * c + np.log1p(x * x) / (2 + y), x, y, c, backend=backend) ** 2

    def recomputed(x):
        return db.sum(lambda x: np.exp(x) * np.sin(x) * np.log1p(x * x) * np.cos(x), x, backend=backend) ** 3

    def polynomial(x, row):
        return np.sin(db.sum(lambda x, row: x ** 3 * row - 2 * x * x, x, row, backend=backend))

    def logarithm(x, a):
        return db.sum(lambda x, a: np.log(x + a) * a, x, a, backend=backend) ** 2

    def outer(column, row):  # no argument has the call's size, the column has the most elements
        return db.sum(lambda c, r: np.exp(c * r) * c, column, row, backend=backend) ** 2

    rng = np.random.default_rng(7)
    x, y = rng.uniform(0.1, 1, (2, BIG))
    grid = rng.uniform(0.1, 1, (BIG // 8, 8))
    return [(eam, (x,)), (several, (x, y, 0.7)), (recomputed, (x,)), (polynomial, (grid, rng.uniform(-1, 1, 8))),
            (logarithm, (x, 1.5)), (outer, (x[:BIG // 4, None], y[:4]))]


@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cotangent_kernel_agrees_with_both_partials_and_differences(monkeypatch, backend, dtype):
    for f, args in full_size_sums(backend):
        rng = np.random.default_rng(8)
        args = tuple(np.asarray(a, dtype) if np.ndim(a) else dtype(a) for a in args)
        vectors = tuple(rng.standard_normal(np.shape(a)).astype(dtype) if np.ndim(a) else dtype(0.3) for a in args)
        kept = [a.copy() for a in args if np.ndim(a)]
        got = reverse_over_forward(f, args, vectors)
        got = got if len(args) > 1 else (got,)
        assert all(np.array_equal(a, k) for a, k in zip([a for a in args if np.ndim(a)], kept))  # inputs untouched
        want = general_path(monkeypatch, f, args, vectors)
        want = want if len(args) > 1 else (want,)
        wide = tuple(np.asarray(a, np.float64) for a in args)
        differences = gradient_differences(f, wide, tuple(np.asarray(v, np.float64) for v in vectors))
        for g, w, d in zip(got, want, differences):
            assert np.result_type(g) == dtype
            scale = np.max(np.abs(d))
            rtol = 1e-4 if dtype is np.float32 else 1e-12
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)
            np.testing.assert_allclose(g, d, rtol=1e-3 if dtype is np.float32 else 1e-6,
                                       atol=(1e-3 if dtype is np.float32 else 1e-6) * scale)


def test_cotangent_kernel_keeps_the_exp_and_writes_over_it():
    x = np.random.default_rng(9).random(BIG)
    v = np.random.default_rng(10).standard_normal(BIG)
    broadcast.clear_cache()
    db.hvp(lambda x: eam_fused(x, "blocked"), x, v)
    (eam,) = broadcast_pullbacks.DEFERRED_KERNELS.values()
    assert [node.op for node in eam.forward.outputs[2:]] == [np.exp] and eam.scale == -3  # r kept; Σ r·v
    ((combine, tangent_only),) = eam.combines.values()  # db.hvp's ȳ is no cotangent: the second
    full = [True, True, False, False, True]  # x, v, ȳ, ẏ̄, r
    for kernel, passes in ((combine, 3), (tangent_only, 2)):  # r · (-3ȳ + 9ẏ̄ · v); r · (9ẏ̄ · v)
        once = broadcast_pullbacks.scalar_nodes(kernel, full)
        assert len([node for node in kernel.order if node.index not in once]) == passes
        out = np.empty(BIG)
        assert kernel.into(out, [x, v, 1.0, 1.0, out], "blocked") is out


def test_cotangent_kernel_on_a_tape_swept_twice_and_without_the_tangent_cotangent():
    x = np.random.default_rng(11).random(BIG)
    v = np.random.default_rng(12).standard_normal(BIG)
    f = lambda x: eam_fused(x, "blocked")
    want = eam_hand(x, v)
    _, back = db.pullback(lambda x: db.jvp(f, (x,), (v,))[1], x)
    first, second = back(1.0), back(2.0)  # a pullback keeps the kept array: nothing written over it
    np.testing.assert_allclose(first, want, rtol=1e-11, atol=1e-11 * np.max(np.abs(want)))
    np.testing.assert_allclose(second, 2 * want, rtol=1e-11, atol=1e-11 * np.max(np.abs(want)))
    # the value alone: the tangent has no cotangent, the whole kernel's partials serve
    np.testing.assert_allclose(db.gradient(lambda x: db.jvp(f, (x,), (v,))[0], x), db.gradient(f, x), rtol=1e-12)
    both = db.gradient(lambda x: (lambda y, t: 0.5 * y + 3 * t)(*db.jvp(f, (x,), (v,))), x)
    np.testing.assert_allclose(both, 0.5 * db.gradient(f, x) + 3 * want, rtol=1e-11,
                               atol=1e-11 * np.max(np.abs(want)))


@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
def test_kernel_into_an_input_gives_the_kernels_value(backend):
    x = np.random.default_rng(13).random(BIG)
    v = np.random.default_rng(14).standard_normal(BIG)
    db.hvp(lambda x: eam_fused(x, backend), x, v)
    deferred = next(d for d in broadcast_pullbacks.DEFERRED_KERNELS.values() if d is not None)
    kernels = next(iter(deferred.combines.values()))
    for combine in kernels:  # ȳ · ∂y/∂x + ẏ̄ · ∂ẏ/∂x, and ẏ̄ · ∂ẏ/∂x alone
        kept = np.exp(x)
        args = [x, v, np.float64(0.5), np.float64(-2.0), kept]
        want = combine(args, [], backend)[0]
        got = combine.into(kept, args, backend)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        assert (got is kept) == (backend == "blocked")
        other = np.exp(x) * 2  # a second call into another array writes there, never into the first one again
        again = combine.into(other, args[:-1] + [other], backend)
        np.testing.assert_allclose(again, combine(args[:-1] + [np.exp(x) * 2], [], backend)[0], rtol=1e-15)
        np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize("shape", [(BIG,), (200, 200), (10, 10)])
def test_a_summed_product_is_a_dot_product_per_block(shape):
    """A kernel's sum of a product of two float64 blocks is their dot product (`kernel_source.block_dot`):
    the partial in a scalar of Σ exp(c·x) is Σ exp(c·x)·x, on the blocked backend, in a single block of a
    prepared program, and in float32 (pairwise sums, no dot) as NumPy's backend gives it."""
    x = np.random.default_rng(15).uniform(-1, 1, shape)
    broadcast.clear_cache()
    for dtype in (np.float64, np.float32):
        xs = x.astype(dtype)

        def f(c, backend):
            return db.sum(lambda x, c: np.exp(c * x), db.cut(xs), c, backend=backend)

        want = db.gradient(lambda c: f(c, "numpy"), dtype(0.3))
        np.testing.assert_allclose(db.gradient(lambda c: f(c, "blocked"), dtype(0.3)), want,
                                   rtol=1e-12 if dtype is np.float64 else 1e-5)
        prog = db.prepare_gradient(lambda c: f(c, None), dtype(0.3))
        np.testing.assert_allclose(prog(dtype(0.3)), want, rtol=1e-12 if dtype is np.float64 else 1e-5)
    kernel = next(k for k in kernel_cache.KERNEL_CACHE.values() if len(k.inputs) == 2 and k.reduce)
    code = broadcast_code(kernel, shape)
    assert "block_dot" in code and code.count("add_reduce") == 1


def broadcast_code(kernel, shape):
    """The blocked kernel's operations for float64 inputs: a full-size one and a scalar."""
    from dualbroadcast.kernel_source import _block_code

    block = _block_code(kernel, (np.dtype(np.float64), np.dtype(np.float64)), (True, False), (False, False))
    return "\n".join(block.operations + [total for total, _ in block.sums.values()])


@pytest.mark.parametrize("shape", [(1,), (1, 1), (2, 1), (1, 2), (3, 2)])
def test_a_view_of_a_broadcast_kernel_result_in_an_hvp(shape):
    """Column slices of a `db.broadcast` result multiplied together (the sweep adds their products into the
    result's cotangent at the slices' indices): that cotangent has the result's shape, never the scalar zero the
    kernel's tangent record gives its value (an IndexError, found by the 10^4 random programs).  Against the
    same model with the kernel written as NumPy calls, and the dense Hessian."""
    x = np.linspace(0.2, 1.1, math.prod(shape)).reshape(shape)
    v = np.cos(np.arange(x.size) + 1.0).reshape(shape)

    def model(kernel):
        return lambda x: sum(np.dot(y[..., j], y[..., j]) for y in [kernel(x)] for j in range(shape[-1]))

    fused, plain_numpy = model(lambda x: db.broadcast(np.sin, x)), model(np.sin)
    want = db.hvp(plain_numpy, x, v)
    np.testing.assert_allclose(db.hvp(fused, x, v), want, rtol=1e-12, atol=1e-14)
    dense = db.hessian(plain_numpy, x).reshape(x.size, x.size) @ v.ravel()
    np.testing.assert_allclose(want.ravel(), dense, rtol=1e-12, atol=1e-14)


def test_a_tracked_partial_is_inspected_and_guarded_where_recorded():
    """`derivatives.is_finite` of a partial an outer gradient tracks: its value is inspected (a finite one takes
    IEEE's product, not the strong product's five recorded steps: a fifth of Rosenbrock's `db.hvp`); while a
    prepared gradient records it, a finite one is a guard the replay checks (`all_finite`), an infinite one no
    guard (the strong product is exact for every value)."""
    from dualbroadcast.derivatives import all_finite, is_finite

    seen = []

    def f(x):
        seen.append((is_finite(2 * x), is_finite(np.log(x * 0.0 + np.where(x > 0.5, 0.0, 1.0)))))
        return np.sum(x ** 2)

    x = np.array([0.25, 0.75])
    with np.errstate(divide="ignore"):
        db.gradient(f, x)
        prog = db.prepare_gradient(f, x)
    assert seen == [(True, False), (True, False)]
    (program,) = {id(p): p for ps in prog.variants.values() for p in ps}.values()
    assert [getattr(s, "convert", None) for s in program.recorded_steps].count(all_finite) == 1


def test_hvp_keeps_the_zero_of_a_singular_partial_where_it_is_not_selected():
    """Where the inspected partial is not finite the strong product stays: 0 · ∞ = 0 in the hvp, the branch
    np.where does not choose at x = 0 (sqrt's infinite partial) contributing nothing, as written by hand."""
    def f(x):
        return np.sum(np.where(x > 0, np.sqrt(np.abs(x)) * x, x ** 2))

    x, v = np.array([0.0, 0.5, -0.25]), np.array([1.0, -2.0, 0.5])
    with np.errstate(divide="ignore", invalid="ignore"):
        got = db.hvp(f, x, v)
    hand = np.array([2.0 * v[0], 0.75 / np.sqrt(0.5) * v[1], 2.0 * v[2]])  # x = 0 takes x², 3/4 x^(-1/2) at 0.5
    np.testing.assert_allclose(got, hand, rtol=1e-12)
