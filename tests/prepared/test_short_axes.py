"""Regions summed along axes whose call ends in short axes (`axis_sums.short_axes_first`): ``pos[:, None] - pos[None]``
of atoms in 3-d, a mixture's ``X[:, None, :] - means[None]``.  Their runners compete under a
`kernels.BackendChoice`; each candidate (rows, whole arrays, and both with the short axes moved,
`axis_sums.axis_sum_moved`) is forced in turn here and its gradient checked against the unfused program, JAX, and
for drawn shapes (broadcasting along every axis, a summed axis of one) against the unfused program."""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast import axis_sums, regions
from dualbroadcast.axis_sums import short_axes_first
from dualbroadcast.kernels import Bucket

from .test_forward_regions import _program, _unfused

replay = importlib.import_module("dualbroadcast.replay")
region_runners = importlib.import_module("dualbroadcast.region_runners")
replay_forward = importlib.import_module("dualbroadcast.replay_forward")
replay_backward = importlib.import_module("dualbroadcast.replay_backward")
jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def test_the_short_trailing_axes_move_before_the_last_long_one():
    assert short_axes_first((1500, 1500, 3)) == (0, 2, 1)
    assert short_axes_first((20000, 4, 2)) == (1, 2, 0)
    assert short_axes_first((64, 32, 100, 3, 2)) == (0, 1, 3, 4, 2)
    assert short_axes_first((100, 100)) is None  # nothing short
    assert short_axes_first((3, 2)) is None  # nothing long
    assert short_axes_first((100, 1)) is None  # nothing to move


def pair_energy(xp):
    def f(pos):
        d = pos[:, None] - pos[None]
        return 0.5 * xp.sum(1.0 / xp.sqrt(xp.sum(d**2, axis=-1) + 0.01))
    return f


def mixture_distances(xp):
    def f(means, X):
        squared = xp.sum((X[:, None, :] - means[None, :, :]) ** 2, axis=2)
        return xp.sum(xp.exp(-0.5 * squared) * xp.arange(squared.shape[1]))
    return f


def mean_over_the_short_axis(xp):
    def f(a, w):
        return xp.sum(xp.cos(xp.mean(a * w, axis=-1, keepdims=True)) * a[..., :1])
    return f


rng = np.random.default_rng(0)
MODELS = [
    (pair_energy, (rng.uniform(0, 10, (150, 3)),), (0,)),
    (mixture_distances, (rng.standard_normal((4, 2)), rng.standard_normal((3000, 2))), (0, 1)),
    (mean_over_the_short_axis, (rng.standard_normal((40, 160, 3)), rng.standard_normal(3)), (0, 1)),
]


def _axis_runners(program):
    """The runners `region_runners.axis_region_runner` made for the program's regions summed along axes."""
    return [made[0] for (step, *kind), made in program.runners.items()
            if type(kind[0]) is bool and step.region is not None and step.region.axes is not None]


def _lower_chosen_min(patch):
    """Per-call backend choices from one element, in every module that reads `region_runners.CHOSEN_MIN`."""
    for module in (replay, region_runners, replay_forward):
        patch.setattr(module, "CHOSEN_MIN", 1)


def _force(choice, name):
    """Every size of a `kernels.BackendChoice` on ``name`` from now on (never re-timed)."""
    for size in list(choice.buckets):
        choice.buckets[size] = forced = Bucket(name, [n for n in choice.kernel.runners if n != name])
        forced.wait = 1 << 40


def _each_candidate(prog, args):
    """The gradient of ``prog`` at ``args`` with each candidate of each axis region's runner forced in turn, the
    fused plan forced: (region, candidate) -> the gradients as a tuple."""
    program = _program(prog)
    if program.plans:
        for choice in program.plans.values():
            _force(choice, "fused")
    results = {}
    for k, runner in enumerate(_axis_runners(program)):
        for name in runner.choice.kernel.runners:
            _force(runner.choice, name)
            g = prog(*args)
            results[k, name] = g if isinstance(g, tuple) else (g,)
    return results


def _compare(results, expected, positions, rtol=1e-12):
    for grads in results.values():
        for k in positions:
            np.testing.assert_allclose(grads[k], expected[k], rtol=rtol, atol=rtol * np.max(np.abs(expected[k])))


def _cut_but(f, positions):
    return lambda *a: f(*[x if k in positions else db.cut(x) for k, x in enumerate(a)])


