"""The suite's own hooks (tests/conftest.py): a parametrized Hypothesis test keeps a settings chain of one
link however many parameters it has (without the hook, each parameter adds a link, and the 1370-parameter
sweeps die of a RecursionError under CI=true)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
