"""Kernels (db.sum / db.broadcast) never give a silently wrong gradient: each case is right or a clear error.

Every gradient is compared with the plain reverse-mode gradient of the same computation written
without db.sum/db.broadcast (the tape, an independent computation) or with a hand formula, under
a cotangent that is not all ones, so a partial that is scaled, dropped or overwritten is seen.
"""

import dataclasses
import functools
import math
import sys
import types

import numpy as np
import pytest

import dualbroadcast as db

BACKENDS = [None, "numpy", "blocked", "numexpr"]  # None: the automatic choice (and the cached plan)
N = 70_000  # large enough that every backend is eligible
RNG = np.random.default_rng(20251124)
broadcast_module = sys.modules["dualbroadcast.broadcast"]


def uniform(shape, low=0.1, high=1.0):
    return RNG.uniform(low, high, size=shape)


def close(got, want, rtol=1e-12):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=rtol)


def fused_loss(kernel, reduce, backend, weights):
    """The loss of one kernel call: its sum, or its broadcast weighted elementwise."""
    if reduce:
        return lambda *args: db.sum(kernel, *args, backend=backend) * 1.5
    return lambda *args: np.sum(db.broadcast(kernel, *args, backend=backend) * weights)


def plain_loss(whole, reduce, weights):
    """The same loss written on whole arrays, for reverse mode."""
    if reduce:
        return lambda *args: np.sum(whole(*args)) * 1.5
    return lambda *args: np.sum(whole(*args) * weights)


# =====================================================================================
# db.cut inside a kernel: a constant of the kernel, on every backend, in a gradient or not
# =====================================================================================
def _unpack_pair(pair, r):
    a, b = pair
    return a * r + b * r * r


def _from_dict(d, r):
    return d["a"] * r + d["b"]


CUT_KERNELS = {  # name -> (kernel, the same on whole arrays); each reads the cut value and the variable
    "r * cut(r)": (lambda r: r * db.cut(r), lambda x: x * db.cut(x)),
    "cut of a derived value": (lambda r: np.exp(-db.cut(np.sin(r) * r)) * r**2,
                               lambda x: np.exp(-db.cut(np.sin(x) * x)) * x**2),
    "two selections on cut conditions": (  # cut truth values must stay truth values: 1 + 1 is 2, not True
        lambda r: np.where(db.cut(r > 0.5), r, 0.0) + np.where(db.cut(r > 0.3), r, 0.0),
        lambda x: np.where(db.cut(x > 0.5), x, 0.0) + np.where(db.cut(x > 0.3), x, 0.0)),
    "cut of a tuple": (lambda r: _unpack_pair(db.cut((r * r, np.sin(r))), r),
                       lambda x: _unpack_pair(db.cut((x * x, np.sin(x))), x)),
    "cut of a dict": (lambda r: _from_dict(db.cut({"a": r * r, "b": r}), r),
                      lambda x: _from_dict(db.cut({"a": x * x, "b": x}), x)),
    "uncut inside cut": (lambda r: _unpack_pair(db.cut((r * r, db.uncut(np.sin(r)))), r),
                         lambda x: _unpack_pair(db.cut((x * x, db.uncut(np.sin(x)))), x)),
}


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("reduce", [True, False], ids=["sum", "broadcast"])
@pytest.mark.parametrize("name", list(CUT_KERNELS))
def test_cut_inside_a_kernel_is_a_constant(name, reduce, backend):
    kernel, whole = CUT_KERNELS[name]
    x, weights = uniform(N), uniform(N)
    got = db.gradient(fused_loss(kernel, reduce, backend, weights), x)
    want = db.gradient(plain_loss(whole, reduce, weights), x)
    close(got, want)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_cut_of_one_argument_leaves_the_other(backend):
    def kernel(r, s):
        return r * db.cut(s) + s * db.cut(r * s) + r * s

    def whole(x, y):
        return x * db.cut(y) + y * db.cut(x * y) + x * y

    x, y, weights = uniform(N), uniform(N), uniform(N)
    for reduce in (True, False):
        got = db.gradient(fused_loss(kernel, reduce, backend, weights), x, y)
        want = db.gradient(plain_loss(whole, reduce, weights), x, y)
        for g, w in zip(got, want):
            close(g, w)


