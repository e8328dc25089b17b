"""``python -m benchmarks.scale_out [--n 1e8] [--chunk 2e7] [--quick]``: gradients over Dask arrays (issue 17).

Every row runs in a subprocess of its own, which reports its best time of a few runs and its peak resident
memory (``resource.getrusage``), so one row's arrays do not count in another's memory:

- **in memory**: ``db.value_and_gradient`` of ``(db.sum(f, r, c0..c9) - t)²`` over N points held in a NumPy
  array, ten parameters (the blocked backend, forced: the automatic choice would time NumPy's backend on
  its first call, whose temporaries at N=1e8 take gigabytes);
- **Dask, same data**: the same with ``r`` a ``da.from_array`` of that array (threaded scheduler): the
  throughput comparison, per element (its memory counts the copy ``da.from_array`` makes);
- **Dask, generated**: ``r`` drawn chunk by chunk by ``da.random`` (the data never exists whole): the
  memory row, N up to 1e9 (``--n 1e9``);
- **workers 1 / 2**: the generated row on a ``LocalCluster`` of 1 and 2 worker processes, one thread each
  and kernels on one thread (`chunked.TASK_THREADS`), 20 chunks: the scaling (the workers' memory is not in
  the peak RSS column, which is the client's);
- **sum_blocks MLP**: a 2-layer MLP's mean squared error over a 2e6 x 32 Dask array in chunks of 1e5 rows
  against ``db.gradient`` of the same program on the NumPy arrays (time and largest relative difference),
  on the threaded scheduler and on a ``LocalCluster`` of 2 worker processes (one thread each; BLAS limited to
  one thread inside tasks, as the kernels are);
- **Hessian**: ``db.hessian`` in the ten parameters over N/5 points (2e7 by default), in memory and on a Dask
  array of the same data in 10 chunks (time, and the largest difference relative to the largest entry).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def term(r, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
    """Ten parameters, a pair potential's shape: two exponentials, a rational term, a polynomial, a cosine."""
    return c0 * np.exp(-c1 * r) + c2 * np.exp(-c3 * r) + c4 / (r + c5) + c6 * r + c7 * r * r + c8 * np.cos(c9 * r)


THETA = [0.1 * (k + 1) for k in range(10)]


def loss_of(db, r, **kwargs):
    def loss(c):
        return (db.sum(term, r, *c, **kwargs) - 1.0) ** 2
    return loss


def best_time(fn, runs):
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


# --- the rows, each run in its own process -------------------------------------------------------------
def row_memory(n, chunk, runs):
    import dualbroadcast as db
    r = np.random.default_rng(0).uniform(2.0, 6.0, n)
    seconds, (v, _) = best_time(lambda: db.value_and_gradient(loss_of(db, r, backend="blocked"), THETA), runs)
    return seconds, float(v)


def row_dask_same(n, chunk, runs):
    import dask.array as da

    import dualbroadcast as db
    r = da.from_array(np.random.default_rng(0).uniform(2.0, 6.0, n), chunks=chunk)
    seconds, (v, _) = best_time(lambda: db.value_and_gradient(loss_of(db, r), THETA), runs)
    return seconds, float(v)


def row_dask_generated(n, chunk, runs, workers=None):
    import dask.array as da

    import dualbroadcast as db
    client = None
    if workers:
        from distributed import Client, LocalCluster
        client = Client(LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                     dashboard_address=None))
    r = da.random.default_rng(0).uniform(2.0, 6.0, size=n, chunks=chunk)
    seconds, (v, _) = best_time(lambda: db.value_and_gradient(loss_of(db, r), THETA), runs)
    if client is not None:
        client.close()
    return seconds, float(v)


def mlp_loss(block, p):
    x, t = block
    h = np.tanh(x @ p["W1"] + p["b1"])
    return np.sum((h @ p["W2"] + p["b2"] - t) ** 2)


def mlp_data(n):
    rng = np.random.default_rng(1)
    x, t = rng.normal(size=(n, 32)), rng.normal(size=n)
    params = {"W1": rng.normal(size=(32, 64)) * 0.2, "b1": np.zeros(64), "W2": rng.normal(size=64) * 0.2, "b2": 0.0}
    return x, t, params


def row_mlp_memory(n, chunk, runs):
    import dualbroadcast as db
    x, t, params = mlp_data(n)
    seconds, g = best_time(lambda: db.gradient(lambda p: mlp_loss((x, t), p) / n, params), runs)
    np.savez(os.path.join(os.environ.get("TMPDIR", "/tmp"), "scale_out_mlp.npz"), **g)
    return seconds, None


def row_mlp_blocks(n, chunk, runs, workers=None):
    import dask.array as da

    import dualbroadcast as db
    if workers:
        from distributed import Client, LocalCluster
        client = Client(LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                     dashboard_address=None))
    x, t, params = mlp_data(n)
    data = (da.from_array(x, chunks=(chunk, 32)), da.from_array(t, chunks=chunk))
    if workers:  # the data on the workers before the clock starts
        from distributed import wait
        data = tuple(client.persist(list(data)))
        wait(data)
    seconds, g = best_time(lambda: db.gradient(lambda p: db.sum_blocks(mlp_loss, data, p) / n, params), runs)
    g0 = np.load(os.path.join(os.environ.get("TMPDIR", "/tmp"), "scale_out_mlp.npz"))
    worst = max(float(np.max(np.abs(g[k] - g0[k])) / np.max(np.abs(g0[k]))) for k in g)
    if workers:
        client.close()
    return seconds, worst


