"""The benchmark suite: every workload, every implementation, one run, one table.

Run: ``python -m benchmarks [--quick] [--json PATH] [--only eam,poly9] [--no-peers]``

Every workload row is timed for its NumPy primal (for the tiny scalar workloads:
the same function on plain Python floats), its hand-written gradient, and each
gradient implementation: dualbroadcast (``db.gradient`` on the plain NumPy code,
and ``db.sum`` where a fused broadcast helps), dualbroadcast prepared
(``db.prepare_gradient``), and the installed peers (JAX ``grad`` and
``jit(grad)``, PyTorch eager autograd, autograd).  Times are medians; the table
shows each as a ratio to the primal of the same row, measured in the same run,
with the absolute median beside it, warm (calls back to back) and cold (single
calls, the row's cells in turns, each after a cache flush: a user's loop).  Every implementation's gradient is checked
against the hand-written one before it is timed: a disagreement is printed as a
warning and its cell is marked ``!``; an exception marks the cell ``err``.
A column is ``-`` when the implementation is not installed or does not apply.
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import dualbroadcast as db

from . import allocator
from . import models as m
from . import peers as pm
from .progress import Progress
from .timing import interleaved_medians, warm_and_cold

COLUMNS = ("primal", "hand", "db", "db.sum", "db prep", "jax", "jax.jit", "torch", "autograd")
DEFAULT_JSON = Path(__file__).resolve().parent / "results.json"
QUICK_BUDGET, FULL_BUDGET = 0.06, 1.0  # seconds of timed calls per cell
QUICK_CAP, FULL_CAP = 2.0, 30.0  # a first call slower than this is the only call of its cell
QUICK_COLD_ROUNDS, FULL_COLD_ROUNDS = 5, 15  # single cold calls per cell (fewer where a row's calls are slow)


# --- timing -----------------------------------------------------------------------------------
def measure(fn, budget, max_runs=1000, cap=math.inf, warm=None):
    """(median seconds per call, calls timed, minor page faults per timed call) of ``fn`` over about
    ``budget`` seconds.

    One warm-up call first (compilation, caches).  Calls faster than 0.2 ms are
    batched so the clock's resolution does not matter; a call slower than the
    whole budget is timed once.  A warm-up slower than ``cap`` seconds is the only
    call: its time (warm-up included) is returned with 0 calls timed.  ``warm``:
    the seconds of a first call already made (it then is the warm-up).
    """
    if warm is None:
        start = time.perf_counter()
        fn()
        warm = time.perf_counter() - start
    if warm > cap:
        return warm, 0, None
    faults = allocator.minor_faults()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    faults = allocator.minor_faults() - faults
    inner = max(1, int(2e-4 / once))
    runs = min(max_runs, int(budget / (once * inner)))
    if runs < 1:
        return once, 1, faults
    samples = [] if runs >= 3 else [once]
    faults = allocator.minor_faults()
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples), runs * inner, (allocator.minor_faults() - faults) / (runs * inner)


def explained_call(prog, args):
    """``lambda: prog(*args)`` for a prepared gradient, which `ran_on` explains (`db.explain` of ``prog``)."""
    call = lambda: prog(*args)  # noqa: E731
    call.explained = lambda: db.explain(prog, *args)
    return call


# --- workloads --------------------------------------------------------------------------------
@dataclass
class Row:
    """One size of one workload: the callables to time, by column.

    ``impls`` maps a column to a factory returning the zero-argument callable
    that computes the gradient (``None``: the column does not apply).  Factories
    run (and so convert data, jit-compile, record) outside the timed region.
    """

    label: str
    primal: Callable
    hand: Callable | None  # None: no hand-written gradient (then ``reference`` gives the one to check against)
    impls: dict = field(default_factory=dict)
    tol: float = 1e-8
    params: dict = field(default_factory=dict)
    skip: dict = field(default_factory=dict)  # column -> why it is not run (too slow to be worth it)
    reference: Callable | None = None  # the gradient every column is checked against, if not ``hand``'s


@dataclass
class Workload:
    key: str
    title: str
    rows: list  # zero-argument builders of Row, built when the workload runs
    extra: tuple = ()  # columns beyond COLUMNS
    omit: tuple = ()  # columns of COLUMNS that do not apply
    in_turns: bool = False  # warm figures sampled in turns across the row's cells (`timing.interleaved_medians`)

    @property
    def columns(self):
        return tuple(c for c in COLUMNS if c not in self.omit) + self.extra


def _sci(n):
    e = round(math.log10(n))
    return f"1e{e}" if 10**e == n else f"{n}"


def _prepared(candidates, args):
    """The ``db prep`` factory: ``db.prepare_gradient`` on the first candidate that works."""
    if not hasattr(db, "prepare_gradient"):
        return None

    def factory():
        first_error = None
        for f in candidates:
            try:
                prog = db.prepare_gradient(f, *args)
                prog(*args)
                return explained_call(prog, args)
            except Exception as e:  # try the next formulation, report the first failure
                first_error = first_error or e
        raise first_error

    return factory


def _db_columns(plain, fused, args):
    """``db``, ``db.sum`` and ``db prep`` for a model written in plain NumPy (and fused).  ``db prep`` prepares
    the plain model (its elementwise steps fused into forward regions), the fused one if that fails."""
    impls = {"db": lambda: (lambda: db.gradient(plain, *args))}
    if fused is not None:
        impls["db.sum"] = lambda: (lambda: db.gradient(fused, *args))
    impls["db prep"] = _prepared([f for f in (plain, fused) if f is not None], args)
    return impls


def _peer_columns(peers, f, diff, consts=()):
    impls = {}
    for peer in peers:
        for column in peer.columns:
            impls[column] = (lambda peer=peer, column=column: _peer_call(peer, column, f, diff, consts))
    return impls


def _peer_call(peer, column, f, diff, consts):
    call = peer.make(column, f, diff, consts)
    return call, peer.to_numpy


def eam_workload(quick, peers):
    sizes = [100, 1000, 10**4] if quick else [100, 1000, 10**4, 10**5, 10**6]

    def build(n):
        x = np.random.default_rng(0).random(n)
        impls = _db_columns(m.eam_numpy, m.eam_dualbroadcast, (x,))
        impls.update(_peer_columns(peers, pm.eam, x))
        return Row(f"N={_sci(n)}", lambda: m.eam_numpy(x), lambda: m.eam_hand_gradient(x), impls, 1e-8, {"N": n})

    return Workload("eam", "EAM: P = sum(exp(-3(x+1))), E = P^2 + P^3 + P^4/4; dE/dx (float64)",
                    [lambda n=n: build(n) for n in sizes])


def eam_jvp_workload(quick, peers):
    """db.jvp of EAM along a random direction, beside JAX's jvp (issue 16: at most 1.0x the primal at N=1e6)."""

    def build(n):
        rng = np.random.default_rng(0)
        x, t = rng.random(n), rng.standard_normal(n)
        impls = {"db": lambda: (lambda: db.jvp(m.eam_numpy, (x,), (t,))[1]),
                 "db.sum": lambda: (lambda: db.jvp(m.eam_dualbroadcast, (x,), (t,))[1])}
        impls.update(_higher_order_peers(peers, pm.eam, (x, t),
                                         jax=lambda jax, f: lambda x, t: jax.jvp(f, (x,), (t,))[1],
                                         torch=lambda func, f: lambda x, t: func.jvp(f, (x,), (t,))[1]))
        return Row(f"N={_sci(n)}", lambda: m.eam_numpy(x), lambda: m.eam_hand_gradient(x) @ t, impls, 1e-8, {"N": n})

    return Workload("eam_jvp", "EAM jvp: dE/dx · t along a random t (float64; hand: the gradient · t)",
                    [lambda n=n: build(n) for n in (100, 10**6)])


