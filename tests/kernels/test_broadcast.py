"""Forward mode over broadcasts: backends, callables' state, staleness, elementwise, kernel limits.

Every value is compared with plain NumPy and every gradient with a hand-written
formula, the reverse tape or finite differences.  The random-expression
properties are in ``test_broadcast_properties.py``.  The last section holds
regression tests for the library bugs these tests found.
"""

import functools
import math
import tracemalloc
from dataclasses import dataclass

import numpy as np
import pytest

import dualbroadcast as db

RTOL = {np.float64: 1e-12, np.float32: 1e-5}
RNG = np.random.default_rng(20240611)


def uniform(shape, dtype=np.float64, low=-1.0, high=1.0, seed=None):
    rng = RNG if seed is None else np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype(dtype)


def widths(calls):
    return [c.width for c in calls]


def close(got, want, dtype=np.float64, scale=None):
    """Relative comparison, with an absolute floor at the size of the terms (sums can cancel)."""
    scale = np.max(np.abs(want), initial=0.0) if scale is None else scale
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=RTOL[dtype], atol=RTOL[dtype] * max(1.0, float(scale)))


# =====================================================================================
# Backends agree
# =====================================================================================
def transcendental(r):
    return np.exp(-3 * (r + 1))


def polynomial(r, c):
    return c * r**3 - 2 * r**2 + r / 3 + 0.5


def selection(r, c):
    return np.where(r > 0.3, np.maximum(r, c) * r, np.minimum(r * c, 0.25) * (r - 1))


def clipped(r, c):
    return np.maximum(r, c) * r + np.minimum(r * c, 0.25) * np.abs(r - 1) + np.clip(r, 0.0, 0.5) * c


def d_transcendental(r):
    return -3 * np.exp(-3 * (r + 1))


def d_polynomial(r, c):
    return 3 * c * r**2 - 4 * r + 1 / 3, r**3


def d_selection(r, c):
    big = r > 0.3
    lo = r * c <= 0.25
    dr = np.where(big, np.where(r >= c, 2 * r, c), np.where(lo, c * (r - 1) + r * c, 0.25))
    dc = np.where(big, np.where(r >= c, 0.0, r), np.where(lo, r * (r - 1), 0.0))
    return dr, dc


def d_clipped(r, c):
    lo = r * c <= 0.25
    inside = (r >= 0) & (r <= 0.5)
    dr = (np.where(r >= c, 2 * r, c) + np.where(lo, c, 0.0) * np.abs(r - 1)
          + np.minimum(r * c, 0.25) * np.sign(r - 1) + inside * c)
    dc = np.where(r >= c, 0.0, r) + np.where(lo, r, 0.0) * np.abs(r - 1) + np.clip(r, 0.0, 0.5)
    return dr, dc


KERNELS = {
    "transcendental": (transcendental, d_transcendental, 1),
    "polynomial": (polynomial, d_polynomial, 2),
    "selection": (selection, d_selection, 2),
    "clipped": (clipped, d_clipped, 2),
}
BACKENDS = ["numpy", "blocked", "numexpr"]


def kernel_args(name, n, dtype):
    r = uniform((n,), dtype, -0.5, 1.0, seed=n)
    return (r,) if KERNELS[name][2] == 1 else (r, dtype(0.45))


def reference(name, args):
    """Plain NumPy value, and the hand-written gradient of sum(w * f) with w = 1."""
    f, df, _ = KERNELS[name]
    a64 = [np.asarray(a, np.float64) for a in args]
    value = f(*a64)
    d = df(*a64)
    d = d if isinstance(d, tuple) else (d,)
    grads = [np.sum(p) if np.ndim(a) == 0 else p for p, a in zip(d, a64)]
    return value, grads


def as_tuple(g):
    return g if isinstance(g, tuple) else (g,)


@pytest.mark.parametrize("name, n, dtype", [
    pytest.param(name, n, dtype, id=f"{name}-{n}-{dtype.__name__}")
    for name in KERNELS for n in [10, 1000, 70000] for dtype in [np.float64, np.float32]
])
def test_backends_agree_on_value_and_gradient(name, n, dtype):
    f = KERNELS[name][0]
    args = kernel_args(name, n, dtype)
    want_value, want_grads = reference(name, args)
    results = {}
    for backend in BACKENDS:
        with db.kernel_log() as calls:
            value = db.broadcast(f, *args, backend=backend)
            total = db.sum(f, *args, backend=backend)
            g_broadcast = as_tuple(db.gradient(lambda *a: np.sum(db.broadcast(f, *a, backend=backend)), *args))
            g_sum = as_tuple(db.gradient(lambda *a: db.sum(f, *a, backend=backend), *args))
        assert value.dtype == dtype and np.result_type(total) == dtype, backend
        for g, a in zip(g_broadcast + g_sum, args + args):
            assert np.shape(g) == np.shape(a) and np.result_type(g) == dtype, backend
        # the forced backend ran where eligible (numexpr from 1024 elements, blocked from 2 blocks)
        eligible = {"numpy": True, "numexpr": n >= 1024, "blocked": n >= 32768}[backend]
        assert {c.backend for c in calls} == {backend if eligible else "numpy"}, calls
        # against plain NumPy and the hand-written derivative
        tol = 1e-12 if dtype == np.float64 else 2e-5
        np.testing.assert_allclose(value, want_value, rtol=tol, atol=tol)
        np.testing.assert_allclose(total, np.sum(want_value), rtol=tol, atol=tol * np.sum(np.abs(want_value)))
        for g, want, a in zip(g_broadcast, want_grads, args):
            scale = np.sum(np.abs(want)) if np.ndim(a) == 0 else 1.0
            np.testing.assert_allclose(g, want, rtol=tol, atol=tol * scale)
        for g, want in zip(g_sum, want_grads):
            np.testing.assert_allclose(g, want, rtol=tol, atol=tol * max(1.0, np.sum(np.abs(want))))
        results[backend] = (value, total) + g_broadcast + g_sum
    for backend in BACKENDS[1:]:
        for got, want in zip(results[backend], results["numpy"]):
            close(got, want, dtype, scale=np.sum(np.abs(want)) if np.ndim(want) == 0 else None)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("coefficient", [2.5, np.float64(2.5), np.array(2.5)], ids=["float", "np.float64", "0-d"])
