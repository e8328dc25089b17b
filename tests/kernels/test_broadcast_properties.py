"""Forward mode over broadcasts against plain NumPy and the reverse tape, on random expressions.

A random elementwise expression of 1-3 arguments is generated as Python source
and compiled into an ordinary function ``f``: the same function runs on plain
arrays (the reference value), on tracked arrays (the reverse tape: the reference
gradient) and on kernel symbols inside ``db.broadcast``/``db.sum`` (under test).
Arguments are arrays of mutually broadcastable shapes, 0-d arrays, NumPy scalars
and Python floats, in float64 and float32, each plain or wrapped in ``db.cut``.
Values come from a seeded NumPy generator (``tests.cases.uniform``); examples
whose values come close to a kink (``where``/``maximum``/``abs``/``clip``) or
grow large are skipped, so every comparison is between smooth functions.
"""

import numpy as np
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.pullbacks import unbroadcast

from ..cases import broadcast_shapes, reset_streams, uniform

SETTINGS = settings(max_examples=100, deadline=None)
BACKENDS = [None, "numpy", "blocked", "numexpr"]
# Sizes from which a backend is a candidate (kernels.py); smaller calls fall back to numpy,
# so an example for a forced backend may be enlarged past its threshold.
LARGE = {"numexpr": 1024, "blocked": 2 * 16384}

# --- random expressions -------------------------------------------------------------
# Templates keep every function on its smooth domain: log/sqrt/fractional powers get a
# positive argument, divisions a denominator >= 1.
UNARY = [
    "(-{a})",
    "np.sin({a})",
    "np.cos({a})",
    "np.tanh({a})",
    "np.arctan({a})",
    "np.exp({a})",
    "np.log({a} * {a} + 1)",
    "np.sqrt({a} * {a} + 0.5)",
    "np.abs({a})",
    "np.clip({a}, -0.5, 0.7)",
    "({a}) ** 2",
    "({a}) ** 3",
    "({a} * {a} + 1) ** 1.5",
    "({a} * {a} + 1.0) ** -2",
    "(1.5 * {a})",
    "({a} - 0.25)",
    "({a} / 2.5)",
]
BINARY = [
    "({a} + {b})",
    "({a} - {b})",
    "({a} * {b})",
    "({a} / ({b} * {b} + 1))",
    "np.maximum({a}, {b})",
    "np.minimum({a}, {b})",
    "np.hypot({a}, {b})",
    "np.logaddexp({a}, {b})",
    "(np.abs({a}) + 0.5) ** np.tanh({b})",
]
LITERALS = ["0.5", "2", "(-1.5)", "3.0"]


def expressions(n_args):
    """Source text of a random elementwise expression of ``x0 .. x{n_args-1}``."""
    names = [f"x{k}" for k in range(n_args)]
    leaf = st.one_of(*[st.sampled_from(names)] * 4, st.sampled_from(LITERALS))

    def extend(children):
        unary = st.builds(lambda t, a: t.format(a=a), st.sampled_from(UNARY), children)
        binary = st.builds(lambda t, a, b: t.format(a=a, b=b), st.sampled_from(BINARY), children, children)
        where = st.builds(
            lambda a, b, c, d: f"np.where({a} > {b}, {c}, {d})", children, children, children, children
        )
        return st.one_of(unary, binary, binary, where)

    return st.recursive(leaf, extend, max_leaves=8)


def compile_function(source, n_args):
    """An ordinary function ``f(x0, ..)`` returning ``source``; it reads nothing but ``np``."""
    params = ", ".join(f"x{k}" for k in range(n_args))
    namespace = {"np": np}
    exec(f"def f({params}):\n    return {source}\n", namespace)
    return namespace["f"]


class Probe(np.ndarray):
    """Records, over one plain evaluation, the largest intermediate and the nearest kink."""

    largest = 0.0
    nearest_kink = np.inf

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(i) if isinstance(i, Probe) else i for i in inputs]
        out = getattr(ufunc, method)(*plain, **kwargs)
        with np.errstate(all="ignore"):
            if ufunc in (np.greater, np.maximum, np.minimum):
                Probe.kink(np.abs(np.subtract(plain[0], plain[1])))
            elif ufunc is np.absolute:
                Probe.kink(np.abs(plain[0]))
            elif ufunc.__name__ == "clip":
                Probe.kink(np.minimum(np.abs(plain[0] - plain[1]), np.abs(plain[0] - plain[2])))
            if np.result_type(out).kind == "f":
                Probe.largest = max(Probe.largest, float(np.max(np.abs(out), initial=0.0)))
        return np.asarray(out).view(Probe)

    @staticmethod
    def kink(distance):
        Probe.nearest_kink = min(Probe.nearest_kink, float(np.min(distance, initial=np.inf)))


