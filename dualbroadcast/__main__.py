"""``python -m dualbroadcast``: gradients of the EAM model against its hand-written gradient.

For N=1000 random float64 distances, prints the largest relative difference of
`db.gradient` (plain NumPy through the reverse tape, and with the density sum
fused by `db.sum`) from the hand gradient, and the median time of each.  Exits
with status 1 if any difference is 1e-12 or more.
"""

import sys
import timeit

import numpy as np

import dualbroadcast as db
from dualbroadcast.demo import eam, eam_fused, eam_hand_gradient, max_relative_difference

TOLERANCE = 1e-12


def median_time(fn, repeat=11, batch_seconds=0.02):
    """Median seconds per call of ``fn()`` over ``repeat`` timed batches of about ``batch_seconds``."""
    once = timeit.timeit(fn, number=1)
    number = max(1, int(batch_seconds / max(once, 1e-9)))
    return float(np.median(timeit.repeat(fn, repeat=repeat, number=number))) / number


def fast_path():
    """One line: whether prepared programs compile their loops of small steps (Numba, the ``fast`` extra), or how
    to get that."""
    from dualbroadcast.loops import NUMBA_INSTALLED

    if NUMBA_INSTALLED:
        return "fast path: on (Numba compiles the loops of small steps in prepared programs)"
    return ("fast path: off; pip install 'dualbroadcast[fast]' (Numba) to compile the loops of small steps in "
            "prepared programs (time loops, recurrences)")


def main(n=1000, seed=0):
    """Run the demo on ``n`` random distances; return the process exit status."""
    x = np.random.default_rng(seed).uniform(0.0, 1.0, n)
    hand = eam_hand_gradient(x)
    t_hand = median_time(lambda: eam_hand_gradient(x))
    print(f"EAM model, N={n} float64: db.gradient against the hand-written gradient")
    print(f"  {'hand gradient':34s} {t_hand * 1e6:9.1f} us")
    worst = 0.0
    for label, model in [("db.gradient, plain NumPy (np.sum)", eam), ("db.gradient, fused (db.sum)", eam_fused)]:
        diff = max_relative_difference(db.gradient(model, x), hand)
        t = median_time(lambda model=model: db.gradient(model, x))
        print(f"  {label:34s} {t * 1e6:9.1f} us  ({t / t_hand:4.1f}x hand)   max rel. difference {diff:.2g}")
        worst = max(worst, diff)
    print("  (times: median over repeated runs)")
    print(fast_path())
    if not worst < TOLERANCE:
        print(f"FAIL: relative difference {worst:.3g} >= {TOLERANCE:g}", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
