"""Forward mode (`db.jvp`, `db.jacobian(mode=)`): every rule case against central finite differences along
the tangent and against its own vjp (the transposition identity ``⟨vjp(u), t⟩ == ⟨u, jvp(t)⟩``), random
programs against reverse mode, kernels, pytrees, cut, complex values and the errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbroadcast as db

from .. import programs
from ..cases import all_cases, complex_cases, reset_streams

CASES = all_cases()
COMPLEX_CASES = complex_cases(CASES)


def leaves(out, like=None):
    """The float arrays of a result (an array or a tuple of them; integer outputs left out), or the
    parts of ``out`` (a tangent) at the float outputs of the result ``like``."""
    outs = out if isinstance(out, (list, tuple)) else [out]
    kept = like if like is not None else out
    kept = kept if isinstance(kept, (list, tuple)) else [kept]
    return [o for o, k in zip(outs, kept) if np.result_type(k).kind in "fc"]


def random_like(x, rng):
    """A random array of ``x``'s shape and dtype (complex parts both drawn for a complex one)."""
    shape, dtype = np.shape(x), np.result_type(x)
    value = rng.standard_normal(shape)
    if dtype.kind == "c":
        value = value + 1j * rng.standard_normal(shape)
    value = np.asarray(value, dtype)
    return value if isinstance(x, np.ndarray) else value[()]


def pairing(a, b):
    """Re Σ a·b, the pairing in which JAX's convention transposes (no conjugation)."""
    return float(np.real(np.sum(np.asarray(a, np.complex128) * np.asarray(b, np.complex128))))


def moved(fn, args, tangents, h):
    """``fn`` at ``args + h · tangents``, in float64 (complex128 for complex arguments)."""
    wide = [np.asarray(a, np.result_type(a, np.float64)) + h * np.asarray(t, np.result_type(t, np.float64))
            for a, t in zip(args, tangents)]
    return [np.asarray(o, np.result_type(o, np.float64)) for o in leaves(fn(*wide))]