def test_scalar_coefficient_broadcast_against_array(backend, coefficient):
    r = uniform((70000,), seed=1)
    f = polynomial
    got = db.broadcast(f, r, coefficient, backend=backend)
    np.testing.assert_allclose(got, f(r, 2.5), rtol=1e-12)
    gr, gc = db.gradient(lambda a, c: np.sum(db.broadcast(f, a, c, backend=backend)), r, coefficient)
    dr, dc = d_polynomial(r, 2.5)
    np.testing.assert_allclose(gr, dr, rtol=1e-12, atol=1e-12)
    assert type(gc) is type(coefficient) or np.shape(gc) == np.shape(coefficient)
    np.testing.assert_allclose(gc, np.sum(dc), rtol=1e-12)
    # only the coefficient active: its partial is reduced in the kernel
    gc = db.gradient(lambda c: db.sum(f, db.cut(r), c, backend=backend), coefficient)
    np.testing.assert_allclose(gc, np.sum(dc), rtol=1e-12)


@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_outer_shapes_fall_back_when_blocked_is_not_eligible(backend, reduce):
    a = uniform((3, 1), seed=2)
    b = uniform((1, 4), seed=3)

    def f(x, y):
        return np.exp(-3 * (x + 1)) * y + x * y * y

    want = f(a, b)
    want_ga = np.sum(-3 * np.exp(-3 * (a + 1)) * b + b * b, axis=1, keepdims=True)
    want_gb = np.sum(np.exp(-3 * (a + 1)) + 2 * a * b, axis=0, keepdims=True)
    with db.kernel_log() as calls:
        if reduce:
            value = db.sum(f, a, b, backend=backend)
            ga, gb = db.gradient(lambda x, y: db.sum(f, x, y, backend=backend), a, b)
            np.testing.assert_allclose(value, np.sum(want), rtol=1e-12)
        else:
            value = db.broadcast(f, a, b, backend=backend)
            ga, gb = db.gradient(lambda x, y: np.sum(db.broadcast(f, x, y, backend=backend)), a, b)
            assert value.shape == (3, 4)
            np.testing.assert_allclose(value, want, rtol=1e-12)
    assert ga.shape == (3, 1) and gb.shape == (1, 4)
    np.testing.assert_allclose(ga, want_ga, rtol=1e-12)
    np.testing.assert_allclose(gb, want_gb, rtol=1e-12)
    if backend == "blocked":
        assert all(c.backend == "numpy" for c in calls), calls  # 12 elements: not eligible


@pytest.mark.parametrize("f", [lambda t: np.maximum(t, 0.5), lambda t: np.minimum(t, 0.5), lambda t: np.clip(t, 0, 1),
                               lambda t: np.hypot(t, 0.5)], ids=["maximum", "minimum", "clip", "hypot"])
def test_numexpr_selection_keeps_float32(f):
    """numexpr computes maximum/minimum/hypot of float32 in float64; the kernel must give float32."""
    r = uniform((70000,), np.float32, seed=25)
    assert db.broadcast(f, r, backend="numexpr").dtype == np.float32
    assert np.result_type(db.sum(f, r, backend="numexpr")) == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_where_on_blocked_backend(dtype):
    r = uniform((70000,), dtype, seed=24)
    out = db.broadcast(lambda t: np.where(t > 0, t, 0.5 * t), r, backend="blocked")
    np.testing.assert_allclose(out, np.where(r > 0, r, 0.5 * r))