def test_cut_inside_a_kernel_without_a_gradient_is_the_value():
    """Outside a gradient the kernel just computes the value; the same kernel, cached, is then
    differentiated right (the trace does not depend on whether a gradient was running)."""
    x = uniform(100)

    def kernel(r):
        return r * db.cut(r) + np.sin(db.cut(r))

    close(db.sum(kernel, x), np.sum(x * x + np.sin(x)))
    close(db.broadcast(kernel, x), x * x + np.sin(x))
    close(db.gradient(lambda a: db.sum(kernel, a), x), x)


def test_cut_inside_a_kernel_in_a_prepared_gradient():
    x, weights = uniform(50), uniform(50)
    for reduce in (True, False):
        kernel, whole = CUT_KERNELS["cut of a tuple"]
        loss = fused_loss(kernel, reduce, None, weights)
        prepared = db.prepare_gradient(loss, x)
        for _ in range(3):
            x = uniform(50)
            close(prepared(x), db.gradient(plain_loss(whole, reduce, weights), x))


@db.elementwise
def cut_square(r):
    return r * db.cut(r)


def test_cut_inside_elementwise_and_inlined():
    x, weights = uniform(50), uniform(50)
    close(cut_square(x), x * x)
    close(db.gradient(lambda a: np.sum(cut_square(a) * weights), x), x * weights)
    close(db.gradient(lambda a: db.sum(lambda r: cut_square(r) * r, a), x), 2 * x * x)  # d(r**2 cut(r))/dr


# =====================================================================================
# Never stale: what a kernel reads besides its arguments is part of its key
# =====================================================================================
CFG = {"k": 2.0}
PARAMS = types.ModuleType("params")
PARAMS.k = 2.0
TABLE = np.array([2.0, 0.5])
INNER_K = 2.0
ZERO = 0.0


class Settings:
    pass


SETTINGS = Settings()
SETTINGS.k = 2.0


class Model:
    k = 2.0

    def energy(self, p):
        return self.k * p * p

    def energy_by_helper(self, p):
        return self.scaled(p) * p

    def scaled(self, p):
        return self.k * p  # the class attribute is read by a method the kernel calls


def _make_scaler():
    k = 2.0

    def scale(p):
        return k * p

    def set_k(value):
        nonlocal k
        k = value

    return scale, set_k


SCALE, SET_SCALE = _make_scaler()


def reads_dict(p):
    return CFG["k"] * p * p


def reads_module_attribute(p):
    return PARAMS.k * p * p


def reads_array(p):
    return TABLE[0] * p * p


def reads_object_attribute(p):
    return SETTINGS.k * p * p


def reads_a_helper_cell(p):
    return SCALE(p) * p


def reads_in_a_comprehension(p):
    return sum(INNER_K * p * p for _ in range(1))  # INNER_K is read by the generator's own code


def scale_by_default(p, k=2.0):
    return k * p


def reads_a_helper_default(p):
    return scale_by_default(p) * p


def reads_its_attribute(p):
    return reads_its_attribute.k * p * p


reads_its_attribute.k = 2.0


def with_keyword_default(p, *, k=2.0):
    return k * p * p


@dataclasses.dataclass
class Scaled:
    a: float

    def __call__(self, p):
        return CFG["k"] * self.a * p * p


def _set_global(name, value):
    globals()[name] = value


