"""The per-call fast paths (issue 18, per-call overhead) against the general paths they shortcut.

Each fast path must give what the general path gives: the same numbers (bitwise where the operations are
the same), types, shapes and dtypes, in float32 and float64, for 0-d values and pytrees; and the gradient
must agree with central differences.  The general path is reached by a form the fast path does not take
(an exponent as a 0-d array, a tuple holding a NumPy scalar, ``backend="numpy"``, ``db.gradient``).
"""

import sys

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast.derivatives import DERIVATIVES
from dualbroadcast.pullbacks import apply
from dualbroadcast.rules.elementwise import power_vjp
from dualbroadcast.rules.reductions import expand

BROADCAST = sys.modules["dualbroadcast.broadcast"]  # the module (``db.broadcast`` is the function)
SHAPES = [(), (1,), (5,), (3, 1, 4), (2, 3)]
DTYPES = [np.float32, np.float64]


def central(f, x, h=1e-6):
    """∇f(x) by central differences, in float64."""
    x = np.array(x, np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        grad[i] = (float(f(x + e)) - float(f(x - e))) / (2 * h)
    return grad


def assert_identical(got, expected):
    """The same type, shape, dtype and numbers, bit for bit (NaNs where NaNs)."""
    assert type(got) is type(expected), (type(got), type(expected))
    assert np.shape(got) == np.shape(expected)
    assert np.result_type(got) == np.result_type(expected)
    np.testing.assert_array_equal(got, expected)


def points(shape, dtype, seed=0):
    return np.asarray(np.random.default_rng(seed).uniform(-2, 2, shape)).astype(dtype)


# --- x ** 2: the base's pullback (2g)·x -------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_square_pullback_is_the_table_formula(shape, dtype):
    """sum(x**2) (a one-number cotangent) and sum(w * x**2) (an array cotangent) take the fast pullback;
    the exponent as a 0-d array takes the table's y·x^(y-1): the same gradients, bit for bit."""
    x, w = points(shape, dtype), points(shape, dtype, seed=1)
    two = np.array(2, dtype)
    for fast, general in [(lambda x: np.sum(x**2), lambda x: np.sum(x**two)),
                          (lambda x: np.sum(w * x**2), lambda x: np.sum(w * x**two)),
                          (lambda x: np.mean(x**2.0), lambda x: np.mean(x**two))]:
        got = db.gradient(fast, x)
        assert_identical(got, db.gradient(general, x))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, central(fast, x), rtol=1e-3 if dtype == np.float32 else 1e-6, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_square_partial_in_kernels_and_replay(dtype):
    """The table's ∂(x ** 2)/∂x is 2·x (no power of each element) in a db.sum kernel, a prepared replay and
    the tape: 2·x bit for bit, as 2·x¹ was; y · x^(y-1) for other exponents, and at 0."""
    x = points((3, 4), dtype)
    x[0, 0] = 0.0
    two = dtype(2) * x
    assert_identical(db.gradient(lambda x: db.sum(lambda v: v**2, x), x), two)
    prog = db.prepare_gradient(lambda x: np.sum(x**2), x)
    for _ in range(2):
        assert_identical(prog(x), two)
    for y in (3, 2.5, 0, 1):
        got = db.gradient(lambda x: np.sum(np.abs(x) ** y), x)
        expected = db.gradient(lambda x: np.sum(np.abs(x) ** np.array(y, dtype)), x)
        assert_identical(got, expected)


def test_square_pullback_in_a_pytree_and_with_other_cotangent_dtypes():
    """A pytree of a float32 array and a float; a float64 sum of a float32 square (its cotangent float64)."""
    x = points((4,), np.float32)
    tree = {"a": x, "b": 1.5}
    got = db.gradient(lambda p: np.sum(p["a"] ** 2) + p["b"] ** 2, tree)
    assert_identical(got["a"], 2 * x)
    assert type(got["b"]) is float and got["b"] == 3.0
    two = np.array(2, np.float32)
    wide = db.gradient(lambda x: np.sum(x**2, dtype=np.float64), x)
    assert_identical(wide, db.gradient(lambda x: np.sum(x**two, dtype=np.float64), x))


def test_square_pullback_called_twice_and_at_second_order():
    """db.pullback's function called twice gives the same cotangent (no state kept); a Hessian of x**2 is 2I."""
    x = points((3,), np.float64)
    _, back = db.pullback(lambda x: x**2, x)
    g = np.ones(3)
    first = back(g)
    assert_identical(back(g), first)
    np.testing.assert_array_equal(db.hessian(lambda x: np.sum(x**2), x), 2 * np.eye(3))


def test_square_pullback_only_for_the_tables_partial(monkeypatch):
    """A partial of x ** y registered anew (db.defderivative) is used as written, for x ** 2 too."""
    monkeypatch.setitem(DERIVATIVES, np.power, (lambda ans, x, y: 3 * x, DERIVATIVES[np.power][1]))
    x = points((3,), np.float64)
    back = power_vjp(np.power, 0)(x**2, x, 2)
    np.testing.assert_array_equal(apply(back, np.ones(3)), 3 * x)
    monkeypatch.undo()
    back = power_vjp(np.power, 0)(x**2, x, 2)
    np.testing.assert_array_equal(apply(back, np.ones(3)), 2 * x)


# --- a total's cotangent, np.sum without keywords -----------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_sum_cotangent_view_and_plain_sum(shape, dtype):
    """np.sum's cotangent, a NumPy scalar's view, read-only; np.sum with positional axis and dtype."""
    x = points(shape, dtype)
    for g in (dtype(2.5), np.array(2.5, dtype)):
        ct = expand(g, shape, None, False)
        expected = np.broadcast_to(g, shape)
        assert ct.shape == expected.shape and ct.dtype == expected.dtype and not ct.flags.writeable
        np.testing.assert_array_equal(ct, expected)
        with pytest.raises(ValueError):
            ct[...] = 0
    _, back = db.pullback(lambda x: np.sum(x), x)
    assert_identical(back(dtype(2.5)), np.full(shape, 2.5, dtype))
    assert_identical(db.value_and_gradient(lambda x: np.sum(x), x)[0], np.sum(x))
    if x.ndim:
        y = db.value_and_gradient(lambda x: np.sum(np.sum(x, 0, np.float64) ** 2), x)
        assert_identical(y[0], np.sum(np.sum(x, 0, np.float64) ** 2))
        np.testing.assert_allclose(y[1], central(lambda x: np.sum(np.sum(x, 0) ** 2), x), rtol=1e-3, atol=1e-3)


# --- prepared: one float, one tuple or list of floats -------------------------------------------
def _qux(x):
    y = np.sin(x)
    return 1 / np.cosh(y) if y > 0 else np.tanh(y)


def _products(xs):
    total = xs[0] * xs[1]
    for v in xs[2:]:
        total = total - v * xs[0]
    return total


def _fold(xs):
    total = xs[0]
    for v in xs[1:]:
        total = total - v
    return total


@pytest.mark.parametrize("x", [0.3, -0.4, 0.05, 2.0])
def test_prepared_one_float_like_gradient(x):
    """A branch on the value (a guard): both variants replay; the gradient a Python float, db.gradient's."""
    prog = db.prepare_gradient(_qux, 0.5)
    for _ in range(2):
        got = prog(x)
        assert type(got) is float and got == db.gradient(_qux, x)
        assert abs(got - central(_qux, x)) < 1e-6
    assert prog.value_and_gradient(x) == db.value_and_gradient(_qux, x)


@pytest.mark.parametrize("f", [_fold, _products])
@pytest.mark.parametrize("kind", [tuple, list])
def test_prepared_floats_like_gradient(f, kind):
    """A tuple or list of floats: constant cotangents (returned as Python floats) or products of the
    arguments (NumPy scalars converted); the same as db.gradient, and as the general path (a NumPy scalar
    in the tuple)."""
    xs = kind(np.random.default_rng(3).uniform(-1, 1, 6).tolist())
    prog = db.prepare_gradient(f, xs)
    expected = db.gradient(f, xs)
    for _ in range(3):
        got = prog(xs)
        assert type(got) is kind and all(type(g) is float for g in got)
        assert got == expected
    mixed = kind([np.float64(xs[0]), *xs[1:]])
    assert list(prog(mixed)) == list(expected)
    np.testing.assert_allclose(prog(xs), central(lambda v: f(list(v)), xs), atol=1e-6)
    assert prog(kind(xs[:3])) == db.gradient(f, kind(xs[:3]))  # another length: another variant


def test_prepared_fast_path_checks_globals_and_out():
    """A global the function reads, rebound, records it again; ``out=`` takes the general path."""
    global SCALE
    SCALE = 2.0

    def f(x):
        return SCALE * np.sin(x)

    prog = db.prepare_gradient(f, 0.1)
    assert prog(0.1) == db.gradient(f, 0.1)
    SCALE = 3.0
    assert prog(0.1) == db.gradient(f, 0.1) and prog.recordings == 2
    xs = (0.1, 0.2)
    fold = db.prepare_gradient(_fold, xs)
    out = (np.empty(()), np.empty(()))
    assert fold(xs, out=out) is out and [float(o) for o in out] == [1.0, -1.0]


# --- db.sum's plan: whole-array kernel reusing dead intermediates ------------------------------
def _chain(x):
    return np.arctan2(x, 2)


def _mixed(x, y):
    a = np.exp(-x) * y
    b = np.where(a > 0.1, a * a, np.sin(y))
    return np.sqrt(1 + b * b) + x**0 + np.maximum(x, y) - np.hypot(x, 3.0)


def _shared(x):
    e = np.exp(x)
    return e * e + e


@pytest.mark.parametrize("shape", [(3, 50), (1,), ()])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [_chain, _mixed, _shared])
def test_plan_kernel_like_the_numpy_backend(f, dtype, shape):
    """The second call of a db.sum takes its plan (the in-place whole-array kernel): value and gradient bit
    for bit those of the numpy backend; the inputs unchanged; db.broadcast likewise; and finite differences."""
    n = f.__code__.co_argcount
    args = [points(shape, dtype, seed=k) for k in range(n)]
    copies = [a.copy() for a in args]
    fast = lambda *a: db.sum(f, *a)
    reference = lambda *a: db.sum(f, *a, backend="numpy")
    expected = db.value_and_gradient(reference, *args)
    key = (id(f.__code__), True)
    BROADCAST._plans.pop(key, None)  # this case's own plan, not one an earlier case left (the key has no shape)
    for _ in range(3):
        got = db.value_and_gradient(fast, *args)
        assert (key in BROADCAST._plans) == bool(shape)  # 0-d results are NumPy scalars: no whole-array plan
        assert_identical(got[0], expected[0])
        for g, e in zip(got[1] if n > 1 else (got[1],), expected[1] if n > 1 else (expected[1],)):
            assert_identical(g, e)
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)
    for _ in range(2):
        assert_identical(db.broadcast(f, *args), db.broadcast(f, *args, backend="numpy"))
    if dtype == np.float64:
        first = lambda x: np.sum(f(x, *args[1:]))
        grad = db.gradient(fast, *args)
        np.testing.assert_allclose(grad[0] if n > 1 else grad, central(first, args[0]), rtol=1e-5, atol=1e-6)