def eam_hvp_workload(quick, peers):
    """db.hvp of EAM along a random vector, beside JAX's forward-over-reverse hvp (issue 16: at most 1.0x the
    primal at N=1e6; prepared, at most 3x at N=100)."""

    def build(n):
        rng = np.random.default_rng(0)
        x, v = rng.random(n), rng.standard_normal(n)

        def prepared():
            prog, out = db.prepare_hvp(m.eam_dualbroadcast, x), np.empty(n)
            return lambda: prog(x, v, out=out)

        impls = {"db": lambda: (lambda: db.hvp(m.eam_numpy, x, v)),
                 "db.sum": lambda: (lambda: db.hvp(m.eam_dualbroadcast, x, v)), "db prep": prepared}
        impls.update(_higher_order_peers(peers, pm.eam, (x, v),
                                         jax=lambda jax, f: lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1],
                                         torch=lambda func, f: lambda x, v: func.jvp(func.grad(f), (x,), (v,))[1]))
        return Row(f"N={_sci(n)}", lambda: m.eam_numpy(x), lambda: m.eam_hvp_hand(x, v), impls, 1e-8, {"N": n})

    return Workload("eam_hvp", "EAM hvp: H·v along a random v (float64; hand: E''(P) ∇P ∇Pᵀv + E'(P) diag(9r) v)",
                    [lambda n=n: build(n) for n in (100, 10**6)])