# name -> (kernel or a function giving it, how to set k); every kernel computes k * p**2
STATE_CASES = {
    "a global dict's item": (lambda: reads_dict, lambda k: CFG.__setitem__("k", k)),
    "a global rebound to a new dict": (lambda: reads_dict, lambda k: _set_global("CFG", {"k": k})),
    "a module's attribute": (lambda: reads_module_attribute, lambda k: setattr(PARAMS, "k", k)),
    "a global array changed in place": (lambda: reads_array, lambda k: TABLE.__setitem__(0, k)),
    "a global object's attribute": (lambda: reads_object_attribute, lambda k: setattr(SETTINGS, "k", k)),
    "a class attribute read by a method": (lambda: Model().energy, lambda k: setattr(Model, "k", k)),
    "a class attribute read by a method it calls": (lambda: Model().energy_by_helper, lambda k: setattr(Model, "k", k)),
    "a global helper's closure cell": (lambda: reads_a_helper_cell, SET_SCALE),
    "a global helper's default": (lambda: reads_a_helper_default,
                                  lambda k: setattr(scale_by_default, "__defaults__", (k,))),
    "a global read in a comprehension": (lambda: reads_in_a_comprehension, lambda k: _set_global("INNER_K", k)),
    "the function's own attribute": (lambda: reads_its_attribute, lambda k: setattr(reads_its_attribute, "k", k)),
    "a keyword-only default": (lambda: with_keyword_default,
                               lambda k: setattr(with_keyword_default, "__kwdefaults__", {"k": k})),
    "a global read by a callable dataclass": (lambda: Scaled(1.0), lambda k: CFG.__setitem__("k", k)),
}


@pytest.fixture
def restore_state():
    saved = dict(CFG), PARAMS.k, TABLE.copy(), SETTINGS.k, Model.k, reads_its_attribute.k
    cfg = CFG
    yield
    _set_global("CFG", cfg)
    CFG.clear()
    CFG.update(saved[0])
    PARAMS.k, TABLE[:], SETTINGS.k, Model.k, reads_its_attribute.k = saved[1:]
    SET_SCALE(2.0)
    scale_by_default.__defaults__ = (2.0,)
    with_keyword_default.__kwdefaults__ = {"k": 2.0}
    _set_global("INNER_K", 2.0)


@pytest.mark.parametrize("name", list(STATE_CASES))
def test_kernel_follows_the_state_it_reads(name, restore_state):
    """The same kernel called again and again (the cached plan's case) while the state it reads
    changes: value, broadcast and gradient follow every change, back and forth."""
    make, set_k = STATE_CASES[name]
    x = uniform(100)
    for k in [2.0, 2.0, 5.0, 5.0, -1.0, 2.0]:
        set_k(k)
        kernel = make()
        close(db.sum(kernel, x), k * np.sum(x * x))
        close(db.broadcast(kernel, x), k * x * x)
        close(db.gradient(lambda a, kernel=kernel: db.sum(kernel, a), x), 2 * k * x)


def test_captured_object_attribute_change_is_seen():
    settings = Settings()

    def kernel(p):
        return settings.k * p * p

    x = uniform(20)
    for k in [2.0, 5.0, 5.0, 2.0]:
        settings.k = k
        close(db.sum(kernel, x), k * np.sum(x * x))
        close(db.gradient(lambda a: db.sum(kernel, a), x), 2 * k * x)


def test_captured_object_holding_a_tracked_value():
    """An object the kernel reads may hold a tracked value of the evaluation: its cut value is a
    constant of the kernel, followed like the number beside it."""
    settings = Settings()

    def loss(w, x):
        settings.w = w
        return db.sum(lambda p: settings.k * p * p + db.cut(settings.w) * p, x) * w

    x = uniform(20)
    for k, w in [(2.0, 1.3), (5.0, 1.3), (5.0, 2.0), (5.0, 2.0)]:
        settings.k = k
        got = db.gradient(loss, w, x)
        close(got[0], np.sum(k * x * x + w * x))
        close(got[1], (2 * k * x + w) * w)