@pytest.mark.parametrize("n", [1000, 70000])
def test_outer_shapes_large_on_every_backend(n):
    """(n,1) against (1,4): blocked needs full-size inputs, so it must fall back; values agree."""
    a = uniform((n // 4, 1), seed=4)
    b = uniform((1, 4), seed=5)
    results = []
    for backend in BACKENDS:
        with db.kernel_log() as calls:
            ga, gb = db.gradient(lambda x, y: db.sum(selection, x, y, backend=backend), a, b)
            value = db.broadcast(selection, a, b, backend=backend)
        if backend == "blocked":
            assert {c.backend for c in calls} == {"numpy"}
        elif n >= 1024:
            assert {c.backend for c in calls} == {backend}
        results.append((value, ga, gb))
    np.testing.assert_allclose(results[0][0], selection(a, b), rtol=1e-12)
    want_ga, want_gb = d_selection(a, b)
    np.testing.assert_allclose(results[0][1], np.sum(want_ga, axis=1, keepdims=True), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(results[0][2], np.sum(want_gb, axis=0, keepdims=True), rtol=1e-12)
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_backend_globally(backend):
    r = uniform((70000,), seed=6)
    try:
        db.set_backend(backend)
        with db.kernel_log() as calls:
            value = db.sum(transcendental, r)
            g = db.gradient(lambda x: db.sum(transcendental, x), r)
    finally:
        db.set_backend(None)
    assert {c.backend for c in calls} == {backend}
    np.testing.assert_allclose(value, np.sum(transcendental(r)), rtol=1e-12)
    np.testing.assert_allclose(g, d_transcendental(r), rtol=1e-12)
    with db.kernel_log() as calls:  # restored: automatic choice among the candidates again
        db.sum(transcendental, r)
    assert calls[0].backend in BACKENDS


def test_set_backend_rejects_unknown_names():
    with pytest.raises(ValueError, match="numexpr"):
        db.set_backend("cuda")


def test_per_call_backend_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        db.sum(transcendental, uniform((10,)), backend="cuda")


def test_per_call_backend_overrides_global_one():
    r = uniform((70000,), seed=7)
    try:
        db.set_backend("blocked")
        with db.kernel_log() as calls:
            db.broadcast(transcendental, r, backend="numexpr")
    finally:
        db.set_backend(None)
    assert calls[0].backend == "numexpr"


# =====================================================================================
# Poly9 and callables' state
# =====================================================================================
XS = uniform((50,), seed=8)
C = tuple(float(c) for c in uniform((10,), seed=9))


@dataclass
class Poly9:
    c: tuple  # c0..c9

    def __call__(self, x):
        return sum(ck * x**k for k, ck in enumerate(self.c))


def test_poly9_one_uncut_coefficient():
    def f(c2):
        q = db.cut(Poly9(c=(C[0], C[1], db.uncut(c2), *C[3:])))
        return db.sum(q, db.cut(XS))

    with db.kernel_log() as calls:
        g = db.gradient(f, 1.0)
    assert type(g) is float
    np.testing.assert_allclose(g, np.sum(XS**2), rtol=1e-12)
    assert widths(calls) == [1]
    db.check_gradient(f, 1.0)
    # the value is the polynomial summed (cut, uncut markers work outside a gradient too)
    want = np.sum(sum(ck * XS**k for k, ck in enumerate((C[0], C[1], 1.0, *C[3:]))))
    np.testing.assert_allclose(f(1.0), want, rtol=1e-12)


@pytest.mark.parametrize("container", ["array", "tuple"])
def test_poly9_all_coefficients(container):
    coefficients = np.array(C) if container == "array" else C

    def f(c):
        return db.sum(Poly9(c=tuple(c)), db.cut(XS))

    with db.kernel_log() as calls:
        g = db.gradient(f, coefficients)
    assert widths(calls) == [10]
    want = [np.sum(XS**k) for k in range(10)]
    np.testing.assert_allclose(np.array(g, dtype=float), want, rtol=1e-12)
    if container == "array":
        assert isinstance(g, np.ndarray) and g.shape == (10,)
        db.check_gradient(f, coefficients)
    else:
        assert isinstance(g, tuple) and len(g) == 10


def test_poly9_width_ten_also_in_broadcast_with_weights():
    w = uniform((50,), seed=10)
    g = db.gradient(lambda c: np.sum(w * db.broadcast(Poly9(c=tuple(c)), db.cut(XS))), np.array(C))
    np.testing.assert_allclose(g, [np.sum(w * XS**k) for k in range(10)], rtol=1e-12)


def test_closure_capturing_derived_scalar():
    def f(a):
        b = a * 2.0

        def g(x):
            return b * x**2 + np.sin(a * x)

        return db.sum(g, db.cut(XS))

    with db.kernel_log() as calls:
        g = db.gradient(f, 0.7)
    assert widths(calls) == [2]  # b and a, both derived from the input
    np.testing.assert_allclose(g, np.sum(2 * XS**2 + XS * np.cos(0.7 * XS)), rtol=1e-12)
    db.check_gradient(f, 0.7)


def test_cut_closure_removes_its_partials():
    def f(a):
        b = a * 2.0
        g = db.cut(lambda x: b * x**2)
        return db.sum(g, XS) + a  # the closure is constant; only `+ a` depends on a

    with db.kernel_log() as calls:
        g = db.gradient(f, 0.7)
    assert widths(calls) == [0]
    assert g == 1.0


def test_cut_argument_of_closure_with_uncut_state():
    def f(a, x):
        return db.sum(lambda t: a * t**3, x)

    with db.kernel_log() as calls:
        ga, gx = db.gradient(f, 0.5, db.cut(XS))
    assert gx is None and widths(calls) == [1]
    np.testing.assert_allclose(ga, np.sum(XS**3), rtol=1e-12)


@dataclass
class Pair:
    a: float
    b: float

    def energy(self, x):
        return self.a * np.exp(-self.b * x)


class PlainModel:
    def __init__(self, a, b):
        self.a = a
        self.b = b

    def energy(self, x):
        return self.a * np.exp(-self.b * x)


class CallableModel(PlainModel):
    def __call__(self, x):
        return self.energy(x)


def energy_gradient(a, b):
    e = np.exp(-b * XS)
    return np.sum(e), np.sum(-a * XS * e)


def test_bound_method_of_dataclass():
    with db.kernel_log() as calls:
        ga, gb = db.gradient(lambda a, b: db.sum(Pair(a, b).energy, db.cut(XS)), 1.5, 0.3)
    assert widths(calls) == [2]
    np.testing.assert_allclose((ga, gb), energy_gradient(1.5, 0.3), rtol=1e-12)
    # cut on the method: no partials, no gradient through the kernel
    with db.kernel_log() as calls:
        g = db.gradient(lambda a: db.sum(db.cut(Pair(a, 0.3).energy), db.cut(XS)) + a, 1.5)
    assert widths(calls) == [0] and g == 1.0


def test_callable_object_state():
    with db.kernel_log() as calls:
        ga, gb = db.gradient(lambda a, b: db.sum(CallableModel(a, b), db.cut(XS)), 1.5, 0.3)
    assert widths(calls) == [2]
    np.testing.assert_allclose((ga, gb), energy_gradient(1.5, 0.3), rtol=1e-12)


def test_bound_method_of_plain_class():
    with db.kernel_log() as calls:
        ga, gb = db.gradient(lambda a, b: db.sum(PlainModel(a, b).energy, db.cut(XS)), 1.5, 0.3)
    np.testing.assert_allclose((ga, gb), energy_gradient(1.5, 0.3), rtol=1e-12)
    assert widths(calls) == [2]


class SlotsModel:
    """State in __slots__: no __dict__ to walk."""

    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b

    def energy(self, x):
        return self.a * np.exp(-self.b * x)

    def __call__(self, x):
        return self.energy(x)


@pytest.mark.parametrize("model", [SlotsModel, Pair, PlainModel, CallableModel], ids=lambda c: c.__name__)
@pytest.mark.parametrize("reduce", [True, False], ids=["sum", "broadcast"])
def test_bound_method_and_callable_object_with_constant_state_as_the_plain_function(model, reduce):
    """A kernel that is a bound method (of a __slots__ object, a dataclass, a plain or a callable class)
    or a callable object, its state plain numbers: the value and gradient of the same plain function."""
    a, b = 1.5, 0.3
    weights = uniform(XS.shape, seed=3)
    owner = model(a, b)
    for kernel in [owner.energy] + ([owner] if callable(owner) else []):
        if reduce:
            value, g = db.value_and_gradient(lambda x, k=kernel: db.sum(k, x), XS)
            close(value, np.sum(a * np.exp(-b * XS)))
            close(g, -a * b * np.exp(-b * XS))
        else:
            value, back = db.pullback(lambda x, k=kernel: db.broadcast(k, x), XS)
            close(value, a * np.exp(-b * XS))
            close(back(weights), -a * b * np.exp(-b * XS) * weights)


def test_functools_partial_arguments():
    def pair_energy(a, x, b=1.0):
        return a * np.exp(-b * x)

    with db.kernel_log() as calls:
        ga, gb = db.gradient(lambda a, b: db.sum(functools.partial(pair_energy, a, b=b), db.cut(XS)), 1.5, 0.3)
    assert widths(calls) == [2]
    np.testing.assert_allclose((ga, gb), energy_gradient(1.5, 0.3), rtol=1e-12)
    # one argument cut inside the partial: width 1
    with db.kernel_log() as calls:
        ga = db.gradient(lambda a, b: db.sum(functools.partial(pair_energy, a, b=db.cut(b)), db.cut(XS)), 1.5, 0.3)[0]
    assert widths(calls) == [1]
    np.testing.assert_allclose(ga, energy_gradient(1.5, 0.3)[0], rtol=1e-12)


def test_state_not_derived_from_input_is_constant():
    """Plain captured floats are kernel inputs without partials: width counts only derived ones."""
    k = 0.25

    def f(a):
        return db.sum(lambda x: k * x + a * x**2, db.cut(XS))

    with db.kernel_log() as calls:
        g = db.gradient(f, 2.0)
    assert widths(calls) == [1]
    np.testing.assert_allclose(g, np.sum(XS**2), rtol=1e-12)


# =====================================================================================
# Never stale
# =====================================================================================
SCALE = 2.0
POWER = 2


def scaled(x):
    return SCALE * x**POWER


def test_global_number_change_is_seen():
    global SCALE, POWER
    x = uniform((5,), seed=11)
    old = SCALE, POWER
    try:
        for SCALE, POWER in [(2.0, 2), (3.0, 2), (3.0, 3), (2.0, 2)]:
            np.testing.assert_allclose(db.broadcast(scaled, x), SCALE * x**POWER, rtol=1e-12)
            np.testing.assert_allclose(db.gradient(lambda a: db.sum(scaled, a), x), SCALE * POWER * x ** (POWER - 1),
                                       rtol=1e-12)
    finally:
        SCALE, POWER = old


ORDERS = (slice(None), 2.0)  # a global holding a slice (not hashable before Python 3.12)


def ordered(x):
    return ORDERS[1] * x if ORDERS[0].step is None else -x


def test_a_global_holding_a_slice_is_read_by_value():
    """A kernel's key reads the slice by its bounds: no TypeError, and another slice is a new trace."""
    global ORDERS
    x = uniform((5,), seed=12)
    old = ORDERS
    try:
        for ORDERS, factor in [  # noqa: B007 - the global the kernel reads
            ((slice(None), 2.0), 2.0), ((slice(None, None, 2), 2.0), -1.0)]:
            np.testing.assert_allclose(db.gradient(lambda a: db.sum(ordered, a), x), np.full(5, factor))
            np.testing.assert_allclose(db.hvp(lambda a: db.sum(lambda r: ordered(r) * r, a), x, np.ones(5)),
                                       np.full(5, 2 * factor))
    finally:
        ORDERS = old


def helper(x):
    return 2 * x


def uses_helper(x):
    return helper(x) + 1


def test_global_function_rebinding_is_seen():
    global helper
    x = np.ones(3)
    old = helper
    try:
        np.testing.assert_allclose(db.broadcast(uses_helper, x), 3.0)

        def helper(x):
            return 10 * x

        np.testing.assert_allclose(db.broadcast(uses_helper, x), 11.0)
    finally:
        helper = old


K = 2.0


def inner(x):
    return K * x


def outer(x):
    return inner(x) + 1


def test_global_read_by_a_helper_change_is_seen():
    """A repeated call takes the cached plan; rebinding a global that only a helper reads
    must still be seen (the plan checks the helper's globals too)."""
    global K
    x = uniform((4,), seed=21)
    old = K
    try:
        for K in [2.0, 2.0, 5.0, 5.0, -1.0]:
            np.testing.assert_allclose(db.broadcast(outer, x), K * x + 1, rtol=1e-12)
            np.testing.assert_allclose(db.gradient(lambda a: db.sum(outer, a), x), np.full(4, K), rtol=1e-12)
    finally:
        K = old


def test_same_code_in_two_namespaces_and_new_defaults():
    """One code object run with two globals dicts, or with its defaults replaced, is two kernels."""
    source = "import numpy as np\ndef f(t, c=1.0):\n    return SCALE * np.sin(t) * c\n"
    first, second = {"SCALE": 2.0}, {"SCALE": -3.0}
    code = compile(source, "<two namespaces>", "exec")
    exec(code, first)
    exec(code, second)
    x = uniform((5,), seed=22)
    for _ in range(2):
        for namespace in (first, second):
            f = namespace["f"]
            scale = namespace["SCALE"]
            np.testing.assert_allclose(db.sum(f, x), scale * np.sum(np.sin(x)), rtol=1e-12)
            np.testing.assert_allclose(db.gradient(lambda a: db.sum(f, a), x), scale * np.cos(x), rtol=1e-12)
    f = first["f"]
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(f, a), x), 2.0 * np.cos(x), rtol=1e-12)
    f.__defaults__ = (10.0,)
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(f, a), x), 20.0 * np.cos(x), rtol=1e-12)


