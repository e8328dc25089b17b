"""Suite-wide pytest hooks.

Hypothesis's pytest plugin gives each parametrization of a ``@given`` test a new settings object whose parent
is the one the previous parametrization left on the function (``_hypothesis_pytestplugin.py``, for the
``differing_executors`` health check), so the chain grows by one per parameter.  Under the ``ci`` profile
(loaded when the ``CI`` environment variable is set) a setting read through the chain walks all of it, and a
test with more than about 900 parameters (the rule-case sweeps have 1370) dies of a RecursionError in
Hypothesis itself, after which every later parameter fails.  Each test function gets its own settings back
after every item, so the chain stays one link long.
"""

import pytest

SETTINGS = "_hypothesis_internal_use_settings"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    function = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    own = getattr(function, SETTINGS, None)
    yield
    if own is not None:
        setattr(function, SETTINGS, own)
