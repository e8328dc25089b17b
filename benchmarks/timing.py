"""Median timings of callables, with the repeat count chosen from a first run; warm and cold.

A warm figure times calls back to back (a benchmark's loop); a cold one times single calls, each
after other work and a pass over more memory than the caches hold (a user's loop, where a gradient
call follows the model's own work): the inputs come from memory, and threads that slept wake up.
"""

import functools
import statistics
import time

import numpy as np

FLUSH_BYTES = 64 << 20  # more than the last-level cache (32 MiB on the 2-core test machine)


def median_time(fn, budget=0.5, max_runs=2000):
    """Median seconds per call of ``fn`` over about ``budget`` seconds (after one warm-up call)."""
    return interleaved_medians([fn], budget, max_runs)[0]


def interleaved_medians(fns, budget=0.5, max_runs=2000, clock=time.perf_counter):
    """Median seconds per call of each of ``fns`` over about ``budget`` seconds each, sampled in turns.

    A shared machine's speed drifts by tens of percent within a minute (other
    processes, a hypervisor's steal); timing one function after another puts that
    drift into their ratio, while taking their samples in turns slows them alike.
    ``clock``: wall time, or ``time.process_time`` (CPU time: what other processes take is left out).
    """
    fns = list(fns)
    inners, total = [], 0.0
    for fn in fns:
        fn()
        start = clock()
        fn()
        once = max(clock() - start, 1e-7)
        inner = max(1, int(1e-3 / once))  # batch very fast calls so the clock resolution does not matter
        inners.append(inner)
        total += once * inner
    runs = max(5, min(max_runs, int(budget * len(fns) / total)))
    samples = [[] for _ in fns]
    for _ in range(runs):
        for fn, inner, taken in zip(fns, inners, samples):
            start = clock()
            for _ in range(inner):
                fn()
            taken.append((clock() - start) / inner)
    return [statistics.median(taken) for taken in samples]


@functools.cache
def _flush_buffer():
    return np.ones(FLUSH_BYTES // 8)


def flush_caches():
    """Read ``FLUSH_BYTES`` of a buffer of its own: what the next call reads is no longer in a cache."""
    np.add.reduce(_flush_buffer())


def warm_and_cold(fns, rounds, warm_calls=3):
    """(warm medians, cold medians): seconds per call of each of ``fns``, sampled in turns.

    Each round takes every function in turn: a cache flush (`flush_caches`), one call timed alone (a cold
    sample: the other functions ran since its last call), then ``warm_calls`` calls back to back timed
    together (a warm sample, their mean; none if 0, and the warm medians are then None).  ``warm_calls``: one
    count for all, or one per function (many for a call of a microsecond).
    """
    cold, warm = [[] for _ in fns], [[] for _ in fns]
    counts = warm_calls if isinstance(warm_calls, (list, tuple)) else [warm_calls] * len(fns)
    for _ in range(rounds):
        for fn, warm_calls, cold_taken, warm_taken in zip(fns, counts, cold, warm):
            flush_caches()
            start = time.perf_counter()
            fn()
            cold_taken.append(time.perf_counter() - start)
            if warm_calls:
                start = time.perf_counter()
                for _ in range(warm_calls):
                    fn()
                warm_taken.append((time.perf_counter() - start) / warm_calls)
    return ([statistics.median(t) if t else None for t in warm] if any(counts) else None,
            [statistics.median(t) for t in cold])


def ratio_table(title, rows, columns, budget=0.5):
    """Time ``rows`` (label -> {column: fn}) and print each as a ratio to its first column."""
    print(f"\n{title}")
    header = f"{'':<12}" + "".join(f"{c:>18}" for c in columns)
    print(header)
    results = {}
    for label, fns in rows.items():
        present = [c for c in columns if c in fns]
        times = dict(zip(present, interleaved_medians([fns[c] for c in present], budget)))
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
