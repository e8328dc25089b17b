"""Forward regions of prepared programs (`dualbroadcast.regions`): elementwise steps feeding a sum, fused
into one kernel.  Each model is replayed fused and unfused (`FUSE_REGIONS` off), on every backend, and
checked against central differences; the tests also check which steps were fused, so that a model that
stopped being fused fails here instead of silently running the old way."""

import importlib

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels
from dualbroadcast.broadcast_pullbacks import unscaled_kernel
from dualbroadcast.kernels import BACKENDS
from dualbroadcast.program import KernelStep
from dualbroadcast.regions import FUSE_REGIONS

N = 70_000  # every backend eligible (numexpr, blocked over several blocks)


@pytest.fixture(params=BACKENDS)
def backend(request):
    kernels.set_backend(request.param)
    yield request.param
    kernels.set_backend(None)


def _program(prog):
    (programs,) = {id(v): v for v in prog.variants.values()}.values()
    return programs[-1]


def _unfused(f, *args):
    token = FUSE_REGIONS.set(False)
    try:
        prog = db.prepare_gradient(f, *args)
        return prog, prog.value_and_gradient(*args)
    finally:
        FUSE_REGIONS.reset(token)


def _as_tuple(g):
    """The gradients of the differentiated arguments (a cut one's is None)."""
    return tuple(a for a in (g if isinstance(g, tuple) else (g,)) if a is not None)


def _central_difference(f, args, grads, positions, rtol):
    """⟨∇f, v⟩ against (f(a + hv) - f(a - hv)) / 2h along a random direction in the differentiated arguments."""
    rng = np.random.default_rng(7)
    vs = [rng.standard_normal(np.shape(args[i])) for i in positions]
    h = 1e-6

    def at(sign):
        moved = list(args)
        for i, v in zip(positions, vs):
            moved[i] = np.asarray(args[i], np.float64) + sign * h * v
            moved[i] = float(moved[i]) if type(args[i]) is float else moved[i]
        return f(*moved)

    expected = (at(1) - at(-1)) / (2 * h)
    got = sum(np.sum(np.asarray(g, np.float64) * v) for g, v in zip(grads, vs))
    assert np.isclose(got, expected, rtol=rtol, atol=rtol * 1e-3 * abs(f(*args)) + 1e-12), (got, expected)


def _check(f, args, positions=(0,), regions=1, fused_steps=None, rtol=1e-10):
    """f prepared, its forward regions counted, replayed (value and gradient, gradient alone, into out=)
    against the unfused program and central differences."""
    prog = db.prepare_gradient(f, *args)
    value, grads = prog.value_and_gradient(*args)
    program = _program(prog)
    assert len(program.regions) == regions
    if fused_steps is not None:
        assert [len(r.steps) for r in program.regions] == fused_steps
    _, (expected_value, expected) = _unfused(f, *args)
    float32 = any(getattr(a, "dtype", None) == np.float32 for a in args)
    tol = 1e-5 if float32 else 1e-12
    assert np.result_type(value) == np.result_type(expected_value)
    np.testing.assert_allclose(value, expected_value, rtol=tol, atol=1e-3 if float32 else 0)  # float32: sums of 7e4
    for g, e in zip(_as_tuple(grads), _as_tuple(expected)):
        assert np.result_type(g) == np.result_type(e) and np.shape(g) == np.shape(e)
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * 10 * np.max(np.abs(e)))  # sums in another order
    again = prog(*args)  # the gradient alone (a region's kernel maybe without its value)
    for g, e in zip(_as_tuple(again), _as_tuple(grads)):
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * 10 * np.max(np.abs(e)))
    kept = [np.array(g) for g in _as_tuple(again)]
    moved = [a * 0.5 if k in positions else a for k, a in enumerate(args)]
    prog(*moved), prog.value_and_gradient(*moved)  # the program's buffers are reused: a returned gradient is not one
    for g, e in zip(_as_tuple(again), kept):
        np.testing.assert_array_equal(g, e)
    targets = [np.empty_like(g) for g in _as_tuple(grads)]
    out = tuple(targets.pop(0) if a is not None else None for a in (grads if isinstance(grads, tuple) else (grads,)))
    prog(*args, out=out if isinstance(grads, tuple) else out[0])
    for g, e in zip(_as_tuple(out), _as_tuple(grads)):
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * 10 * np.max(np.abs(e)))
    if not float32:
        _central_difference(f, args, _as_tuple(grads), positions, rtol=1e-6)
    return prog, program


def _x(n=N, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, n)