def row_hessian(n, chunk, runs, on_dask=True):
    """The 10-parameter Hessian of the loss over N points: on a Dask array (each chunk's second-order kernel,
    tree-summed), or in memory (saved, for the Dask row's difference)."""
    import dask.array as da

    import dualbroadcast as db
    r = np.random.default_rng(0).uniform(2.0, 6.0, n)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "scale_out_hessian.npy")
    if not on_dask:
        seconds, h = best_time(lambda: db.hessian(lambda c: loss_of(db, r, backend="blocked")(list(c)),
                                                  np.array(THETA)), runs)
        np.save(path, h)
        return seconds, None
    r = da.from_array(r, chunks=chunk)
    seconds, h = best_time(lambda: db.hessian(lambda c: loss_of(db, r)(list(c)), np.array(THETA)), runs)
    h0 = np.load(path)
    return seconds, float(np.max(np.abs(h - h0)) / np.max(np.abs(h0)))


ROWS = {"memory": row_memory, "dask_same": row_dask_same, "generated": row_dask_generated,
        "mlp_memory": row_mlp_memory, "mlp_blocks": row_mlp_blocks,
        "hessian_memory": lambda n, chunk, runs: row_hessian(n, chunk, runs, False), "hessian_dask": row_hessian}
# and "workersK" / "mlp_workersK": K worker processes


def row(name):
    """The function of row ``name``."""
    if name.startswith("workers"):
        return lambda n, chunk, runs: row_dask_generated(n, chunk, runs, int(name[len("workers"):]))
    if name.startswith("mlp_workers"):
        return lambda n, chunk, runs: row_mlp_blocks(n, chunk, runs, int(name[len("mlp_workers"):]))
    return ROWS[name]


def run_row(name, n, chunk, runs):
    """Run one row in a subprocess: ``(seconds, result, peak RSS in bytes)``."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.scale_out", "--row", name, "--n", str(n), "--chunk",
                           str(chunk), "--runs", str(runs)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    if done.returncode:
        raise RuntimeError(f"row {name} failed:\n{done.stderr}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["seconds"], out["result"], out["peak"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1e8, help="points of the potential rows")
    parser.add_argument("--chunk", type=float, default=2e7, help="points per chunk of the generated rows")
    parser.add_argument("--quick", action="store_true", help="1e7 points, small MLP: a check that it runs")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n, chunk = int(args.n), int(args.chunk)
    if args.row:  # inside the row's own process
        seconds, result = row(args.row)(n, chunk, args.runs)
        print(json.dumps({"seconds": seconds, "result": result,
                          "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
        return 0
    if args.quick:
        n, chunk = 10**7, 2 * 10**6
    mlp_n, mlp_chunk = (2 * 10**5, 10**4) if args.quick else (2 * 10**6, 10**5)
    same_chunk = min(chunk, 10**7)
    rows = [
        (f"in memory, N={n:.0e} (blocked)", "memory", n, same_chunk, 3),
        (f"Dask, same data, chunks {same_chunk:.0e}", "dask_same", n, same_chunk, 3),
        (f"Dask, generated, chunks {chunk:.0e}", "generated", n, chunk, 2),
        (f"1 worker process, N={n // 5:.0e}", "workers1", n // 5, n // 100, 3),
        (f"2 worker processes, N={n // 5:.0e}", "workers2", n // 5, n // 100, 3),
        (f"MLP in memory, {mlp_n:.0e} x 32", "mlp_memory", mlp_n, mlp_chunk, 2),
        (f"MLP sum_blocks, chunks {mlp_chunk:.0e} rows", "mlp_blocks", mlp_n, mlp_chunk, 2),
        ("MLP sum_blocks, 2 worker processes", "mlp_workers2", mlp_n, mlp_chunk, 2),
        (f"Hessian in memory, N={n // 5:.0e} (blocked)", "hessian_memory", n // 5, n // 50, 2),
        (f"Hessian, Dask, same data, chunks {n // 50:.0e}", "hessian_dask", n // 5, n // 50, 2),
    ]
    print(f"{'row':44s} {'seconds':>9s} {'ns/element':>11s} {'peak RSS':>10s}  note")
    measured = {}
    for label, name, rows_n, rows_chunk, runs in rows:
        seconds, result, peak = run_row(name, rows_n, rows_chunk, runs)
        measured[name] = seconds
        note = ""
        if name == "dask_same":
            note = f"{seconds / measured['memory']:.2f}x in memory, per element"
        elif name == "generated":
            note = f"data would be {8 * rows_n / 1e9:.1f} GB"
        elif name == "workers2":
            note = f"{measured['workers1'] / seconds:.2f}x faster than 1 worker"
        elif name == "hessian_dask":
            note = f"{seconds / measured['hessian_memory']:.2f}x in memory; max relative difference {result:.1e}"
        elif name in ("mlp_blocks", "mlp_workers2"):
            note = f"{seconds / measured['mlp_memory']:.2f}x in memory; max relative difference {result:.1e}"
        print(f"{label:44s} {seconds:9.3f} {1e9 * seconds / rows_n:11.2f} {peak / 2**30:8.2f} GB  {note}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