def exp_poly_hessian_workload(quick, peers):
    """The 10x10 Hessian of sum(exp(c0 + c1 x + ... + c9 x^9)) in the coefficients (issue 16: through db.sum at
    most 10x the primal at N=1e6, 20x at N=1e3)."""
    c = np.full(10, 0.01)

    def build(n):
        xs = np.random.default_rng(2).uniform(-1, 1, n)
        impls = {"db": lambda: (lambda: db.hessian(lambda c: m.exp_poly(c, xs), c)),
                 "db.sum": lambda: (lambda: db.hessian(lambda c: m.exp_poly_db(c, xs), c))}
        impls.update(_higher_order_peers(peers, pm.exp_poly, (c, xs), jax=lambda jax, f: jax.hessian(f),
                                         torch=lambda func, f: func.hessian(f)))
        return Row(f"N={_sci(n)}", lambda: m.exp_poly(c, xs), lambda: m.exp_poly_hessian_hand(c, xs), impls, 1e-8,
                   {"N": n})

    return Workload("exp_poly_hessian", "exp-poly Hessian: d²/dc² sum(exp(c0 + c1 x + ... + c9 x^9)), 10 coefficients",
                    [lambda n=n: build(n) for n in (10**3, 10**6)])


def _higher_order_peers(peers, model, args, jax, torch):
    """The peers' columns of a higher-order row: ``jax(jax, f)`` and ``torch(torch.func, f)`` transform ``f``, the
    model over that library's arrays, into what is timed on ``args`` (forward over reverse for an hvp, as both
    libraries' documentation writes it)."""
    impls = {}
    for peer in peers:
        if peer.name == "jax":
            impls.update(_jax_columns(peer, jax, model, args))
        elif peer.name == "torch":
            impls.update(_torch_columns(peer, torch, model, args))
    return impls


def _torch_columns(peer, transform, model, args):
    """The ``torch`` column timing ``transform(torch.func, f)(*args)`` for ``f`` the model on torch tensors (eager
    mode, as a PyTorch user calls torch.func).  The first torch.func call of an operation in a process sets it
    up, once (2.8 s here for the EAM jvp's, 4 s for the first call at all), so the factory calls it once before
    the first, timed call: what is timed is every later call's work, as a user's loop sees it."""
    converted = peer.convert(args)
    computed = transform(peer.torch.func, lambda *a: model(peer.xp, *a))

    def factory():
        computed(*converted)
        return (lambda: computed(*converted)), (lambda out: out.detach().numpy())

    return {"torch": factory}


def _jax_columns(peer, transform, model, args):
    """``jax`` and ``jax.jit`` columns timing ``transform(jax, f)(*args)`` for ``f`` the model in jax.numpy."""
    jax, xp = peer.jax, peer.xp
    converted = peer.convert(args)
    computed = transform(jax, lambda *a: model(xp, *a))
    compiled = jax.jit(computed)
    return {"jax": lambda: (lambda: jax.block_until_ready(computed(*converted))),
            "jax.jit": lambda: (lambda: jax.block_until_ready(compiled(*converted)))}


def poly9_workload(quick, peers):
    sizes = [1000, 10**5] if quick else [1000, 10**6]
    c = np.array(m.COEFFICIENTS)

    def build(n):
        xs = np.random.default_rng(1).uniform(-1, 1, n)
        args = (c, db.cut(xs))
        impls = _db_columns(m.poly9_numpy, m.poly9_all_uncut, args)
        impls.update(_peer_columns(peers, pm.poly9, c, (xs,)))
        return Row(f"N={_sci(n)}", lambda: m.poly9_numpy(c, xs), lambda: m.poly9_hand_gradient(xs), impls, 1e-8,
                   {"N": n})

    return Workload("poly9", "Poly9: sum over N points of c0 + c1 x + ... + c9 x^9; d/dc (10 coefficients, float64)",
                    [lambda n=n: build(n) for n in sizes])


def _image():
    return np.random.default_rng(2).standard_normal(m.IMAGE_SHAPE).astype(np.float32)


def sum_of_squares_workload(quick, peers):
    return _image_reduction("sumsq", "Sum of squares: sum(x**2), x float32 of shape (128, 1, 28, 28); d/dx",
                            m.sum_of_squares, m.sum_of_squares_dualbroadcast, m.sum_of_squares_hand_gradient,
                            pm.sum_of_squares, peers)