def check_case(case, dtype, data, rtol, atol):
    reset_streams()
    fn, args = case.build(data.draw, dtype)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    tangents = [random_like(a, rng) for a in args]
    value, tangent = db.jvp(fn, tuple(args), tuple(tangents))
    expected = fn(*args)
    values, outs, out_tangents = leaves(value), leaves(expected), leaves(tangent, like=expected)
    assert len(values) == len(outs) == len(out_tangents)
    for v, o, t in zip(values, outs, out_tangents):
        np.testing.assert_allclose(v, o, rtol=1e-6, atol=1e-6)
        assert np.shape(t) == np.shape(o) and np.result_type(t) == np.result_type(o), \
            f"{case}: tangent {np.shape(t)} {np.result_type(t)} for a result {np.shape(o)} {np.result_type(o)}"
    # ⟨vjp(u), t⟩ == ⟨u, jvp(t)⟩
    us = [random_like(o, rng) for o in outs]
    out, back = db.pullback(fn, *args)
    seeds = [random_like(o, rng) * 0 for o in (out if isinstance(out, (list, tuple)) else [out])]
    k = 0
    for j, o in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        if np.result_type(o).kind in "fc":
            seeds[j] = us[k].astype(np.result_type(o))
            k += 1
    cotangents = back(tuple(seeds) if isinstance(out, (list, tuple)) else seeds[0])
    cotangents = cotangents if len(args) > 1 else (cotangents,)
    left = sum(pairing(c, t) for c, t in zip(cotangents, tangents) if c is not None)
    right = sum(pairing(u, t) for u, t in zip(us, out_tangents))
    assert abs(left - right) <= atol + rtol * max(abs(left), abs(right), 1.0), \
        f"{case}: ⟨vjp(u), t⟩ = {left} but ⟨u, jvp(t)⟩ = {right}"
    # central finite differences along t, in float64
    if dtype == np.float32:
        return
    h = 1e-6
    plus, minus = moved(fn, args, tangents, h), moved(fn, args, tangents, -h)
    scale = max([1.0] + [float(np.max(np.abs(o), initial=0.0)) for o in outs])
    centre, plus2, minus2 = moved(fn, args, tangents, 0.0), moved(fn, args, tangents, 2 * h), \
        moved(fn, args, tangents, -2 * h)
    for t, p, m, c, p2, m2 in zip(out_tangents, plus, minus, centre, plus2, minus2):
        fd = (p - m) / (2 * h)
        # at a kink (a tie of a maximum...) the convention lies between the one-sided derivatives
        right, left = (-3 * c + 4 * p - p2) / (2 * h), (3 * c - 4 * m + m2) / (2 * h)
        tolerance = 1e-4 * np.abs(fd) + 1e-5 * scale
        low, high = np.real(np.minimum(left, right)), np.real(np.maximum(left, right))
        between = (low - tolerance <= np.real(t)) & (np.real(t) <= high + tolerance)
        kink = np.abs(right - left) > 1e-3 * scale
        if not np.iscomplexobj(t):
            t = np.where(kink & between, fd, t)
        np.testing.assert_allclose(t, fd, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: jvp vs finite differences")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_jvp_of_every_rule_case(case, dtype, data):
    """Every rule case: the jvp's value, shape and dtype; its transposition identity with the vjp; and
    central finite differences along a random tangent (float64)."""
    tight = dtype == np.float64
    if str(case) in UNSUPPORTED:  # a clear error naming the function
        with pytest.raises(db.UnsupportedFunctionError, match=r"np\.pad"):
            check_case(case, dtype, data, rtol=0, atol=0)
        return
    check_case(case, dtype, data, rtol=1e-6 if tight else 2e-3, atol=1e-6 if tight else 2e-3)


@pytest.mark.parametrize("case", COMPLEX_CASES, ids=str)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_jvp_of_every_complex_rule_case(case, data):
    """Complex arguments: the tangent of a holomorphic function is f'(z) t (JAX's convention), and the
    transposition identity holds in the pairing Re Σ a·b."""
    check_case(case, np.complex128, data, rtol=1e-6, atol=1e-6)


# Rule cases whose jvp is a clear error (case name: why), asserted by the sweep.
UNSUPPORTED: dict[str, str] = {}  # none today (np.pad's selections take the tangent at what they chose)


# --- random programs: jvp against the gradient ---------------------------------------------------------------------
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_jvp_of_random_programs_matches_reverse_mode(data):
    """Random programs (tests/programs.py): ⟨∇f, t⟩ from reverse mode equals the jvp of f along t, and the
    jvp's value is f's."""
    program = data.draw(programs.programs(), label="program")
    grads = programs.check_gradient(program)
    if grads is None:  # refused with a clear error in reverse mode
        return
    values = programs.build_inputs(program)
    f = programs.compile_program(program)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="tangent seed"))
    tangents = tuple(None if x.cut else random_like(v, rng) for x, v in zip(program.inputs, values))
    value, tangent = db.jvp(f, tuple(programs.wrap(program, values)), tangents)
    expected = sum(pairing(g, t) for g, t in zip(grads, tangents) if t is not None and g is not None)
    np.testing.assert_allclose(value, f(*values) if not any(x.cut for x in program.inputs) else value)
    if not np.isfinite(expected):  # a singular point (cbrt at 0 times a zero derivative): both modes say so
        assert not np.isfinite(float(tangent)), programs.snippet(
            program, [f"print(db.jvp(f, ...))  # {float(tangent)} against ⟨∇f, t⟩ = {expected}"])
        return
    assert abs(float(tangent) - expected) <= 1e-8 * max(1.0, abs(expected)) + 1e-9 * programs.gradient_scale(grads), \
        programs.snippet(program, [f"print(db.jvp(f, ...))  # {float(tangent)} against ⟨∇f, t⟩ = {expected}"])


# --- kernels -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", [None, "numpy", "blocked", "numexpr"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("reduce", [False, True])
@pytest.mark.parametrize("rows", [3, 5000])
def test_kernels_on_duals_match_plain_numpy(dtype, reduce, backend, rows):
    """db.sum / db.broadcast of dual arguments (broadcast shapes, a scalar, a cut one) give the tangent of the
    same computation in plain NumPy, in the arguments' dtype, on every backend: one fused pass, one tangent."""
    rng = np.random.default_rng(0)
    x, y, c = rng.uniform(0.5, 2, (rows, 4)).astype(dtype), rng.uniform(0.5, 2, (4,)).astype(dtype), dtype(1.5)
    tx, ty, tc = (random_like(a, rng) for a in (x, y, c))

    def body(a, b, s):
        return np.exp(-a * b) * s + np.sqrt(a) / b

    def kernel(*args):
        return (db.sum if reduce else db.broadcast)(*args, backend=backend)

    plain = (lambda a, b, s: np.sum(body(a, b, s))) if reduce else body
    with db.kernel_log() as calls:
        value, tangent = db.jvp(lambda a, b, s: kernel(body, a, b, s), (x, y, c), (tx, ty, tc))
    assert calls[0].width == 1
    want_value, want_tangent = db.jvp(plain, (x, y, c), (tx, ty, tc))
    tight = 1e-11 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(value, want_value, rtol=tight)
    np.testing.assert_allclose(tangent, want_tangent, rtol=100 * tight, atol=100 * tight)
    assert np.result_type(tangent) == dtype and np.shape(tangent) == np.shape(want_tangent)
    _, cut_tangent = db.jvp(lambda a, b: kernel(body, a, db.cut(b), c), (x, y), (tx, ty))
    _, only_x = db.jvp(lambda a: kernel(body, a, y, c), (x,), (tx,))
    np.testing.assert_allclose(cut_tangent, only_x, rtol=tight)


