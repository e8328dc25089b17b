"""The full composition sweep (`test_compositions.py`, marked ``sweep``) runs only when asked for: ``-m sweep``."""


def pytest_collection_modifyitems(config, items):
    if "sweep" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("sweep") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("sweep")])
        items[:] = kept