def sum_arctan2_workload(quick, peers):
    return _image_reduction("arctan2", "Sum of arctan2(x, 2), x float32 of shape (128, 1, 28, 28); d/dx",
                            m.sum_arctan2, m.sum_arctan2_dualbroadcast, m.sum_arctan2_hand_gradient,
                            pm.sum_arctan2, peers)


def _image_reduction(key, title, primal, dualbroadcast_model, hand, peer_model, peers):
    """An elementwise reduction over the float32 image batch (128, 1, 28, 28)."""

    def build():
        x = _image()
        impls = _db_columns(primal, dualbroadcast_model, (x,))
        impls.update(_peer_columns(peers, peer_model, x))
        return Row("128x1x28x28", lambda: primal(x), lambda: hand(x), impls, 1e-5, {"shape": list(m.IMAGE_SHAPE)})

    return Workload(key, title, [build])


def constants_workloads(quick, peers):
    sizes = [10**3, 10**6] if quick else [10**3, 10**4, 10**5, 10**6]

    def build(n, projection):
        c = np.ones(n)
        proj = np.zeros(n)
        proj[0] = 1.0
        if projection:
            model, consts, peer_f = m.constant_projection_model(c, proj), (c, proj), pm.constant_projection
            hand = lambda: c @ proj  # noqa: E731
        else:
            model, consts, peer_f = m.constant_index_model(c), (c,), pm.constant_index
            hand = lambda: c[0]  # noqa: E731
        impls = _db_columns(model, None, (1.0,))

        def back_only():
            _, back = db.pullback(model, 1.0)
            return lambda: back(1.0)

        impls["db back()"] = back_only
        impls.update(_peer_columns(peers, peer_f, 1.0, consts))
        return Row(f"n={_sci(n)}", lambda: model(1.0), hand, impls, 1e-12, {"n": n})

    return [
        Workload("const_index", "Constant array: p -> c[0] * p, c constant of size n; d/dp at p = 1.0 (float64)",
                 [lambda n=n: build(n, False) for n in sizes], extra=("db back()",)),
        Workload("const_proj",
                 "Constant arrays: p -> (c @ proj) * p, c and one-hot proj constant of size n; d/dp (float64)",
                 [lambda n=n: build(n, True) for n in sizes], extra=("db back()",)),
    ]


def slices_workload(quick, peers):
    T = 16 if quick else 256
    variants = (
        ("A sum(diag(y0.T @ yt))", m.slices_diag, pm.slices_diag, True),
        ("B columnwise dot", m.slices_columns, pm.slices_columns, True),
        ("C batched einsum", m.slices_einsum, pm.slices_einsum, False),
    )

    def build(name, model, peer_f, as_list):
        rng = np.random.default_rng(0)
        W = rng.standard_normal((32, 64)).astype(np.float32)
        b = rng.standard_normal(32).astype(np.float32)
        xs = rng.standard_normal((T, 64, 128)).astype(np.float32)
        data = list(xs) if as_list else xs
        impls = _db_columns(model, None, (W, b, db.cut(data)))
        impls.update(_peer_columns(peers, peer_f, (W, b), (data,)))
        skip = {}
        if peer_f is pm.slices_columns and T > 32:  # 128 T dot products of slices
            skip = {"jax": f"eager jax.grad takes ~0.5 s per input: ~{T // 2} s a call",
                    "jax.jit": f"XLA compiles ~0.9 s per input: ~{T} s"}
        return Row(name, lambda: model(W, b, data), lambda: m.slices_hand_gradient(W, b, xs), impls, 2e-4,
                   {"T": T, "variant": name[0]}, skip)

    return Workload("slices", f"Slices in a loop: dense layer over T={T} inputs (64, 128), then sum_t <y0, yt>; "
                              "d/dW, d/db (float32)",
                    [lambda v=v: build(*v) for v in variants])


def qux_workload(quick, peers):
    def build(a, b):
        x = 0.7
        f = lambda x: m.qux(a, b, x)  # noqa: E731
        impls = _db_columns(f, None, (x,))
        impls.update(_peer_columns(peers, lambda xp, x: pm.qux(xp, a, b, x), x))
        inner = "sin" if a else "cos"
        outer = "sech" if b else "tanh"
        return Row(f"{outer}({inner} x)", lambda: f(x), lambda: m.qux_hand_gradient(a, b, x), impls, 1e-12,
                   {"a": a, "b": b, "x": x})

    return Workload("qux", "qux(a, b, x) = (sech if b else tanh)(sin(x) if a else cos(x)), x a Python float; d/dx",
                    [lambda a=a, b=b: build(a, b) for a in (True, False) for b in (True, False)])