# --- replay: a dot's known-1 cotangent, a slice's cotangent added into its view ------------------
def _columns(W, xs):
    ys = [W @ x for x in xs]
    total = 0.0
    for y in ys:
        for j in range(y.shape[1]):
            total = total + np.dot(ys[0][:, j], y[:, j])
    return total


def _rows_and_scaled(W, xs):
    y = W @ xs[0]
    dots = np.float64(1.0) * np.dot(y[0], y[1]) + 2.0 * np.dot(y[0], y[2]) + np.dot(y[-1, :], y[0])
    return dots + np.sum(y[1:3] ** 2) + np.sum(y[0]) + 3.0 * y[1][2]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [_columns, _rows_and_scaled])
def test_replayed_dots_and_slices_like_gradient(f, dtype):
    """Sums of dots of columns and rows (a known-1 cotangent, one of float64 for float32 vectors), slices
    of a matrix: the prepared gradient equals db.gradient (to rounding: the sums' order) and central
    differences, in the argument's dtype."""
    rng = np.random.default_rng(5)
    W = rng.standard_normal((4, 3)).astype(dtype)
    xs = list(rng.standard_normal((3, 3, 5)).astype(dtype))
    prog = db.prepare_gradient(f, W, db.cut(xs))
    expected = db.gradient(f, W, db.cut(xs))[0]
    for _ in range(2):
        got = prog(W, db.cut(xs))[0]
        assert got.dtype == dtype and got.shape == W.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    if dtype == np.float64:
        np.testing.assert_allclose(expected, central(lambda w: f(w, xs), W), rtol=1e-6, atol=1e-6)


