"""The suite's own hooks (tests/conftest.py): a parametrized Hypothesis test keeps a settings chain of one
link however many parameters it has (without the hook, each parameter adds a link, and the 1370-parameter
sweeps die of a RecursionError under CI=true); a default run samples the rule-case sweeps, ``--rest-of-sweeps``
runs the rest of them (CI runs both), ``--full-sweeps`` all."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .. import conftest
from ..cases import Case

SETTINGS = "_hypothesis_internal_use_settings"  # where Hypothesis keeps a test function's settings


@pytest.mark.parametrize("k", range(5))
@settings(max_examples=1, deadline=None)
@given(x=st.integers())
def test_parametrized(k, x):
    assert isinstance(x, int)


def chain_length(s):
    length = 0
    while s is not None:
        s, length = getattr(s, "_fallback", None), length + 1
    return length


def test_settings_chain_does_not_grow_with_parameters():
    own = getattr(test_parametrized, SETTINGS)
    assert chain_length(own) <= 3, f"a chain of {chain_length(own)} settings after 5 parameters"


def items(n, **params):
    return [SimpleNamespace(nodeid=f"tests/rules/test_rules.py::test_gradient[{k}]",
                            callspec=SimpleNamespace(params={**params, "k": k})) for k in range(n)]


def test_a_default_run_takes_a_share_of_the_rule_case_sweeps_and_every_other_test():
    case = Case(func=np.sin, build=None, name="sin")
    sweep = items(300, case=case)
    left = [item for item in sweep if conftest._left_to_the_full_sweep(item)]
    share = 1 - 1 / conftest.SWEEP_SHARE
    assert share - 0.1 < len(left) / len(sweep) < share + 0.1, "about 1 - 1/SWEEP_SHARE of a sweep is left to the rest"
    assert not any(conftest._left_to_the_full_sweep(item) for item in items(300, x=1.0))  # not a rule case
    assert not conftest._left_to_the_full_sweep(SimpleNamespace(nodeid="tests/x.py::test_plain"))


@pytest.mark.parametrize("ci, option, kept", [(None, None, "sample"), ("true", None, "sample"),
                                              (None, "--full-sweeps", "all"), (None, "--rest-of-sweeps", "rest")])
def test_the_default_run_and_the_rest_of_the_sweeps_make_the_full_sweep(monkeypatch, ci, option, kept):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    collected = items(60, case=Case(func=np.sin, build=None, name="sin")) + items(3, x=1.0)
    deselected = []
    config = SimpleNamespace(getoption=lambda name: name == option,
                             hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    remaining = list(collected)
    conftest.pytest_collection_modifyitems(config, remaining)
    assert len(remaining) + len(deselected) == 63
    sample = [item for item in collected if not conftest._left_to_the_full_sweep(item)]
    rest = [item for item in collected if conftest._left_to_the_full_sweep(item)]
    assert remaining == {"sample": sample, "all": collected, "rest": rest}[kept]
    assert len(sample) > 3 and len(rest) > 3  # both halves hold items
