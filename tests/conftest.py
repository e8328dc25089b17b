"""Suite-wide pytest hooks and fixtures.

Hypothesis's pytest plugin gives each parametrization of a ``@given`` test a new settings object whose parent
is the one the previous parametrization left on the function (``_hypothesis_pytestplugin.py``, for the
``differing_executors`` health check), so the chain grows by one per parameter.  Under the ``ci`` profile
(loaded when the ``CI`` environment variable is set) a setting read through the chain walks all of it, and a
test with more than about 900 parameters (the rule-case sweeps have 1370) dies of a RecursionError in
Hypothesis itself, after which every later parameter fails.  Each test function gets its own settings back
after every item, so the chain stays one link long.

The rule-case sweeps (a test parametrized over `tests.cases.Case`s: every rule in every mode) hold most of the
suite's items.  A default run (`python -m pytest`) takes one item in `SWEEP_SHARE` of them, chosen by a hash of
the item's id, so each sweep still visits every family (and tests/test_random_programs.py draws a quarter of
its programs) and the suite stays within a few minutes on two cores.  ``--full-sweeps`` runs every item, and
``--rest-of-sweeps`` only those a default run leaves out: CI (.ci/run) runs the default command, then the rest.
"""

import os
import zlib

import pytest

from .cases import Case

SWEEP_SHARE = 7


MAX_WORKERS = 4  # ``-n auto``'s worker processes at most: each holds the package, JAX and its caches (~0.5 GB)


def pytest_xdist_auto_num_workers(config):
    """How many worker processes ``python -m pytest -n auto`` starts: one per core, at most `MAX_WORKERS`."""
    return min(os.cpu_count() or 1, MAX_WORKERS)


def pytest_addoption(parser):
    parser.addoption("--full-sweeps", action="store_true",
                     help="run every rule case of the sweeps (a default run takes a seventh of them)")
    parser.addoption("--rest-of-sweeps", action="store_true",
                     help="run only the rule cases a default run leaves out (CI runs them after the default run)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full-sweeps"):
        return
    rest = config.getoption("--rest-of-sweeps")
    dropped = [item for item in items if _left_to_the_full_sweep(item) != rest]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        left = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in left]


def _left_to_the_full_sweep(item):
    """Whether ``item`` is a rule-case sweep item outside the default run's sample."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or not any(isinstance(v, Case) for v in callspec.params.values()):
        return False
    return zlib.crc32(item.nodeid.encode()) % SWEEP_SHARE != 0

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
    `kernels.run_in_threads` appends to (the axis sums' calls of it too, `axis_sums`)."""
    from dualbroadcast import axis_sums, kernels

    monkeypatch.setattr(kernels, "THREADS", 2)
    chunks = []
    in_threads = kernels.run_in_threads

    def counted(run, bounds, block, args, scratch):
        chunks.append(len(bounds) - 1)
        return in_threads(run, bounds, block, args, scratch)

    monkeypatch.setattr(kernels, "run_in_threads", counted)
    monkeypatch.setattr(axis_sums, "run_in_threads", counted)
    return chunks
