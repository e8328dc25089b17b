"""The two builders of forward-mode partials' pullbacks (`dualbroadcast.pullbacks`): each runtime pullback
and the source its twin writes for prepared replay compute the same cotangent, for every case."""

import operator
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dualbroadcast as db
from dualbroadcast.pullbacks import (
    apply,
    kernel_pullback,
    kernel_pullback_source,
    table_pullback,
    table_pullback_source,
    unbroadcast,
)

broadcast_module = sys.modules["dualbroadcast.broadcast"]


def run_source(text, **names):
    """Evaluate a cotangent's source as replay's generated code would."""
    return eval(text, {"np": np, "unbroadcast": unbroadcast}, names)


@st.composite
def argument_and_result_shapes(draw):
    """An argument's shape and the shape of a result it broadcasts into (possibly the same)."""
    result = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))
    lead = draw(st.integers(0, len(result)))
    shape = tuple(1 if draw(st.booleans()) else n for n in result[lead:])
    return shape, result


@settings(max_examples=60, deadline=None)
@given(argument_and_result_shapes(), st.sampled_from(["one", "minus one", "number", "array", "scalar"]))
def test_table_pullback_and_its_source_agree(shapes, kind):
    shape, out_shape = shapes
    rng = np.random.default_rng(0)
    g = rng.normal(size=out_shape) if out_shape else np.float64(rng.normal())
    d = {"one": 1, "minus one": -1, "number": 0.25, "array": rng.normal(size=out_shape),
         "scalar": np.float32(1.5)}[kind]
    want = unbroadcast(g * d, shape)
    got = apply(table_pullback(d, shape, out_shape), g)
    source = table_pullback_source("g", d if type(d) in (int, float) else "d", shape, out_shape)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_allclose(run_source(source, g=g, d=d), want, rtol=1e-15)
    assert np.shape(got) == shape


@settings(max_examples=60, deadline=None)
@given(argument_and_result_shapes(), st.booleans(), st.booleans())
def test_kernel_pullback_and_its_source_agree(shapes, reduce, in_place):
    shape, out_shape = shapes
    out_shape = () if reduce else out_shape
    rng = np.random.default_rng(1)
    partial = rng.normal(size=shape if reduce else out_shape)
    g = rng.normal(size=out_shape) if out_shape else np.float64(rng.normal())
    want = unbroadcast(np.broadcast_to(g * partial, out_shape or shape), shape)
    got = kernel_pullback(partial.copy(), shape, out_shape, in_place)(g)
    source = kernel_pullback_source("g", "p", np.shape(partial), out_shape)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    if np.shape(partial) == shape:  # replay's partials have the argument's shape (see replay.kernel_runner)
        np.testing.assert_allclose(run_source(source, g=g, p=partial.copy()), want, rtol=1e-15)


def test_a_pullback_not_in_place_leaves_its_partial_unchanged():
    """A lone large array bound as ``partial.__mul__`` is multiplied in place by NumPy (temporary
    elision): the pullback of a multi-sweep tape must never change its partial."""
    partial = np.random.default_rng(2).normal(size=100_000)
    kept = partial.copy()
    back = kernel_pullback(partial, partial.shape, (), in_place=False)
    del partial
    back(2.0)
    np.testing.assert_array_equal(back(1.0), kept)


def test_a_cached_plan_pullback_called_twice(monkeypatch):
    """Regression: on main before issue 14 the cached plan of a large db.sum on the NumPy backend gave
    ``db.pullback`` a pullback that scaled its partial in place, so the second cotangent got a wrong
    gradient (2x here)."""
    monkeypatch.setattr(db.kernels.Kernel, "_candidates", lambda self, values, size: ["numpy"])
    x = np.random.default_rng(3).uniform(size=100_000)

    def square(a):
        return a * a

    for _ in range(3):  # the second and third calls run the cached plan
        _, back = db.pullback(lambda a: db.sum(square, a), x)
        for g in (2.0, -0.5, 2.0):
            np.testing.assert_allclose(back(g), 2 * x * g, rtol=1e-14)
    assert any(plan.call.function == "square" for plan in broadcast_module._plans.values())


@pytest.mark.parametrize("d, kind", [(1, None), (-1, operator.neg), (0.5, 0.5), (-2, -2)])
def test_constant_table_partials_are_held_without_a_closure(d, kind):
    """A constant partial of a same-shaped argument is applied by the sweep itself: None (the identity),
    operator.neg, or the number as a factor."""
    assert table_pullback(d, (3,), (3,)) is kind or table_pullback(d, (3,), (3,)) == kind


@pytest.mark.parametrize("constant", [-2, 3.0, -0.5])
def test_a_constant_partial_other_than_one_is_a_factor(constant):
    """A user's constant partial (``db.defderivative(f, -2)``) scales the cotangent; only 1 and -1 are the
    identity and negation."""
    @db.primitive
    def scaled(x):
        return constant * x

    db.defderivative(scaled, constant)
    try:
        x = np.array([0.5, 1.5])
        np.testing.assert_array_equal(db.gradient(lambda x: np.sum(scaled(x) * np.array([1.0, 2.0])), x),
                                      constant * np.array([1.0, 2.0]))
        assert db.gradient(lambda x: scaled(x), 0.5) == constant
    finally:
        del db.registry.RULES[scaled], db.derivatives.DERIVATIVES[scaled]