# --- prepared calls of one array, and gradients known when compiled ----------------------------------------------
def _density(x):
    return np.sum(np.exp(-3 * (x + SCALE)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_prepared_one_array_reads_globals_like_gradient(shape, dtype):
    """One array argument (replayed from ``__call__`` itself) of a function reading a global: db.gradient's
    type, dtype, shape and numbers; the global rebound, recorded again; a fresh array on every call."""
    global SCALE
    SCALE = 1.0
    x = points(shape, dtype)
    prog = db.prepare_gradient(_density, x)
    first = prog(x)
    expected = db.gradient(_density, x)
    assert type(first) is type(expected) and first.dtype == expected.dtype and first.shape == expected.shape
    np.testing.assert_allclose(first, expected, rtol=1e-6 if dtype is np.float32 else 1e-14)
    kept = first.copy()
    prog(x * 0.5)
    np.testing.assert_array_equal(first, kept)  # not a buffer the next call writes
    SCALE = 0.5
    np.testing.assert_allclose(prog(x), db.gradient(_density, x), rtol=1e-6 if dtype is np.float32 else 1e-14)
    assert prog.recordings == 2
    if dtype is np.float64:
        g = prog(x)
        np.testing.assert_allclose(g, central(_density, x), rtol=1e-6, atol=1e-6 * np.max(np.abs(g)))


def test_prepared_known_gradients_are_new_lists_and_written_into_out():
    """A fold's gradient, known when compiled: a new list on every call (the caller may change it), the
    numbers written into ``out=``."""
    xs = [0.5, 0.25, 2.0, -1.0]
    prog = db.prepare_gradient(_fold, xs)
    got = prog(xs)
    assert got == db.gradient(_fold, xs) == [1.0, -1.0, -1.0, -1.0]
    got[0] = 7.0
    assert prog(xs) == [1.0, -1.0, -1.0, -1.0] and prog(xs) is not prog(xs)
    out = tuple(np.empty(()) for _ in xs)
    assert prog(xs, out=out) is out and [float(o) for o in out] == [1.0, -1.0, -1.0, -1.0]


def _unary_chain(x):
    return 1 / np.cosh(np.sin(x))


def _log_too(x):
    return np.sin(x) + np.log(x)


@pytest.mark.parametrize(("f", "x"), [(_unary_chain, 0.3), (_unary_chain, 0.0), (_log_too, 0.7), (_log_too, 0.0)])
def test_prepared_float_read_only_by_unary_ufuncs(f, x):
    """A Python float read only by ufuncs of one input stays a float (no conversion), else it is converted
    (``1 / x`` of a Python 0.0 would raise): db.gradient's gradient bit for bit, infinities included."""
    prog = db.prepare_gradient(f, x)
    with np.errstate(divide="ignore"):
        for _ in range(2):
            got, expected = prog(x), db.gradient(f, x)
            assert type(got) is float and (got == expected or (np.isnan(got) and np.isnan(expected)))
    (program,) = next(iter(prog.variants.values()))
    source = program.source.split("def gradient")[1]
    assert ("v0 = " in source) == (f is _log_too)  # the conversion left out where only np.sin reads the float


def test_backward_stores_left_out_only_where_nothing_else_reads_them():
    """`replay._tidied`: a store read once as a plain read is propagated, a store never read is dropped; a store
    that is a target later (``+=``), read twice, or of an expression stays."""
    from dualbroadcast.replay import _tidied

    lines = ["    g1 = v2", "    w = g3[c4]; w += g1", "    g5 = v6", "    g5 += g7", "    g8 = c9",
             "    g10 = c11", "    g12 = g8 * v13", "    g14 = (v15 + v16)", "    return g8, g12, g14"]
    assert _tidied(lines) == ["    w = g3[c4]; w += v2", "    g5 = v6", "    g5 += g7", "    g8 = c9",
                              "    g12 = g8 * v13", "    g14 = (v15 + v16)", "    return g8, g12, g14"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_prepared_one_array_into_out_like_gradient(dtype):
    """``prog(x, out=o)`` of one array (replayed from ``__call__``): ``o`` returned, holding db.gradient's
    numbers; a rebound global records again; an ``out`` of the wrong shape is NumPy's error."""
    global SCALE
    SCALE = 1.0
    x = points((3, 4), dtype)
    prog = db.prepare_gradient(_density, x)
    out = np.empty_like(x)
    for scale in (1.0, 1.0, 0.25):
        SCALE = scale
        assert prog(x, out=out) is out
        np.testing.assert_allclose(out, db.gradient(_density, x), rtol=1e-6 if dtype is np.float32 else 1e-14)
    assert prog.recordings == 2
    with pytest.raises(ValueError):
        prog(x, out=np.empty(5, dtype))


# --- operators on arrays without their makers' calls (issue 27) ---------------------------------
def _through_the_makers(monkeypatch):
    """Make `record_binary` ask the rules' makers for every array result, as before its shortcut."""
    tracked = sys.modules["dualbroadcast.tracked"]
    monkeypatch.setattr(tracked, "_unbroadcast_backs", lambda *args: None)
    monkeypatch.setattr(tracked, "_unbroadcast_back", lambda *args: NotImplemented)


OPERATORS = [np.add, np.subtract, np.multiply]
CONSTANTS = [lambda x: 2.5, lambda x: 3, lambda x: x.dtype.type(-1.5), lambda x: points(x.shape, x.dtype, seed=3),
             lambda x: points(x.shape[-1:], np.float64, seed=4), lambda x: np.arange(x.size).reshape(x.shape)]


@pytest.mark.parametrize("dtype", [*DTYPES, np.float16])  # (float16's partials are no factors the sweep takes)
@pytest.mark.parametrize("shape", [(5,), (3, 4)])
@pytest.mark.parametrize("op", OPERATORS)
def test_operator_pullbacks_without_makers_like_the_makers(op, shape, dtype, monkeypatch):
    """x op c, c op x (numbers, NumPy scalars, float, integer and broadcast arrays) and x op y of one shape
    take the operators' pullbacks without a maker's call: the gradients of the makers, bit for bit, and
    central differences' (y = np.flip(x) ** 3, so each argument's cotangent is its own)."""
    x, w = points(shape, dtype), points(shape, dtype, seed=1)
    constants = [make(x) for make in CONSTANTS]
    forms = [lambda x, c=c: np.sum(w * op(x, c)) for c in constants]
    forms += [lambda x, c=c: np.sum(w * op(c, x)) for c in constants]
    forms += [lambda x: np.sum(w * op(x, np.flip(x) ** 3)), lambda x: np.sum(w * op(np.exp(x), x))]
    fast = [db.gradient(f, x) for f in forms]
    with monkeypatch.context() as patched:
        _through_the_makers(patched)
        general = [db.gradient(f, x) for f in forms]
    for f, got, expected in zip(forms, fast, general):
        assert_identical(got, expected)
        if dtype is not np.float16:  # (differences of float16 values are noise)
            np.testing.assert_allclose(got, central(f, x), rtol=1e-3 if dtype is np.float32 else 1e-6, atol=1e-3)


def test_elements_read_in_a_loop_share_their_pullback():
    """p[0], p[1] read at every step of a loop (one `IndexPullback` per element, shared by the records): the
    gradient adds each read's cotangent, as the hand-written one; a second gradient starts a table of its own."""
    def f(p):
        total = 0.0
        for k in range(5):
            total = total + p[0] * p[1] ** k + np.sin(p[k % 2])
        return total

    p = np.array([0.7, 1.3])
    expected = np.array([sum(p[1] ** k for k in range(5)) + 3 * np.cos(p[0]),
                         sum(k * p[0] * p[1] ** (k - 1) for k in range(5)) + 2 * np.cos(p[1])])
    np.testing.assert_allclose(db.gradient(f, p), expected, rtol=1e-14)
    np.testing.assert_allclose(db.gradient(f, p * 2), central(f, p * 2), rtol=1e-7)


@pytest.mark.parametrize("x", [0.3, -2.0])
def test_one_python_float_like_the_tree_path(x):
    """A Python float argument (a scalar model) takes the leaf path: a Python float gradient, as a tuple of one
    float gives; 0.0 for a function that does not read it; the value from value_and_gradient; and a gradient of
    that gradient (nested tapes) still right."""
    def f(t):
        return 1 / np.cosh(np.sin(t))

    assert type(db.gradient(f, x)) is float
    assert db.gradient(f, x) == db.gradient(lambda ts: f(ts[0]), (x,))[0]
    assert db.gradient(lambda t: 2.0, x) == 0.0 and type(db.gradient(lambda t: 2.0, x)) is float
    value, grad = db.value_and_gradient(f, x)
    assert value == f(x) and grad == db.gradient(f, x)
    second = db.gradient(lambda t: db.gradient(f, t), x)
    assert second == pytest.approx((db.gradient(f, x + 1e-6) - db.gradient(f, x - 1e-6)) / 2e-6, rel=1e-6)
