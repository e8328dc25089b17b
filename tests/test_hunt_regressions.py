"""Wrong gradients and crashes found by comparing every mode on small user programs (gradient, prepared
replay and its ``out=``, jvp, hvp, prepare_hvp, hessian), each pinned here with the program that showed it."""

import importlib
import math
import re

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import kernels

replay = importlib.import_module("dualbroadcast.replay")


class FakeClock:
    """``kernels.clock``: seconds pass only when a region's runner runs, by the scripted cost per element."""

    def __init__(self, cost):
        self.now, self.cost = 0.0, cost

    def __call__(self):
        return self.now


@pytest.fixture
def whole_arrays_win(monkeypatch):
    """Every prepared region with two candidate runners (blocked, whole arrays) chooses whole arrays (the
    program's plan kept fused: tests/prepared/test_plan_choice.py tests that choice)."""
    monkeypatch.setattr(replay, "PLAN_MARGIN", math.inf)
    fake = FakeClock({"numpy": 1e-9, "blocked": 4e-9, kernels.ONE_THREAD: 4e-9})
    monkeypatch.setattr(kernels, "clock", fake)
    original = replay.Runners.run

    def run(self, backend, values, shape, size, active_shapes):
        result = original(self, backend, values, shape, size, active_shapes)
        fake.now += fake.cost.get(backend, 0.0) * size  # (a plan's run: the regions it runs cost)
        return result

    monkeypatch.setattr(replay.Runners, "run", run)
    monkeypatch.setattr(kernels, "THREADS", 2)


def _programs(n):
    rng = np.random.default_rng(0)
    w, c = rng.standard_normal(n), rng.uniform(0.5, 1.5, n)
    return {  # each a region not feeding a whole sum (a db.broadcast kernel of its own), read by a dot
        "one input": (lambda x: np.dot(np.exp(x * 0.3) * 2.0, w), 1),
        "read twice": (lambda x: (lambda r: np.sum(r) * np.dot(r, c))(np.exp(-x * 0.3)), 1),
        "two inputs": (lambda x, y: np.dot(np.exp(x * 0.3) * y, w) + np.dot(x, w), 2),
        "hvp's region": (lambda x: np.sum(-1 * np.exp(x * 0.1)), 1),
    }


def _chosen_backends(prog, n):
    """The backends the regions of a prepared program run calls of ``n`` elements on now."""
    regions = [r for program in next(iter(prog.variants.values())) for r in program.regions]
    return [choice.chosen(n) for r in regions for choice in r.choices.values()]


@pytest.mark.parametrize("name", list(_programs(1)))
def test_a_broadcast_region_run_on_whole_arrays(whole_arrays_win, name):
    """A forward region of at least `regions.BROADCAST_MIN` elements that is not summed, on one chunk, where whole
    arrays time fastest: its runner returned NumPy's flat ``(value, partial, ...)``, read as ``(value, partials)``;
    one active input's partials were then the partial array itself and ``partials[0]`` its first element, so the
    gradient was that number times the cotangent (silently, through ``out=``) or a TypeError."""
    n = replay.CHOSEN_MIN + 1000  # one chunk of two threads: whole arrays are a candidate
    f, arity = _programs(n)[name]
    rng = np.random.default_rng(1)
    args = [rng.uniform(-1, 1, n) for _ in range(arity)]
    expected = db.gradient(f, *args)
    expected = expected if arity > 1 else (expected,)
    prog = db.prepare_gradient(f, *args)
    assert "numpy" in _chosen_backends(prog, n)
    got = prog(*args)
    out = [np.empty(n) for _ in range(arity)]
    prog(*args, out=out if arity > 1 else out[0])
    value, again = prog.value_and_gradient(*args)
    np.testing.assert_allclose(value, f(*args), rtol=1e-12)
    for g in zip(expected, got if arity > 1 else (got,), out, again if arity > 1 else (again,)):
        for a in g[1:]:
            np.testing.assert_allclose(a, g[0], rtol=1e-12, atol=1e-15)
    v = rng.standard_normal(n)
    if arity == 1:
        np.testing.assert_allclose(db.prepare_hvp(f, *args)(args[0], v), db.hvp(f, args[0], v), rtol=1e-10,
                                   atol=1e-15)


def _gradient_inside(how):
    """``⟨∇f(x), v⟩ / 2`` with the gradient taken inside by ``how``: a function whose Hessian holds third
    derivatives of f."""
    def f(x):
        return np.sum(np.exp(-x) * x ** 2) + np.sum(x) ** 2 + np.sum(np.sin(x) ** 3)

    x0 = np.linspace(0.1, 1, 5)
    inner = {"gradient": lambda x: db.gradient(f, x), "value_and_gradient": lambda x: db.value_and_gradient(f, x)[1],
             "prepared": db.prepare_gradient(f, x0)}[how]
    v = np.cos(np.arange(5.0))
    return (lambda x: np.dot(inner(x), v) * 0.5), x0, v


