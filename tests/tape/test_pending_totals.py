"""Totals left pending by `db.gradient` (`tracked.Pending`): a whole `np.sum` or a `db.sum` whose value the gradient
does not read is never computed; any read computes it, and the gradient is the one computed with the value.

Every test runs with the size threshold lowered to one element (`small_totals`), so that 0-d and tiny arrays
take the pending path too; each gradient is checked against `db.value_and_gradient` (which computes every value
as it goes) and against a hand-written gradient or central differences.
"""

import importlib

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import tracked as tracked_module
from dualbroadcast.errors import StaleValueError, ValueConversionError
from dualbroadcast.registry import RULES

from ..tape.test_fast_paths import central

broadcast_module = importlib.import_module("dualbroadcast.broadcast")


@pytest.fixture(autouse=True)
def small_totals(monkeypatch):
    monkeypatch.setattr(tracked_module, "LAZY_TOTAL", 1)
    monkeypatch.setattr(broadcast_module, "LAZY_TOTAL", 1)
    db.clear_cache()
    yield
    db.clear_cache()


@pytest.fixture
def sums_computed(monkeypatch):
    """How many times np.sum's value was computed on the tape (its rule's plain call)."""
    rule = RULES[np.sum]
    plain = rule.plain
    count = []

    def counted(*args):
        count.append(1)
        return plain(*args)

    monkeypatch.setattr(rule, "plain", counted)
    return count


SHAPES = [(), (1,), (5,), (3, 1, 4), (128, 1, 28, 28)]
DTYPES = [np.float32, np.float64]


def _x(shape, dtype, seed=0):
    return np.asarray(np.random.default_rng(seed).random(shape) + 0.5, dtype)


