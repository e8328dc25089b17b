"""Write the notebooks in this folder, without outputs: ``python notebooks/make_notebooks.py``.

The notebooks are generated so that they stay small, reviewable and free of
outputs; edit the cells here and run this script again.  Each one runs top to
bottom in a fresh kernel in under a minute (``QUICK = True``) from the repository
root or from this folder; ``tests/docs/test_notebooks.py`` executes all of them.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = '''\
import sys
from pathlib import Path

# Run from the repository root or from notebooks/: the `benchmarks` package lives in the root.
ROOT = Path.cwd() if (Path.cwd() / "benchmarks").is_dir() else Path.cwd().parent
sys.path.insert(0, str(ROOT))

import numpy as np
import dualbroadcast as db'''

PLOT = '''\
import matplotlib
import matplotlib.pyplot as plt'''


def md(text):
    return new_markdown_cell(text.strip("\n"))


def code(text):
    return new_code_cell(text.strip("\n"))


def quickstart():
    return [
        md('''
# dualbroadcast in five minutes

dualbroadcast differentiates plain NumPy code: operators, `np.*` functions and Python
control flow.  Reverse mode runs over array operations; elementwise functions passed to
`db.sum` / `db.broadcast` run in forward mode as one fused kernel.
'''),
        code(SETUP),
        md('''
## Gradients

`db.gradient(f, *args)` differentiates a real scalar `f` with respect to every argument.
One argument gives one gradient, several give a tuple.  Gradients have the shapes and
dtypes of their arguments.
'''),
        code('''
def loss(x, data):
    return np.sum((np.sin(x) - data) ** 2)

x, data = np.linspace(0.0, 1.0, 5), np.ones(5)
gx, gdata = db.gradient(loss, x, data)
print("d loss / dx    =", gx)
print("d loss / ddata =", gdata)
print("by hand        =", 2 * (np.sin(x) - data) * np.cos(x))
'''),
        code('''
v, g = db.value_and_gradient(lambda x: loss(x, data), x)
print(v, g)

# float32 stays float32, a Python float gives a Python float
print(db.gradient(lambda x: np.sum(x**2), np.ones(3, np.float32)).dtype,
      type(db.gradient(lambda t: np.tanh(t) * 3, 0.5)))

# Python control flow on values just works: the tape records what ran
def clipped(t):
    return t**2 if t < 1 else 2 * t - 1

print(db.gradient(clipped, 0.5), db.gradient(clipped, 3.0))

# check_gradient raises db.GradientMismatchError if the gradient disagrees with central finite differences
worst = db.check_gradient(loss, x, data)
print("check_gradient passed; worst difference", worst)
'''),
        md('''
## A derivative curve in one call

For an elementwise `f`, the gradient of `np.sum(f(t))` over a grid `t` is `f'(t)` at every point:
one `db.gradient` call draws the whole derivative.
'''),
        code(PLOT + '''

def f(t):
    return np.sin(3 * t) * np.exp(-t)

t = np.linspace(0.0, 4.0, 200)
df = db.gradient(lambda t: np.sum(f(t)), t)
print("agrees with the hand derivative:", np.allclose(df, (3 * np.cos(3 * t) - np.sin(3 * t)) * np.exp(-t)))

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(t, f(t), label="f(t) = sin(3t) exp(-t)")
ax.plot(t, df, label="f'(t) by db.gradient")
ax.axhline(0.0, color="gray", linewidth=0.5)
ax.set(xlabel="t", title="A function and its derivative")
ax.legend()
fig.tight_layout()
'''),
        md('''
## Pytrees

Arguments can be nested dicts, lists, tuples, namedtuples and dataclasses of arrays and
scalars; the gradient has the same structure.
'''),
        code('''
from dataclasses import dataclass

@dataclass
class Layer:
    w: np.ndarray
    b: float

def predict(params, x):
    hidden = np.tanh(params["layer"].w * x + params["layer"].b)
    return np.sum(params["scale"][0] * hidden)

params = {"layer": Layer(w=np.ones(3), b=0.5), "scale": [2.0]}
grads = db.gradient(predict, params, db.cut(np.arange(3.0)))
grads
'''),
        md('''
## `cut` and `uncut`

* `db.cut(arg)` as an argument: a constant. Its gradient is `None`, and it costs nothing
  in the backward pass.
* `db.cut(container)` cuts every leaf except those wrapped in `db.uncut`.
* `db.cut(y)` inside a function is a stop-gradient: `y`'s value, no gradient through it.
'''),
        code('''
gx, gdata = db.gradient(loss, x, db.cut(data))
print("gdata is", gdata)

g = db.gradient(lambda p: np.sum(p["w"] * p["b"]), db.cut({"w": np.ones(3), "b": db.uncut(0.5)}))
print(g)   # only b is a variable

g = db.gradient(lambda x: np.sum(x * db.cut(np.exp(x))), x)
print(np.allclose(g, np.exp(x)))   # exp(x) is treated as a constant
'''),
        md('''
## Fused forward mode: `db.sum` and `db.broadcast`

`db.sum(f, x)` is `sum(f(x))` for a scalar-style `f`, computed as one fused forward-mode
kernel that never materialises the values it sums.  Its *dual width* is the number of
partials carried per element: one per active argument, including the state of a callable
(dataclass fields, closure cells).  `db.kernel_log()` shows each kernel call.
'''),
        code('''
def rho(r):
    return np.exp(-3 * (r + 1))

def eam(x):
    p = db.sum(rho, x)
    return p**2 + p**3 + 0.25 * p**4

x = np.random.default_rng(0).random(1000)
with db.kernel_log() as calls:
    g = db.gradient(eam, x)
print(calls)

r = rho(x)
p = r.sum()
print("agrees with the hand gradient:", np.allclose(g, -3 * r * (2 * p + 3 * p**2 + p**3)))

# db.broadcast keeps the elementwise values; the width is 2 when both arguments are active
with db.kernel_log() as calls:
    db.gradient(lambda a, b: np.sum(db.broadcast(lambda u, v: u * np.sin(v), a, b)), np.ones(4), np.ones(4))
print([c.width for c in calls])
'''),
        md('''
## `db.explain`: what the gradient will do

`db.explain(f, *args)` runs `f` once and reports every recorded operation: reverse or
forward mode, how many of its inputs are active, the dual width of forward-mode kernels,
and how many bytes each keeps for the backward pass.
'''),
        code('''
def model(x, data):
    return loss(x, data) + db.sum(rho, x)

report = db.explain(model, x, db.cut(np.ones_like(x)))
report
'''),
        code('''
print(report)
print("kept for the backward pass:", report.total_kept_bytes, "bytes")
[(op.name, op.mode, op.width) for op in report.operations if op.mode == "forward"]
'''),
        md('''
## Prepared gradients

For a model evaluated many times on inputs of the same shapes, `db.prepare_gradient`
records once and returns a program that replays the gradient without tracing.
'''),
        code('''
prog = db.prepare_gradient(eam, x)
x2 = np.random.default_rng(1).random(1000)
print(np.allclose(prog(x2), db.gradient(eam, x2)))
'''),
    ]


def eam():
    return [
        md('''
# The EAM story

A toy embedded-atom model: a density `P = sum(rho(x))` with `rho(r) = exp(-3 (r + 1))`,
and an energy `E = P^2 + P^3 + P^4 / 4`.  We compare four ways to get `dE/dx`:

1. the NumPy **primal** (the energy alone, the yardstick),
2. the **hand-written** gradient,
3. the same **plain NumPy code through the tape** (`db.gradient(eam_numpy, x)`): reverse mode,
   one tape node per NumPy operation, and
4. **`db.sum(rho, x)`**: one fused forward-mode kernel for the sum, reverse mode for the scalar
   energy around it,

plus `db.prepare_gradient` (record once, replay).  `QUICK = True` keeps the run under a minute.
'''),
        code(SETUP + '''
import inspect
from benchmarks import models as m
from benchmarks.timing import median_time

QUICK = True
SIZES = [10**2, 10**3, 10**4, 10**5] if QUICK else [10**2, 10**3, 10**4, 10**5, 10**6]
BUDGET = 0.05 if QUICK else 0.5     # seconds of timed calls per measurement'''),
        code('''
for f in (m.rho, m.eam_energy, m.eam_numpy, m.eam_dualbroadcast, m.eam_hand_gradient):
    print(inspect.getsource(f))
'''),
        md('All four agree (the hand gradient is the reference):'),
        code('''
x = np.random.default_rng(0).random(1000)
hand = m.eam_hand_gradient(x)
for name, g in [("numpy on the tape", db.gradient(m.eam_numpy, x)),
                ("db.sum", db.gradient(m.eam_dualbroadcast, x)),
                ("prepared", db.prepare_gradient(m.eam_dualbroadcast, x)(x))]:
    print(f"{name:<18} max relative error {np.max(np.abs(g / hand - 1)):.1e}")
'''),
        md('''
`db.explain` shows the difference: through the tape every NumPy operation is a reverse-mode
node that keeps its inputs; with `db.sum` the elementwise part is a single forward-mode node.
'''),
        code('''
print(db.explain(m.eam_numpy, x))
print()
print(db.explain(m.eam_dualbroadcast, x))
'''),
        md('## Timing over N'),
        code('''
implementations = {
    "numpy primal": lambda x: m.eam_numpy(x),
    "hand gradient": lambda x: m.eam_hand_gradient(x),
    "numpy on the tape": lambda x: db.gradient(m.eam_numpy, x),
    "db.sum": lambda x: db.gradient(m.eam_dualbroadcast, x),
}
times = {name: [] for name in implementations}
times["prepared db.sum"] = []
for n in SIZES:
    x = np.random.default_rng(0).random(n)
    for name, f in implementations.items():
        times[name].append(median_time(lambda: f(x), BUDGET))
    prog = db.prepare_gradient(m.eam_dualbroadcast, x)
    times["prepared db.sum"].append(median_time(lambda: prog(x), BUDGET))

print(f"{'N':>8}" + "".join(f"{name:>20}" for name in times))
for i, n in enumerate(SIZES):
    base = times["numpy primal"][i]
    print(f"{n:>8}" + "".join(f"{t[i] * 1e6:>10.1f}us {t[i] / base:>6.2f}x" for t in times.values()))
'''),
        code(PLOT + '''

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for name, t in times.items():
    ax.loglog(SIZES, t, "o-", label=name)
    ax2.semilogx(SIZES, np.array(t) / np.array(times["numpy primal"]), "o-", label=name)
ax.set(xlabel="N", ylabel="median seconds per call", title="EAM: gradient time")
ax2.set(xlabel="N", ylabel="ratio to the NumPy primal", title="EAM: ratio to the primal")
ax2.set_yscale("log")
ax.legend(fontsize=8)
fig.tight_layout()
'''),
        md('''
What to read in the plot: at small N every gradient through dualbroadcast pays a fixed
per-call cost (tracing and recording the tape), which the prepared program mostly
removes; as N grows that cost is amortised and the ratios fall towards the cost of the
arithmetic itself.  The fused `db.sum` kernel computes the values and their derivatives
in one pass and keeps one partial per element, where the tape keeps one array per
operation.  Timings on a shared machine are noisy: rerun with `QUICK = False` (N up to
1e6 and longer timing budgets) for steadier numbers.
'''),
    ]


def cut_uncut():
    return [
        md('''
# `cut` and `uncut` on Poly9

Poly9 is a dataclass holding ten coefficients, evaluated at N points and summed with
`db.sum`.  The fields of a callable are broadcast arguments too, so the coefficients that
are active decide the **dual width** of the kernel: the number of partials carried per
element.  Here all ten coefficients are differentiated inputs, and the model marks only
the first `k` as variables: `db.cut(poly)` cuts every field, `db.uncut(c[j])` keeps one.
The width, read from `db.kernel_log()`, is `k`; the plot shows what each extra partial costs.
'''),
        code(SETUP + '''
import inspect
from benchmarks import models as m
from benchmarks.timing import median_time

QUICK = True
N = 10**5 if QUICK else 10**6
BUDGET = 0.05 if QUICK else 0.5'''),
        code('''
print(inspect.getsource(m.Poly9))

def first_k_uncut(k):
    """The Poly9 sum with only the first k coefficients variables (the others cut)."""
    def f(c, xs):
        poly = m.Poly9(tuple(db.uncut(c[j]) if j < k else c[j] for j in range(10)))
        return db.sum(db.cut(poly), db.cut(xs))
    return f

c = np.array(m.COEFFICIENTS)
xs = np.random.default_rng(1).uniform(-1, 1, N)
hand = m.poly9_hand_gradient(xs)    # d/dc_k sum(poly) = sum(x^k)
'''),
        code('''
K = list(range(1, 11))
widths, times = [], []
for k in K:
    f = first_k_uncut(k)
    with db.kernel_log() as calls:
        g, _ = db.gradient(f, c, db.cut(xs))
    assert np.allclose(g[:k], hand[:k]) and not np.any(g[k:]), k   # cut coefficients get zero
    widths.append(calls[0].width)
    times.append(median_time(lambda: db.gradient(f, c, db.cut(xs)), BUDGET))

primal = median_time(lambda: m.poly9_numpy(c, xs), BUDGET)
tape = median_time(lambda: db.gradient(m.poly9_numpy, c, db.cut(xs)), BUDGET)
hand_time = median_time(lambda: m.poly9_hand_gradient(xs), BUDGET)
print(f"N = {N}: primal {primal * 1e3:.2f} ms, hand gradient {hand_time * 1e3:.2f} ms, "
      f"plain NumPy on the tape {tape * 1e3:.2f} ms")
print(f"{'uncut':>6}{'width':>7}{'gradient':>12}{'/ primal':>10}")
for k, w, t in zip(K, widths, times):
    print(f"{k:>6}{w:>7}{t * 1e3:>10.2f}ms{t / primal:>9.2f}x")
'''),
        md('''
Without any `cut`, every coefficient that depends on a differentiated input is active
automatically (width 10); a single `uncut` coefficient in a cut model gives width 1:
'''),
        code('''
for name, f, args in [("no cut (automatic activity)", m.poly9_all_uncut, (c, db.cut(xs))),
                      ("one uncut coefficient", m.poly9_one_uncut, (c[2], db.cut(xs)))]:
    with db.kernel_log() as calls:
        db.gradient(f, *args)
    print(f"{name:<30} width {calls[0].width}")
'''),
        code(PLOT + '''

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
ax.plot(K, widths, "o-")
ax.set(xlabel="uncut coefficients", ylabel="dual width (kernel_log)", title="Dual width")
ax2.plot(K, np.array(times) * 1e3, "o-", label="db.sum gradient")
ax2.axhline(primal * 1e3, color="gray", ls="--", label="NumPy primal")
ax2.axhline(tape * 1e3, color="red", ls=":", label="plain NumPy on the tape")
ax2.axhline(hand_time * 1e3, color="green", ls="-.", label="hand gradient")
ax2.set(xlabel="uncut coefficients", ylabel="ms per gradient (log)", title=f"Poly9 gradient time, N = {N}")
ax2.set_yscale("log")
ax2.legend(fontsize=8)
fig.tight_layout()
'''),
    ]


def constants_and_slices():
    return [
        md('''
# Constants and slices

Two promises of the design, measured:

1. **A constant costs nothing in the backward pass, however large it is.**  The pullback of
   `p -> c[0] * p` and of `p -> (c @ proj) * p`, with `c` and `proj` constant arrays of
   size `n`, should take the same time for every `n`.
2. **Slicing an active array accumulates into one buffer.**  A dense layer over `T` inputs
   followed by inner products of slices, written three ways: (A) `sum(diag(y0.T @ yt))`,
   (B) a Python loop of column dot products, (C) one batched `einsum`.
'''),
        code('''
import os
# One BLAS thread: on a small machine shared with other work, a multithreaded BLAS call can
# stall for milliseconds waiting for a descheduled thread.  Delete this line to use every core
# (it only takes effect before NumPy is first imported, that is in a fresh kernel).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
''' + SETUP + '''
from benchmarks import models as m
from benchmarks.timing import median_time

QUICK = True
SIZES = [10**3, 10**4, 10**5, 10**6]
TS = [2, 4, 8] if QUICK else [4, 16, 64, 256]
BUDGET = 0.03 if QUICK else 0.5'''),
        md('## Constant arrays: pullback time against n'),
        code('''
models = {"c[0] * p": m.constant_index_model, "(c @ proj) * p": m.constant_projection_model}
pullback_times = {name: [] for name in models}
gradient_times = {name: [] for name in models}
for n in SIZES:
    c = np.ones(n)
    proj = np.zeros(n)
    proj[0] = 1.0
    for name, make in models.items():
        model = make(c) if name == "c[0] * p" else make(c, proj)
        _, back = db.pullback(model, 1.0)
        assert back(1.0) == 1.0
        pullback_times[name].append(median_time(lambda: back(1.0), BUDGET))
        gradient_times[name].append(median_time(lambda: db.gradient(model, 1.0), BUDGET))

print(f"{'n':>9}" + "".join(f"{'back() ' + k:>24}{'gradient ' + k:>26}" for k in models))
for i, n in enumerate(SIZES):
    print(f"{n:>9}" + "".join(f"{pullback_times[k][i] * 1e6:>22.2f}us{gradient_times[k][i] * 1e6:>24.2f}us"
                              for k in models))
for k in models:
    print(f"{k}: pullback grows {pullback_times[k][-1] / pullback_times[k][0]:.2f}x from n = {SIZES[0]} to {SIZES[-1]}")
'''),
        code(PLOT + '''

fig, ax = plt.subplots(figsize=(6, 4))
for k in models:
    ax.loglog(SIZES, np.array(pullback_times[k]) * 1e6, "o-" if k == "c[0] * p" else "x:", label=f"back(1.0): {k}")
    ax.loglog(SIZES, np.array(gradient_times[k]) * 1e6, "s--", label=f"db.gradient: {k}")
ax.set(xlabel="n (size of the constants)", ylabel="microseconds", title="Constants cost nothing backwards")
ax.legend(fontsize=8)
fig.tight_layout()
'''),
        md('''
The pullback does no work proportional to `n`.  The full gradient of `(c @ proj) * p`
grows with `n` because its forward pass computes `c @ proj` (an O(n) dot product), as the
primal does.

## Slices in a loop
'''),
        code('''
import inspect
for f in (m.dense_layer, m.slices_diag, m.slices_columns, m.slices_einsum):
    print(inspect.getsource(f))
'''),
        code('''
variants = {"A diag": (m.slices_diag, True), "B columns": (m.slices_columns, True),
            "C einsum": (m.slices_einsum, False)}
forward = {v: [] for v in variants}
gradient = {v: [] for v in variants}
rng = np.random.default_rng(0)
W = rng.standard_normal((32, 64)).astype(np.float32)
b = rng.standard_normal(32).astype(np.float32)
for T in TS:
    xs = rng.standard_normal((T, 64, 128)).astype(np.float32)
    hand = m.slices_hand_gradient(W, b, xs)
    for v, (model, as_list) in variants.items():
        data = list(xs) if as_list else xs
        gW, gb, _ = db.gradient(model, W, b, db.cut(data))
        assert np.allclose(gW, hand[0], rtol=1e-3, atol=1e-2 * np.abs(hand[0]).max()), v
        forward[v].append(median_time(lambda: model(W, b, data), BUDGET))
        gradient[v].append(median_time(lambda: db.gradient(model, W, b, db.cut(data)), BUDGET))

print(f"{'T':>4}" + "".join(f"{v + ' fwd':>16}{v + ' grad':>16}{'ratio':>7}" for v in variants))
for i, T in enumerate(TS):
    print(f"{T:>4}" + "".join(f"{forward[v][i] * 1e3:>14.2f}ms{gradient[v][i] * 1e3:>14.2f}ms"
                              f"{gradient[v][i] / forward[v][i]:>6.1f}x" for v in variants))
'''),
        code('''
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for v in variants:
    line, = ax.loglog(TS, np.array(gradient[v]) * 1e3, "o-", label=f"gradient {v}")
    ax.loglog(TS, np.array(forward[v]) * 1e3, "s--", color=line.get_color(), alpha=0.6, label=f"forward {v}")
    ax2.semilogx(TS, np.array(gradient[v]) / np.array(forward[v]), "o-", label=v)
ax.set(xlabel="T (inputs)", ylabel="ms", title="Slice workload")
ax2.set(xlabel="T (inputs)", ylabel="gradient / forward (log)", title="Gradient cost relative to the forward pass")
ax2.set_yscale("log")
for a in (ax, ax2):
    a.set_xticks(TS, [str(T) for T in TS])
    a.minorticks_off()
ax.legend(fontsize=7)
ax2.legend(fontsize=8)
fig.tight_layout()
'''),
        md('''
The slices `ys[0][:, j]` taken inside the loop pull back into one buffer per array, not
one dense zero array per slice, so the backward pass of every variant stays proportional
to the work of its forward pass; variant B pays the per-operation cost of its 128 `T`
small dot products.
'''),
    ]


def peers():
    return [
        md('''
# dualbroadcast and its peers

The benchmark suite (`python -m benchmarks`, in `benchmarks/suite.py`) run from Python on
a few workloads: each gradient as a ratio to the NumPy primal of the same row, measured in
the same run.  JAX, PyTorch and autograd are optional: a peer that is not installed is
skipped and its column shows `-`.  `python -m benchmarks --quick` runs every workload
(under three minutes); without `--quick`, the full sizes.
'''),
        code(SETUP + '''
from benchmarks.suite import run, format_table

WORKLOADS = ["eam", "sumsq", "arctan2", "qux", "foldminus"]
results = run(quick=True, only=WORKLOADS, budget=0.02, progress=False)
print(format_table(results))'''),
        md('''
What was installed, and why a peer was skipped:
'''),
        code('''
print("peers:", results["meta"]["peers"])
print("absent:", results["meta"]["peers_missing"] or "none")
'''),
        code(PLOT + '''

rows = [(w["key"], row) for w in results["workloads"] for row in w["rows"]]
columns = [c for c in results["columns"] if c != "primal"]
columns = [c for c in columns if any("ratio" in row["cells"].get(c, {}) for _, row in rows)]
fig, ax = plt.subplots(figsize=(12, 4.5))
width = 0.8 / len(columns)
for j, column in enumerate(columns):
    ratios = [row["cells"][column].get("ratio", np.nan) for _, row in rows]
    ax.bar(np.arange(len(rows)) + j * width, ratios, width, label=column)
ax.axhline(1.0, color="black", lw=0.8)
ax.set_yscale("log")
ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2)
ax.set_xticklabels([f"{key}\\n{row['label']}" for key, row in rows], fontsize=7)
ax.set_ylabel("time / NumPy primal (log)")
ax.set_title("Gradient cost relative to the primal (missing bars: not installed or not applicable)")
ax.legend(fontsize=7, ncol=4)
fig.tight_layout()
'''),
    ]


def scale_out():
    return [
        md("""
