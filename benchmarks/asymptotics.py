"""Backward work proportional to what is active: constant arrays and slices in loops.

Run: python -m benchmarks.asymptotics
"""

import numpy as np

import dualbroadcast as db

from .models import (
    constant_index_model,
    constant_projection_model,
    slices_columns,
    slices_diag,
    slices_einsum,
    slices_hand_gradient,
)
from .timing import interleaved_medians


def constant_pullbacks(sizes, budget):
    """Pullback time of both constant-array models, per n (autograd's beside it if installed)."""
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        autograd = None
    print("\nPullback of p -> c[0]*p and p -> (c @ proj)*p, c constant of size n")
    print(f"{'n':>10}{'c[0]*p':>14}{'(c@proj)*p':>14}"
          + (f"{'autograd c[0]*p':>18}{'autograd proj':>16}" if autograd else ""))
    rows = {}
    for n in sizes:
        c = np.ones(n)
        proj = np.zeros(n)
        proj[0] = 1.0
        backs = [db.pullback(model, 1.0)[1] for model in (constant_index_model(c), constant_projection_model(c, proj))]
        if autograd:
            backs += [autograd.make_vjp(model)(1.0)[0]
                      for model in (lambda p: c[0] * p, lambda p: anp.dot(c, proj) * p)]
        row = interleaved_medians([lambda back=back: back(1.0) for back in backs], budget)
        rows[n] = row
        print(f"{n:>10.0e}"
              + "".join(f"{t * 1e6:>12.2f}us" if i < 2 else f"{t * 1e6:>16.2f}us" for i, t in enumerate(row)))
    first, last = rows[sizes[0]], rows[sizes[-1]]
    print(f"  growth from n={sizes[0]:.0e} to n={sizes[-1]:.0e}: "
          f"{last[0] / first[0]:.2f}x and {last[1] / first[1]:.2f}x (target <= 1.5x)")
    return rows


def slice_workload(T, budget):
    """The dense layer + column products, three ways: forward, gradient and their ratio."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    xs = rng.standard_normal((T, 64, 128)).astype(np.float32)
    xs_list = list(xs)
    hand = slices_hand_gradient(W, b, xs)
    print(f"\nSlice workload: W (32, 64), b (32,), {T} inputs (64, 128), float32; gradient w.r.t. W and b")
    print(f"{'variant':<28}{'forward':>12}{'gradient':>12}{'ratio':>8}{'prepared':>12}{'ratio':>8}{'max rel err':>14}")
    results = {}
    for name, model, data in (
        ("A sum(diag(y0.T @ yt))", slices_diag, xs_list),
        ("B columnwise dot", slices_columns, xs_list),
        ("C batched einsum", slices_einsum, xs),
    ):
        gW, gb = db.gradient(model, W, b, db.cut(data))[:2]
        prog = db.prepare_gradient(model, W, b, db.cut(data))
        err = max(_relative_error(g, h) for g, h in zip((gW, gb) + prog(W, b, db.cut(data))[:2], hand + hand))
        forward, gradient, prepared = interleaved_medians([
            lambda: model(W, b, data), lambda: db.gradient(model, W, b, db.cut(data)), lambda: prog(W, b, db.cut(data)),
        ], budget)
        results[name] = (forward, gradient, prepared)
        print(f"{name:<28}{forward * 1e3:>10.2f}ms{gradient * 1e3:>10.2f}ms{gradient / forward:>7.1f}x"
              f"{prepared * 1e3:>10.2f}ms{prepared / forward:>7.1f}x{err:>14.1e}")
    return results


def _relative_error(g, hand):
    return np.max(np.abs(g - hand)) / np.max(np.abs(hand))


def main(quick=False):
    budget = 0.2 if quick else 1.0
    constant_pullbacks([10**3, 10**4, 10**5, 10**6], budget)
    slice_workload(16 if quick else 256, budget)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