def test_a_chain_feeding_a_sum_is_one_kernel(backend):
    def eam(x):
        p = np.sum(np.exp(-3 * (x + 1)))
        return p**2 + p**3 + p**4 / 4

    _, program = _check(eam, (_x(),), fused_steps=[4])
    (kernel,) = [s for s in program.steps if type(s) is KernelStep]
    assert kernel.region is program.regions[0] and kernel.active == [0]


def test_a_diamond_with_a_shared_subexpression(backend):
    def f(x):
        a = x * x + 1
        return np.sum(np.log(a) * np.sqrt(a))

    _check(f, (_x(),), fused_steps=[6])


def test_an_intermediate_read_outside_the_region_is_its_input(backend):
    def f(x):
        a = np.sin(x)
        return np.sum(a * x) + np.max(a)  # np.max reads a: the region is a * x and its sum, a an input

    _, program = _check(f, (_x(),), fused_steps=[2])
    assert sorted(program.regions[0].active) == [0, 1]


def test_an_intermediate_used_twice_inside_the_region(backend):
    def f(x):
        a = np.cos(x)
        return np.sum(a * a + 2 * a)

    _check(f, (_x(),), fused_steps=[5])


def test_small_arguments_broadcast_their_partials_reduced(backend):
    def f(x, w, c):
        return np.sum(np.tanh(x * w + c))

    x = _x().reshape(-1, 7)
    w = np.linspace(0.5, 1.5, 7)
    _check(f, (x, w, 0.3), positions=(0, 1, 2), fused_steps=[4])


def test_float32_keeps_its_dtype(backend):
    x = _x().astype(np.float32)
    _check(lambda x: np.sum(x**2), (x,), fused_steps=[2])
    _check(lambda x: np.sum(np.arctan2(x, 2)), (x,), fused_steps=[2])


def test_constants_in_the_region(backend):
    k = np.linspace(-1, 2, N)

    def f(x):
        return np.sum(np.exp(x) * k + np.float64(0.5) * x - 0.25)

    _, program = _check(f, (_x(),), fused_steps=[6])
    assert len(program.regions[0].refs) == 3  # x, the array k and the NumPy scalar (as db.sum); 0.25 a literal


def test_integer_and_boolean_inputs(backend):
    def f(x, mask, n):
        return np.sum(x * mask + n * x * x)

    x = _x()
    mask, n = db.cut(x > 0), db.cut(np.arange(N) % 5)
    _, program = _check(f, (x, mask, n), fused_steps=[5])
    assert program.regions[0].active == [0]


def test_where_and_a_comparison_inside(backend):
    def f(x):
        return np.sum(np.where(x > 0, x**2, -x))

    _check(f, (_x(),), fused_steps=[5])


def test_a_guard_on_a_region_value_stops_the_region(backend):
    def f(x):
        b = x * 3
        c = np.sin(b) if b[0] > 0 else np.cos(b)  # the guard reads b (through b[0]): b is the region's input
        return np.sum(c * x)

    x = _x()
    x[0] = abs(x[0])
    prog, _ = _check(f, (x,), fused_steps=[3])
    y = x.copy()
    y[0] = -y[0]
    np.testing.assert_allclose(prog(y), db.gradient(f, y), rtol=1e-12)  # the other branch: recorded anew
    assert prog.recordings == 2


def test_several_regions_and_a_sum_of_a_leaf_alone():
    def f(x, y):
        return np.sum(np.exp(x)) * np.sum(y * y) + np.sum(x)  # np.sum(x) alone: no elementwise step, kept

    _check(f, (_x(), _x(seed=1)), positions=(0, 1), regions=2)


def test_a_region_whose_value_is_the_result():
    _check(lambda x: np.sum(np.cos(x) * x), (_x(100),), fused_steps=[3])


def test_python_float_arguments_in_a_region():
    def f(x, s):
        return np.sum(np.exp(s * x))

    _check(f, (_x(50), 0.7), positions=(0, 1), fused_steps=[3])


def test_a_complex_or_mixed_precision_region_stays_as_recorded():
    x = _x(10)
    prog = db.prepare_gradient(lambda x: np.sum(np.real(np.exp(1j * x))), x)
    assert _program(prog).regions == []
    a = x.astype(np.float32)
    prog = db.prepare_gradient(lambda s, a: np.sum((s - 1.0) * a), 0.1, a)
    assert _program(prog).regions == []


