"""Every elementwise rule at its kinks, zeros and ties, in every mode, against each other and against JAX.

The convention (docs/design.md, Conventions at kinks; `derivatives.chain_product`) is one number per
program whatever the mode computes it with: reverse mode on arrays and on Python floats, prepared replay,
`db.sum`/`db.broadcast` kernels, `db.jvp`, and to second order every composition: `db.hvp`, `prepare_hvp`,
the hvp of a kernel, `db.hessian`, reverse over reverse, forward over reverse, reverse over forward and
forward over forward (`SECOND_ORDER`).  Each function of the derivative table is swept at points that hit
its kinks, zeros, ties and domain edges, alone and behind the guards users write (`np.where(x > 0, x, 0)`
before it, `np.where(x > 0, f(x), 0)` after it, and `np.where(x > 0, f(|x|) * x, x ** 2)`, where the guard's
0 meets a 0 of the data in a product's pullback before the singular partial: issue 30's Hessian).  The modes
must agree exactly (NaN where NaN).  Against JAX: where `jax.grad` and `jax.jvp` agree with each other and are
finite, we agree with them except at the conventions `JAX_DIFFERENCES` names.

The default run takes a few functions (seconds); ``-m long`` sweeps every function of the table.
"""

import warnings

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast.derivatives import DERIVATIVES, SELECTIONS, SMOOTH

jax = pytest.importorskip("jax")
jnp = jax.numpy

POINTS = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 40.0])
PAIRS = np.array([(a, b) for a in (-1.0, 0.0, 1.0, 2.0) for b in (-1.0, 0.0, 1.0, 2.0)]).T  # ties and zeros
FIRST_ORDER = ["reverse", "prepared", "sum", "broadcast", "jvp", "python-float"]
SECOND_ORDER = ["hvp", "prepared-hvp", "sum-hvp", "hessian", "reverse-over-reverse", "forward-over-reverse",
                "reverse-over-forward", "forward-over-forward", "sum-reverse-over-reverse", "sum-forward-over-reverse"]
DEFAULT = {"sqrt", "log", "power", "arcsin", "hypot", "maximum", "absolute", "divide", "where-guards"}

# Where JAX's two modes agree and ours differ, by design (docs/design.md, Conventions at kinks):
JAX_DIFFERENCES = {
    "absolute": "|x| at 0: sign(0) = 0, the subgradient of least norm, as PyTorch (JAX: 1)",
    "fabs": "as absolute",
    "copysign": "the partial in x is sign(x) sign(y): 0 at x = 0 (JAX: sign(y))",
    "hypot": "0 at x = y = 0, as |x|'s sign(0) (JAX: 1/2 each, from its max/min formula)",
    "fmax": "a tie is split 1/2 and 1/2 (JAX gives it to y)",
    "fmin": "a tie is split 1/2 and 1/2 (JAX gives it to y)",
    "arccosh": "below 1, where arccosh is NaN, its partial is NaN (JAX: 1/sqrt(x² - 1), a number)",
}
# Known and open, second order only (label -> the modes that differ; empty: every mode).  arccosh: behind the
# guard written after the function, at points where the function's value is NaN, the reverse-over-forward
# hvp multiplies the guard's 0 by a NaN partial in a smooth multiplication (√(x-1)·√(x+1)), which IEEE makes
# NaN; the fused kernel gives the guard's 0.  The same product gives NaN at x = 1 in reverse over reverse
# (0 · ∞ in the product's pullback; a kernel: -∞), and `db.hessian`'s rows meet it below 1 (-m long).
# reciprocal and cbrt: forward over forward gives 0 at x = 0, where f'' is infinite (-m long): a 0 upstream (the
# value x or ∛x in a product's partial) meets the infinite tangent there, strong in forward mode, IEEE's NaN in a
# reverse sweep's smooth pullback.
SECOND_ORDER_KNOWN = {"where(x > 0, arccosh(x), 0)": (), "arccosh": (), "arccosh(where(x > 0, x, 0))": (),
                      "arccosh(x) * 0": (), "where(x > 0, broadcast(arccosh, x), 0)": (),
                      "reciprocal": ("forward-over-forward",), "cbrt": ("forward-over-forward",)}


def table_functions(long):
    """(name, func, arity) for every NumPy function of the derivative table that JAX has too."""
    found = []
    for func in list(DERIVATIVES):
        name = getattr(func, "__name__", "")
        if not isinstance(func, np.ufunc) or func.nout != 1 or func.nin not in (1, 2) or not hasattr(jnp, name) \
                or None in DERIVATIVES[func]:  # an integer argument (ldexp's exponent): test_conventions' cases
            continue
        if long or name in DEFAULT:
            found.append((name, func, func.nin))
    return found


