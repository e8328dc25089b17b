"""``y op= v`` on a view ``y`` of another array (np.reshape(x, s), x.T, np.ravel(x), np.split): NumPy writes
through into that array.  ``y`` is rebound to ``y op v`` and the array it views, with every other view of the
same memory, refuses to be read afterwards (`guards._update`): the common program that never reads it again
works in every mode, and the one that would read values NumPy changed is an error, never a stale number."""

import numpy as np
import pytest

import dualbroadcast as db

X = np.array([0.3, -1.2, 0.8, 1.5, -0.4, 0.9])
T = np.array([1.0, -0.5, 0.25, 2.0, -1.0, 0.5])


def every_mode(f, x, t):
    """Each mode's result for ``f`` at ``x`` (tangent ``t``), by name; the prepared ones replayed at a second point
    too, so a replay of the recording is checked, not only the recording."""
    prepared, prepared_hvp = db.prepare_gradient(f, x), db.prepare_hvp(f, x)
    return {
        "gradient": lambda: db.gradient(f, x),
        "value_and_gradient": lambda: db.value_and_gradient(f, x)[1],
        "prepare_gradient": lambda: prepared(x),
        "prepared replay": lambda: prepared(x * 0.5) - 0 * prepared(x),
        "jvp": lambda: db.jvp(f, (x,), (t,))[1],
        "hvp": lambda: db.hvp(f, x, t),
        "prepare_hvp": lambda: prepared_hvp(x, t),
        "hessian": lambda: db.hessian(f, x),
    }