def test_closure_with_keyword_only_default():
    """A closure with keyword-only defaults is rebuilt with them, and a new default is a new kernel."""
    def make(k):
        def kernel(p, c, *, s=k):
            return s * p * c
        return kernel

    x, c = uniform(30), 1.7
    for k in [2.0, 5.0, 2.0]:
        kernel = make(k)
        close(db.sum(kernel, x, c), k * c * np.sum(x))
        got = db.gradient(lambda a, b, k=k: db.sum(make(k), a, b), x, c)
        want = db.gradient(lambda a, b, k=k: np.sum(k * a * b), x, c)
        close(got[0], want[0])
        close(got[1], want[1])


def keyword_scaled(p, *, k):
    return k * p * p


def test_functions_of_one_code_with_other_keyword_defaults():
    """Functions made from one code object: a walk of what one reads is not reused for another
    with keyword defaults (they are read too)."""
    x = uniform(10)
    bare = types.FunctionType(keyword_scaled.__code__, globals())
    with pytest.raises(TypeError, match="k"):  # no default for k: the call fails, after its walk
        db.sum(bare, x)
    for k in [5.0, 7.0, 5.0]:
        kernel = types.FunctionType(keyword_scaled.__code__, globals())
        kernel.__kwdefaults__ = {"k": k}
        close(db.sum(kernel, x), k * np.sum(x * x))


def test_sign_of_a_zero_read_by_a_kernel():
    """0.0 and -0.0 are different constants (arctan2 tells them apart): a new sign is a new kernel."""
    def kernel(p):
        return np.arctan2(ZERO, -1.0) * p

    x = uniform(10)
    try:
        for zero in [0.0, -0.0, 0.0]:
            _set_global("ZERO", zero)
            close(db.sum(kernel, x), math.atan2(zero, -1.0) * np.sum(x))
            close(db.gradient(lambda a: db.sum(kernel, a), x), np.full(10, math.atan2(zero, -1.0)))
    finally:
        _set_global("ZERO", 0.0)


# =====================================================================================
# Complex values inside a kernel: holomorphic functions only; object and text values: a clear error
# =====================================================================================
COMPLEX_UNIT = np.complex128(1j)


@pytest.mark.parametrize("call, operation", [
    (lambda x: db.sum(lambda r: np.abs(r + 1j), x), "np.absolute"),
    (lambda x: db.sum(lambda r, c: np.abs(r * c), x, 1j), "np.absolute"),
    (lambda x: db.sum(lambda r, c: np.abs(r * c), x, np.complex128(1j)), "np.absolute"),
    (lambda x: db.sum(lambda r: np.maximum(r * COMPLEX_UNIT, 0.0), x), "np.maximum"),
    (lambda x: db.broadcast(lambda r: np.where(r * COMPLEX_UNIT == 0, 1.0, r), x), "np.equal"),
], ids=["literal", "python complex argument", "numpy complex argument", "complex global", "predicate"])
def test_a_function_that_is_not_holomorphic_on_complex_values_in_a_kernel_is_an_error(call, operation):
    x = uniform(5)
    for run in (call, lambda a: db.gradient(lambda b: np.real(np.sum(call(b))), a)):
        with pytest.raises(db.KernelError, match="holomorphic") as info:
            run(x)
        assert operation in str(info.value)


@pytest.mark.parametrize("argument, kind", [
    (np.array([1.0, 2.0, 3.0], dtype=object), "object"),
    (np.array(["a", "b", "c"]), "<U1"),
], ids=["object", "text"])
def test_argument_that_is_not_a_number_is_an_error(argument, kind):
    x = uniform(3)
    with pytest.raises(db.KernelError, match=kind):
        db.gradient(lambda a: db.sum(lambda r, c: np.abs(r * c), a, argument), x)
    with pytest.raises(db.KernelError, match=kind):
        db.sum(lambda r, c: r * c, x, argument)


def test_returning_a_complex_constant_is_a_complex_array():
    np.testing.assert_array_equal(db.broadcast(lambda r: COMPLEX_UNIT, uniform(3)), np.full(3, 1j))


