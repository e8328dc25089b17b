"""Issue 18's table, re-measured: ratios to the NumPy primal, warm and cold, sampled in turns, targets beside.

Run: ``python -m benchmarks.issue18 [--rounds 15] [--no-jax] [--json PATH]``

Rows and columns are the suite's (`benchmarks.suite`: its models, data and implementations; the
"prep" column is ``db.prepare_gradient`` of the plain NumPy model).  Each row is timed in rounds: a
round takes every cell of the row once, in turns (`timing.warm_and_cold`): a cache flush, one call
timed alone (cold: other work ran since the cell's last call), then calls back to back (warm).
Medians over the rounds; each cell is the ratio to the primal's median of the same kind, warm/cold.
A gradient that disagrees with the hand-written one is marked ``!`` (and reported).
"""

import argparse
import json
import math
import sys
import time

from . import peers as pm
from . import suite
from .timing import warm_and_cold

COLUMNS = ("db", "db.sum", "prep", "jax.jit", "hand")
SUITE_COLUMN = {"db": "db", "db.sum": "db.sum", "prep": "db prep", "jax.jit": "jax.jit"}  # the suite's names


def rows(peers):
    """(label, suite Row, targets {column: at most this ratio}) in the issue's order."""
    eam = {row.params["N"]: row for row in (build() for build in suite.eam_workload(False, peers).rows)}
    slices = suite.slices_workload(False, peers).rows[1]()  # B, columnwise dot, T=256
    image = [w.rows[0]() for w in (suite.sum_of_squares_workload(False, peers),
                                  suite.sum_arctan2_workload(False, peers))]
    listed = [
        ("EAM N=1e6", eam[10**6], {"prep": 0.4}),
        ("EAM N=100", eam[100], {"prep": 0.8}),
        ("sum(x**2) f32", image[0], {"prep": 0.5, "db": 1.5}),
        ("sum(arctan2(x,2)) f32", image[1], {"prep": 0.35, "db.sum": 0.8}),
        (f"slices B T={slices.params['T']} /fwd", slices, {"prep": 2.5}),
    ]
    listed += [(f"qux {row.label}", row, {"prep": 3.0}) for row in (b() for b in suite.qux_workload(False, peers).rows)]
    listed.append(("foldminus", suite.foldminus_workload(False, peers).rows[0](), {"prep": 3.0}))
    return listed


def cells(row, warnings, label):
    """{column: zero-argument callable} of the row: its primal, the implementations that apply (each
    checked against the hand-written gradient first), and the hand-written gradient."""
    found = {"primal": row.primal}
    reference = row.hand()
    for column in COLUMNS:
        if column == "hand":
            found[column] = row.hand
            continue
        key = SUITE_COLUMN[column]
        if row.impls.get(key) is None or key in row.skip:
            continue
        try:
            made = row.impls[key]()
            fn, convert = made if isinstance(made, tuple) else (made, lambda out: out)
            err = suite.max_relative_error(convert(fn()), reference)
        except Exception as e:
            warnings.append(f"{label}: {column} failed: {type(e).__name__}: {e}"[:300])
            continue
        if not err <= row.tol:
            warnings.append(f"{label}: {column} disagrees with the hand-written gradient (max relative error "
                            f"{err:.3g} > {row.tol:g})")
            column += "!"
        found[column] = fn
    return found


def measure(found, rounds):
    """{column: (warm seconds, cold seconds)}, sampled in turns (`warm_and_cold`); fast calls are repeated
    so that a warm sample takes about half a millisecond."""
    counts = []
    for fn in found.values():
        fn()
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        counts.append(max(3, min(2000, int(5e-4 / once))))
    warm, cold = warm_and_cold(list(found.values()), rounds, counts)
    return {column: (w, c) for column, w, c in zip(found, warm, cold)}


def _ratio(r):
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def table(results):
    """The results as text: per row, the primal's warm/cold time and each cell's warm/cold ratios, then the
    targets (met or not, warm and cold)."""
    head = ["row", "primal"] + list(COLUMNS) + ["targets (warm, cold)"]
    lines = [head]
    for label, times, targets in results:
        pw, pc = times["primal"]
        line = [label, f"{suite.human(pw)}/{suite.human(pc)}"]
        for column in COLUMNS:
            key = column if column in times else column + "!" if column + "!" in times else None
            if key is None:
                line.append("-")
            else:
                w, c = times[key]
                line.append(f"{_ratio(w / pw)}/{_ratio(c / pc)}" + ("!" if key.endswith("!") else ""))
        verdicts = []
        for column, bound in targets.items():
            if column not in times:
                verdicts.append(f"{column} <= {bound}x: no cell")
                continue
            w, c = times[column]
            verdicts.append(f"{column} <= {bound}x: {'met' if w / pw <= bound else 'NOT met'}, "
                            f"{'met' if c / pc <= bound else 'NOT met'}")
        line.append("; ".join(verdicts))
        lines.append(line)
    widths = [max(len(r[i]) for r in lines) for i in range(len(head) - 1)]
    return "\n".join("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
                     + "  " + r[-1] for r in lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.issue18", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per row (each times every cell once)")
    parser.add_argument("--no-jax", action="store_true", help="no jax.jit column")
    parser.add_argument("--json", default=None, help="also write the medians (seconds) to this file")
    args = parser.parse_args(argv)
    peers, _ = pm.available(() if args.no_jax else ("jax",))
    started = time.perf_counter()
    results, warnings = [], []
    for label, row, targets in rows(peers):
        found = cells(row, warnings, label)
        results.append((label, measure(found, args.rounds), targets))
        print(f"  {label}: done", file=sys.stderr)
    print("Issue 18: ratio to the NumPy primal (slices: to its forward; qux, foldminus: to the Python-float "
          f"primal), warm/cold; medians of {args.rounds} rounds in turns, cold calls after a cache flush")
    print(table(results))
    for warning in warnings:
        print("warning:", warning)
    print(f"wall time {time.perf_counter() - started:.1f}s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({label: {c: {"warm": w, "cold": k} for c, (w, k) in times.items()}
                       for label, times, _ in results}, out, indent=1)
    return 0 if all(math.isfinite(w) for _, times, _ in results for w, _ in times.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