def finite_differences(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


def expected(f, x, t):
    """Each mode's result for ``f`` by finite differences (the Hessian by differences of the gradient)."""
    grad = finite_differences(f, x)
    hess = np.array([(db.gradient(f, x + 1e-6 * e) - db.gradient(f, x - 1e-6 * e)) / 2e-6 for e in np.eye(len(x))])
    return {"gradient": grad, "value_and_gradient": grad, "prepare_gradient": grad,
            "prepared replay": finite_differences(f, x * 0.5), "jvp": grad @ t, "hvp": hess @ t,
            "prepare_hvp": hess @ t, "hessian": hess}


# --- the common pattern: the updated view is what is read afterwards -----------------------------------------
def reshape_of_temporary(x):  # the fluid program's shape: vx views a temporary nobody reads again
    flat_f = np.sin(x) * 2.0
    vx = np.reshape(flat_f, (2, 3))
    vx -= 0.5 * np.cos(vx) * vx
    vx *= x[:3]
    return np.sum(vx ** 3)


def transpose_of_temporary(x):
    m = np.reshape(x ** 2, (3, 2)).T
    m += np.reshape(x, (2, 3))
    m /= 1.5
    return np.sum(np.tanh(m) * m)


def split_of_temporary(x):
    a, b = np.split(x * x, 2)
    a **= 2
    b -= a
    return np.sum(a * b)


def views_of_numpy_temporaries(x):  # np.roll's result and a gather view memory no tracked value shares
    y = np.roll(x * 1.0, 1)
    y += x
    z = np.reshape(x, (2, 3))[:, [0, 2]]
    z *= z
    return np.sum(y ** 2) + np.sum(z)


def by_hand(f):
    """The same program with y = y op v for each y op= v: what the update must compute."""
    return {
        reshape_of_temporary: lambda x: np.sum((lambda v: (v - 0.5 * np.cos(v) * v) * x[:3])(
            np.reshape(np.sin(x) * 2.0, (2, 3))) ** 3),
        transpose_of_temporary: lambda x: np.sum(
            (lambda m: np.tanh(m) * m)((np.reshape(x ** 2, (3, 2)).T + np.reshape(x, (2, 3))) / 1.5)),
        split_of_temporary: lambda x: np.sum(
            (lambda a, b: a ** 2 * (b - a ** 2))(*np.split(x * x, 2))),
        views_of_numpy_temporaries: lambda x: np.sum((np.roll(x, 1) + x) ** 2)
        + np.sum(np.reshape(x, (2, 3))[:, [0, 2]] ** 2),
    }[f]


@pytest.mark.parametrize("f", [reshape_of_temporary, transpose_of_temporary, split_of_temporary,
                               views_of_numpy_temporaries], ids=lambda f: f.__name__)
def test_an_update_of_a_view_nobody_reads_again_works_in_every_mode(f):
    np.testing.assert_allclose(f(X), by_hand(f)(X), rtol=1e-14)  # plain NumPy: the same function
    want = expected(by_hand(f), X, T)
    for mode, run in every_mode(f, X, T).items():
        np.testing.assert_allclose(run(), want[mode], rtol=1e-5, atol=1e-7, err_msg=mode)


# --- the case the guard is for: reading what NumPy would have changed through the view -----------------------
def reads_the_array(x):
    flat_f = np.sin(x) * 2.0
    vx = np.reshape(flat_f, (2, 3))
    vx -= 1.0
    return np.sum(flat_f ** 2)  # NumPy: flat_f changed with vx


def reads_another_view(x):
    flat_f = x * 2.0
    vx = np.reshape(flat_f, (2, 3))
    vy = np.reshape(flat_f, (3, 2))
    vx -= 1.0
    return np.sum(vy)


def reads_the_old_view(x):
    flat_f = x * 2.0
    vx = flat_f.reshape(3, 2).T
    views = [vx]
    vx += 1.0
    return np.sum(views[0])  # the same object as vx in NumPy: the new values


def reads_a_slice_of_the_array_in_a_sum(x):
    flat_f = np.exp(x)
    vx = np.ravel(np.reshape(flat_f, (2, 3)))
    vx *= 2.0
    return db.sum(lambda a: a ** 2, flat_f)


def reads_the_argument(x):
    vx = np.reshape(x, (2, 3))
    vx -= 1.0
    return np.sum(x)


STALE_READS = [reads_the_array, reads_another_view, reads_the_old_view, reads_a_slice_of_the_array_in_a_sum,
               reads_the_argument]


@pytest.mark.parametrize("f", STALE_READS, ids=lambda f: f.__name__)
def test_reading_an_array_after_an_update_through_its_view_is_an_error_in_every_mode(f):
    for mode in ["gradient", "value_and_gradient", "jvp", "hvp", "hessian"]:
        run = {"gradient": lambda: db.gradient(f, X), "value_and_gradient": lambda: db.value_and_gradient(f, X),
               "jvp": lambda: db.jvp(f, (X,), (T,)), "hvp": lambda: db.hvp(f, X, T),
               "hessian": lambda: db.hessian(f, X)}[mode]
        with pytest.raises(db.InPlaceMutationError, match=r"changed in place by y .= v on a view y of it.*Read y"):
            run()
    for prepare in (lambda: db.prepare_gradient(f, X)(X), lambda: db.prepare_hvp(f, X)(X, T)):
        with pytest.raises(db.InPlaceMutationError, match=r"changed in place by y .= v on a view y of it"):
            prepare()


def test_an_unreadable_array_says_so_when_printed_and_on_every_use():
    seen = {}

    def f(x):
        flat_f = x * 2.0
        vx = np.reshape(flat_f, (2, 3))
        vx -= 1.0
        seen["repr"] = repr(flat_f)
        for use in (lambda: flat_f + 1, lambda: flat_f[0], lambda: flat_f.shape, lambda: len(flat_f),
                    lambda: float(flat_f[0]), lambda: np.asarray(flat_f), lambda: flat_f.sum()):
            with pytest.raises(db.InPlaceMutationError, match="changed in place"):
                use()
        return np.sum(vx)

    np.testing.assert_array_equal(db.gradient(f, X), np.full(6, 2.0))
    assert "unreadable" in seen["repr"] and "changed in place" in seen["repr"]


# --- a fluid simulation: advect, then a pressure projection updating the velocities through views ------------
ROWS, COLS = 4, 5


def advect(field, u, w, dt=0.3):
    """Semi-Lagrangian advection: ``field`` read back along the velocity (u, w), bilinearly, flat."""
    i, j = np.meshgrid(np.arange(ROWS), np.arange(COLS), indexing="ij")
    y = np.clip(i - dt * w, 0, ROWS - 1.001)
    x = np.clip(j - dt * u, 0, COLS - 1.001)
    i0, j0 = np.floor(db.cut(y)).astype(int), np.floor(db.cut(x)).astype(int)
    sy, sx = y - i0, x - j0
    interpolated = (field[i0, j0] * (1 - sy) * (1 - sx) + field[i0 + 1, j0] * sy * (1 - sx)
                    + field[i0, j0 + 1] * (1 - sy) * sx + field[i0 + 1, j0 + 1] * sy * sx)
    return np.ravel(interpolated)


def fluid(v):
    u, w = np.reshape(v[:ROWS * COLS], (ROWS, COLS)), np.reshape(v[ROWS * COLS:], (ROWS, COLS))
    flat_f, flat_g = advect(u, u, w), advect(w, u, w)
    vx, vy = np.reshape(flat_f, (ROWS, COLS)), np.reshape(flat_g, (ROWS, COLS))
    div = 0.5 * (np.roll(vx, -1, 1) - np.roll(vx, 1, 1) + np.roll(vy, -1, 0) - np.roll(vy, 1, 0))
    p = np.zeros((ROWS, COLS))
    for _ in range(8):  # Jacobi iterations of the pressure's Poisson equation
        p = (np.roll(p, 1, 0) + np.roll(p, -1, 0) + np.roll(p, 1, 1) + np.roll(p, -1, 1) - div) / 4
    vx -= 0.5 * (np.roll(p, -1, 1) - np.roll(p, 1, 1))
    vy -= 0.5 * (np.roll(p, -1, 0) - np.roll(p, 1, 0))
    return np.sum(vx ** 2 + vy ** 2) + np.sum(np.sin(vx) * vy)


def test_a_fluid_step_with_updates_through_views_matches_finite_differences():
    v = np.random.default_rng(3).uniform(-1, 1, 2 * ROWS * COLS)
    t = np.random.default_rng(4).standard_normal(v.size)
    want = finite_differences(fluid, v)
    np.testing.assert_allclose(db.gradient(fluid, v), want, rtol=1e-6, atol=1e-8)
    prepared = db.prepare_gradient(fluid, v)
    np.testing.assert_allclose(prepared(v), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db.jvp(fluid, (v,), (t,))[1], want @ t, rtol=1e-6)
    v2 = v * 0.9
    np.testing.assert_allclose(prepared(v2), finite_differences(fluid, v2), rtol=1e-6, atol=1e-8)
    hvp = (db.gradient(fluid, v + 1e-6 * t) - db.gradient(fluid, v - 1e-6 * t)) / 2e-6
    np.testing.assert_allclose(db.hvp(fluid, v, t), hvp, rtol=1e-5, atol=1e-7)


# --- a slice shares the memory: its siblings are unknown to a gradient, so the update is refused -----------------
def update_beside_a_slice(x):
    flat_f = x * 2.0
    head = flat_f[:2]  # a slice: NumPy would change head[...] too
    vx = np.reshape(flat_f, (2, 3))
    vx -= 1.0
    return np.sum(vx) + np.sum(head)


def test_an_update_of_memory_a_slice_shares_is_an_error_in_every_mode():
    runs = [lambda: db.gradient(update_beside_a_slice, X), lambda: db.jvp(update_beside_a_slice, (X,), (T,)),
            lambda: db.hvp(update_beside_a_slice, X, T), lambda: db.prepare_gradient(update_beside_a_slice, X)(X),
            lambda: db.prepare_hvp(update_beside_a_slice, X)(X, T), lambda: db.hessian(update_beside_a_slice, X)]
    for run in runs:
        with pytest.raises(db.InPlaceMutationError, match=r"views memory a slice of it shares.*write through"):
            run()