@pytest.mark.parametrize("reduce", [False, True], ids=["broadcast", "sum"])
def test_repeated_calls_agree_with_the_tape_as_arguments_change(reduce):
    """The same function called again and again (the cached plan's case) while its arguments'
    shapes, dtypes, tracking and views change: every call agrees with the reverse tape."""
    def f(x, y):  # weak literals: a plan types them to the arrays' dtype
        return np.exp(-x) * y + 0.5 * x * x - 3 + x**2 / 7.0

    def cases(kernel):
        return [
            lambda a, b: kernel(f, a, b),
            lambda a, b: kernel(f, a, db.cut(b)),
            lambda a, b: kernel(f, a[:, 0], b[:, 1]),  # column views of the arguments
            lambda a, b: kernel(f, a[:, 0], b[:, 0]),
            lambda a, b: kernel(f, a, b) * 2.0,
        ]

    fused = cases(db.sum if reduce else db.broadcast)
    plain = cases((lambda g, *args: np.sum(g(*args))) if reduce else (lambda g, *args: g(*args)))
    X = uniform((6, 3), seed=23)
    for dtype in (np.float64, np.float32, np.float64):
        x, y = X.astype(dtype), (X[::-1] + 0.5).astype(dtype)
        for case, reference in list(zip(fused, plain)) * 2:
            with db.kernel_log() as calls:
                got = db.gradient(lambda a, b: np.sum(case(a, b)), x, y)
            want = db.gradient(lambda a, b: np.sum(reference(a, b)), x, y)
            assert calls and all(c.backend == "numpy" for c in calls)
            for g, w in zip(got, want):
                assert g.dtype == dtype
                np.testing.assert_allclose(g, w, rtol=RTOL[dtype], atol=RTOL[dtype])
        first, again = (db.broadcast(f, x, y) for _ in range(2))  # the kernel as built, then as planned
        assert again.dtype == dtype
        np.testing.assert_array_equal(again, first)