def well_conditioned(f, args, margin):
    """True if ``f`` at ``args`` (in float64) is finite, moderate and ``margin`` from every kink.

    Far enough that float32 rounding (or a finite-difference step) cannot cross a kink.
    """
    Probe.largest, Probe.nearest_kink = 0.0, np.inf
    probes = [np.asarray(a, np.float64).view(Probe) for a in args]
    with np.errstate(all="ignore"):
        out = np.asarray(f(*probes))
    return bool(np.all(np.isfinite(out))) and Probe.largest < 50 and Probe.nearest_kink > margin


# --- random arguments ----------------------------------------------------------------
def draw_arguments(draw, n_args, dtype):
    """Arrays of mutually broadcastable shapes; a 0-d one may become a NumPy scalar or a Python float."""
    args = []
    for shape in broadcast_shapes(draw, n_args):
        value = uniform(draw, shape, dtype)
        if shape == ():
            kind = draw(st.sampled_from(["python float", "numpy scalar", "0-d array"]))
            value = float(value) if kind == "python float" else np.asarray(value) if kind == "0-d array" else value
        args.append(value)
    return args


def enlarge(draw, args, dtype, backend):
    """Grow an example past ``backend``'s size threshold with a new leading axis.

    numexpr: the first argument gets the leading axis (the others still broadcast);
    blocked (which needs every input full-size or one element): every array argument does.
    """
    shape = np.broadcast_shapes(*[np.shape(a) for a in args])
    lead = -(-LARGE[backend] // max(1, int(np.prod(shape))))
    big = (lead,) + shape
    out = list(args)
    for k, a in enumerate(args):
        if k == 0 or (backend == "blocked" and np.ndim(a) > 0):
            out[k] = uniform(draw, big, dtype)
    return out


@st.composite
def problems(draw, reduce=False, max_args=3, large=True, backends=BACKENDS):
    """One well-conditioned example: a dict with source, f, args, cuts, dtype, backend, seed, reduce.

    ``reduce``: for db.sum (True), db.broadcast (False) or either (None: drawn).
    ``large``: examples for blocked/numexpr may be (True) or are ("always") enlarged so that
    backend really runs.
    """
    reset_streams()
    n_args = draw(st.integers(1, max_args))
    source = draw(expressions(n_args))
    f = compile_function(source, n_args)
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    args = draw_arguments(draw, n_args, dtype)
    cuts = draw(st.lists(st.sampled_from([False, False, True]), min_size=n_args, max_size=n_args))
    backend = draw(st.sampled_from(backends))
    seed = draw(st.integers(0, 2**16))
    reduce = draw(st.booleans()) if reduce is None else reduce
    enlarged = large and backend in LARGE and (large == "always" or draw(st.booleans()))
    if enlarged:
        args = enlarge(draw, args, dtype, backend)
    note(f"f = {source}; dtype {dtype.__name__}; backend {backend}; cut {cuts}; sum {reduce}")
    note("shapes: " + ", ".join(f"{type(a).__name__}{np.shape(a)}" for a in args))
    assume(well_conditioned(f, args, margin=1e-4 if enlarged else 1e-3))
    return dict(source=source, f=f, args=args, cuts=cuts, dtype=dtype, backend=backend, seed=seed, reduce=reduce)


# --- comparisons ----------------------------------------------------------------------
def tolerances(dtype, scale):
    """float32 ~1e-4 relative, float64 ~1e-10, with an absolute floor at ``scale``."""
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    return dict(rtol=rtol, atol=rtol * max(1.0, scale))


def magnitude(x):
    return float(np.max(np.abs(np.asarray(x, np.float64)), initial=0.0))


def wrap(args, cuts):
    return [db.cut(a) if c else a for a, c in zip(args, cuts)]


def weights(seed, shape, dtype):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def reference_gradients(f, args, cuts, w):
    """``gradient(sum(w * f(*a)))`` through the reverse tape, and a scale per argument.

    The scale is the sum of the absolute per-element contributions to each gradient
    element (the same gradient with every argument materialised at the full shape):
    rounding in a reduction over broadcast axes is relative to that, not to the result.
    """
    shape = np.shape(w)
    want = db.gradient(lambda *a: np.sum(w * f(*a)), *wrap(args, cuts))
    want = want if len(args) > 1 else (want,)
    full = [np.array(np.broadcast_to(np.asarray(a, np.result_type(a)), shape)) for a in args]
    per_element = db.gradient(lambda *a: np.sum(w * f(*a)), *full)
    per_element = per_element if len(args) > 1 else (per_element,)
    scales = []
    for a, t in zip(args, per_element):
        t = np.abs(np.asarray(t, np.float64))
        scales.append(magnitude(unbroadcast(t, np.shape(a))))
    return want, scales


def assert_gradients_match(got, want, scales, args, cuts, dtype):
    got = got if len(args) > 1 else (got,)
    for k, (g, r, scale, a, is_cut) in enumerate(zip(got, want, scales, args, cuts)):
        if is_cut:
            assert g is None, f"argument {k} is cut but got a gradient"
            continue
        assert g is not None, f"argument {k}: no gradient"
        if type(a) is float:
            assert type(g) is float, f"argument {k}: Python float in, {type(g).__name__} gradient"
        else:
            assert np.shape(g) == np.shape(a), f"argument {k}: gradient shape {np.shape(g)} for {np.shape(a)}"
            assert np.result_type(g) == np.result_type(a), f"argument {k}: gradient dtype {np.result_type(g)}"
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(r, np.float64),
                                   err_msg=f"gradient of argument {k}", **tolerances(dtype, scale))