@pytest.fixture
def small_regions(monkeypatch):
    """Regions and per-call choices from one element (the models are small), buffers on one thread."""
    monkeypatch.setattr(regions, "BROADCAST_MIN", 1)
    _lower_chosen_min(monkeypatch)


@pytest.mark.parametrize(("model", "args", "positions"), MODELS, ids=[m[0].__name__ for m in MODELS])
def test_every_candidate_gives_the_unfused_gradient_and_jax(small_regions, model, args, positions):
    f = _cut_but(model(np), positions)
    prog = db.prepare_gradient(f, *args)
    program = _program(prog)
    names = {name for runner in _axis_runners(program) for name in runner.choice.kernel.runners}
    assert {region_runners.SHORT_AXES_FIRST, region_runners.SHORT_AXES_FIRST_BLOCKED} <= names
    _, (_, expected) = _unfused(f, *args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    _compare(_each_candidate(prog, args), expected, positions)
    reference = jax.grad(model(jnp), argnums=positions)(*map(jnp.asarray, args))
    for k, e in zip(positions, reference):
        np.testing.assert_allclose(expected[k], np.asarray(e), rtol=1e-11, atol=1e-11 * np.max(np.abs(e)))
    value, _ = prog.value_and_gradient(*args)
    np.testing.assert_allclose(value, model(np)(*args), rtol=1e-12)


def test_a_partial_negating_another_is_computed_once(small_regions):
    """∂(a - b)²/∂b is -∂/∂a: the runners compute one partial, the backward pass one product with the cotangent."""
    (pos,) = MODELS[0][1]
    prog = db.prepare_gradient(pair_energy(np), pos)
    program = _program(prog)
    (step,) = [s for s in program.steps if getattr(s, "region", None) is not None and s.region.axes is not None]
    shapes = [program.shape_of(step.refs[i]) for i in step.active]
    assert step.region.axes.sharing(step.kernel.outputs[1:], shapes) == [(0, 1), (0, -1)]
    assert sum(f"q{step.out}_0 = " in line for line in program.source.split("\n")) == 3  # run, gradient, one


def test_negates_by_form():
    from dualbroadcast.expr import Graph

    graph = Graph()
    x, y = graph.input(), graph.input()
    d = x - y
    assert axis_sums.negates(-d, d) and axis_sums.negates(d, -d)
    assert axis_sums.negates((-d) + (-d), d + d) and axis_sums.negates(x * (-d), x * d)
    assert axis_sums.negates(-d / x, d / x)
    assert axis_sums.negates(-2.0, 2.0) and not axis_sums.negates(2.0, 2.0)
    assert not axis_sums.negates(d + d, d + d) and not axis_sums.negates(y - x, x - y)  # (equal, but not by form)
    assert not axis_sums.negates((-d) * (-d), d * d)


@st.composite
def broadcast_shapes(draw):
    """The shapes of two arrays broadcast to (n, m, k) with k short, each of its axes maybe one, and a summed axis."""
    call = (draw(st.integers(1, 40)), draw(st.integers(1, 40)), draw(st.integers(1, 5)))
    shapes = []
    for dropped in (0, draw(st.integers(0, 2))):  # the second's leading ones maybe dropped
        ones = draw(st.lists(st.booleans(), min_size=3, max_size=3))
        shape = tuple(1 if one else n for one, n in zip(ones, call))
        shapes.append(shape[dropped:] if set(shape[:dropped]) <= {1} else shape)
    axis = draw(st.sampled_from([-1, 1, 0, (0, 2)]))
    return shapes, axis, draw(st.booleans())


TERMS = [  # elementwise chains of two broadcast arrays; the first two have partials negating each other
    lambda a, b: (a - b) ** 2,
    lambda a, b: np.exp(-((a - b) ** 2)),
    lambda a, b: np.tanh(a - 2.0 * b) ** 2 + a * b,
]


@settings(max_examples=30, deadline=None)
@given(broadcast_shapes(), st.sampled_from(TERMS), st.integers(0, 2**32 - 1))
def test_drawn_broadcasts_summed_along_axes(case, term, seed):
    (shape_a, shape_b), axis, keepdims = case
    rng = np.random.default_rng(seed)
    a = np.round(rng.uniform(-1, 1, shape_a) * 4) / 4  # ties and zeros
    b = np.round(rng.uniform(-1, 1, shape_b) * 4) / 4

    def f(a, b):
        s = np.sum(term(a, b), axis=axis, keepdims=keepdims)
        return np.sum(np.sin(s) * (1 + np.arange(s.size).reshape(s.shape)))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(regions, "BROADCAST_MIN", 1)
        _lower_chosen_min(patch)
        prog = db.prepare_gradient(f, a, b)
        _, expected = _unfused(f, a, b)[1]
        _compare(_each_candidate(prog, (a, b)), expected, (0, 1))


EXTREMES = [(np.max, -1, True), (np.min, 1, False), (np.amax, (1,), False)]


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 60), st.integers(2, 15), st.sampled_from(EXTREMES), st.integers(0, 2**32 - 1))
def test_an_extreme_along_a_short_last_axis_by_columns(rows, columns, extreme, seed):
    """np.max / np.min along a short last axis run by columns (`replay_forward._extreme_by_columns`, its pullback): the
    gradient as the tape's (ties share the cotangent equally: many ties here, and NaN; bit for bit but for a sum over
    rows), and as JAX's."""
    func, axis, keepdims = extreme
    rng = np.random.default_rng(seed)
    a = np.round(rng.uniform(-1, 1, (rows, columns)) * 2) / 2
    b = np.round(rng.uniform(-1, 1, columns) * 2) / 2
    weights = rng.standard_normal((rows, 1) if keepdims else rows)

    def model(xp, func):
        def f(a, b):
            return xp.sum(func(a * 2.0 + b, axis=axis, keepdims=keepdims) * weights)
        return f

    calls = []
    with pytest.MonkeyPatch.context() as patch:
        _lower_chosen_min(patch)
        for module, name in ((replay_forward, "_extreme_by_columns"), (replay_backward, "extreme_pullback_by_columns")):
            original = getattr(module, name)
            patch.setattr(module, name,
                          lambda *args, original=original, name=name: calls.append(name) or original(*args))
        f = model(np, func)
        prog = db.prepare_gradient(f, a, b)
        value, grads = prog.value_and_gradient(a, b)
        again = prog(a, b)
    assert {"_extreme_by_columns", "extreme_pullback_by_columns"} <= set(calls)
    expected_value, expected = db.value_and_gradient(f, a, b)
    np.testing.assert_allclose(value, expected_value, rtol=1e-12, atol=1e-12)  # (its sum: a kernel of the program)
    for got in (grads, again):
        _as_the_tape(got, expected)
    jax_func = {np.max: jnp.max, np.min: jnp.min, np.amax: jnp.max}[func]
    for g, e in zip(grads, jax.grad(model(jnp, jax_func), argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-12, atol=1e-12)
    a[0, 0] = np.nan  # NaN propagates to the extreme; its row's gradient as the tape gives it
    with np.errstate(invalid="ignore"):
        _as_the_tape(prog(a, b), db.gradient(f, a, b))


def _as_the_tape(got, expected):
    """``a``'s gradient bit for bit the tape's; ``b``'s, summed over the rows (by columns:
    `replay_forward.unbroadcast_short_axes`),
    up to rounding."""
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-14, atol=1e-14 * np.max(np.abs(expected[1])))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(1, 300), st.integers(0, 3),
       st.sampled_from([np.float64, np.float32, np.complex128]), st.integers(0, 2**32 - 1))
def test_unbroadcast_by_columns_is_unbroadcast(trailing, rows, ones, dtype, seed):
    """`replay_forward.unbroadcast_short_axes` (what generated code calls) sums back to a shape as
    `pullbacks.unbroadcast` does, by
    columns where the kept trailing axes are short: the same up to rounding, for leading axes dropped or kept as
    ones and trailing axes summed too."""
    from dualbroadcast.pullbacks import unbroadcast

    rng = np.random.default_rng(seed)
    g = rng.standard_normal((rows, *trailing)).astype(dtype)
    target = tuple(trailing)
    for k in range(min(ones, len(target))):  # some leading axes of the target summed too (ones)
        target = (1,) * (k + 1) + target[k + 1:]
    for shape in (target, (1, *target)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(replay, "CHOSEN_MIN", 1)
            got = replay_forward.unbroadcast_short_axes(g, shape)
        expected = unbroadcast(g, shape)
        assert got.shape == expected.shape == shape and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                   atol=1e-4 if dtype == np.float32 else 1e-11)