def test_closure_cell_change_is_seen():
    x = uniform((6,), seed=12)
    for c in [1.0, 2.5, 2, 3, np.float32(0.5)]:  # floats are inputs, ints are baked
        def f(t):
            return c * t + t**2
        # the same code object and cell layout every time: only the cell's value changes
        np.testing.assert_allclose(db.broadcast(f, x), c * x + x**2, rtol=1e-6)
        np.testing.assert_allclose(db.gradient(lambda a: db.sum(f, a), x), c + 2 * x, rtol=1e-6)


def test_nonlocal_rebinding_with_same_function_object():
    c = 1.0

    def f(t):
        return c * np.sin(t)

    x = uniform((4,), seed=13)
    for value in [1.0, -2.0, 3]:
        c = value
        np.testing.assert_allclose(db.broadcast(f, x), value * np.sin(x), rtol=1e-12)
        np.testing.assert_allclose(db.gradient(lambda a: db.sum(f, a), x), value * np.cos(x), rtol=1e-12)


def test_dataclass_field_change_is_seen():
    x = uniform((7,), seed=14)
    p = Poly9(c=C)
    for k in range(3):
        p.c = tuple(ck * (k + 1) for ck in C)
        want = sum(ck * x**j for j, ck in enumerate(p.c))
        np.testing.assert_allclose(db.broadcast(p, x), want, rtol=1e-12)
    pair = Pair(1.0, 0.5)
    for a in [1.0, 2.0]:
        pair.a = a
        np.testing.assert_allclose(db.broadcast(pair.energy, x), a * np.exp(-0.5 * x), rtol=1e-12)


def test_plain_class_attribute_change_is_seen():
    x = uniform((7,), seed=15)
    model = PlainModel(1.0, 0.5)
    np.testing.assert_allclose(db.broadcast(model.energy, x), np.exp(-0.5 * x), rtol=1e-12)
    model.a = 2.0
    np.testing.assert_allclose(db.broadcast(model.energy, x), 2.0 * np.exp(-0.5 * x), rtol=1e-12)


def test_callable_object_attribute_change_is_seen():
    x = uniform((7,), seed=16)
    model = CallableModel(1.0, 0.5)
    for a, b in [(1.0, 0.5), (2.0, 0.5), (2.0, -1.0), (3, 2)]:
        model.a, model.b = a, b
        np.testing.assert_allclose(db.broadcast(model, x), a * np.exp(-b * x), rtol=1e-12)