def test_truth_valued_kernel_is_a_plain_array():
    """A kernel whose value is a truth value carries no gradient, like ``x > 0.5``: a plain array,
    usable where NumPy wants a condition and as a constant argument of another kernel."""
    x = uniform(8)

    def loss(a):
        mask = db.broadcast(lambda r: r > 0.5, a)
        assert type(mask) is np.ndarray and mask.dtype == bool
        return np.sum(np.where(mask, a * a, a)) + db.sum(lambda r, m: r * m, a, mask)

    close(db.gradient(loss, x), np.where(x > 0.5, 2 * x + 1, 1.0))


# =====================================================================================
# NumPy's calling forms and conventions, as in reverse mode
# =====================================================================================
CLIP_KERNELS = {
    "positional": lambda r: np.clip(r, 0.3, 0.7),
    "a_min= a_max=": lambda r: np.clip(r, a_min=0.3, a_max=0.7),
    "mixed": lambda r: np.clip(r, 0.3, a_max=0.7),
    "min= max=": lambda r: np.clip(r, min=0.3, max=0.7),
    "out=None": lambda r: np.clip(r, 0.3, 0.7, None),
    "lower only": lambda r: np.clip(r, min=0.3),
    "upper only": lambda r: np.clip(r, None, 0.7),
    "method": lambda r: r.clip(0.3, 0.7),
}


@pytest.mark.parametrize("name", list(CLIP_KERNELS))
def test_clip_in_every_calling_form(name):
    kernel = CLIP_KERNELS[name]
    x, weights = uniform(40, 0.0, 1.0), uniform(40)
    close(db.broadcast(kernel, x), kernel(x))
    got = db.gradient(lambda a: np.sum(db.broadcast(kernel, a) * weights), x)
    close(got, db.gradient(lambda a: np.sum(kernel(a) * weights), x))


def test_clip_keywords_a_kernel_cannot_honour_are_an_error():
    with pytest.raises(db.KernelError, match=r"np\.clip"):
        db.sum(lambda r: np.clip(r, 0.3, 0.7, where=r > 0.5), uniform(4))
    with pytest.raises(db.KernelError, match=r"np\.clip"):
        db.sum(lambda r: np.clip(r, a_min=0.3, min=0.2), uniform(4))


@pytest.mark.parametrize("k", [-1, -2, -3, -6])
def test_negative_integer_power_at_zero_as_in_reverse_mode(k):
    """At 0 the derivative of x**k (k < 0) is infinite, as the reverse rule's k * x**(k - 1) says, not nan."""
    x = np.array([0.0, -0.0, 0.5, -1.5])
    with np.errstate(divide="ignore", invalid="ignore"):
        want = db.gradient(lambda a: np.sum(a**k), x)
        for backend in ("numpy", "blocked", "numexpr", None):
            got = db.gradient(lambda a, backend=backend: db.sum(lambda r: r**k, a, backend=backend), x)
            np.testing.assert_allclose(got, want, rtol=1e-13)  # equal infinities at 0 and -0
            assert np.isinf(got[:2]).all()


# =====================================================================================
# Messages for the case at hand
# =====================================================================================
def test_missing_kernel_rule_message_gives_one_formula_per_argument():
    special = pytest.importorskip("scipy.special")  # chdtr: a ufunc of two arguments without a rule
    with pytest.raises(db.KernelError) as info:
        db.sum(lambda r: special.chdtr(r, 2.0), uniform(3))
    assert "db.defderivative(scipy.special.chdtr, lambda ans, x, y: ..., lambda ans, x, y: ...)" in str(info.value)


def test_ufunc_without_kernel_rule_is_named_by_its_module():
    special = pytest.importorskip("scipy.special")
    with pytest.raises(db.KernelError, match="no forward-mode") as info:
        db.sum(special.ber, uniform(3))
    assert "scipy.special.ber" in str(info.value) and "np.ber" not in str(info.value)


