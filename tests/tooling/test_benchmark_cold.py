"""The benchmark suite's cold figures (issue 18): single calls in turns, each after a cache flush, beside
the warm ones in the JSON and the table.  Only the bookkeeping is checked, never a duration."""

import numpy as np

from benchmarks import suite, timing
from benchmarks.progress import Progress


def test_warm_and_cold_takes_the_functions_in_turns_each_cold_call_after_a_flush(monkeypatch):
    events = []
    monkeypatch.setattr(timing, "flush_caches", lambda: events.append("flush"))
    fns = [lambda name=name: events.append(name) for name in "abc"]
    warm, cold = timing.warm_and_cold(fns, rounds=2, warm_calls=[1, 2, 0])
    assert events == ["flush", "a", "a", "flush", "b", "b", "b", "flush", "c"] * 2
    assert len(cold) == 3 and all(t >= 0 for t in cold)
    assert warm[2] is None and warm[0] >= 0
    _, cold = timing.warm_and_cold(fns, rounds=1, warm_calls=0)
    assert len(cold) == 3


def test_a_row_gets_cold_figures_and_the_table_shows_them_warm_slash_cold(monkeypatch):
    monkeypatch.setattr(timing, "flush_caches", lambda: None)  # the test times nothing that matters
    x = np.linspace(0.0, 1.0, 10)
    row = suite.Row("tiny", lambda: np.sum(x * x), lambda: 2 * x,
                    {"db": lambda: (lambda: 2 * x), "db.sum": lambda: slow_gradient}, 1e-12)

    def slow_gradient():  # slower than half the budget (below): a warm figure only
        return 2 * x

    monkeypatch.setattr(suite, "measure", lambda fn, budget, cap, warm: (
        (1.0, 1, 0.0) if fn is slow_gradient else (1e-3 if fn is row.primal else 2e-3, 5, 0.0)))
    workload = suite.Workload("tiny", "a tiny workload", [lambda: row])
    with Progress(len(workload.columns), enabled=False) as bar:
        result = suite._run_row(workload, row, 0.05, 10.0, bar, [], cold_rounds=3)
    cells = result["cells"]
    for column in ("primal", "hand", "db"):
        assert cells[column]["cold_calls"] == 3 and cells[column]["cold_seconds"] > 0
        assert "cold_ratio" in cells[column]
    assert "cold_seconds" not in cells["db.sum"] and cells["db.sum"]["ratio"] == 1000
    text = suite.format_cell(cells["db"])
    assert text.startswith(f"2.00x/{suite._ratio(cells['db']['cold_ratio'])} ")
    assert suite.format_cell(cells["db.sum"]) == "1000x 1s 0pf"  # and the page faults per call
    assert suite.format_cell(cells["primal"], primal=True).startswith("1ms/")
