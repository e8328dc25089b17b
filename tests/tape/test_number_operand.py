"""A NumPy ufunc called on a tracked value and a plain number (``np.multiply(c, x)``, ``np.float64(2) * x``,
``np.power(x, 3)``) takes the tape's binary fast path, as the operators do (`tracked.Tracked.__array_ufunc__`):
the same values and dtypes as the general recording path, and its gradients up to a few ulps (a scalar result's
partials are the rule's scalar formulas), first and second order."""

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import operands

UFUNCS = [np.add, np.subtract, np.multiply, np.divide, np.power, np.arctan2, np.maximum, np.minimum, np.hypot,
          np.logaddexp, np.copysign, np.fmax]
NUMBERS = [2, 0.5, np.float64(1.5), np.float32(-0.75), 3]
pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # (-0.75) ** x: NaN either way


def _f(ufunc, number, left):
    def f(x):
        y = ufunc(number, x) if left else ufunc(x, number)
        return np.sum(y * np.cos(x))

    return f


def _general(monkeypatch):
    """The general recording path (`record_operation`) for every ufunc call."""
    monkeypatch.setattr(operands, "PLAIN_NUMBERS", frozenset())


@pytest.mark.parametrize("ufunc", UFUNCS, ids=lambda u: u.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(), (1,), (4,), (2, 3)])
def test_a_number_beside_a_tracked_value_as_the_general_path(ufunc, dtype, shape, monkeypatch):
    rng = np.random.default_rng(len(shape))
    x = (rng.random(shape) + 0.25).astype(dtype)[()]
    results = []
    for general in (False, True):
        with monkeypatch.context() as m:
            if general:
                _general(m)
            results.append([db.value_and_gradient(_f(ufunc, c, left), x) for c in NUMBERS for left in (True, False)])
    for (fast_value, fast_grad), (value, grad) in zip(*results):
        assert np.result_type(fast_value) == np.result_type(value)
        assert np.result_type(fast_grad) == np.result_type(grad) == dtype
        np.testing.assert_array_equal(fast_value, value)
        # a scalar result's partials are the rule's scalar formulas (as for ``x ** c``), within a few ulps
        np.testing.assert_allclose(fast_grad, grad, rtol=8 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("ufunc", [np.multiply, np.power, np.add, np.divide], ids=lambda u: u.__name__)
def test_a_number_beside_a_tracked_value_second_order(ufunc, monkeypatch):
    """hvp (reverse over forward) and the Hessian (reverse over reverse) through the fast path: as the general
    path, and as central differences of the gradient."""
    x, v = np.array([0.7, 1.3, 2.1]), np.array([1.0, -0.5, 2.0])
    f = _f(ufunc, np.float64(1.5), False)
    fast = db.hvp(f, x, v), db.hessian(f, x)
    with monkeypatch.context() as m:
        _general(m)
        general = db.hvp(f, x, v), db.hessian(f, x)
    np.testing.assert_allclose(fast[0], general[0], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(fast[1], general[1], rtol=1e-14, atol=1e-14)
    h = 1e-6
    central = (db.gradient(f, x + h * v) - db.gradient(f, x - h * v)) / (2 * h)
    np.testing.assert_allclose(fast[0], central, rtol=1e-6, atol=1e-8)
    assert db.check_gradient(f, x, order=2) < 1  # (raises on a mismatch)


def test_a_python_number_stays_weak_for_float32():
    """``np.multiply(2.0, x)`` of a float32 ``x``: float32 value and gradient (a Python number is weakly typed),
    where an ``np.float64`` number promotes, as NumPy does."""
    x = np.float32([1.0, 2.0])
    value, grad = db.value_and_gradient(lambda x: np.sum(np.multiply(2.0, x) ** 2), x)
    assert value.dtype == grad.dtype == np.float32
    value, grad = db.value_and_gradient(lambda x: np.sum(np.multiply(np.float64(2.0), x) ** 2), x)
    assert value.dtype == np.float64 and grad.dtype == np.float32
    np.testing.assert_allclose(grad, 8 * x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reverse_over_forward_hands_binary_ufuncs_to_the_tape_as_numpy_does(dtype, monkeypatch):
    """Under `db.hvp` (a jvp inside a gradient) a binary ufunc of tracked values and numbers goes to the tape's
    `record_binary` directly (`forward.apply_function`), not through NumPy's dispatch: the same numbers."""
    from dualbroadcast import forward

    def energy(x):
        p = db.sum(lambda r: np.exp(-3 * (r + 1)), x)
        q = np.multiply(np.float64(0.5), p) + np.power(p, 3) - np.arctan2(p, 2.0) + np.maximum(p, np.sqrt(p))
        return q + p**2 + 0.25 * p**4 + np.hypot(q, p)

    rng = np.random.default_rng(1)
    x, v = rng.random(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    fast = db.hvp(energy, x, v)
    monkeypatch.setattr(forward, "_TAPE_OPERANDS", frozenset())
    np.testing.assert_array_equal(db.hvp(energy, x, v), fast)
    assert fast.dtype == dtype
    monkeypatch.setattr(operands, "PLAIN_NUMBERS", frozenset())
    np.testing.assert_allclose(db.hvp(energy, x, v), fast, rtol=16 * np.finfo(dtype).eps)
    reverse = db.gradient(lambda x: np.dot(db.gradient(energy, x), v), x)  # reverse over reverse
    np.testing.assert_allclose(fast, reverse, rtol=1e-4 if dtype == np.float32 else 1e-12)