def test_dtype_shape_and_cut_changes_with_same_function():
    def f(x, y):
        return np.tanh(x * y) + x**2 * y

    cases = [
        (uniform((5,)), uniform((5,))),
        (uniform((5,), np.float32), uniform((5,), np.float32)),
        (uniform((3, 4)), uniform((4,))),
        (uniform((3, 1)), uniform((1, 4))),
        (uniform(()), uniform((2, 3))),
        (np.float32(0.5), uniform((6,), np.float32)),
        (uniform((5,)), uniform((5,))),  # back to the first: still right
    ]
    for x, y in cases:
        dtype = np.result_type(x, y)
        shape = np.broadcast_shapes(np.shape(x), np.shape(y))
        got = db.broadcast(f, x, y)
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_allclose(got, f(x, y), rtol=RTOL[dtype.type])
        # the reverse tape over the same NumPy code is the reference
        want = db.gradient(lambda a, b: np.sum(np.broadcast_to(f(a, b), shape)), x, y)
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for cuts in [(False, False), (True, False), (False, True), (True, True)]:
            args = [db.cut(a) if c else a for a, c in zip((x, y), cuts)]
            with db.kernel_log() as calls:
                got = db.gradient(lambda a, b: db.sum(f, a, b), *args)
            assert widths(calls) == [2 - sum(cuts)]
            for g, w, a, c in zip(got, want, (x, y), cuts):
                if c:
                    assert g is None
                else:
                    assert np.shape(g) == np.shape(a) and np.result_type(g) == np.result_type(a)
                    np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# =====================================================================================
# db.elementwise
# =====================================================================================
@db.elementwise
def softplus(x):
    return np.logaddexp(x, 0.0)


@db.elementwise
def swish_energy(x, beta):
    return x * softplus(beta * x) ** 2  # softplus is inlined into this kernel


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_elementwise_means_broadcast():
    x = uniform((4, 3), seed=17)
    with db.kernel_log() as calls:
        got = softplus(x)
    assert len(calls) == 1 and calls[0].function == "softplus"
    np.testing.assert_allclose(got, np.logaddexp(x, 0.0), rtol=1e-12)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(softplus(a)), x), sigmoid(x), rtol=1e-12)
    assert softplus.__name__ == "softplus"


def test_elementwise_inlined_in_other_kernels():
    x = uniform((9,), seed=18)
    beta = 1.7
    sp = np.logaddexp(beta * x, 0.0)
    with db.kernel_log() as calls:
        value = swish_energy(x, beta)
        gx, gb = db.gradient(lambda a, b: np.sum(swish_energy(a, b)), x, beta)
        total = db.sum(lambda t: softplus(t) * t, x)
    assert [c.function for c in calls] == ["swish_energy", "swish_energy", "<lambda>"]  # one kernel each
    np.testing.assert_allclose(value, x * sp**2, rtol=1e-12)
    np.testing.assert_allclose(total, np.sum(np.logaddexp(x, 0.0) * x), rtol=1e-12)
    np.testing.assert_allclose(gx, sp**2 + x * 2 * sp * sigmoid(beta * x) * beta, rtol=1e-12)
    np.testing.assert_allclose(gb, np.sum(x * 2 * sp * sigmoid(beta * x) * x), rtol=1e-12)
    db.check_gradient(lambda a, b: np.sum(swish_energy(a, b)), x, beta)


def test_the_key_of_a_kernel_calling_an_elementwise_function_reads_no_library_state():
    """Its key walks the user's code (the wrapped function and the globals it reads), not the library
    module the wrapper lives in: that walk reached every cached plan and grew with each kernel run."""
    from dualbroadcast.kernel_keys import walk_of

    walk = walk_of(lambda t: softplus(t) * t)
    modules = {namespace.get("__name__") for namespace, _, _ in walk.bindings}
    assert __name__ in modules and not any(m.startswith("dualbroadcast") for m in modules)
    assert len(walk.seen) < 20


@db.elementwise
def gaussian(x):
    return np.exp(-x * x)


def test_elementwise_with_backend_keyword():
    x = uniform((70000,), seed=19)
    for backend in BACKENDS:
        with db.kernel_log() as calls:
            np.testing.assert_allclose(gaussian(x, backend=backend), np.exp(-x * x), rtol=1e-12)
            g = db.gradient(lambda a: np.sum(gaussian(a, backend=backend)), x)
        assert [c.backend for c in calls] == [backend, backend]
        np.testing.assert_allclose(g, -2 * x * np.exp(-x * x), rtol=1e-12)
    with db.kernel_log() as calls:  # numexpr has no logaddexp: the kernel falls back to numpy
        np.testing.assert_allclose(softplus(x, backend="numexpr"), np.logaddexp(x, 0.0), rtol=1e-12)
    assert calls[0].backend == "numpy"


def test_sum_inside_a_kernel_is_an_error():
    with pytest.raises(db.KernelError, match=r"db\.sum"):
        db.broadcast(lambda x: db.sum(np.sin, x), np.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel", [
    lambda r: 7.0 % r + 2.0 // r,
    lambda r: 2.0 ** r - 1.5 / r + (3.0 - r) * (0.5 + r),
    lambda r: np.round(r, 2) * r + np.round(r) * r,
], ids=["reflected % and //", "reflected arithmetic", "round"])
def test_operators_with_the_array_second_and_round(kernel, backend):
    """Python's reflected operators (``7.0 % r``) and np.round with and without decimals, as NumPy computes them."""
    r = uniform((70000,), low=0.3, high=2.0, seed=8)
    close(db.broadcast(kernel, r, backend=backend), kernel(r))
    weights = uniform((70000,), seed=9)
    close(db.gradient(lambda a: np.sum(db.broadcast(kernel, a, backend=backend) * weights), r),
          db.gradient(lambda a: np.sum(kernel(a) * weights), r))


# =====================================================================================
# Kernel limits are clear errors
# =====================================================================================
def branchy(x):
    if x > 0:
        return x
    return -x