# --- known library bugs ------------------------------------------------------------------
# --- (a) value, (b) gradient of a broadcast --------------------------------------------
@SETTINGS
@given(problems())
def test_broadcast_value_and_dtype_match_plain_numpy(p):
    f, args = p["f"], p["args"]
    want = f(*args)
    got = db.broadcast(f, *wrap(args, p["cuts"]), backend=p["backend"])
    assert isinstance(got, np.ndarray), f"broadcast returned {type(got).__name__}"
    assert got.dtype == np.result_type(want), f"dtype {got.dtype}, plain NumPy gives {np.result_type(want)}"
    assert got.shape == np.broadcast_shapes(*[np.shape(a) for a in args])
    want = np.broadcast_to(want, got.shape)
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               **tolerances(p["dtype"], magnitude(want)))


@SETTINGS
@given(problems())
def test_broadcast_gradient_matches_reverse_tape(p):
    f, args, cuts, backend = p["f"], p["args"], p["cuts"], p["backend"]
    shape = np.broadcast_shapes(*[np.shape(a) for a in args])
    w = weights(p["seed"], shape, np.result_type(f(*args)))
    got = db.gradient(lambda *a: np.sum(w * db.broadcast(f, *a, backend=backend)), *wrap(args, cuts))
    want, scales = reference_gradients(f, args, cuts, w)
    assert_gradients_match(got, want, scales, args, cuts, p["dtype"])


# --- (c) value and gradient of a fused sum ----------------------------------------------
@SETTINGS
@given(problems(reduce=True))
def test_sum_value_and_gradient_match_reverse_tape(p):
    f, args, cuts, backend = p["f"], p["args"], p["cuts"], p["backend"]
    shape = np.broadcast_shapes(*[np.shape(a) for a in args])
    values = np.broadcast_to(f(*args), shape)
    want = np.sum(values)
    got = db.sum(f, *wrap(args, cuts), backend=backend)
    assert np.ndim(got) == 0
    assert np.result_type(got) == np.result_type(want), f"dtype {np.result_type(got)} != {np.result_type(want)}"
    scale = float(np.sum(np.abs(values.astype(np.float64))))
    np.testing.assert_allclose(float(got), float(want), **tolerances(p["dtype"], scale))

    got = db.gradient(lambda *a: db.sum(f, *a, backend=backend), *wrap(args, cuts))
    want, scales = reference_gradients(f, args, cuts, np.ones(shape, np.result_type(values)))
    assert_gradients_match(got, want, scales, args, cuts, p["dtype"])


# --- (d) finite differences on small problems --------------------------------------------
@settings(max_examples=40, deadline=None)
@given(problems(reduce=None, large=False))
def test_check_gradient_through_broadcast_and_sum(p):
    f, args, cuts, backend = p["f"], p["args"], p["cuts"], p["backend"]
    active = sum(np.size(a) for a, c in zip(args, cuts) if not c)
    assume(0 < active <= 16)
    shape = np.broadcast_shapes(*[np.shape(a) for a in args])
    w = weights(p["seed"], shape, np.result_type(f(*args)))
    if p["reduce"]:
        def loss(*a):
            return db.sum(f, *a, backend=backend)
    else:
        def loss(*a):
            return np.sum(w * db.broadcast(f, *a, backend=backend))
    db.check_gradient(loss, *wrap(args, cuts))


@settings(max_examples=10, deadline=None)
@given(problems(reduce=None, large="always", backends=list(LARGE)))
def test_large_examples_really_run_on_the_forced_backend(p):
    """The enlargement works: the forced backend is the one the kernel log reports.

    (numexpr may fall back to numpy: it lacks some functions, e.g. logaddexp.)
    """
    f, args, backend = p["f"], p["args"], p["backend"]
    with db.kernel_log() as calls:
        (db.sum if p["reduce"] else db.broadcast)(f, *args, backend=backend)
    assert calls[0].size >= LARGE[backend]
    assert calls[0].backend == backend or (calls[0].backend == "numpy" and backend == "numexpr"), calls
