"""Second derivatives: gradients of gradients, reverse over reverse, through every rule.

Every pullback is itself differentiable: run on values tracked by an outer gradient, its NumPy calls are
recorded there.  So every rule case is checked in second order, `check_gradient(order=2)` (each row of the
Hessian of a random projection against central differences of the gradient)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db

from .cases import all_cases, reset_streams
from .test_rules import projection

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_rule_second_derivatives_match_finite_differences(case, data):
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    seed = data.draw(st.integers(0, 1000))
    db.check_gradient(lambda *a: projection(fn(*a), seed), *args, order=2, **case.tolerance)