def test_the_gradient_alone_skips_the_sums_value():
    x = _x(1000).astype(np.float32)
    prog = db.prepare_gradient(lambda x: np.sum(np.arctan2(x, 2)), x)
    program = _program(prog)
    out = program.regions[0].out
    gradient_source = program.source[program.source.index("def gradient"):]
    run_source = program.source[:program.source.index("def gradient")]
    assert f"v{out}" in run_source and f"v{out}" not in gradient_source
    np.testing.assert_allclose(prog(x), 2 / (x * x + 4), rtol=1e-6)
    value = prog.value_and_gradient(x)[0]
    np.testing.assert_allclose(value, np.sum(np.arctan2(x, 2), dtype=np.float64), rtol=1e-5)


def test_the_gradient_alone_keeps_a_sum_the_backward_pass_reads():
    def eam(x):
        p = np.sum(np.exp(-3 * (x + 1)))
        return p**2 + p**3

    x = _x(1000)
    program = _program(db.prepare_gradient(eam, x))
    gradient_source = program.source[program.source.index("def gradient"):]
    assert f"v{program.regions[0].out}, " in gradient_source  # P is read by E's adjoint


# --- db.explain of a prepared program ------------------------------------------------------------------------------
def test_explain_shows_the_eam_region_and_the_steps_the_gradient_leaves_out():
    def eam(x):
        p = np.sum(np.exp(-3 * (x + 1)))
        return p**2 + p**3 + p**4 / 4

    x = _x(1000)
    prog = db.prepare_gradient(eam, x)
    report = db.explain(prog, x)
    (region,) = report.regions
    assert region.fused == ("np.add", "np.multiply", "np.exp", "np.sum") and region.active == region.width == 1
    assert region.gradient_alone == "runs"  # P is read by E's adjoint
    assert report.recorded == 10 and len(report.steps) == 7
    assert [s.name for s in report.removed] == ["np.power", "np.power", "np.add", "np.power", "np.divide", "np.add"]
    assert report.value == pytest.approx(eam(x))
    text = str(report)
    assert "region(np.add, np.multiply, np.exp, np.sum)" in text and "forward region" in text
    assert "1 forward region(s) fusing 4 steps; the gradient alone leaves out 6 step(s)" in text
    assert "<table>" in report._repr_html_()


def test_explain_shows_a_region_computed_without_its_value():
    x = _x(1000).astype(np.float32)
    report = db.explain(db.prepare_gradient(lambda x: np.sum(np.arctan2(x, 2)), x), x)
    (region,) = report.regions
    assert region.gradient_alone == "without value" and region.fused == ("np.arctan2", "np.sum")
    assert "computes 1 region(s) without their value" in str(report)


def test_explain_of_the_variant_the_arguments_take():
    def f(x):
        return np.sum(np.exp(x)) if np.sum(x) > 0 else np.sum(x * x * x)

    prog = db.prepare_gradient(f, np.ones(10))
    assert db.explain(prog, np.ones(10)).regions[0].fused == ("np.exp", "np.sum")
    assert db.explain(prog, -np.ones(10)).regions[0].fused == ("np.multiply", "np.multiply", "np.sum")
    assert prog.recordings == 2


def test_a_region_of_constants_alone_and_one_whose_sum_only_the_value_reads():
    d = np.random.default_rng(3).random(N)

    def f(x, d):
        return np.sum(np.exp(d) * 2) * np.sum(x * x)  # the first region has no active input; the second's sum
        # is read only by the product's value (its adjoint in x reads the first sum, not the second)

    _, program = _check(f, (_x(), db.cut(d)), regions=2, fused_steps=[3, 2])
    assert [r.active for r in program.regions] == [[], [0]]
    report = db.explain(db.prepare_gradient(f, _x(), db.cut(d)), _x(), db.cut(d))
    assert [s.gradient_alone for s in report.regions] == ["runs", "without value"]


# --- regions feeding another step than a sum: a broadcast kernel, its partials at the value's shape --------------
def _layer_args(dtype=np.float64):
    rng = np.random.default_rng(5)
    return (rng.standard_normal((2000, 10)).astype(dtype), rng.standard_normal((10, 20)).astype(dtype) / 3,
            rng.standard_normal(20).astype(dtype))


def test_a_region_feeding_a_matrix_product(backend):
    def f(x, W, b):
        h = np.tanh(x @ W + b) * 2.0  # add, tanh, multiply: one broadcast kernel; its value read by a matmul
        return np.sum((h @ W.T) ** 2)

    _, program = _check(f, _layer_args(), positions=(0, 1, 2), regions=2, fused_steps=[3, 2])
    kernels = [s for s in program.steps if type(s) is KernelStep]
    assert [k.reduce for k in kernels] == [False, True] and len(kernels[0].active) == 2


def test_a_region_whose_value_is_read_twice_outside(backend):
    def f(x, W, b):
        h = np.exp(-np.abs(x @ W) * 0.5)
        return np.sum(h @ W.T) + np.max(h)

    _check(f, _layer_args(), positions=(0, 1), regions=1, fused_steps=[4])


