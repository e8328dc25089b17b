"""A/B: the working tree's dualbroadcast against a committed one, in one process, sampled in turns.

On a shared machine two runs drift apart by more than most changes gain; the two
versions timed side by side in turns, each as a ratio to the same primal, show it.

Run: python -m benchmarks.ab [REV] [--budget SECONDS]   (REV defaults to HEAD)
"""

import argparse
import importlib
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import numpy as np

import dualbroadcast as db

from . import allocator
from . import models as m
from .timing import interleaved_medians

ROOT = Path(__file__).resolve().parent.parent


def committed_package(rev, folder):
    """``dualbroadcast`` as of ``rev``, imported from ``folder`` under the name ``dualbroadcast_base``."""
    archive = subprocess.run(["git", "archive", rev, "dualbroadcast"], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (Path(folder) / "dualbroadcast").rename(Path(folder) / "dualbroadcast_base")  # relative imports inside
    sys.path.insert(0, folder)
    return importlib.import_module("dualbroadcast_base")


def workloads():
    """(name, primal, gradient of a given library) for the models whose per-call cost matters."""
    xs16 = tuple(float(k) for k in range(16))
    x100 = np.random.default_rng(0).random(100)
    x1e6 = np.random.default_rng(0).random(1_000_000)
    rng = np.random.default_rng(0)
    W = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    xs = list(rng.standard_normal((8, 64, 128)).astype(np.float32))

    def eam(lib):
        return lambda x: m.eam_energy(lib.sum(m.rho, x))

    return [
        ("foldminus", lambda: m.foldminus(xs16), lambda lib: lambda: lib.gradient(m.foldminus, xs16)),
        ("qux 11", lambda: m.qux(True, True, 0.3),
         lambda lib: lambda: lib.gradient(lambda x: m.qux(True, True, x), 0.3)),
        ("EAM N=100", lambda: m.eam_numpy(x100), lambda lib: lambda f=eam(lib): lib.gradient(f, x100)),
        ("EAM N=1e6", lambda: m.eam_numpy(x1e6), lambda lib: lambda f=eam(lib): lib.gradient(f, x1e6)),
        ("slices B T=8", lambda: m.slices_columns(W, b, xs),
         lambda lib: lambda: lib.gradient(m.slices_columns, W, b, lib.cut(xs))),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", default="HEAD")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timed calls per column")
    parser.add_argument("--unpinned", action="store_true",
                        help="leave glibc's allocator at its defaults (see benchmarks/allocator.py)")
    args = parser.parse_args(argv)
    pinned = not args.unpinned and allocator.pin()
    print(f"allocator: {'pinned' if pinned else 'defaults'}; page faults per call of primal/{args.rev}/working tree "
          "in brackets")
    with tempfile.TemporaryDirectory() as folder:
        base = committed_package(args.rev, folder)
        print(f"{'':<14}{'primal':>10}{args.rev:>12}{'working tree':>14}{'tree/' + args.rev:>14}")
        for name, primal, gradient in workloads():
            fns = [primal, gradient(base), gradient(db)]
            p, old, new = interleaved_medians(fns, args.budget)
            faults = "/".join(f"{allocator.faults_per_call(fn):.0f}" for fn in fns)
            print(f"{name:<14}{p * 1e6:>8.2f}us{old / p:>11.2f}x{new / p:>13.2f}x{new / old:>14.3f}  [{faults}]")


if __name__ == "__main__":
    main()
