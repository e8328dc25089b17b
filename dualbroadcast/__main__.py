"""``python -m dualbroadcast``: gradient of the EAM model against its hand-written gradient.

Prints the largest relative difference and the median time of each; exits with
status 1 if they differ by 1e-12 or more.
"""

import sys
import timeit

import numpy as np

import dualbroadcast as db
from dualbroadcast.demo import eam, eam_hand_gradient, max_relative_difference

TOLERANCE = 1e-12


def median_time(fn, repeat=11, batch_seconds=0.02):
    """Median seconds per call of ``fn()`` over ``repeat`` timed batches of about ``batch_seconds``."""
    once = timeit.timeit(fn, number=1)
    number = max(1, int(batch_seconds / max(once, 1e-9)))
    times = timeit.repeat(fn, repeat=repeat, number=number)
    return float(np.median(times)) / number


def main(n=1000, seed=0):
    """Run the demo on ``n`` random distances; return the process exit status."""
    x = np.random.default_rng(seed).uniform(0.0, 1.0, n)
    g = db.gradient(eam, x)
    hand = eam_hand_gradient(x)
    diff = max_relative_difference(g, hand)
    t_db = median_time(lambda: db.gradient(eam, x))
    t_hand = median_time(lambda: eam_hand_gradient(x))
    print(f"EAM model, N={n} float64")
    print(f"  max relative difference db.gradient vs hand gradient: {diff:.3g}")
    print(f"  db.gradient:   {t_db * 1e6:10.1f} us (median)")
    print(f"  hand gradient: {t_hand * 1e6:10.1f} us (median)   ratio {t_db / t_hand:.1f}x")
    if not diff < TOLERANCE:
        print(f"FAIL: difference {diff:.3g} >= {TOLERANCE:g}", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
