"""Second derivatives: gradients of gradients, reverse over reverse, through every rule.

Every pullback is itself differentiable: run on values tracked by an outer gradient, its NumPy calls are
recorded there.  So every rule case is checked in second order, `check_gradient(order=2)` (each row of the
Hessian of a random projection against central differences of the gradient).  The few rules whose
pullbacks cannot run on tracked values yet must refuse with the clear error that names them."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.api import directional_derivative

from ..cases import all_cases, reset_streams
from ..rules.test_rules import projection

CASES = all_cases()

# The gradient jumps at a tie (it is split there): no finite difference of it means anything.
AT_A_TIE = {"max_two_way_tie", "min_two_way_tie"}

# Rules whose pullbacks cannot run on values tracked by an outer gradient: a second derivative through them is a
# clear error, which these cases check (naming the rule).  None today: every rule's pullback is recorded.
NOT_TWICE: set[str] = set()


@pytest.mark.parametrize("case", [c for c in CASES if str(c) not in AT_A_TIE], ids=str)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_rule_second_derivatives_match_finite_differences(case, data):
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    seed = data.draw(st.integers(0, 1000))
    try:
        db.check_gradient(lambda *a: projection(fn(*a), seed), *args, order=2, **case.tolerance)
    except (db.UnsupportedFunctionError, db.ValueConversionError):
        if str(case) not in NOT_TWICE:  # these may refuse (a clear error), never give a wrong value
            raise


def test_the_refusal_list_names_only_cases_that_exist():
    names = {str(c) for c in CASES}
    assert names >= NOT_TWICE and names >= AT_A_TIE


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=1, deadline=None)
@given(data=st.data())
def test_every_rule_hvp_and_its_replay(case, data):
    """db.hvp through every rule (reverse over forward: the gradient of each rule's tangent) equals the gradient
    of ⟨∇f, v⟩ (reverse over reverse, checked against finite differences above); db.prepare_hvp replays it, at
    the recorded arguments and at moved ones: a pullback that chooses elements by a value (`pullbacks.plain`)
    leaves its recording to db.hvp, never refused."""
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    seed = data.draw(st.integers(0, 1000))
    rng = np.random.default_rng(seed)
    vectors = tuple(rng.standard_normal(np.shape(a)) for a in args)
    f = lambda *a: projection(fn(*a), seed)
    try:
        want = db.hvp(f, *args, vectors=vectors)
    except (db.UnsupportedFunctionError, db.ValueConversionError):
        assert str(case) in NOT_TWICE
        return
    reverse = db.gradient(lambda *xs: directional_derivative(f, args, xs, vectors), *args)
    for g, w in zip(want if len(args) > 1 else (want,), reverse if len(args) > 1 else (reverse,)):
        np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-9 * max(1.0, np.max(np.abs(w), initial=0)), equal_nan=True)
    prog = db.prepare_hvp(f, *args)
    moved = [a * 1.01 for a in args]
    for point, expected in ((args, want), (moved, db.hvp(f, *moved, vectors=vectors))):
        got = prog(*point, vectors=vectors)
        for g, w in zip(got if len(args) > 1 else (got,), expected if len(args) > 1 else (expected,)):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, equal_nan=True)