def cases(long):
    """(label, f of numpy, f of jax, arguments): each function alone, and each singular one behind a guard."""
    out = []
    for name, func, arity in table_functions(long):
        jfunc = getattr(jnp, name)
        if arity == 1:
            out.append((name, func, jfunc, (POINTS,)))
            if func not in SMOOTH and func not in SELECTIONS and (long or "where-guards" in DEFAULT):
                out.append((f"{name}(where(x > 0, x, 0))", lambda x, f=func: f(np.where(x > 0, x, 0.0)),
                            lambda x, f=jfunc: f(jnp.where(x > 0, x, 0.0)), (POINTS,)))
                out.append((f"where(x > 0, {name}(x), 0)", lambda x, f=func: np.where(x > 0, f(x), 0.0),
                            lambda x, f=jfunc: jnp.where(x > 0, f(x), 0.0), (POINTS,)))
                # the guard's 0 meets a data 0 (x) in the product's pullback before the singular partial; only
                # where the unchosen branch's value is finite (a NaN value times the guard's 0 in the smooth
                # product's pullback is IEEE's NaN in reverse mode, open: see docs/design.md)
                # a data zero (not a selection's) times the singular partial, and a kernel behind a guard written
                # after it: reverse mode's strong product in every mode (docs/design.md; JAX: NaN, and NaN in grad)
                out.append((f"{name}(x) * 0", lambda x, f=func: f(x) * 0.0, lambda x, f=jfunc: f(x) * 0.0, (POINTS,)))
                out.append((f"where(x > 0, broadcast({name}, x), 0)",
                            lambda x, f=func: np.where(x > 0, db.broadcast(f, x), 0.0),
                            lambda x, f=jfunc: jnp.where(x > 0, f(x), 0.0), (POINTS,)))
                if np.isfinite(func(np.abs(POINTS))).all():
                    out.append((f"where(x > 0, {name}(|x|) * x, x ** 2)",
                                lambda x, f=func: np.where(x > 0, f(np.abs(x)) * x, x ** 2),
                                lambda x, f=jfunc: jnp.where(x > 0, f(jnp.abs(x)) * x, x ** 2), (POINTS,)))
        else:
            out.append((name, func, jfunc, tuple(PAIRS)))
    return out


def first_order(mode, f, args):
    """The elementwise partials of the elementwise ``f`` in each argument, in ``mode``, as float arrays."""
    n = len(args)

    def loss(*a):
        return np.sum(f(*a))

    if mode == "reverse":
        g = db.gradient(loss, *args)
    elif mode == "prepared":
        prepared = db.prepare_gradient(loss, *args)
        prepared(*args)
        g = prepared(*args)
    elif mode == "sum":
        g = db.gradient(lambda *a: db.sum(f, *a), *args)
    elif mode == "broadcast":
        g = db.gradient(lambda *a: np.sum(db.broadcast(f, *a)), *args)
    elif mode == "jvp":  # one argument's tangent at a time: the partials themselves
        g = tuple(db.jvp(f, args, tuple(np.ones_like(b) if j == i else np.zeros_like(b) for j, b in enumerate(args)))[1]
                  for i in range(n))
    else:
        g = [db.gradient(f, *(float(a[k]) for a in args)) for k in range(len(args[0]))]
        g = tuple(np.array([row[i] if n > 1 else row for row in g], float) for i in range(n))
    return tuple(np.asarray(v, float) for v in (g if isinstance(g, tuple) else (g,)))


def second_order(mode, f, args):
    """The Hessian's diagonal of Σ f (f elementwise, one argument), in ``mode``."""
    (x,) = args
    v = np.ones_like(x)
    def loss(a):
        return np.sum(f(a))

    def fused(a):
        return db.sum(f, a)

    if mode == "hvp":
        h = db.hvp(loss, x, v)
    elif mode == "prepared-hvp":
        prepared = db.prepare_hvp(loss, x)
        prepared(x, v)
        h = prepared(x, v)
    elif mode == "sum-hvp":
        h = db.hvp(fused, x, v)
    elif mode == "hessian":
        h = db.hessian(loss, x) @ v
    elif mode.endswith("reverse-over-reverse"):
        g = fused if mode.startswith("sum") else loss
        h = db.gradient(lambda a: np.sum(db.gradient(g, a) * v), x)
    elif mode.endswith("forward-over-reverse"):
        g = fused if mode.startswith("sum") else loss
        h = db.jvp(lambda a: db.gradient(g, a), (x,), (v,))[1]
    elif mode == "reverse-over-forward":
        h = db.gradient(lambda a: db.jvp(loss, (a,), (v,))[1], x)
    else:  # f elementwise: its second derivative, element by element
        h = db.jvp(lambda a: db.jvp(f, (a,), (v,))[1], (x,), (v,))[1]
    return np.asarray(h, float)


