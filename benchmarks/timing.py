"""Median timing of a callable, with the repeat count chosen from a first run."""

import statistics
import time


def median_time(fn, budget=0.5, max_runs=2000):
    """Median seconds per call of ``fn`` over about ``budget`` seconds (after one warm-up call)."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    inner = max(1, int(1e-3 / once))  # batch very fast calls so the clock resolution does not matter
    runs = max(5, min(max_runs, int(budget / (once * inner))))
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def ratio_table(title, rows, columns, budget=0.5):
    """Time ``rows`` (label -> {column: fn}) and print each as a ratio to its first column."""
    print(f"\n{title}")
    header = f"{'':<12}" + "".join(f"{c:>18}" for c in columns)
    print(header)
    results = {}
    for label, fns in rows.items():
        times = {c: median_time(fns[c], budget) for c in columns if c in fns}
        base = times[columns[0]]
        results[label] = times
        cells = []
        for c in columns:
            if c not in times:
                cells.append(f"{'-':>18}")
            elif c == columns[0]:
                cells.append(f"{_human(base):>18}")
            else:
                cells.append(f"{times[c] / base:.2f}x ({_human(times[c])})".rjust(18))
        print(f"{label:<12}" + "".join(cells))
    return results


def _human(seconds):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g}{unit}"
    return f"{seconds / 1e-9:.3g}ns"