def foldminus_workload(quick, peers):
    def build():
        xs = tuple(float(v) for v in np.random.default_rng(3).standard_normal(16))
        impls = _db_columns(m.foldminus, None, (xs,))
        impls.update(_peer_columns(peers, pm.foldminus, xs))
        return Row("16 floats", lambda: m.foldminus(xs), lambda: m.foldminus_hand_gradient(xs), impls, 1e-12,
                   {"n": 16})

    return Workload("foldminus", "foldminus(xs) = xs[0] - xs[1] - ... - xs[15], a tuple of 16 Python floats; d/dxs",
                    [build])


def workloads(quick, peers):
    return [
        eam_workload(quick, peers),
        eam_jvp_workload(quick, peers),
        eam_hvp_workload(quick, peers),
        exp_poly_hessian_workload(quick, peers),
        poly9_workload(quick, peers),
        sum_of_squares_workload(quick, peers),
        sum_arctan2_workload(quick, peers),
        *constants_workloads(quick, peers),
        slices_workload(quick, peers),
        qux_workload(quick, peers),
        foldminus_workload(quick, peers),
    ]


GROUPS = {"realistic": ("logistic", "gmm", "mlp", "pairs", "rk4", "rosenbrock", "adam", "trust_ncg")}
WORKLOAD_KEYS = ("eam", "eam_jvp", "eam_hvp", "exp_poly_hessian", "poly9", "sumsq", "arctan2", "const_index",
                 "const_proj", "slices", "qux", "foldminus", *GROUPS["realistic"])


# --- checking ---------------------------------------------------------------------------------
def _leaves(tree):
    """Flatten tuples and lists of gradients into NumPy arrays (``None`` leaves dropped)."""
    if tree is None:
        return []
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [np.asarray(tree)]


def max_relative_error(got, expected):
    """max |got - expected| / max |expected| over the leaves (inf on a structure or shape mismatch)."""
    got, expected = _leaves(got), _leaves(expected)
    if len(got) != len(expected):
        return math.inf
    worst = 0.0
    for g, e in zip(got, expected):
        if g.shape != e.shape:
            return math.inf
        e64 = e.astype(np.float64)
        scale = max(float(np.max(np.abs(e64))) if e.size else 0.0, 1e-300)
        diff = float(np.max(np.abs(g.astype(np.float64) - e64))) if e.size else 0.0
        if not math.isfinite(diff):
            return math.inf
        worst = max(worst, diff / scale)
    return worst


# --- running ----------------------------------------------------------------------------------
def run(quick=True, only=None, peers=("jax", "torch", "autograd"), budget=None, progress=True, stream=None,
        cap=None, pin_allocator=True, more=None):
    """Run the suite and return the results (a JSON-ready dict; see `format_table`).

    ``only``: workload keys to run (default all, `WORKLOAD_KEYS`; a key of `GROUPS`
    stands for its workloads); ``peers``: the
    peer libraries to try (absent ones are skipped); ``budget``: seconds of timed
    calls per cell (default 0.06 quick, 1.0 full); ``cap``: a first call slower
    than this many seconds is the only call of its cell (default 2 quick, 30 full;
    its cell is marked ``~``); ``pin_allocator``: hold glibc's allocator in one state
    for the run (`allocator.pin`: freed temporaries stay mapped, no page faults per call); ``more``:
    ``more(quick, peers)`` lists workloads built on this module's rows (`benchmarks.realistic`'s, which
    ``python -m benchmarks`` passes: that module imports this one, so this one does not import it).
    """
    allocator_state = ("pinned" if allocator.pin() else "defaults (not glibc)") if pin_allocator else "defaults"
    only = None if only is None else [key for k in only for key in GROUPS.get(k, (k,))]
    budget = budget if budget is not None else (QUICK_BUDGET if quick else FULL_BUDGET)
    cap = cap if cap is not None else (QUICK_CAP if quick else FULL_CAP)
    cold_rounds = QUICK_COLD_ROUNDS if quick else FULL_COLD_ROUNDS
    started = time.perf_counter()
    unknown = set(only or ()) - set(WORKLOAD_KEYS)
    if unknown:
        raise ValueError(f"unknown workload(s) {sorted(unknown)}; choose from {', '.join(WORKLOAD_KEYS)} "
                         f"or a group ({', '.join(GROUPS)})")
    found, missing = pm.available(tuple(peers or ()))
    listed = workloads(quick, found) + (more(quick, found) if more else [])
    chosen = [w for w in listed if only is None or w.key in only]
    results = {
        "meta": {**_meta(quick, budget, cap, found, missing), "allocator": allocator_state},
        "columns": list(COLUMNS),
        "workloads": [],
        "warnings": [],
    }
    total = sum(len(w.rows) * len(w.columns) for w in chosen)
    with Progress(total, stream=stream, enabled=progress) as bar:
        for w in chosen:
            entry = {"key": w.key, "title": w.title, "columns": list(w.columns), "rows": [], "details": w.in_turns}
            results["workloads"].append(entry)
            for build in w.rows:
                try:
                    row = build()
                except RuntimeError as e:  # a row that cannot be checked (realistic: no JAX, no autograd)
                    message = f"warning: {w.key}: row not run: {e}"
                    results["warnings"].append(message)
                    bar.write(message)
                    for _ in w.columns:
                        bar.advance()
                    continue
                entry["rows"].append(_run_row(w, row, budget, cap, bar, results["warnings"], cold_rounds))
    results["meta"]["wall_seconds"] = round(time.perf_counter() - started, 2)
    return results