@pytest.mark.parametrize("how", ["gradient", "value_and_gradient", "prepared"])
def test_hvp_of_a_function_taking_a_gradient(how):
    """`hvp` of a function that takes a gradient inside: reverse over forward meets forward over reverse, which
    raised an ArgumentTypeError telling the user to call db.hvp; now hvp falls back to reverse over reverse, as it
    does where forward mode cannot go, and gives what the gradient of ⟨∇g, v⟩ gives; and so does forward over
    reverse, asked directly."""
    g, x, v = _gradient_inside(how)
    expected = db.gradient(lambda x: np.dot(db.gradient(g, x), v), x)
    np.testing.assert_allclose(db.hvp(g, x, v), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(db.prepare_hvp(g, x)(x, v), expected, rtol=1e-12, atol=1e-14)
    forward_over_reverse = db.jvp(lambda x: db.gradient(g, x), (x,), (v,))[1]  # once an error
    np.testing.assert_allclose(forward_over_reverse, expected, rtol=1e-12, atol=1e-14)


def test_hvp_of_a_gradient_inside_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    g, x, v = _gradient_inside("gradient")

    def g_jax(z):
        return 0.5 * jnp.dot(jax.grad(lambda y: jnp.sum(jnp.exp(-y) * y ** 2) + jnp.sum(y) ** 2
                                      + jnp.sum(jnp.sin(y) ** 3))(z), v)

    expected = np.asarray(jax.jvp(jax.grad(g_jax), (x,), (v,))[1])
    np.testing.assert_allclose(db.hvp(g, x, v), expected, rtol=1e-12, atol=1e-14)


C3 = np.array([1.0, 2.0, 3.0])
SELECTIONS = {  # values chosen by data, broadcast against C3 when one is chosen
    "x[x > 0]": lambda x: np.sum(np.sin(x[x > 0] * C3)),
    "np.compress": lambda x: np.sum(np.sin(np.compress(x > 0, x) * C3)),
    "np.extract": lambda x: np.sum(np.sin(np.extract(x > 0, x) * C3)),
    "np.take of np.flatnonzero": lambda x: np.sum(np.sin(np.take(x, np.flatnonzero(x > 0)) * C3)),
    "a mask of db.cut(x)": lambda x: np.sum(np.sin(x[db.cut(x) > 0] * C3)),
    "x[np.nonzero(x > 0)]": lambda x: np.sum(np.sin(x[np.nonzero(x > 0)] * C3)),
}
ONE, THREE = np.array([0.5, -1.0, -1.0]), np.array([0.5, 0.7, 0.2])


@pytest.mark.parametrize("name", list(SELECTIONS))
@pytest.mark.parametrize("recorded, replayed", [(ONE, THREE), (THREE, ONE)], ids=["one then three", "three then one"])
def test_a_selection_whose_size_changes_is_recorded_anew(name, recorded, replayed):
    """A prepared program is compiled for the shapes it recorded.  Recorded where one element is selected (so
    broadcast against C3, its pullback a sum over that axis) and replayed where three are, the gradient was
    silently that sum in each selected element; the other way round a ValueError.  A result whose shape
    depends on values is now guarded: another shape is a new case, recorded anew."""
    f = SELECTIONS[name]
    prog = db.prepare_gradient(f, recorded)
    for x in (replayed, recorded, replayed):
        np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-13, atol=1e-15)
        out = np.empty(3)
        prog(x, out=out)
        np.testing.assert_allclose(out, db.gradient(f, x), rtol=1e-13, atol=1e-15)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(db.prepare_hvp(f, recorded)(replayed, v), db.hvp(f, replayed, v), rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("n", [6, replay.CHOSEN_MIN + 1000])
def test_a_region_over_a_selection_whose_size_changes(n):
    """A forward region over ``x[x > 0]`` is a kernel bound to the recorded size: a replay selecting another
    number of elements raised a ValueError (operands could not be broadcast); now it is recorded anew."""
    def f(x):
        return np.sum(x[x > 0] ** 2) + np.sum(np.exp(-x[x > 0]))

    rng = np.random.default_rng(6)
    x0 = rng.standard_normal(n)
    prog = db.prepare_gradient(f, x0)
    for _ in range(3):
        x = rng.standard_normal(n)
        np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape", [(7,), (6, 1), (1, 6), (6, 6), ()])
def test_out_of_another_shape_is_a_clear_error(shape):
    """``out=`` arrays of another shape than the gradient's: one NumPy could broadcast into ((1, 6), (6, 6)) was
    silently filled, another failed inside the replay ("operands could not be broadcast together with shapes
    (6,) () (7,)"); now every path says which array has which shape and what it must have."""
    def f(x):
        return np.sum(np.sin(x) * 2.0)

    def g(x, y):
        return np.sum(np.sin(x) * y)

    x = np.linspace(0, 1, 6)
    wrong = np.zeros(shape)
    message = rf"out= array \d has shape {re.escape(str(shape))} but its gradient has shape \(6,\)"
    prog, two, hvp = db.prepare_gradient(f, x), db.prepare_gradient(g, x, x), db.prepare_hvp(f, x)
    calls = [lambda: prog(x, out=wrong), lambda: prog(x, out=(wrong,)), lambda: prog.value_and_gradient(x, out=wrong),
             lambda: db.prepare_gradient(f, x)(x.astype(np.float32), out=wrong),  # a new variant, recorded by this call
             lambda: two(x, x, out=(np.zeros(6), wrong)),
             lambda: two.value_and_gradient(x, x, out=(wrong, np.zeros(6))),
             lambda: hvp(x, x, out=wrong)]
    for call in calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert not wrong.any()


def test_dicts_pair_their_leaves_by_key():
    """Two dicts with the same keys inserted in another order (tangents, vectors, cotangents, ``out=``) were
    paired leaf by leaf in insertion order: the tangent of "a" went to "b", silently.  Dicts flatten in sorted
    key order now (JAX's), and are rebuilt in their own order."""
    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}

    def f(p):
        return np.sum(p["a"] ** 2) + np.sum(np.sin(p["b"]))

    va, vb = np.array([1.0, -1.0]), np.array([0.5, 2.0])
    ordered, reordered = {"a": va, "b": vb}, {"b": vb, "a": va}
    assert db.jvp(f, (p,), (reordered,))[1] == pytest.approx(db.jvp(f, (p,), (ordered,))[1], rel=1e-15)
    assert db.jvp(f, (p,), (ordered,))[1] == pytest.approx(np.dot(2 * p["a"], va) + np.dot(np.cos(p["b"]), vb))
    expected = {"a": 2 * va, "b": -np.sin(p["b"]) * vb}
    for got in (db.hvp(f, p, reordered), db.prepare_hvp(f, p)(p, reordered)):
        assert list(got) == ["a", "b"]  # the argument's own order
        for k in p:
            np.testing.assert_allclose(got[k], expected[k], rtol=1e-14)
    out = {"b": np.zeros(2), "a": np.zeros(2)}
    db.prepare_gradient(f, p)(p, out=out)
    np.testing.assert_allclose(out["a"], 2 * p["a"], rtol=1e-15)
    np.testing.assert_allclose(out["b"], np.cos(p["b"]), rtol=1e-15)
    _, back = db.pullback(lambda p: {"u": p["a"] * 2, "w": p["b"] * 3}, p)
    cotangent = back({"w": np.ones(2), "u": np.zeros(2)})
    np.testing.assert_array_equal(cotangent["a"], np.zeros(2))
    np.testing.assert_array_equal(cotangent["b"], np.full(2, 3.0))
    assert list(db.gradient(f, {"b": p["b"], "a": p["a"]})) == ["b", "a"]


