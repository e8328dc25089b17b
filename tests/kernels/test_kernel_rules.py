"""The kernels' forward rules, rule by rule, on every backend; and functions given derivatives at run time.

Every elementwise rule case (tests/cases/elementwise.py, the cases test_rules.py sweeps against finite
differences) runs as ``db.sum(f, *args)`` and as ``db.broadcast(f, *args)`` under a cotangent, forced on
each kernel backend, in float64 and float32; value and gradient are compared with reverse mode on the
tape (an independent path) on the same inputs, and in float64 with a directional finite difference.
The kernel log proves each call ran on the backend it was forced to.

A function with no forward rule gets one with ``db.defderivative`` (through the `defderivative` fixture,
which removes it after the test), and then runs in kernels as one operation.  The library's own entries
for np.sinc and scipy.special.erf stand for a user's: the tests start without them (`without_rule`).
"""

import contextlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast import kernels
from dualbroadcast.derivatives import DERIVATIVES
from dualbroadcast.registry import RULES
from dualbroadcast.rules import BUILTIN_RULES

from ..cases import elementwise, reset_streams, scipy_special

BACKENDS = ("numpy", "blocked", "numexpr")
SIZE = 1200  # elements of a call: numexpr runs from kernels.NUMEXPR_MIN, blocked from 2 * BLOCK
BLOCK = 128  # kernels.BLOCK during the sweep: blocks of a chunk, chunks on two threads, a short last block
NUMEXPR_BLOCK = 500  # kernels.NUMEXPR_BLOCK during the sweep: numexpr's blocked sums over several blocks
# Kernels with an operation numexpr lacks, in the function or its derivative: numexpr is no candidate.
NUMEXPR_LACKS = {np.positive, np.reciprocal, np.square, np.cbrt, np.exp2, np.logaddexp, np.logaddexp2,
                 np.deg2rad, np.rad2deg, np.remainder, np.fmax, np.fmin, np.fabs, np.copysign, np.radians,
                 np.degrees}
NUMEXPR_LACKS |= {np.sinc, np.nan_to_num, np.ldexp, np.float_power, np.i0, *scipy_special.SPECS}  # and SciPy's
KERNEL_CASES = elementwise.KERNEL_CASES + scipy_special.KERNEL_CASES
JUMPS = {np.remainder, np.fmod}  # a finite difference may straddle their jumps (x / y an integer)
TOLERANCE = {np.float64: 1e-12, np.float32: 2e-5}


