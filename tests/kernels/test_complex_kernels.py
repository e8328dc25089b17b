"""Holomorphic kernels of complex values on every backend: against the NumPy backend, against plain NumPy
differentiated in reverse mode, and against finite differences in x and y.

A drawn expression of one or two arguments (complex, or one complex and one real, complex64 or complex128)
with complex and real literals runs in ``db.broadcast``/``db.sum`` on a forced backend.  For the finite
differences the backends' size thresholds are lowered (`small_thresholds`), so arrays of a few elements
run blocked (over several blocks and chunks) and on numexpr, as large ones do.
"""

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import dualbroadcast as db
import dualbroadcast.kernels as kernels_module

from ..cases import broadcast_shapes

BACKENDS = ["numpy", "blocked", "numexpr"]

# Holomorphic templates; the arguments' real parts are in (0.5, 2), imaginary parts in (-1, 1), so that logs,
# roots and powers stay off their branch cuts and tan off its poles.
UNARY = [
    "np.exp({a})", "np.sin({a})", "np.cos({a})", "np.tan({a} / 2)", "np.sinh({a})", "np.cosh({a})",
    "np.tanh({a})", "np.log({a})", "np.log1p({a})", "np.log10({a} * {a} + 2)", "np.log2({a} + 1)",
    "np.sqrt({a})", "np.expm1({a})", "np.arccos({a} / 4)", "np.arccosh({a} + 2)", "np.arcsin({a} / 4)",
    "np.arctan({a} / 4)", "np.arcsinh({a})", "np.arctanh({a} / 4)", "({a}) ** 3", "({a}) ** 2.5",
    "np.reciprocal({a})", "np.square({a})", "(-{a})", "((1 - 2j) * {a})", "({a} + 0.5j)", "(2.5 * {a})",
]
# numexpr has no complex form of these, or one that loses digits (`derivatives.Facts.numexpr_complex`)
NUMEXPR_LACKS = ("arcsin", "arctan", "arcsinh", "arctanh", "reciprocal", "square")
BINARY = ["({a} + {b})", "({a} - {b})", "({a} * {b})", "({a} / ({b} * {b} + 3))", "({a} ** ({b} / 4))"]


@st.composite
def expressions(draw, names, depth=2):
    """A holomorphic expression of ``names`` (source text), each name used at least once."""
    if depth == 0:
        return draw(st.sampled_from(names))
    if len(names) == 2 and draw(st.booleans()):
        template = draw(st.sampled_from(BINARY))
        return template.format(a=draw(expressions(names[:1], depth - 1)), b=draw(expressions(names[1:], depth - 1)))
    inner = draw(expressions(names, depth - 1))
    for name in names:
        if name not in inner:
            inner = f"({inner} * {name})"
    return draw(st.sampled_from(UNARY)).format(a=inner)


def compile_function(source, names):
    namespace = {"np": np}
    exec(f"def f({', '.join(names)}):\n    return {source}\n", namespace)
    return namespace["f"]


def draw_value(draw, shape, dtype, rng):
    """Real parts in (0.5, 2), imaginary parts in (-1, 1) (none for a real dtype)."""
    value = rng.uniform(0.5, 2.0, shape)
    if np.dtype(dtype).kind == "c":
        value = value + 1j * rng.uniform(-1.0, 1.0, shape)
    value = np.asarray(value.astype(dtype))
    return value if shape else draw(st.sampled_from([value, value[()]]))  # a 0-d array or a NumPy scalar