def _run_row(w, row, budget, cap, bar, warnings, cold_rounds=QUICK_COLD_ROUNDS):
    cells = {}
    timed = {}  # column -> its callable, for the cold figures
    reference = row.reference() if row.reference is not None else None
    for column in w.columns:
        bar.step(f"{w.key} {row.label} {column}")
        cells[column] = cell = {}
        started = time.perf_counter()
        try:
            if column == "primal":
                fn, warm = row.primal, None
            elif column == "hand":
                if row.hand is None:
                    cell["status"] = "n/a"
                    bar.advance()
                    continue
                fn = row.hand
                out, warm = _first_call(fn)
                reference = out if reference is None else reference
            else:
                factory = row.impls.get(column)
                if factory is not None and column in row.skip:
                    cell.update(status="skipped", reason=row.skip[column])
                    bar.advance()
                    continue
                if factory is None:
                    cell["status"] = "missing" if column in _optional_columns() else "n/a"
                    bar.advance()
                    continue
                made = factory()
                fn, convert = made if isinstance(made, tuple) else (made, lambda out: out)
                out, warm = _first_call(fn)
                cell["first_seconds"] = time.perf_counter() - started  # preparing, compiling, the first call
                if column.startswith("db"):
                    cell["backend"] = ran_on(fn)
                err = max_relative_error(convert(out), reference)
                cell["max_rel_err"] = err if math.isfinite(err) else "inf (shapes or structure differ, or not finite)"
                if not err <= row.tol:
                    cell["status"] = "mismatch"
                    whose = "hand-written" if row.reference is None else "reference"
                    message = (f"warning: {w.key} {row.label}: {column} gradient disagrees with the {whose} "
                               f"one (max relative error {err:.3g} > {row.tol:g}); its cell is marked '!'")
                    warnings.append(message)
                    bar.write(message)
            seconds, calls, faults = measure(fn, budget, cap=cap, warm=warm)
            cell.update(seconds=seconds, calls=calls, faults=faults)
            if calls and seconds <= budget / 2:  # a slower cell's warm figure is a few single calls already
                timed[column] = fn
            cell.setdefault("status", "ok")
            cell["wall_seconds"] = round(time.perf_counter() - started, 3)
        except Exception as e:
            cell.clear()
            cell.update(status="error", error=f"{type(e).__name__}: {e}"[:500])
            message = f"warning: {w.key} {row.label}: {column} failed: {cell['error'][:200]}"
            warnings.append(message)
            bar.write(message)
        bar.advance()
    if w.in_turns and timed:
        _warm_in_turns(cells, timed, budget)
    _cold(cells, timed, budget, cold_rounds)
    base, cold_base = cells["primal"].get("seconds"), cells["primal"].get("cold_seconds")
    for cell in cells.values():
        if base and "seconds" in cell:
            cell["ratio"] = cell["seconds"] / base
        if cold_base and "cold_seconds" in cell:
            cell["cold_ratio"] = cell["cold_seconds"] / cold_base
    result = {"label": row.label, "params": row.params, "cells": cells}
    prepared, jitted = cells.get("db prep", {}).get("seconds"), cells.get("jax.jit", {}).get("seconds")
    if prepared and jitted:
        result["prep_over_jit"] = prepared / jitted
    return result