def _check(f, x, expected, rtol):
    """gradient (pending totals) == value_and_gradient's (computed) == ``expected``; dtype and shape kept."""
    g = db.gradient(f, x)
    value, g2 = db.value_and_gradient(f, x)
    assert type(g) is np.ndarray and g.dtype == x.dtype and g.shape == np.shape(x)
    np.testing.assert_allclose(g, g2, rtol=rtol)
    np.testing.assert_allclose(g, expected, rtol=rtol)
    return value


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_of_squares_leaves_the_sum_uncomputed(shape, dtype, sums_computed):
    x = _x(shape, dtype)
    f = lambda v: np.sum(v**2)
    g = db.gradient(f, x)
    if shape:  # (x**2 of a 0-d array is a NumPy scalar, summed as it is)
        assert not sums_computed  # the gradient needs 2x, not the sum
    np.testing.assert_array_equal(g, 2 * x)
    assert g.dtype == x.dtype
    value, _ = db.value_and_gradient(f, x)
    assert value == np.sum(x**2) and type(value) is type(np.sum(x**2))  # the primal's own number


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_db_sum_gradient_without_its_value(shape, dtype):
    x = _x(shape, dtype)
    f = lambda v: db.sum(lambda u: np.arctan2(u, 2), v)
    value = _check(f, x, 2 / (x.astype(np.float64) ** 2 + 4), rtol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(value, np.sum(np.arctan2(x, 2)), rtol=1e-5)


def test_db_sum_of_broadcast_arguments():
    x, y = _x((4, 3), np.float64), _x((1, 3), np.float64, seed=1)
    f = lambda a, b: db.sum(lambda u, w: np.sin(u) * w, a, b)
    gx, gy = db.gradient(f, x, y)
    (_, (ex, ey)) = db.value_and_gradient(f, x, y)
    np.testing.assert_allclose(gx, np.cos(x) * y)
    np.testing.assert_allclose(gy, np.sum(np.sin(x), axis=0, keepdims=True))
    np.testing.assert_allclose(gx, ex)
    np.testing.assert_allclose(gy, ey)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_read_total_is_computed(dtype):
    """The value read by arithmetic, NumPy functions, comparisons and another sum: the same gradient as
    computed eagerly, and as central differences."""
    x = _x((6,), dtype)

    def f(v):
        s = np.sum(v**2)
        t = db.sum(lambda u: np.exp(-u), v)
        r = s * s + np.sin(s) - 2.0 / t + abs(-t) + t**2
        if s > 0 and bool(t < 1e9):
            r = r + np.stack([s, t]).sum()
        return r + db.sum(lambda u, c: u * c, v, s)

    rtol = 2e-4 if dtype == np.float32 else 1e-6
    _check(f, x, central(f, x), rtol)


def test_operators_with_a_tracked_left_operand_read_the_total():
    x = _x((4,), np.float64)

    def f(v):
        s = np.sum(v)
        return np.sum((v * s) + (v - s) * (v / s))

    _check(f, x, central(f, x), 1e-6)


def test_a_total_numpy_does_not_dispatch_on_is_read():
    """np.full_like dispatches on its array only: its fill value reaches the tape as an argument."""
    x = _x((3,), np.float64)

    def f(v):
        return np.sum(np.full_like(v, np.sum(v**2)) * np.sin(v))

    _check(f, x, central(f, x), 1e-6)


def test_a_cut_total_is_a_constant():
    x = _x((5,), np.float64)

    def f(v):
        s = db.cut(np.sum(v**2))
        return np.sum(v) * s

    _check(f, x, np.full(5, np.sum(x**2)), 1e-12)


def test_a_primitive_gets_its_rule_on_a_total():
    """A rule that is not its body's derivative (a custom gradient): a total passed to it gets the rule's."""

    @db.primitive
    def twice(a):
        return 2 * a

    db.defvjp(twice, lambda ans, a: lambda g: 3 * g)
    x = _x((5,), np.float64)
    _check(lambda v: twice(np.sum(v**2)), x, 6 * x, 1e-12)


def test_a_total_in_a_gradient_of_a_gradient():
    x = _x((5,), np.float64)
    f = lambda v: np.sum(db.gradient(lambda y: np.sum(y**3), v))
    _check(f, x, 6 * x, 1e-12)
    hessian = db.hessian(lambda v: np.sum(v**2) ** 2, x)
    np.testing.assert_allclose(hessian, 8 * np.outer(x, x) + 4 * np.sum(x**2) * np.eye(5))


def test_a_total_kept_past_the_gradient_is_a_clear_error():
    kept = []

    def f(v):
        kept.append(np.sum(v**2))
        return kept[-1]

    db.gradient(f, _x((5,), np.float64))
    with pytest.raises(StaleValueError, match="value_and_gradient"):
        kept[0] + 1.0
    assert "did not compute" in repr(kept[0])  # printing it does not fail
    with pytest.raises(StaleValueError, match="another gradient evaluation"):
        db.gradient(lambda v: kept[0], _x((5,), np.float64))


def test_conversions_are_the_errors_they_are_for_tracked_values():
    def f(v):
        float(np.sum(v))

    with pytest.raises(ValueConversionError):
        db.gradient(f, _x((3,), np.float64))


def test_a_sum_whose_value_is_read_is_computed_with_its_partials_next_time():
    """`Kernel.value_unread`: after a read, the next calls compute the value in the same kernel (one pass), for
    1, 2, 4, ... calls; a gradient that never reads it leaves it pending every call."""
    x = _x((50,), np.float64)
    rho = lambda u: np.exp(-3 * u)
    read = lambda v: db.sum(rho, v) ** 2
    unread = lambda v: db.sum(rho, v)
    expected = 2 * np.sum(np.exp(-3 * x)) * -3 * np.exp(-3 * x)
    for _ in range(7):
        np.testing.assert_allclose(db.gradient(read, x), expected)
    cached = list(broadcast_module.KERNEL_CACHE.values())
    (kernel,) = [k for k in cached + [k.unscaled[0] for k in cached if k.unscaled] if k.split]
    assert kernel.read_backoff == 4 and kernel.read_wait == 3  # pending and read at calls 1, 3 and 6
    for _ in range(5):  # 3 computed with the partials, then pending, unread
        np.testing.assert_allclose(db.gradient(unread, x), -3 * np.exp(-3 * x))
    assert kernel.read_wait == 0 and kernel.read_backoff == 4


def test_prepared_gradients_and_value_and_gradient_compute_every_total(sums_computed):
    x = _x((5,), np.float64)
    f = lambda v: np.sum(v**2)
    db.value_and_gradient(f, x)
    assert len(sums_computed) == 1
    prepared = db.prepare_gradient(f, x)
    np.testing.assert_allclose(prepared(x), 2 * x)


def test_a_repeated_sum_is_left_pending_by_its_plan():
    """The cached plan of a repeated `db.sum` (`broadcast._Plan`) leaves its value pending too, and computes it
    by the whole kernel when read."""
    x = _x((50,), np.float64)
    f = lambda v: db.sum(lambda u: np.sin(u) * u, v)
    for _ in range(3):
        np.testing.assert_allclose(db.gradient(f, x), np.cos(x) * x + np.sin(x))
    (plan,) = broadcast_module._plans.values()
    assert plan.valueless
    np.testing.assert_allclose(db.gradient(lambda v: np.sin(f(v)), x),
                               np.cos(np.sum(np.sin(x) * x)) * (np.cos(x) * x + np.sin(x)))
    value, g = db.value_and_gradient(f, x)
    np.testing.assert_allclose(value, np.sum(np.sin(x) * x))
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x))