@pytest.mark.parametrize("kernel", [
    lambda p: p[0],
    lambda p: p.shape[0] * p,
    lambda p: len(p) * p,
    lambda p: sum(p),
    lambda p: p.sum(),
], ids=["index", "shape", "len", "iterate", "method"])
def test_array_level_use_of_an_argument_says_one_element_at_a_time(kernel):
    with pytest.raises(db.KernelError, match="one element at a time"):
        db.gradient(lambda a: db.sum(kernel, a), uniform(4))


def test_missing_attribute_is_also_an_attribute_error():
    """``p.shape`` is a KernelError that is also an AttributeError: hasattr and getattr keep working."""
    x = uniform(4)
    close(db.sum(lambda p: p * getattr(p, "size", 2.0), x), 2 * np.sum(x))


# =====================================================================================
# Paths no other test takes
# =====================================================================================
def plan_single(p):
    return np.exp(-p) * p + 0.5 * p * p


def plan_pair(p, q):
    return np.exp(-p) * q + p * p * q


@pytest.fixture
def plan_runs(monkeypatch):
    """The results the cached plan gave (None when it declined)."""
    runs = []
    run = broadcast_module._Plan.run

    def spy(self, f, args):
        result = run(self, f, args)
        runs.append(result)
        return result

    monkeypatch.setattr(broadcast_module._Plan, "run", spy)
    return runs


@pytest.mark.parametrize("reduce", [True, False], ids=["sum", "broadcast"])
def test_cached_plan_under_a_gradient_with_new_values(reduce, plan_runs):
    """The second and third calls of the same kernel take the cached plan, each with new values:
    one tracked argument, two, and a column view."""
    n = 40
    weights = uniform(n)
    for _ in range(3):
        x, y, m = uniform(n), uniform(n), uniform((n, 2))
        got = db.gradient(fused_loss(plan_single, reduce, None, weights), x)
        close(got, db.gradient(plain_loss(plan_single, reduce, weights), x))
        got = db.gradient(fused_loss(plan_pair, reduce, None, weights), x, y)
        for g, w in zip(got, db.gradient(plain_loss(plan_pair, reduce, weights), x, y)):
            close(g, w)
        got = db.gradient(lambda a: fused_loss(plan_single, reduce, None, weights)(a[:, 1]), m)
        close(got, db.gradient(lambda a: plain_loss(plan_single, reduce, weights)(a[:, 1]), m))
    assert sum(result is not None for result in plan_runs) >= 6


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("reduce", [True, False], ids=["sum", "broadcast"])
def test_pullback_of_a_kernel_called_twice(backend, reduce, plan_runs):
    """Each pullback is called twice, with different cotangents: the first must not overwrite the
    partials the second reads.  Three pullbacks of the same kernel (the later ones planned)."""
    n = N if backend in ("blocked", "numexpr") else 40
    op = db.sum if reduce else db.broadcast
    for _ in range(3):
        x, y = uniform(n), uniform(n)
        cotangents = (2.0, -0.5) if reduce else (uniform(n), uniform(n))
        _, back = db.pullback(lambda a: op(plan_single, a, backend=backend), x)
        firsts = [back(g) for g in cotangents]
        for g, got in zip(cotangents, firsts + [back(cotangents[0])]):
            close(got, db.gradient(lambda a, g=g: np.sum(plan_single(a) * g), x))
        _, back = db.pullback(lambda a, b: op(plan_pair, a, b, backend=backend), x, y)
        firsts = [back(g) for g in cotangents]
        for g, got in zip(cotangents, firsts + [back(cotangents[0])]):
            for gi, wi in zip(got, db.gradient(lambda a, b, g=g: np.sum(plan_pair(a, b) * g), x, y)):
                close(gi, wi)


@pytest.mark.parametrize("kernel, whole", [
    (lambda r, a: r + a * a, lambda x, a: x + a * a),  # the partial for a reads only a
    (lambda r, a: a * r + np.exp(a), lambda x, a: a * x + np.exp(a)),  # the partial for r reads only a
], ids=["partial of the scalar", "partial of the array"])
def test_numexpr_sum_with_a_partial_reading_only_scalars(kernel, whole):
    n = 300_000  # more than one numexpr block
    x, a = uniform(n), 0.7
    with db.kernel_log() as calls:
        got = db.gradient(lambda r, s: db.sum(kernel, r, s, backend="numexpr"), x, a)
    assert [c.backend for c in calls] == ["numexpr"]
    want = db.gradient(lambda r, s: np.sum(whole(r, s)), x, a)
    close(got[0], want[0])
    close(got[1], want[1], rtol=1e-9)  # a sum of 300,000 terms