def test_kernel_of_eam_matches_its_hand_gradient():
    from dualbroadcast.demo import eam_fused, eam_hand_gradient

    x, t = np.linspace(0.1, 2.0, 50), np.cos(np.arange(50.0))
    with db.kernel_log() as calls:
        _, tangent = db.jvp(eam_fused, (x,), (t,))
    assert calls[0].width == 1
    np.testing.assert_allclose(tangent, eam_hand_gradient(x) @ t, rtol=1e-12)


# --- pytrees, cut, numbers -----------------------------------------------------------------------------------------
def test_pytrees_cut_and_python_floats():
    params = {"w": np.array([1.0, 2.0]), "b": 0.5, "frozen": db.uncut(3.0)}

    def f(p, x, scale):
        return {"y": np.tanh(p["w"] * x + p["b"]) * scale, "n": 2, "c": np.ones(2)}

    x = np.array([0.3, -0.2])
    tw, tb = np.array([0.1, -1.0]), 2.0
    out, tangent = db.jvp(f, (params, x, db.cut(4.0)), ({"w": tw, "b": tb, "frozen": 0.0}, np.zeros(2), None))
    want = (1 - np.tanh(params["w"] * x + 0.5) ** 2) * (tw * x + tb) * 4.0
    np.testing.assert_allclose(tangent["y"], want, rtol=1e-12)
    assert tangent["n"] is None and np.array_equal(tangent["c"], np.zeros(2))
    np.testing.assert_allclose(out["y"], np.tanh(params["w"] * x + 0.5) * 4.0)
    value, t = db.jvp(lambda a: a * a, (3.0,), (1.0,))
    assert value == 9.0 and t == 6.0


def test_float32_stays_float32():
    x = np.linspace(0, 1, 5, dtype=np.float32)
    value, tangent = db.jvp(lambda x: np.sum(np.sin(x) @ np.outer(x, x)), (x,), (np.ones(5, np.float32),))
    assert value.dtype == np.float32 and tangent.dtype == np.float32


def test_complex_holomorphic_tangent_is_the_derivative_times_t():
    z = np.array([0.3 + 0.4j, -1.0 + 0.2j])
    t = np.array([1.0 - 2.0j, 0.5j])
    _, tangent = db.jvp(lambda z: np.exp(z) * z ** 2, (z,), (t,))
    np.testing.assert_allclose(tangent, (np.exp(z) * z**2 + 2 * z * np.exp(z)) * t, rtol=1e-12)
    _, of_abs = db.jvp(np.abs, (z,), (t,))  # not holomorphic: d|z| = Re(conj(z) dz) / |z|
    np.testing.assert_allclose(of_abs, np.real(np.conj(z) * t) / np.abs(z), rtol=1e-12)


# --- nesting: no perturbation confusion ----------------------------------------------------------------------------
def test_nested_jvp_has_no_perturbation_confusion():
    """d/dx (x · d/dy (x + y)) = 1: the inner derivative of a closure over the outer x is 1, not 2."""
    def f(x):
        inner = db.jvp(lambda y: x + y, (1.0,), (1.0,))[1]
        return x * inner

    assert db.jvp(f, (2.0,), (1.0,))[1] == 1.0
    # second derivative by forward over forward: d²/dx² x³ = 6x
    d2 = db.jvp(lambda x: db.jvp(lambda y: y ** 3, (x,), (1.0,))[1], (2.0,), (1.0,))[1]
    assert d2 == 12.0


