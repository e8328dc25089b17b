"""In-place updates as NumPy code writes them (``y op= v`` on a view or a value of its own, ``np.add.at``), in
every mode: gradient, value_and_gradient, prepared replay, jvp, hvp, prepare_hvp, hessian."""

import numpy as np
import pytest

import dualbroadcast as db

X = np.array([0.3, -1.2, 0.8, 1.5, -0.4, 0.9])
T = np.array([1.0, -0.5, 0.25, 2.0, -1.0, 0.5])


# --- y op= v on a view: NumPy writes through into the array it views ---------------------------------
# A tracked y was rebound to y op v, leaving the array it views unchanged: f(x) = sum(y ** 2) below was
# computed from the old values, a silently wrong value and gradient in every mode.  Now a slice's update is
# refused; any other view is rebound and the array it views refuses to be read (tests/tape/test_view_updates.py).
def slice_update(x):
    y = x * 1.0
    v = y[1:4]
    v += 10 * x[:3]
    return np.sum(y ** 2)


def transpose_update(x):
    m = np.reshape(x * 1.0, (2, 3))
    t = m.T
    t *= 2.0
    return np.sum(m ** 3)


def reshape_update(x):
    y = x * 1.0
    r = y.reshape(2, 3)
    r -= 1.0
    return np.sum(y * x)


def ravel_update(x):
    m = np.reshape(x * 1.0, (3, 2))
    r = np.ravel(m)
    r /= 4.0
    return np.sum(np.sin(m))


def argument_slice_update(x):
    v = x[:2]
    v **= 2
    return np.sum(x)


@pytest.mark.parametrize("f", [slice_update, argument_slice_update], ids=lambda f: f.__name__)
def test_an_in_place_update_of_a_slice_is_an_error_in_every_mode(f):
    for run in every_mode(f, X).values():
        with pytest.raises(db.InPlaceMutationError, match=r"slice of another array.*write through"):
            run()


@pytest.mark.parametrize("f", [transpose_update, reshape_update, ravel_update], ids=lambda f: f.__name__)
def test_reading_an_array_updated_through_a_view_is_an_error_in_every_mode(f):
    for run in every_mode(f, X).values():
        with pytest.raises(db.InPlaceMutationError, match=r"changed in place by y .= v on a view y of it"):
            run()


def every_mode(f, x):
    """Each mode's call of ``f`` at ``x``, by name (a prepared program is made inside its call)."""
    return {
        "gradient": lambda: db.gradient(f, x),
        "value_and_gradient": lambda: db.value_and_gradient(f, x),
        "prepare_gradient": lambda: db.prepare_gradient(f, x)(x),
        "jvp": lambda: db.jvp(f, (x,), (T,)),
        "hvp": lambda: db.hvp(f, x, T),
        "prepare_hvp": lambda: db.prepare_hvp(f, x)(x, T),
        "hessian": lambda: db.hessian(f, x),
    }


# --- y op= v on a value of its own: y = y op v, with NumPy's shape and dtype --------------------------
def fresh_updates(x):
    y = x * 2.0
    z = np.sin(y)  # read before the updates: it keeps the old value
    y += x
    y *= z
    y **= 2
    y /= 3.0
    y -= x
    y @= np.eye(6)
    return np.sum(y)


def fresh_updates_by_hand(x):
    y = ((3 * x * np.sin(2 * x)) ** 2 / 3.0 - x) @ np.eye(6)
    return np.sum(y)


def argument_updates(x):
    x += 1.0  # an argument itself: f sees the new value, as NumPy's
    x *= x
    return np.sum(x)


@pytest.mark.parametrize("f, by_hand", [(fresh_updates, fresh_updates_by_hand),
                                        (argument_updates, lambda x: np.sum((x + 1.0) ** 2))],
                         ids=["fresh", "argument"])
def test_in_place_updates_of_own_values_in_every_mode(f, by_hand):
    x2 = X * 1.3 - 0.1
    value, g = db.value_and_gradient(f, X.copy())
    assert value == pytest.approx(by_hand(X), rel=1e-12)
    np.testing.assert_allclose(g, db.gradient(by_hand, X), rtol=1e-10)
    prepared = db.prepare_gradient(f, X.copy())
    for x in (X, x2):
        np.testing.assert_allclose(prepared(x.copy()), db.gradient(by_hand, x), rtol=1e-10)
    out = np.empty(6)
    prepared(x2.copy(), out=out)
    np.testing.assert_allclose(out, db.gradient(by_hand, x2), rtol=1e-10)
    np.testing.assert_allclose(db.jvp(f, (X.copy(),), (T,))[1], db.jvp(by_hand, (X,), (T,))[1], rtol=1e-10)
    np.testing.assert_allclose(db.hvp(f, X.copy(), T), db.hvp(by_hand, X, T), rtol=1e-10)
    np.testing.assert_allclose(db.prepare_hvp(f, X.copy())(x2.copy(), T), db.hvp(by_hand, x2, T), rtol=1e-10)
    np.testing.assert_allclose(db.hessian(f, X.copy()), db.hessian(by_hand, X), rtol=1e-10)
    assert db.check_gradient(by_hand, X)


def float32_update(x):
    y = x * 1.0
    y += np.linspace(0.0, 1.0, 6)  # float64: NumPy casts the sum back into y's float32
    return y


def test_an_in_place_update_keeps_the_dtype_as_numpy():
    x = X.astype(np.float32)
    assert float32_update(x).dtype == np.float32
    assert db.jvp(float32_update, (x,), (T.astype(np.float32),))[0].dtype == np.float32
    value, g = db.value_and_gradient(lambda x: np.sum(float32_update(x) ** 2), x)
    assert value.dtype == np.float32 and g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * float32_update(x), rtol=1e-6)


def broadcast_update(x):
    y = x * 1.0
    y += np.ones((2, 6))
    return np.sum(y)


def complex_update(x):
    y = x * 1.0
    y *= 1j
    return np.sum(np.real(y))


@pytest.mark.parametrize("f, error", [(broadcast_update, ValueError), (complex_update, TypeError)],
                         ids=["broadcast", "complex"])
def test_an_in_place_update_numpy_refuses_is_refused(f, error):
    with pytest.raises(error):
        f(X.copy())  # NumPy: the output operand keeps its shape and dtype
    for run in every_mode(f, X).values():
        with pytest.raises(error, match=r"y (\+|\*)= v"):
            run()


# --- np.add.at in forward mode ---------------------------------------------------------------------------
# db.jvp and db.hvp refused it advising "write y = np.add.at(...) instead", which returns None.
def add_at(x):
    z = x * 1.0
    np.add.at(z, [0, 1, 1], x[:3])
    return np.sum(z ** 2)


def test_ufunc_at_says_what_to_write_in_every_mode():
    for run in every_mode(add_at, X).values():
        with pytest.raises(db.InPlaceMutationError, match=r"np\.add\.at mutates an array in place.*np\.bincount"):
            run()