def jax_partials(jf, args):
    """(jax.grad, jax.jvp) elementwise partials in each argument, float64."""
    with jax.enable_x64(True):
        jargs = tuple(jnp.asarray(a) for a in args)
        grads = jax.grad(lambda *a: jnp.sum(jf(*a)), argnums=tuple(range(len(args))))(*jargs)
        jvps = tuple(jax.jvp(jf, jargs, tuple(jnp.ones_like(b) if j == i else jnp.zeros_like(b)
                                              for j, b in enumerate(jargs)))[1] for i in range(len(args)))
        return tuple(np.asarray(g, float) for g in grads), tuple(np.asarray(t, float) for t in jvps)


def sweep(long):
    """Run every case in every mode; return (mode disagreements, JAX disagreements, counts per mode: elements
    compared, refusals, elements that differ at a known open case, `SECOND_ORDER_KNOWN`)."""
    mode_errors, jax_errors, counts = [], [], {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for label, f, jf, args in cases(long):
            base = first_order("reverse", f, args)
            for mode in FIRST_ORDER:
                try:
                    got = first_order(mode, f, args)
                except db.DifferentiationError:  # a refusal (a kernel without the function) is no wrong number:
                    counts.setdefault(mode, [0, 0, 0])[1] += 1  # counted, not compared
                    continue
                counts.setdefault(mode, [0, 0, 0])[0] += sum(np.size(g) for g in got)
                for k, (g, want) in enumerate(zip(got, base)):
                    if not np.allclose(g, want, rtol=1e-12, atol=1e-300, equal_nan=True):
                        bad = ~np.isclose(g, want, rtol=1e-12, atol=1e-300, equal_nan=True)
                        points = [tuple(float(a[i]) for a in args) for i in np.flatnonzero(bad)]
                        mode_errors.append(f"{label} {mode} argument {k} at {points}: {g[bad]} vs reverse {want[bad]}")
            if len(args) == 1:
                hessian = second_order("hvp", f, args)
                for mode in SECOND_ORDER:
                    got = second_order(mode, f, args)
                    counts.setdefault(mode, [0, 0, 0])[0] += got.size
                    bad = ~np.isclose(got, hessian, rtol=1e-10, atol=1e-300, equal_nan=True)
                    differing = int(bad.sum())
                    if mode.startswith("sum"):  # known, open: at a point where f'' itself is ±inf (log, arcsin at
                        bad &= ~(np.isnan(got) & np.isinf(hessian))  # their poles) the fused kernel gives NaN
                    known = SECOND_ORDER_KNOWN.get(label)
                    if bad.any() and not (known == () or (known and mode in known)):
                        mode_errors.append(f"{label} {mode} at {args[0][bad]}: {got[bad]} vs hvp {hessian[bad]}")
                    else:
                        counts[mode][2] += differing  # known and open: counted
            name = label.split("(")[0] if "(" in label and not label.startswith("where") else label
            if name in JAX_DIFFERENCES:
                continue
            grads, jvps = jax_partials(jf, args)
            for k, (ours, g, t) in enumerate(zip(base, grads, jvps)):
                jax_agrees = np.isclose(g, t, rtol=1e-12, equal_nan=True) & np.isfinite(g)
                differ = jax_agrees & ~np.isclose(ours, g, rtol=1e-9, atol=1e-12, equal_nan=True)
                counts.setdefault("jax-compared", [0, 0, 0])[0] += int(jax_agrees.sum())
                if differ.any():
                    points = [tuple(float(a[i]) for a in args) for i in np.flatnonzero(differ)]
                    jax_errors.append(f"{label} argument {k} at {points}: ours {ours[differ]}, JAX {g[differ]}")
    return mode_errors, jax_errors, counts


def check_sweep(long):
    mode_errors, jax_errors, counts = sweep(long)
    assert not mode_errors, "\n".join(mode_errors)
    assert not jax_errors, "\n".join(jax_errors)
    assert counts["reverse"][0] and counts["hvp"][0] and counts["jax-compared"][0]
    return counts


def test_every_mode_gives_the_same_number_at_kinks_zeros_and_ties():
    check_sweep(long=False)


@pytest.mark.long
def test_every_function_of_the_table_in_every_mode(request):
    marks = request.config.getoption("markexpr")
    if not ("long" in marks and "not long" not in marks):
        pytest.skip("the whole table: python -m pytest tests/modes/test_kink_sweep.py -m long")
    print(check_sweep(long=True))