def ran_on(fn):
    """What a dualbroadcast column's call ran on: a prepared program's forward regions and their backends
    (``fn.explained()``, `db.explain` of its program), else the backends of the `db.sum`/`db.broadcast` kernels
    it called (`db.kernel_log`), else "numpy" (NumPy's own operations, recorded on the tape); a loop of small
    steps, what runs it (its runners' times and compile times)."""
    explained = getattr(fn, "explained", None)
    if explained is not None:
        explanation = explained()
        regions = explanation.regions
        backends = sorted({r.backend for r in regions})
        loop = f"; {explanation.loop.describe()}" if getattr(explanation, "loop", None) is not None else ""
        return f"replay, {len(regions)} region(s)" + (f": {', '.join(backends)}" if backends else "") + loop
    with db.kernel_log() as calls:
        fn()
    return ", ".join(sorted({c.backend for c in calls})) or "numpy"


def _warm_in_turns(cells, timed, budget):
    """The warm figures of the cells in ``timed`` re-taken in turns (`timing.interleaved_medians`): their
    ratios then do not carry the machine's drift between one cell's samples and the next's."""
    for column, seconds in zip(timed, interleaved_medians(list(timed.values()), budget)):
        cells[column]["seconds"] = seconds


def _cold(cells, timed, budget, rounds):
    """Each timed cell's cold figure (``cold_seconds``): the median of single calls, the row's cells in turns,
    each call after a cache flush (`timing.warm_and_cold`), as in a user's loop where other work comes
    between gradient calls.  At least 3 rounds; fewer than ``rounds`` where they would take more than twice
    the row's warm budget.  Cells slower than half the budget have none (their warm figure is a few calls)."""
    if "primal" not in timed:
        return
    per_round = sum(cells[c]["seconds"] for c in timed) + 0.005 * len(timed)  # the flushes: ~4 ms each
    rounds = max(3, min(rounds, int(2 * budget * len(timed) / per_round)))
    try:
        _, cold = warm_and_cold(list(timed.values()), rounds, warm_calls=0)
    except Exception as e:  # a cell that failed here ran in its warm pass: keep its warm figure
        for column in timed:
            cells[column]["cold_error"] = f"{type(e).__name__}: {e}"[:200]
        return
    for column, seconds in zip(timed, cold):
        cells[column].update(cold_seconds=seconds, cold_calls=rounds)


def _first_call(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _optional_columns():
    return {"db prep", "jax", "jax.jit", "torch", "autograd"}


def _meta(quick, budget, cap, found, missing):
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "quick": quick,
        "budget_seconds_per_cell": budget,
        "cap_seconds_per_call": cap,
        "load_average_at_start": _load_average(),
        "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                                   "NUMEXPR_NUM_THREADS") if k in os.environ},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "dualbroadcast": getattr(db, "__version__", _package_version("dualbroadcast")),
        "prepare_gradient": hasattr(db, "prepare_gradient"),
        "peers": {p.name: p.version for p in found},
        "peers_missing": missing,
    }
    try:
        import subprocess

        meta["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=Path(__file__).resolve().parent, timeout=5).stdout.strip()
    except Exception:
        pass
    return meta


def _load_average():
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _package_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "?"


# --- reporting --------------------------------------------------------------------------------
def human(seconds):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g}{unit}"
    return f"{seconds / 1e-9:.3g}ns"


def _ratio(r):
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def format_cell(cell, primal=False):
    status = cell.get("status")
    if status == "error":
        return "err"
    if status == "skipped":
        return "skip"
    if "seconds" not in cell:
        return "-"
    mark = "!" if status == "mismatch" else ""
    mark += "~" if cell.get("calls") == 0 else ""
    faults = f" {_faults(cell['faults'])}pf" if cell.get("faults") is not None else ""
    if primal or "ratio" not in cell:
        cold = f"/{human(cell['cold_seconds'])}" if "cold_seconds" in cell else ""
        return human(cell["seconds"]) + cold + mark + faults
    cold = f"/{_ratio(cell['cold_ratio'])}" if "cold_ratio" in cell else ""
    return f"{_ratio(cell['ratio'])}{cold} {human(cell['seconds'])}{mark}{faults}"


def _faults(per_call):
    return f"{per_call:.0f}" if per_call >= 10 or per_call < 0.05 else f"{per_call:.1f}"