@st.composite
def problems(draw, shapes=None):
    """``(source, f, args)``: the first argument complex, the second (if any) complex or real."""
    n = draw(st.integers(1, 2))
    names = ["a", "b"][:n]
    source = draw(expressions(names))
    precision = draw(st.sampled_from(["64", "32"]))
    dtypes = [np.complex128 if precision == "64" else np.complex64]
    if n == 2:
        dtypes.append(draw(st.sampled_from([dtypes[0], np.float64 if precision == "64" else np.float32])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shapes = shapes or broadcast_shapes(draw, n)
    args = [draw_value(draw, shape, dtype, rng) for shape, dtype in zip(shapes, dtypes)]
    note(f"f = {source}; " + ", ".join(f"{np.result_type(a)}{np.shape(a)}" for a in args))
    return source, compile_function(source, names), args


def projection(y, seed):
    """Re Σ w·y for complex weights w: a real scalar every real and imaginary part of ``y`` counts in."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(np.shape(y)) + 1j * rng.standard_normal(np.shape(y))
    return np.real(np.sum(y * w))


def tolerance(args):
    single = any(np.result_type(a) in (np.complex64, np.float32) for a in args)
    return 2e-4 if single else 1e-10


@pytest.fixture
def small_thresholds(monkeypatch):
    """Blocked kernels over blocks of 4 elements (from 8 on, several chunks from 16), numexpr from 1 element
    and summing over blocks of 4: the paths large arrays take, on arrays finite differences can afford."""
    monkeypatch.setattr(kernels_module, "BLOCK", 4)
    monkeypatch.setattr(kernels_module, "NUMEXPR_MIN", 1)
    monkeypatch.setattr(kernels_module, "NUMEXPR_BLOCK", 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_complex_kernel_matches_finite_differences_in_x_and_y(small_thresholds, backend, reduce, data):
    _, f, args = data.draw(problems())
    seed = data.draw(st.integers(0, 1000))
    kernel = db.sum if reduce else db.broadcast
    loss = lambda *a: projection(kernel(f, *a, backend=backend), seed)
    grads = db.gradient(loss, *args)
    grads = grads if len(args) > 1 else (grads,)
    for a, g in zip(args, grads):
        assert np.shape(g) == np.shape(a) and np.result_type(g) == np.result_type(a)
    db.check_gradient(loss, *args)


@pytest.mark.parametrize("backend", ["blocked", "numexpr"])
@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_complex_kernel_on_each_backend_gives_what_numpy_gives(small_thresholds, backend, reduce, data):
    """Values and gradients (complex and real arguments) against the NumPy backend and against plain NumPy
    differentiated in reverse mode; every array full-size, so the forced backend runs (unless numexpr lacks
    an operation for complex numbers: then it is NumPy's)."""
    shape = data.draw(st.sampled_from([(9,), (3, 7), (33,)]))
    source, f, args = data.draw(problems(shapes=[shape, shape]))
    seed = data.draw(st.integers(0, 1000))
    kernel = db.sum if reduce else db.broadcast
    rtol = tolerance(args)
    with db.kernel_log() as calls:
        value = kernel(f, *args, backend=backend)
    lacking = any(f"np.{name}(" in source for name in NUMEXPR_LACKS)
    assert calls[0].backend == ("numpy" if backend == "numexpr" and lacking else backend)
    reference = kernel(f, *args, backend="numpy")
    assert np.result_type(value) == np.result_type(reference)
    np.testing.assert_allclose(value, reference, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(value, np.sum(f(*args)) if reduce else f(*args), rtol=10 * rtol, atol=10 * rtol)
    on = db.gradient(lambda *a: projection(kernel(f, *a, backend=backend), seed), *args)
    numpy = db.gradient(lambda *a: projection(kernel(f, *a, backend="numpy"), seed), *args)
    plain = db.gradient(lambda *a: projection(np.sum(f(*a)) if reduce else f(*a), seed), *args)
    for got, want, reverse in zip(*[g if len(args) > 1 else (g,) for g in (on, numpy, plain)]):
        assert got.dtype == want.dtype == reverse.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1, np.max(np.abs(want))))
        np.testing.assert_allclose(got, reverse, rtol=10 * rtol, atol=10 * rtol * max(1, np.max(np.abs(want))))


@pytest.mark.parametrize("func", [np.arcsin, np.arctan, np.arcsinh, np.arctanh])
def test_numexpr_is_no_candidate_for_complex_functions_it_computes_inexactly(small_thresholds, func):
    """numexpr's complex arcsin/arctan/arcsinh/arctanh lose digits near 0 (up to 1e-4 relative): a kernel
    with one runs on NumPy, whose value it then gives exactly."""
    z = np.array([1e-12 + 1e-12j, 3e-11 - 1e-10j, 0.3 + 0.2j, -1e-9j])
    with db.kernel_log() as calls:
        value = db.broadcast(func, z, backend="numexpr")
    assert calls[0].backend == "numpy"
    np.testing.assert_array_equal(value, func(z))


def test_numexpr_runs_a_complex_kernel_of_functions_it_has(small_thresholds):
    z = np.linspace(0.5, 2.0, 8) + 0.3j
    h = lambda a: np.exp(a) * np.sin(a) / (1 + a * a) + np.sqrt(a) ** 1.5 - np.log(a)
    with db.kernel_log() as calls:
        value = db.broadcast(h, z, backend="numexpr")
    assert calls[0].backend == "numexpr"
    np.testing.assert_allclose(value, h(z), rtol=1e-13)


@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
def test_the_measured_choice_takes_every_backend_for_a_large_complex_kernel(reduce):
    """At full size (no lowered thresholds) each backend is a candidate, and the automatic choice gives the
    same value and gradient as each forced one."""
    n = 2 * kernels_module.BLOCK + 5
    rng = np.random.default_rng(3)
    z = rng.uniform(0.5, 2, n) + 1j * rng.uniform(-1, 1, n)
    x = rng.uniform(-1, 1, n)
    h = lambda a, r: np.exp(a * r) * np.cos(a) + 2j * r
    kernel = db.sum if reduce else db.broadcast
    loss = lambda backend: lambda z, x: projection(kernel(h, z, x, backend=backend), 5)
    with db.kernel_log() as calls:
        results = {b: db.value_and_gradient(loss(b), z, x) for b in [None, *BACKENDS]}
    assert [c.backend for c in calls[1:]] == BACKENDS
    value, (gz, gx) = results["numpy"]
    assert gz.dtype == np.complex128 and gx.dtype == np.float64
    for v, (hz, hx) in results.values():
        np.testing.assert_allclose(v, value, rtol=1e-12)
        np.testing.assert_allclose(hz, gz, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(hx, gx, rtol=1e-12, atol=1e-12)


def plan_kernel(a, b):
    return np.exp(a * b) + a * a * (0.5 - 2j)


@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
def test_a_repeated_complex_kernel_takes_the_cached_plan_with_new_values(reduce, monkeypatch):
    """Complex arrays of one shape and dtype: the second and third calls take the cached plan (the kernel
    called without building a key), and give what plain NumPy in reverse mode gives."""
    broadcast_module = sys.modules["dualbroadcast.broadcast"]  # not db.broadcast, the function
    runs, run = [], broadcast_module._Plan.run

    def spy(self, f, args):
        runs.append(run(self, f, args))
        return runs[-1]

    monkeypatch.setattr(broadcast_module._Plan, "run", spy)
    kernel = db.sum if reduce else db.broadcast
    rng = np.random.default_rng(11)
    for _ in range(3):
        z, w = (rng.standard_normal(30) + 1j * rng.standard_normal(30) for _ in range(2))
        got = db.gradient(lambda z, w: projection(kernel(plan_kernel, z, w), 2), z, w)
        want = db.gradient(lambda z, w: projection(np.sum(plan_kernel(z, w)) if reduce else plan_kernel(z, w), 2), z, w)
        for g, e in zip(got, want):
            assert g.dtype == np.complex128
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    assert sum(result is not None for result in runs) >= 2