def test_a_float32_region_feeding_a_matrix_product(backend):
    def f(x, W, b):
        return np.sum(np.sin(x @ W - b) * 3.0 @ W.T)

    _check(f, _layer_args(np.float32), positions=(0, 1, 2), regions=1, fused_steps=[3])


def test_small_values_are_not_fused_outside_a_sum():
    def f(x, W, b):
        h = np.tanh(x @ W + b) * 2.0
        return np.sum(h @ W.T)

    args = tuple(a[:10] if a.ndim == 2 and a.shape[0] == 2000 else a for a in _layer_args())
    assert _program(db.prepare_gradient(f, *args)).regions == []


# --- issue 18, per-call overhead: literal factors left to the cotangent; the choice per call ----------------------
FACTORED = [
    (lambda x: np.sum(np.exp(-3 * (x + 1))), -3),  # EAM's density: the partial exp(..)·-3 is computed as exp(..)
    (lambda x: np.sum(np.sin(x) * 2.5) ** 2, 2.5),
    (lambda x: np.sum(0.5 * (x * x)) + np.sum(x), 0.5),
    (lambda x: np.sum(np.sin(x) * np.cos(x)), None),  # no literal factor
    (lambda x: np.sum(np.exp(x) * -1.5) * np.sum(np.cos(x)), -1.5),  # two regions, one with a factor
]


@pytest.mark.parametrize(("n", "dtype"), [(1, np.float32), (100, np.float32), (1, np.float64), (7, np.float64),
                                          (100, np.float64), (N, np.float64)])  # (float32 sums of N: `_check`'s atol)
@pytest.mark.parametrize("k", range(len(FACTORED)))
def test_a_literal_factor_is_left_to_the_cotangent(k, n, dtype, backend):
    """A region's partials ``c·p`` (``c`` one Python number) computed as ``p``, ``c`` applied to the sum's
    cotangent: the unfused program's gradient (float32 stays float32), central differences."""
    f, factor = FACTORED[k]
    x = _x(n, seed=k).astype(dtype)
    _, program = _check(f, (x,), regions=len(program_regions(f, x)))
    scales = literal_factors(program)
    assert (factor in scales) if factor is not None else scales == [1] * len(scales)


def program_regions(f, x):
    return _program(db.prepare_gradient(f, x)).regions


def literal_factors(program):
    """The literal factors the summing kernels of ``program`` leave to their cotangents, per partial
    (`broadcast_pullbacks.unscaled_kernel`: 1 for a partial without one)."""
    return [c for step in program.steps if type(step) is KernelStep and step.reduce
            for c in (unscaled_kernel(step.kernel)[1] or [1] * len(step.active))]


def test_a_literal_factor_of_an_input_stays_in_the_kernel():
    """``sum(-3·(x·y))``: the partials ``-3·y`` and ``-3·x`` keep their factor, since without it each would be an
    input the kernel copies (no pass saved, `broadcast_pullbacks.unscaled_kernel`); the gradients are right either
    way."""
    def f(x, y):
        return np.sum(-3.0 * (x * y) + 0) ** 2

    _, program = _check(f, (_x(100), _x(100, seed=1)), positions=(0, 1))
    assert literal_factors(program) == [1, 1]


def test_a_region_chosen_per_call_gives_fresh_gradients_on_each_backend():
    """From `region_runners.CHOSEN_MIN` elements a region runs on the backend its `kernels.BackendChoice` picks: the
    same gradients on either, and a returned gradient is the caller's (the next call, on the other, keeps it)."""
    replay = importlib.import_module("dualbroadcast.replay")
    x = _x(replay.CHOSEN_MIN + 100)

    def f(x):
        return np.sum(np.exp(-0.5 * x * x) * x)

    prog, program = _check(f, (x,))
    choices = program.regions[0].choices
    assert set(choices) == {"value", "gradient alone"}
    kept = []
    for backend in ("blocked", "numpy", "blocked"):
        for choice in choices.values():
            (bucket,) = choice.buckets.values()
            bucket.backend, bucket.others, bucket.wait = backend, [b for b in ("blocked", "numpy") if b != backend], 99
        kept.append((prog(x), np.array(prog(x))))
        value, g = prog.value_and_gradient(x)
        np.testing.assert_allclose(value, f(x), rtol=1e-12)
        np.testing.assert_allclose(g, kept[-1][1], rtol=1e-12, atol=1e-15)
    for got, copy in kept:
        np.testing.assert_array_equal(got, copy)