def test_numexpr_sum_with_a_one_element_array_argument():
    """A shape-(1,) argument of a numexpr db.sum over more than one numexpr block is whole in every block
    (it is not split like the full-size arguments)."""
    n = 2 * 262_144 + 1000  # three numexpr blocks
    x, c = uniform(n), np.array([0.7])

    def kernel(p, q):
        return np.exp(-p) * q

    with db.kernel_log() as calls:
        value = db.sum(kernel, x, c, backend="numexpr")
        got, (gx, gc) = db.value_and_gradient(lambda r, s: db.sum(kernel, r, s, backend="numexpr"), x, c)
    assert [k.backend for k in calls] == ["numexpr", "numexpr"]
    e = np.exp(-x)
    close(value, np.sum(e * c), rtol=1e-9)  # sums of 500,000 terms
    close(got, np.sum(e * c), rtol=1e-9)
    close(gx, -e * c)
    assert gc.shape == (1,)
    close(gc, [np.sum(e)], rtol=1e-9)


def test_a_call_with_a_container_argument_leaves_no_plan_for_a_plain_call():
    """A kernel called with a tuple argument is keyed by its tree: it must not leave the cached plan a
    later call of the same function with plain arrays would take (that call's q[0] indexes an element,
    an error when called fresh)."""

    def kernel(p, q):
        return p * q[0]

    x, y = uniform(5), uniform(5)
    for _ in range(2):
        close(db.broadcast(kernel, x, (y,)), x * y)
        close(db.gradient(lambda a: np.sum(db.broadcast(kernel, a, (y,))), x), y)
    for _ in range(2):
        with pytest.raises(db.KernelError, match="one element at a time"):
            db.broadcast(kernel, x, y)
        with pytest.raises(db.KernelError, match="one element at a time"):
            db.gradient(lambda a: np.sum(db.broadcast(kernel, a, y)), x)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("reduce", [True, False], ids=["sum", "broadcast"])
def test_kernel_with_constant_partials(backend, reduce):
    def kernel(r, a):
        return 3.0 * r + a - 0.25 * r

    n = N if backend in ("blocked", "numexpr") else 40
    x, a, weights = uniform(n), 0.3, uniform(n)
    for _ in range(2):
        got = db.gradient(fused_loss(kernel, reduce, backend, weights), x, a)
        want = db.gradient(plain_loss(kernel, reduce, weights), x, a)
        close(got[0], want[0])
        close(got[1], want[1], rtol=1e-10)


# =====================================================================================
# A constant array changed after use: the kernel's partials are its own
# =====================================================================================
@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("reduce", [True, False], ids=["sum", "broadcast"])
def test_constant_changed_after_the_kernel_used_it(backend, reduce):
    n = N if backend in ("blocked", "numexpr") else 3
    original = uniform(n)
    weights = uniform(n)

    def loss(x):
        c = original.copy()
        scale = 1.0

        def kernel(r):  # c captured: an argument of the kernel, read when called
            return r * c * scale

        y = db.sum(kernel, x, backend=backend) if reduce else db.broadcast(kernel, x, backend=backend) * weights
        c[:] = 100.0
        scale = 7.0
        return np.sum(y)

    want = original if reduce else original * weights
    for _ in range(2):
        close(db.gradient(loss, uniform(n)), want)


def test_captured_array_changed_between_calls_is_seen():
    c = uniform(5)

    def kernel(r):
        return r * c

    x = uniform(5)
    for value in (1.0, 4.0):
        c[:] = value
        close(db.gradient(lambda a: db.sum(kernel, a), x), np.full(5, value))


