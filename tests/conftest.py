"""Suite-wide pytest hooks and fixtures.

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


@pytest.fixture
def chunk_counts(monkeypatch):
    """The number of chunks each blocked kernel call runs in, on a machine taken to have two cores: the list
    `kernels._in_threads` appends to."""
    from dualbroadcast import kernels

    monkeypatch.setattr(kernels, "THREADS", 2)
    chunks = []
    in_threads = kernels._in_threads

    def counted(run, bounds, block, args, scratch):
        chunks.append(len(bounds) - 1)
        return in_threads(run, bounds, block, args, scratch)

    monkeypatch.setattr(kernels, "_in_threads", counted)
    return chunks