def _details(w):
    """Lines under a detailed workload's table: each row's first calls (preparing or compiling included) and
    what its dualbroadcast columns ran on."""
    lines = []
    for row in w["rows"]:
        first = [f"{c} {human(cell['first_seconds'])}" for c, cell in row["cells"].items() if "first_seconds" in cell]
        ran = [f"{c}: {cell['backend']}" for c, cell in row["cells"].items() if "backend" in cell]
        lines.append(f"  {row['label']}: first call {', '.join(first)}; ran on {'; '.join(ran) or '-'}")
    return lines


def format_table(results):
    """The results as text: one table per workload, ratios to the primal with absolute medians."""
    meta = results["meta"]
    lines = [
        f"dualbroadcast benchmarks ({'quick' if meta['quick'] else 'full'}): ratio to the NumPy primal of the same "
        f"row, warm/cold (warm: calls back to back; cold: single calls in turns, each after a cache flush), "
        f"the warm median time beside it (the primal: warm/cold times) and the minor page faults per warm call "
        f"('pf'); "
        f"'!' = gradient disagrees with the hand-written one, 'err' = failed, "
        f"'~' = one slow first call (warm-up included), 'skip' = too slow to run (reason in the JSON), "
        f"'-' = not installed / not applicable",
        f"numpy {meta['numpy']}, python {meta['python']}, {meta['cpus']} cpus; peers: "
        + (", ".join(f"{k} {v}" for k, v in meta["peers"].items()) or "none")
        + (f"; absent: {', '.join(meta['peers_missing'])}" if meta["peers_missing"] else "")
        + ("" if meta["prepare_gradient"] else "; db.prepare_gradient: absent")
        + (f"; {', '.join(f'{k}={v}' for k, v in meta['thread_env'].items())}" if meta.get("thread_env") else "")
        + f"; allocator: {meta.get('allocator', '?')}",
    ]
    for w in results["workloads"]:
        columns = w["columns"]
        against_jit = any("prep_over_jit" in row for row in w["rows"])
        table = [[""] + columns + ["prep/jax.jit"] * against_jit]
        for row in w["rows"]:
            table.append([row["label"]] + [format_cell(row["cells"][c], primal=(c == "primal")) for c in columns]
                         + [f"{row['prep_over_jit']:.2f}" if "prep_over_jit" in row else "-"] * against_jit)
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines.append("")
        lines.append(w["title"])
        for r in table:
            lines.append(r[0].ljust(widths[0]) + "".join("  " + v.rjust(wd) for v, wd in zip(r[1:], widths[1:])))
        if w.get("details"):
            lines.extend(_details(w))
    load = meta.get("load_average_at_start")
    if load is not None and load > 0.5:
        lines.append("")
        lines.append(f"note: the load average was {load} when the run started: other processes shared the "
                     f"{meta['cpus']} cores, so the timings (and multithreaded BLAS above all) are noisy"
                     + ("" if meta.get("thread_env") else "; --threads 1 avoids the BLAS stalls"))
    if results.get("warnings"):
        lines.append("")
        lines.extend(results["warnings"])
    lines.append("")
    lines.append(f"wall time {meta.get('wall_seconds', float('nan')):.1f}s")
    return "\n".join(lines)


def write_json(results, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=_json_default) + "\n")
    return path


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def main(argv=None, more=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and short time budgets (< 3 minutes)")
    parser.add_argument("--json", default=str(DEFAULT_JSON),
                        help=f"where to write the results (default {DEFAULT_JSON})")
    parser.add_argument("--only", default=None, help=f"comma-separated workloads among {','.join(WORKLOAD_KEYS)}, "
                                                     f"or a group: {','.join(GROUPS)}")
    parser.add_argument("--no-peers", action="store_true", help="do not import JAX, PyTorch or autograd")
    parser.add_argument("--budget", type=float, default=None, help="seconds of timed calls per cell")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for BLAS, OpenMP and numexpr (only through python -m benchmarks, which sets "
                             "OMP/OPENBLAS/MKL/NUMEXPR_NUM_THREADS before NumPy loads); 1 steadies timings on a "
                             "busy machine")
    parser.add_argument("--unpinned", action="store_true",
                        help="leave glibc's allocator at its defaults: freed blocks of 128 KiB or more go back to the "
                             "kernel and fault in again on the next call (see benchmarks/allocator.py)")
    args = parser.parse_args(argv)
    only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only else None
    results = run(quick=args.quick, only=only, peers=() if args.no_peers else ("jax", "torch", "autograd"),
                  budget=args.budget, progress=not args.no_progress, pin_allocator=not args.unpinned, more=more)
    print(format_table(results))
    path = write_json(results, args.json)
    print(f"results written to {path}")
    return 0