@pytest.mark.parametrize("run", [
    lambda f, x: db.broadcast(f, x),
    lambda f, x: db.sum(f, x),
    lambda f, x: db.gradient(lambda a: db.sum(f, a), x),
], ids=["broadcast", "sum", "gradient"])
def test_value_dependent_if_names_np_where(run):
    with pytest.raises(db.KernelError, match=r"np\.where") as info:
        run(branchy, np.array([-1.0, 2.0]))
    assert "if" in str(info.value)


@pytest.mark.parametrize("op", [math.exp, math.sin, float, math.sqrt], ids=["exp", "sin", "float", "sqrt"])
def test_math_functions_name_numpy(op):
    with pytest.raises(db.KernelError, match=r"np\.") as info:
        db.broadcast(lambda x: op(x), np.array([1.0, 2.0]))
    assert "math" in str(info.value)


@pytest.mark.parametrize("op", [np.sum, np.sort, np.mean, np.cumsum], ids=["sum", "sort", "mean", "cumsum"])
def test_array_functions_are_not_elementwise(op):
    with pytest.raises(db.KernelError, match="not elementwise") as info:
        db.broadcast(lambda x: op(x) + x, np.array([1.0, 2.0]))
    assert op.__name__ in str(info.value)


def test_matmul_is_not_elementwise():
    with pytest.raises(db.KernelError, match="not elementwise"):
        db.broadcast(lambda x: np.matmul(x, x), np.array([1.0, 2.0]))


def test_matmul_operator_is_a_kernel_error():
    with pytest.raises(db.KernelError, match="not elementwise"):
        db.broadcast(lambda x: x @ x, np.array([1.0, 2.0]))


def test_unsupported_ufunc_names_itself():
    with pytest.raises(db.KernelError, match="gcd"):
        db.broadcast(lambda x: np.gcd(x, x), np.array([1.0, 2.0]))


def test_non_elementwise_result_is_an_error():
    with pytest.raises(db.KernelError, match="returned"):
        db.broadcast(lambda x: (x, x), np.array([1.0, 2.0]))


# =====================================================================================
# Without a gradient: plain evaluation
# =====================================================================================
def test_no_gradient_gives_plain_values():
    x = uniform((5, 2), seed=20)
    out = db.broadcast(transcendental, x)
    assert type(out) is np.ndarray and out.dtype == np.float64
    np.testing.assert_allclose(out, transcendental(x), rtol=1e-12)
    total = db.sum(transcendental, x)
    assert np.ndim(total) == 0 and isinstance(total, (float, np.floating))
    np.testing.assert_allclose(total, np.sum(transcendental(x)), rtol=1e-12)
    out32 = db.broadcast(transcendental, x.astype(np.float32))
    assert type(out32) is np.ndarray and out32.dtype == np.float32
    # scalars in, a 0-d array out (the broadcast shape is ())
    assert np.shape(db.broadcast(transcendental, 0.5)) == ()
    np.testing.assert_allclose(db.broadcast(transcendental, 0.5), transcendental(0.5))
    # cut markers are ignored outside a gradient
    np.testing.assert_allclose(db.sum(polynomial, db.cut(x), 2.0), np.sum(polynomial(x, 2.0)), rtol=1e-12)


def test_no_gradient_kernel_has_width_zero():
    with db.kernel_log() as calls:
        db.sum(polynomial, np.ones(3), 2.0)
    assert widths(calls) == [0] and calls[0].reduce


def test_kernel_log_records_call():
    x = uniform((8,), seed=21)
    with db.kernel_log() as calls:
        db.gradient(lambda a, c: db.sum(polynomial, a, c), x, 2.0)
        db.gradient(lambda a: np.sum(db.broadcast(polynomial, a, 2.0)), x)
    assert calls == [
        db.KernelCall("polynomial", 2, calls[0].backend, 8, True),
        db.KernelCall("polynomial", 1, calls[1].backend, 8, False),
    ]
    with db.kernel_log() as calls:
        pass
    assert calls == []


# =====================================================================================
# A scalar coefficient over a large array
# =====================================================================================
def pair_potential(r, c):
    return c * np.exp(-3 * (r + 1))