# --- jacobian modes ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_jacobian_forward_equals_reverse(shape):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, shape)

    def f(x):
        return np.stack([np.sin(x) * np.sum(x), np.cumsum(np.ravel(x ** 2)).reshape(np.shape(x))])

    forward = db.jacobian(f, x, mode="forward")
    reverse = db.jacobian(f, x, mode="reverse")
    assert forward.shape == reverse.shape == (2,) + shape + shape
    np.testing.assert_allclose(forward, reverse, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(db.jacobian(f, x), reverse, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="mode"):
        db.jacobian(f, x, mode="sideways")


def test_jacobian_auto_picks_forward_for_few_inputs(monkeypatch):
    calls = []
    real_jvp = db.api.jvp
    monkeypatch.setattr(db.api, "jvp", lambda *a: calls.append(1) or real_jvp(*a))
    db.jacobian(lambda x: np.outer(x, x), np.ones(2))  # 2 inputs, 4 outputs: forward, one jvp per input
    assert len(calls) == 2
    calls.clear()
    db.jacobian(lambda x: np.sum(x), np.ones(3))  # 3 inputs, 1 output: reverse
    assert not calls


# --- against JAX ---------------------------------------------------------------------------------------------------
def test_jvp_matches_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    rng = np.random.default_rng(2)
    a, x = rng.standard_normal((3, 3)) + 3 * np.eye(3), rng.standard_normal(3)
    ta, tx = rng.standard_normal((3, 3)), rng.standard_normal(3)

    def f(xp, a, x):
        y = xp.linalg.solve(a, xp.tanh(x)) @ xp.linalg.inv(a)
        return xp.sort(y) * xp.max(xp.abs(a), axis=0) + xp.cumsum(xp.fft.fft(y).real)

    value, tangent = db.jvp(lambda a, x: f(np, a, x), (a, x), (ta, tx))
    want_value, want_tangent = jax.jvp(lambda a, x: f(jnp, a, x), (a, x), (ta, tx))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(tangent, want_tangent, rtol=1e-10, atol=1e-12)


# --- errors --------------------------------------------------------------------------------------------------------
def test_errors_are_clear():
    x = np.ones(3)
    with pytest.raises(db.UnsupportedFunctionError, match="cannot be differentiated"):
        db.jvp(lambda x: np.frompyfunc(lambda v: v, 1, 1)(x), (x,), (x,))
    np.testing.assert_array_equal(db.jvp(lambda x: np.polyval(np.ones(2), x=x), (x,), (x,))[1], x)  # keyword: works
    with pytest.raises(db.ShapeMismatchError, match="shape"):
        db.jvp(np.sin, (x,), (np.ones(2),))
    with pytest.raises(db.ArgumentTypeError, match="integer"):
        db.jvp(np.sin, (np.arange(3),), (x,))
    with pytest.raises(db.ValueConversionError):
        db.jvp(lambda x: float(x[0]), (x,), (x,))
    with pytest.raises(db.ArgumentTypeError, match="tuple"):
        db.jvp(np.sin, x, x)


def test_a_rule_without_a_forward_derivation_is_a_clear_error_naming_it():
    """A user's rule whose pullback cannot be traced (it writes into a buffer) has no jvp: beyond a small
    result, the error names the function."""
    @db.primitive
    def doubled(x):
        return 2 * x

    def doubled_vjp(ans, x):
        def back(g):
            out = np.empty(np.shape(g))
            out[...] = 2 * g
            return out
        return back

    db.defvjp(doubled, doubled_vjp)
    small = np.ones(3)
    np.testing.assert_allclose(db.jvp(doubled, (small,), (small,))[1], 2 * small)  # transposed densely
    large = np.ones(1000)
    with pytest.raises(db.UnsupportedFunctionError, match=r"doubled.*db\.defjvp"):
        db.jvp(doubled, (large,), (large,))
    db.defjvp(doubled, lambda tangents, ans, x: 2 * tangents[0])
    np.testing.assert_allclose(db.jvp(doubled, (large,), (large,))[1], 2 * large)


def test_a_users_derivative_gives_the_tangent_everywhere():
    """db.defderivative's partial gives the jvp of a primitive, called alone and inside a kernel."""
    @db.primitive
    def softplus(x):
        return np.logaddexp(0.0, x)

    db.defderivative(softplus, lambda ans, x: 1 / (1 + np.exp(-x)))
    x, t = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(db.jvp(softplus, (x,), (t,))[1], t / (1 + np.exp(-x)), rtol=1e-14)
    np.testing.assert_allclose(db.jvp(lambda x: db.sum(softplus, x), (x,), (t,))[1], np.sum(t / (1 + np.exp(-x))),
                               rtol=1e-14)


# --- a tuple-valued function's declared forward rule takes the first argument's tangent only -------------------
# np.gradient's jvp rule is for its array; a tangent on its spacing (alone, or with the array's) must take the
# transposed pullbacks of every argument, not the array's rule with the spacing's tangent.
def spread_of_gradient(f, dx):
    parts = np.gradient(f, dx, 0.7) if np.ndim(f) == 2 else (np.gradient(f, dx),)
    return sum(np.sum(np.sin(g) * g) for g in parts)


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_jvp_of_np_gradient_with_a_tangent_on_its_spacing(shape):
    rng = np.random.default_rng(7)
    f, t = rng.standard_normal(shape), rng.standard_normal(shape)
    dx = 0.5
    gf, gdx = db.gradient(spread_of_gradient, f, dx)
    for tf, tdx in [(np.zeros(shape), 1.0), (t, -0.3)]:
        h = 1e-6
        fd = (spread_of_gradient(f + h * tf, dx + h * tdx) - spread_of_gradient(f - h * tf, dx - h * tdx)) / (2 * h)
        tangent = db.jvp(spread_of_gradient, (f, dx), (tf, tdx))[1]
        np.testing.assert_allclose(tangent, fd, rtol=1e-6)
        np.testing.assert_allclose(tangent, np.sum(gf * tf) + gdx * tdx, rtol=1e-10)