# Beyond one machine: gradients over Dask arrays

`db.sum(f, r, *params)` over a Dask array runs, chunk by chunk, the same fused kernel as in
memory, and Dask sums the chunks' values and partials: the gradient in the parameters is one
pass over the data, in memory for a few chunks per worker. This notebook checks the issue's
example against its hand-written gradient, measures peak memory against the size of the data
(each measurement in a process of its own, `benchmarks.scale_out`), and plots throughput
against the number of worker processes of a `dask.distributed` cluster.
"""),
        code(SETUP + """
import dask.array as da
from benchmarks import scale_out

QUICK = True
N = 2 * 10**6 if QUICK else 10**8"""),
        md("""
## The example, checked

`r` is drawn chunk by chunk and never exists whole. The gradient of
`(Σ a e^(-b r) - t)²` is `2 (e - t) Σ e^(-b r)` in `a` and `-2 (e - t) Σ a r e^(-b r)` in `b`.
"""),
        code("""
r = da.random.default_rng(0).uniform(2.0, 6.0, size=N, chunks=N // 10)
target = 0.1 * N

def loss(theta):
    e = db.sum(lambda r, a, b: a * np.exp(-b * r), r, theta["a"], theta["b"])
    return (e - target) ** 2

v, g = db.value_and_gradient(loss, {"a": 1.0, "b": 0.5})
rm = r.compute()
e = np.sum(np.exp(-0.5 * rm))
print(g)
print("by hand:", 2 * (e - target) * e, -2 * (e - target) * np.sum(rm * np.exp(-0.5 * rm)))
"""),
        md("""
## Memory: the chunk, not the data

Ten parameters (`benchmarks.scale_out.term`), value and gradient: the data in memory
(`db.sum` on a NumPy array) against the data drawn chunk by chunk by Dask, peak resident
memory of each run's own process.
"""),
        code(PLOT + """
sizes = [N // 4, N // 2, N] if QUICK else [10**7, 3 * 10**7, 10**8]
chunk = N // 20
memory = {name: [scale_out.run_row(name, n, chunk, 1)[2] / 2**20 for n in sizes]
          for name in ("memory", "generated")}
for name, peaks in memory.items():
    print(name, [f"{p:.0f} MB" for p in peaks])
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(sizes, memory["memory"], "o-", label="NumPy array in memory")
ax.plot(sizes, memory["generated"], "s-", label=f"Dask, chunks of {chunk:.0e}")
ax.set_xscale("log")
ax.set_xlabel("points")
ax.set_ylabel("peak RSS (MB)")
ax.legend()
fig.tight_layout()
"""),
        md("""
## Throughput against workers

A `LocalCluster` of K worker processes, one thread each, kernels on one thread
(`dualbroadcast.chunked.TASK_THREADS`), 20 chunks. On a machine shared with other work the
scaling is what the free cores allow.
"""),
        code("""
workers = [1, 2]
seconds = [scale_out.run_row(f"workers{k}", N, N // 20, 2)[0] for k in workers]
throughput = [N / s / 1e6 for s in seconds]
print([f"{k} worker(s): {t:.1f} M points/s" for k, t in zip(workers, throughput)])
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot(workers, throughput, "o-")
ax.set_xticks(workers)
ax.set_xlabel("worker processes")
ax.set_ylabel("M points / s (value and gradient)")
fig.tight_layout()
"""),
    ]


def lotka_volterra():
    return [
        md("""
# Fitting an ODE model: Lotka-Volterra with `solve_ivp` and L-BFGS-B

The predator-prey model `u' = p₀u - p₁uv`, `v' = -p₂v + p₃uv`, its four rates fitted to noisy
observations.  The right-hand side is plain NumPy; `dualbroadcast.scipy.integrate.solve_ivp` is
SciPy's `solve_ivp` (same signature, same values) whose `result.y` carries a gradient, computed by
the adjoint method or by forward sensitivities with SciPy's own solver.  `db.value_and_gradient`
hands `scipy.optimize.minimize(..., jac=True)` the loss and its gradient from one call.
"""),
        code(SETUP + """
import scipy.optimize
from dualbroadcast.scipy import integrate
from benchmarks.timing import interleaved_medians

QUICK = True
TIMES = 40 if QUICK else 1000   # observation times
RUNS = 5 if QUICK else 50       # timed calls per measurement"""),
        md("""
## The model and the data

Observations at `TIMES` points of two periods, with 5% multiplicative noise.
"""),
        code("""
def rhs(t, y, p):
    u, v = y[0], y[1]
    return np.stack([p[0] * u - p[1] * u * v, -p[2] * v + p[3] * u * v])

truth, y0 = np.array([1.5, 1.0, 3.0, 1.0]), np.array([1.0, 1.0])
t = np.linspace(0.0, 6.0, TIMES)
clean = integrate.solve_ivp(rhs, (0.0, 6.0), y0, t_eval=t, args=(truth,), rtol=1e-7, atol=1e-7).y
data = clean * np.exp(0.05 * np.random.default_rng(0).standard_normal(clean.shape))

def loss(p, sensitivity="auto"):
    y = integrate.solve_ivp(rhs, (0.0, 6.0), y0, t_eval=t, args=(p,), rtol=1e-7, atol=1e-7,
                            sensitivity=sensitivity).y
    return np.sum((y - data) ** 2)

p0 = np.array([1.2, 0.8, 2.6, 0.8])
print("loss at the guess:", loss(p0))
print("gradient:", db.gradient(loss, p0))
print("worst error against central differences (relative to the tolerance):",
      db.check_gradient(loss, p0, rtol=1e-5))"""),
        md("""
## The fit

L-BFGS-B with the rates kept positive; the callback records the loss SciPy reached at each
iteration.
"""),
        code("""
history = [loss(p0)]
fit = scipy.optimize.minimize(lambda p: db.value_and_gradient(loss, p), p0, jac=True,
                              method="L-BFGS-B", bounds=[(0.05, 10.0)] * 4,
                              callback=lambda intermediate_result: history.append(intermediate_result.fun))
print(fit.message, f"after {fit.nit} iterations, {fit.nfev} evaluations")
print("fitted:", np.round(fit.x, 4))
print("truth: ", truth)"""),
        code(PLOT + """

fine = np.linspace(0.0, 6.0, 300)
fitted = integrate.solve_ivp(rhs, (0.0, 6.0), y0, t_eval=fine, args=(fit.x,), rtol=1e-7, atol=1e-7).y
guess = integrate.solve_ivp(rhs, (0.0, 6.0), y0, t_eval=fine, args=(p0,), rtol=1e-7, atol=1e-7).y
fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2, 1]})
for i, (name, color) in enumerate([("prey u", "tab:blue"), ("predator v", "tab:red")]):
    ax.plot(t, data[i], "o", ms=3, color=color, alpha=0.6, label=f"{name}: data")
    ax.plot(fine, fitted[i], "-", color=color, label=f"{name}: fit")
    ax.plot(fine, guess[i], ":", color=color, alpha=0.7, label=f"{name}: initial guess")
ax.set_xlabel("t")
ax.set_ylabel("population")
ax.legend(fontsize=7, ncol=3)
ax.set_title("Data and fitted trajectories")
bx.semilogy(history, "o-")
bx.set_xlabel("iteration")
bx.set_ylabel("loss (sum of squares)")
bx.set_title("Loss per L-BFGS-B iteration")
fig.tight_layout()"""),
        md("""
## Against JAX's `odeint`

`jax.experimental.ode.odeint` solves with Dormand-Prince 5(4) (SciPy's `RK45`) and differentiates
by the adjoint method, compiled by `jax.jit`.  The same loss at the initial guess (at the fit the
gradient is near zero, its digits the solver's tolerance): the gradients' agreement and their
times (medians sampled in turns, after JAX's compilation).  Skipped when JAX is not installed.
"""),
        code("""
try:
    import jax
    from jax.experimental.ode import odeint as jax_odeint
except ImportError:
    jax = None
    print("JAX is not installed: the comparison is skipped")

times = {
    "dualbroadcast, sensitivity='auto'": lambda: db.gradient(loss, p0),
    "dualbroadcast, adjoint": lambda: db.gradient(lambda p: loss(p, "adjoint"), p0),
    "dualbroadcast, forward sensitivities": lambda: db.gradient(lambda p: loss(p, "forward"), p0),
    "SciPy's solve_ivp (values only)": lambda: loss(p0),
}
ours = db.gradient(loss, p0)
if jax is not None:
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jax_loss(p):
        f = lambda y, t, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])
        return jnp.sum((jax_odeint(f, jnp.asarray(y0), jnp.asarray(t), p, rtol=1e-7, atol=1e-7).T - data) ** 2)

    jax_gradient = jax.jit(jax.grad(jax_loss))
    theirs = np.asarray(jax_gradient(p0))
    scale = np.max(np.abs(theirs))
    print("largest difference to JAX's gradient, relative to its largest element:",
          f"{np.max(np.abs(ours - theirs)) / scale:.1e}")
    times["JAX odeint gradient (jit)"] = lambda: jax_gradient(p0).block_until_ready()
medians = dict(zip(times, interleaved_medians(list(times.values()), budget=0.0, max_runs=RUNS)))
for name, seconds in medians.items():
    print(f"{name:40s} {seconds * 1e3:8.2f} ms")"""),
        md("""
JAX compiles the whole solve and its adjoint into one program; here each step of the solve is
SciPy's Python code calling the user's NumPy function, and each step of the gradient replays a
prepared program of that function's vector-Jacobian product, so the gradient costs a few forward
solves.  The benchmark `python -m benchmarks.ode_targets` measures the issue's larger cases.
"""),
    ]


NOTEBOOKS = {
    "quickstart.ipynb": quickstart,
    "eam.ipynb": eam,
    "cut_uncut.ipynb": cut_uncut,
    "constants_and_slices.ipynb": constants_and_slices,
    "peers.ipynb": peers,
    "scale_out.ipynb": scale_out,
    "lotka_volterra.ipynb": lotka_volterra,
}


def build(name):
    nb = new_notebook(cells=NOTEBOOKS[name]())
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):  # stable ids: regenerating does not churn the diff
        cell["id"] = f"{Path(name).stem}-{i}"
    return nb


def main():
    for name in NOTEBOOKS:
        nb = build(name)
        nbformat.validate(nb)
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
