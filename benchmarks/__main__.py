"""``python -m benchmarks [--quick]``: the whole suite, one table, one JSON file (see `benchmarks.suite`)."""

import os
import sys

# --threads N must reach the thread pools (OpenBLAS, OpenMP, MKL, numexpr) before NumPy loads them.
if "--threads" in sys.argv[1:-1]:
    threads = sys.argv[sys.argv.index("--threads") + 1]
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[name] = threads

from .realistic import workloads as realistic_workloads  # (built from the suite's rows: listed here, not there)
from .suite import main

sys.exit(main(more=realistic_workloads))