@pytest.mark.parametrize("backend", [None] + BACKENDS)
def test_scalar_coefficient_keeps_one_partial(backend):
    r = uniform((200000,), low=0.0, high=2.0, seed=22)
    with db.kernel_log() as calls:
        g = db.gradient(lambda c: db.sum(pair_potential, db.cut(r), c, backend=backend), 1.5)
    assert widths(calls) == [1] and calls[0].size == r.size
    np.testing.assert_allclose(g, np.sum(np.exp(-3 * (r + 1))), rtol=1e-11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_only_active_argument_backward_is_constant_memory(backend):
    """The tape keeps a 0-d partial: the backward pass allocates O(1) with N = 1e6."""
    r = uniform((1_000_000,), low=0.0, high=2.0, seed=23)
    f = lambda c: db.sum(pair_potential, db.cut(r), c, backend=backend)
    db.pullback(f, 1.5)  # compile, measure and bind buffers (blocked: scratch kept for the next call) outside
    tracemalloc.start()
    try:
        y, back = db.pullback(f, 1.5)
        kept, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        g = back(1.0)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert kept < 200_000, f"{kept} bytes kept after the forward pass (r is {r.nbytes})"
    assert peak < 50_000, f"backward pass peaked at {peak} bytes"
    np.testing.assert_allclose(g, np.sum(np.exp(-3 * (r + 1))), rtol=1e-11)
    np.testing.assert_allclose(y, 1.5 * np.sum(np.exp(-3 * (r + 1))), rtol=1e-11)


# =====================================================================================
# Library bugs found by these tests and the properties: regression tests
# =====================================================================================
X = np.array([0.25, -1.5, 2.0, 0.75])
X32 = np.linspace(0.1, 1.0, 3000, dtype=np.float32)

SELECTIONS = {
    "maximum": (lambda t: np.maximum(t, 0.0), lambda t: (t >= 0).astype(float)),
    "minimum": (lambda t: np.minimum(t, 0.5), lambda t: (t <= 0.5).astype(float)),
    "where": (lambda t: np.where(t > 0, t, 0.0), lambda t: (t > 0).astype(float)),
    "clip": (lambda t: np.clip(t, -1.0, 1.0), lambda t: ((t >= -1) & (t <= 1)).astype(float)),
}


@pytest.mark.parametrize("name, backend", [(name, backend) for name in SELECTIONS for backend in BACKENDS])
def test_selection_alone_gradient_through_broadcast(name, backend):
    """A selection's partial is boolean; the pullback must still produce float cotangents."""
    f, df = SELECTIONS[name]
    x = np.tile(X, 20000)
    g = db.gradient(lambda a: np.sum(db.broadcast(f, a, backend=backend)), x)
    np.testing.assert_allclose(g, df(x))


@pytest.mark.parametrize("f", [lambda t, u: np.sin(t), lambda t, u: t + np.sin(u)], ids=["unused", "linear"])
def test_sum_gradient_with_constant_partial(f):
    """Literal partials (0 for an unused argument, 1 for `t`) reduced to array shape, pulled back."""
    x, y = X, X[::-1].copy()
    gx, gy = db.gradient(lambda a, b: db.sum(f, a, b), x, y)
    want_x, want_y = db.gradient(lambda a, b: np.sum(f(a, b)), x, y)
    np.testing.assert_allclose(gx, want_x)
    np.testing.assert_allclose(gy, want_y)


@pytest.mark.parametrize("how", ["broadcast", "sum", "pullback", "scalar"])
def test_sum_of_selections_counts_both(how):
    def f(t):
        return np.maximum(t, 0.0) + np.maximum(t, -1.0)

    want = np.where(X >= 0, 2.0, np.where(X >= -1, 1.0, 0.0))
    if how == "broadcast":
        got = db.gradient(lambda a: np.sum(db.broadcast(f, a)), X)
    elif how == "sum":
        got = db.gradient(lambda a: db.sum(f, a), X)
    elif how == "pullback":
        got = db.pullback(lambda a: db.broadcast(f, a), X)[1](np.ones(4))
    else:  # a scalar broadcast over the array: the partial is summed in the kernel
        got = db.gradient(lambda c: db.sum(lambda t, c: t * 0 + f(c), db.cut(X), c), 1.0)
        want = 2.0 * X.size
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("f", [
    lambda t: -np.maximum(t, 0.0),
    lambda t: 1 - np.clip(t, -1.0, 1.0),
    lambda t: -np.where(t > 0, t, 0.5),
], ids=["neg-maximum", "one-minus-clip", "neg-where"])
def test_negated_selection_gradient(f):
    g = db.gradient(lambda a: db.sum(lambda t: f(t) * 1.0, a), 0.5)
    assert g == -1.0


@pytest.mark.parametrize("f", [
    lambda t: np.where(np.float64(0.5) < t, t, 0.0),
    lambda t: np.maximum(np.sqrt(2.0), t) * t,
    lambda t: t + np.where(True, 1.0, 2.0),
], ids=["scalar-less-than", "maximum-folded-literal", "constant-where"])
def test_numpy_scalar_literals_in_kernels(f):
    x = np.array([0.2, 0.7, 3.0])
    np.testing.assert_allclose(db.broadcast(f, x), f(x))
    want = db.gradient(lambda a: np.sum(f(a)), x)
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(f, a), x), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_float_coefficient_keeps_float32(backend):
    def f(r, c):
        return np.exp(-c * r)

    assert f(X32, 3.0).dtype == np.float32
    assert db.broadcast(f, X32, 3.0, backend=backend).dtype == np.float32
    assert np.result_type(db.sum(f, X32, 3.0, backend=backend)) == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_times_python_float(backend):
    out = db.broadcast(lambda a, b: a * b, X32, 2.0, backend=backend)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, X32 * 2.0, rtol=1e-6)


def test_folded_float64_literal_dtype_on_every_backend():
    """np.sin(0.5) folds to a strong np.float64: NumPy promotes float32 to float64, so must kernels."""
    def f(a):
        return a + np.sin(0.5) * a

    want = f(X32).dtype
    assert [db.broadcast(f, X32, backend=b).dtype for b in BACKENDS] == [want] * 3
    assert [np.result_type(db.sum(f, X32, backend=b)) for b in BACKENDS] == [want] * 3


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_power_zero_keeps_dtype(dtype):
    x = X.astype(dtype)
    out = db.broadcast(lambda t: t**0, x)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.ones(4, dtype))


@pytest.mark.parametrize("backend", ["numpy", "blocked", "numexpr"])
def test_a_sum_counts_the_broadcast_of_an_argument_its_value_does_not_read(backend):
    """``db.sum(f, x, y)`` sums over the broadcast of every argument, also one f's value ignores: a value of
    shape (4,) summed over the call's (3, 4) counts each element three times (a shape check that compared
    the shapes by order instead of equality would sum it once)."""
    x, y = np.arange(4.0), np.ones((3, 1))
    assert db.sum(lambda x, y: 2 * x, x, y, backend=backend) == 3 * np.sum(2 * x)
    np.testing.assert_array_equal(db.gradient(lambda x: db.sum(lambda x, y: 2 * x, x, y, backend=backend), x),
                                  np.full(4, 6.0))