def test_partial_functions_and_methods_read_their_state():
    """functools.partial and bound methods as kernels: their arguments and owner are their state."""
    x = uniform(7)
    kernel = functools.partial(lambda p, k: k * p * p, k=2.0)
    close(db.gradient(lambda a: db.sum(kernel, a), x), 4.0 * x)
    model = Model()
    model.k = 3.0  # an instance attribute shadowing the class's
    close(db.gradient(lambda a: db.sum(model.energy, a), x), 6.0 * x)


# --- state a kernel reads through objects ---------------------------------------------------------------------------
class _Slotted:
    __slots__ = ("a", "__scale")

    def __init__(self, a):
        self.a = a
        self.__scale = 2.0

    def model(self, r):
        return self.a * r * self.__scale


class _Plain:
    def __init__(self, a):
        self.a = a

    def model(self, r):
        return self.a * r * 2.0


@pytest.mark.parametrize("owner", [_Slotted, _Plain])
def test_a_bound_method_of_an_object_holding_a_tracked_value_is_differentiated(owner):
    """A __slots__ object's attributes were not walked: its tracked value met a kernel symbol (a wrong error)."""
    x = np.linspace(0.1, 1.0, 4)
    g = db.gradient(lambda a: db.sum(owner(a).model, x), 1.5)
    assert g == pytest.approx(db.gradient(lambda a: np.sum(a * x * 2.0), 1.5), rel=1e-14)
    assert db.gradient(lambda a: db.sum(db.cut(owner(a)).model, x) + a, 1.5) == 1.0


@pytest.mark.parametrize("owner", [_Slotted, _Plain])
def test_cut_of_a_plain_object_cuts_the_values_it_holds(owner):
    """db.cut(obj) returned a plain object unchanged, its tracked attributes still differentiated."""
    x = np.linspace(0.1, 1.0, 4)
    assert db.gradient(lambda a: np.sum(db.cut(owner(a)).a * x) + a, 1.5) == 1.0
    g = db.gradient(lambda a: np.sum(db.cut([owner(a), db.uncut(owner(a))])[1].a * x), 1.5)
    assert g == pytest.approx(np.sum(x))


_BOX = []


def _boxed_model(r):
    return _BOX[0] * r


def test_a_tracked_value_a_kernel_reaches_unseen_is_a_kernel_error_naming_the_way():
    """Read through a global, a tracked value is not the kernel's argument: an error that says so."""
    x = np.linspace(0.1, 1.0, 4)

    def f(a):
        _BOX[:] = [a * 1.0]
        return db.sum(_boxed_model, x)

    with pytest.raises(db.KernelError, match="pass the value as an argument"):
        db.gradient(f, 1.5)


def test_a_tracked_value_in_a_captured_list_is_the_kernels_state():
    x = np.linspace(0.1, 1.0, 4)
    box = []

    def f(a):
        box[:] = [a * 1.0]
        return db.sum(lambda r: box[0] * r, x)

    assert db.gradient(f, 1.5) == pytest.approx(np.sum(x), rel=1e-14)


@pytest.mark.parametrize("constant_shape", [(1, 1), (1,), (), (1, 1, 1)])
@pytest.mark.parametrize("n", [1024, 2 * 262_144 + 1000])
def test_numexpr_sum_with_a_size_one_constant_of_any_rank(constant_shape, n):
    """A (1, 1) closure constant broadcast the flat numexpr blocks to (1, block): a ValueError (random programs)."""
    c = np.full(constant_shape, 0.5)
    model = lambda p: np.sin(p * c)
    a = np.random.default_rng(0).uniform(-2, 2, (n, 1))
    expected = db.gradient(lambda a: np.sum(np.sin(a * c)), a)
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(model, a, backend="numexpr"), a), expected, rtol=1e-12)
    assert db.sum(model, a, backend="numexpr") == pytest.approx(np.sum(np.sin(a * c)), rel=1e-12)