def test_a_dict_of_keys_that_do_not_sort_keeps_its_order():
    p = {1: np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    g = db.gradient(lambda p: np.sum(p[1] ** 2) + np.sum(p["b"]), p)
    assert list(g) == [1, "b"]
    np.testing.assert_array_equal(g[1], 2 * p[1])


def test_a_dict_of_other_keys_is_a_clear_error():
    """Tangents, hvp vectors or cotangents whose dicts have other keys than the primal's (the same number of
    leaves) were paired by position: now a ShapeMismatchError naming both keys."""
    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}

    def f(p):
        return np.sum(p["a"] ** 2) + np.sum(np.sin(p["b"]))

    other = {"a": np.ones(2), "c": np.ones(2)}
    with pytest.raises(db.ShapeMismatchError, match=r"keys \[\('a', 'c'\)\], its primal's \[\('a', 'b'\)\]"):
        db.jvp(f, (p,), (other,))
    with pytest.raises(db.ShapeMismatchError, match="keys"):
        db.hvp(f, p, other)
    _, back = db.pullback(lambda p: {"u": p["a"], "w": p["b"]}, p)
    with pytest.raises(db.ShapeMismatchError, match=r"the output's \[\('u', 'w'\)\]"):
        back({"u": np.ones(2), "v": np.ones(2)})