def full_or_one_element(draw, n, **_):
    """``n`` shapes a blocked kernel takes: each the call's full shape or one element, at least one full."""
    full = draw(st.sampled_from([(SIZE,), (SIZE // 4, 4)]))
    shapes = [full if draw(st.booleans()) else draw(st.sampled_from([(), (1,), (1, 1)])) for _ in range(n)]
    if full not in shapes:
        shapes[draw(st.integers(0, n - 1))] = full
    return shapes


@contextlib.contextmanager
def sweep_sizes():
    """The cases drawn at `full_or_one_element` shapes; kernels run with small blocks."""
    with mock.patch.object(elementwise, "broadcast_shapes", full_or_one_element), \
            mock.patch.object(scipy_special, "broadcast_shapes", full_or_one_element), \
            mock.patch.object(kernels, "BLOCK", BLOCK), mock.patch.object(kernels, "NUMEXPR_BLOCK", NUMEXPR_BLOCK):
        yield


def test_every_derivative_has_a_kernel_case():
    covered = {case.func for case in KERNEL_CASES}
    missing = [f.__name__ for f in DERIVATIVES if f in BUILTIN_RULES and f not in covered]  # not a user's entry
    assert not missing, f"functions in DERIVATIVES without an elementwise case: {missing}"


def as_tuple(gradient, n):
    return gradient if n > 1 else (gradient,)


def close(got, want, dtype, summed):
    """``got`` equals ``want`` to ``dtype``'s precision; a sum of ``SIZE`` terms (of size up to ~10) is
    added in another order by each backend."""
    tol = TOLERANCE[dtype]
    assert np.result_type(got) == dtype and np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (10 * SIZE if summed else 10))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", KERNEL_CASES, ids=str)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_rule_case_in_kernels_on_every_backend(case, dtype, data):
    reset_streams()
    with sweep_sizes():
        fn, args = case.build(data.draw, dtype)
        shape = np.broadcast_shapes(*[np.shape(a) for a in args])
        weights = np.random.default_rng(len(args)).standard_normal(shape).astype(dtype)
        one_element = [np.size(a) == 1 for a in args]
        losses = {  # db.sum and db.broadcast: (the kernel's loss on a backend, the same loss on the tape)
            True: (lambda backend: lambda *a: db.sum(fn, *a, backend=backend), lambda *a: np.sum(fn(*a))),
            False: (lambda backend: lambda *a: np.sum(db.broadcast(fn, *a, backend=backend) * weights),
                    lambda *a: np.sum(fn(*a) * weights)),
        }
        for kernel_loss, tape_loss in losses.values():
            want_value, want = db.value_and_gradient(tape_loss, *args)
            for backend in BACKENDS:
                ran = "numpy" if backend == "numexpr" and case.func in NUMEXPR_LACKS else backend
                with db.kernel_log() as calls:
                    value, got = db.value_and_gradient(kernel_loss(backend), *args)
                    plain = db.broadcast(fn, *args, backend=backend)
                assert [c.backend for c in calls] == [ran, ran], f"{backend} forced, ran {calls}"
                close(value, want_value, case.out_dtype or dtype, summed=True)
                close(plain, fn(*args), case.out_dtype or dtype, summed=False)
                for g, w, summed in zip(as_tuple(got, len(args)), as_tuple(want, len(args)), one_element):
                    close(g, w, dtype, summed=summed)
                if dtype == np.float64 and case.func not in JUMPS:
                    directional_difference(kernel_loss(backend), args, got)


def directional_difference(loss, args, gradient, h=1e-5):
    """``loss``'s central difference along a random direction equals the gradient's projection on it."""
    rng = np.random.default_rng(0)
    direction = [rng.uniform(-1.0, 1.0, np.shape(a)) for a in args]
    step = [(a + h * d, a - h * d) for a, d in zip(args, direction)]
    difference = (loss(*[s[0] for s in step]) - loss(*[s[1] for s in step])) / (2 * h)
    projection = sum(np.sum(g * d) for g, d in zip(as_tuple(gradient, len(args)), direction))
    np.testing.assert_allclose(difference, projection, rtol=1e-6, atol=1e-6)


# --- functions given derivatives at run time ---------------------------------------------------------
@pytest.fixture
def defderivative():
    """``db.defderivative`` for this test only: the table entries and reverse rules it makes are removed
    afterwards, and the kernels traced meanwhile forgotten."""
    registered = []

    def register(func, *partials):
        registered.append((func, DERIVATIVES.get(func), RULES.get(func)))
        db.defderivative(func, *partials)

    def forget(func):
        """The library has no rule for ``func`` during the test."""
        registered.append((func, DERIVATIVES.pop(func, None), RULES.pop(func, None)))
        db.clear_cache()

    register.forget = forget
    yield register
    for func, entry, rule in reversed(registered):
        for table, old in ((DERIVATIVES, entry), (RULES, rule)):
            if old is None:
                table.pop(func, None)
            else:
                table[func] = old
    db.clear_cache()


def d_erf(ans, x):
    return 2 / np.sqrt(np.pi) * np.exp(-x * x)


X = np.random.default_rng(3).uniform(-1.0, 1.0, 70_000)  # every backend eligible


@pytest.mark.parametrize("backend", BACKENDS)
def test_scipy_ufunc_with_registered_derivative_runs_in_kernels(backend, defderivative):
    special = pytest.importorskip("scipy.special")
    defderivative.forget(special.erf)
    with pytest.raises(db.KernelError, match=r"db\.defderivative\(scipy\.special\.erf, lambda ans, x: \.\.\.\)"):
        db.sum(special.erf, X)
    defderivative(special.erf, d_erf)  # as the message says
    y = X[::-1].copy()
    def loss(x, y):
        return db.sum(lambda a, b: special.erf(a) * b, x, y, backend=backend)

    with db.kernel_log() as calls:
        value, (gx, gy) = db.value_and_gradient(loss, X, y)
    assert [c.backend for c in calls] == ["numpy" if backend == "numexpr" else backend]  # numexpr has no erf
    np.testing.assert_allclose(value, np.sum(special.erf(X) * y), rtol=1e-12)
    np.testing.assert_allclose(gx, d_erf(None, X) * y, rtol=1e-12)
    np.testing.assert_allclose(gy, special.erf(X), rtol=1e-12)
    out = db.broadcast(lambda a: special.erf(a) + 1.0, X[:100], backend=backend)
    np.testing.assert_allclose(out, special.erf(X[:100]) + 1.0, rtol=1e-14)


def test_registered_function_in_a_prepared_gradient(defderivative):
    special = pytest.importorskip("scipy.special")
    defderivative.forget(special.erf)
    defderivative(special.erf, d_erf)

    def loss(x):
        return db.sum(lambda a: special.erf(a) ** 2, x) + np.sum(db.broadcast(special.erf, x) * x)

    for x in (X[:50], X):  # one block, several blocks
        prepared = db.prepare_gradient(loss, x)
        for sample in (x, x * 0.5):
            np.testing.assert_allclose(prepared(sample), db.gradient(loss, sample), rtol=1e-12)
            hand = 2 * special.erf(sample) * d_erf(None, sample) + special.erf(sample) + sample * d_erf(None, sample)
            np.testing.assert_allclose(prepared(sample), hand, rtol=1e-10)


def test_numpy_function_without_kernel_rule_and_the_advice_works(defderivative):
    defderivative.forget(np.sinc)
    x = np.random.default_rng(4).uniform(0.1, 1.0, 6)
    with pytest.raises(db.KernelError) as info:
        db.gradient(lambda a: db.sum(np.sinc, a), x)
    message = str(info.value)
    assert "no forward-mode (kernel) rule" in message and "not elementwise" not in message
    assert "db.defderivative(np.sinc, lambda ans, x: ...)" in message and "outside f" in message

    def dsinc(ans, t):
        return (np.cos(np.pi * t) * np.pi * t - np.sin(np.pi * t)) / (np.pi * t * t)

    defderivative(np.sinc, dsinc)  # as the message says
    for backend in BACKENDS:
        got = db.gradient(lambda a, backend=backend: db.sum(lambda r: r * np.sinc(r), a, backend=backend), x)
        np.testing.assert_allclose(got, np.sinc(x) + x * dsinc(None, x), rtol=1e-12)
    db.check_gradient(lambda a: db.sum(lambda r: r * np.sinc(r), a), x)


def test_the_advice_computed_outside_f_works_too(defderivative):
    defderivative.forget(np.sinc)
    x = np.random.default_rng(5).uniform(0.1, 1.0, 6)

    def dsinc(t):
        return (np.cos(np.pi * t) * np.pi * t - np.sin(np.pi * t)) / (np.pi * t * t)

    db.defvjp(np.sinc, lambda ans, t: lambda g: g * dsinc(t))
    got = db.gradient(lambda a: db.sum(lambda r, s: s * r, a, np.sinc(a)), x)
    np.testing.assert_allclose(got, np.sinc(x) + x * dsinc(x), rtol=1e-12)


def softplus_body(x):
    if np.any(x > 700):  # array-level code: a kernel cannot trace it, but it runs on whole arrays and blocks
        raise OverflowError("softplus of a large argument")
    return np.log1p(np.exp(x))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", [True, False])
def test_primitive_with_registered_derivative_is_one_kernel_operation(backend, reduce, defderivative):
    softplus = db.primitive(softplus_body)

    def kernel(a, b):
        return softplus(a) * b

    with pytest.raises(db.KernelError, match=r"np\.any is not elementwise"):
        db.sum(kernel, X, 2.0)  # without derivatives its body is traced
    defderivative(softplus, lambda ans, x: 1 / (1 + np.exp(-x)))
    sigmoid = 1 / (1 + np.exp(-X))
    weights = np.linspace(-1.0, 1.0, X.size)
    if reduce:
        want = (2.5 * sigmoid, np.sum(softplus_body(X)))
    else:
        want = (2.5 * sigmoid * weights, np.sum(softplus_body(X) * weights))

    def loss(x, b):
        if reduce:
            return db.sum(kernel, x, b, backend=backend)
        return np.sum(db.broadcast(kernel, x, b, backend=backend) * weights)

    with db.kernel_log() as calls:
        gx, gb = db.gradient(loss, X, 2.5)
    assert [c.backend for c in calls] == ["numpy" if backend == "numexpr" else backend]
    np.testing.assert_allclose(gx, want[0], rtol=1e-12)
    np.testing.assert_allclose(gb, want[1], rtol=1e-12)


def test_primitive_without_registered_derivative_is_traced_through():
    """Its body is traced, so the kernel differentiates the body; its reverse rule (wrong here on purpose)
    serves reverse mode only."""
    @db.primitive
    def cube(x):
        return x * x * x

    db.defvjp(cube, lambda ans, x: lambda g: g * 0.0)
    try:
        got = db.gradient(lambda a: db.sum(cube, a), X[:10])
    finally:
        del RULES[cube]
    np.testing.assert_allclose(got, 3 * X[:10] ** 2, rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_functions_sharing_a_numpy_name_are_not_numpy(backend, defderivative):
    """Generated code calls each function by a name of its own: a user's ``exp`` is not np.exp, and
    scipy.special.exp2 (the same name as np.exp2) is called as itself."""
    special = pytest.importorskip("scipy.special")

    @db.primitive
    def exp(x):
        return x * x

    defderivative(exp, lambda ans, x: 2 * x)
    defderivative(special.exp2, lambda ans, x: ans * np.log(2.0))
    assert special.exp2 is not np.exp2 and special.exp2.__name__ == np.exp2.__name__

    def kernel(r):
        return exp(r) + np.exp(r) + special.exp2(r) - np.exp2(r)

    got = db.gradient(lambda a: db.sum(kernel, a, backend=backend), X)
    np.testing.assert_allclose(db.sum(kernel, X, backend=backend), np.sum(X * X + np.exp(X)), rtol=1e-12)
    np.testing.assert_allclose(got, 2 * X + np.exp(X), rtol=1e-12, atol=1e-14)  # exp2's partials cancel


@pytest.mark.parametrize("backend", BACKENDS)
def test_three_functions_sharing_a_name_each_get_a_name_of_their_own(backend, defderivative):
    """A third function of one name (after ``f_exp`` and ``f_exp1``) is ``f_exp2``, not ``f_exp1`` again."""

    def primitive_named_exp(power):
        @db.primitive
        def exp(x):
            return x ** power

        defderivative(exp, lambda ans, x: power * x ** (power - 1))
        return exp

    square, cube = primitive_named_exp(2), primitive_named_exp(3)

    def kernel(r):
        return square(r) + cube(r) + np.exp(r)

    got = db.gradient(lambda a: db.sum(kernel, a, backend=backend), X)
    np.testing.assert_allclose(db.sum(kernel, X, backend=backend), np.sum(X ** 2 + X ** 3 + np.exp(X)), rtol=1e-12)
    np.testing.assert_allclose(got, 2 * X + 3 * X ** 2 + np.exp(X), rtol=1e-12)


def test_keyword_arguments_of_a_registered_function_in_a_kernel_are_an_error(defderivative):
    @db.primitive
    def scaled(x, k):
        return k * x

    defderivative(scaled, lambda ans, x, k: k, lambda ans, x, k: x)
    with pytest.raises(db.KernelError, match=r"by position.*pass k positionally"):
        db.sum(lambda r: scaled(r, k=2.0), X[:10])
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(lambda r: scaled(r, 2.0), a), X[:10]), 2.0)


def test_a_corrected_derivative_is_not_served_a_kernel_traced_with_the_old_one(defderivative):
    special = pytest.importorskip("scipy.special")
    defderivative.forget(special.erf)
    defderivative(special.erf, lambda ans, x: 3.0 * x)  # wrong
    db.gradient(lambda a: db.sum(special.erf, a), X[:10])
    defderivative(special.erf, d_erf)  # corrected
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(special.erf, a), X[:10]), d_erf(None, X[:10]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_integer_argument_of_a_ufunc_stays_an_integer_in_kernels(backend, dtype):
    """np.ldexp's exponent, a Python int, was typed to the float inputs like a weak literal: a TypeError."""
    x = np.linspace(-1.0, 1.0, 1200).astype(dtype)
    with mock.patch.object(kernels, "BLOCK", BLOCK), mock.patch.object(kernels, "NUMEXPR_BLOCK", NUMEXPR_BLOCK):
        value, g = db.value_and_gradient(lambda x: db.sum(lambda r: np.ldexp(r, 3) * r, x, backend=backend), x)
    np.testing.assert_allclose(value, np.sum(8 * x * x), rtol=1e-5)
    np.testing.assert_allclose(g, 16 * x, rtol=1e-5)
    assert g.dtype == dtype
