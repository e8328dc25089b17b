"""Differences, integrals, interpolation, convolution and ranges beyond the finite-difference sweep:
against JAX's vjp, against the dense Jacobian NumPy itself gives, the conventions stated in
dualbroadcast/rules/signal.py pinned in reverse mode and prepared replay, and the clear errors."""

import numpy as np
import pytest

import dualbroadcast as db

try:
    import jax
    import jax.numpy as jnp
except ImportError:  # the JAX comparisons skip
    jax = jnp = None

RNG = np.random.default_rng(7)
A = RNG.standard_normal((4, 5))
V = RNG.standard_normal(6)
COORDINATES = np.cumsum(RNG.uniform(0.4, 1.2, 5))  # non-uniform, along A's last axis
XP = np.array([-1.5, -0.5, 0.25, 1.0, 2.0])
FP = np.array([0.5, -1.0, 2.0, 1.5, -0.25])
X = np.array([-2.0, -1.2, 0.1, 0.7, 1.9, 2.5])  # below, inside (away from the knots) and above


# --- against jax.vjp ---------------------------------------------------------------------------------------
def case(name, numpy_f, jax_f, *args):
    return pytest.param(numpy_f, jax_f, args, id=name)


def jax_cases():
    """(NumPy function, the same with jax.numpy, arguments)."""
    pair = RNG.standard_normal(4), RNG.standard_normal(7)
    return [
        case("diff", lambda a: np.diff(a, 2, 0), lambda a: jnp.diff(a, 2, 0), A),
        case("diff_prepend_append", lambda a, p, q: np.diff(a, 3, -1, p, q), lambda a, p, q: jnp.diff(a, 3, -1, p, q),
             A, 0.5, RNG.standard_normal((4, 2))),
        case("ediff1d", lambda a, e, b: np.ediff1d(a, e, b), lambda a, e, b: jnp.ediff1d(a, e, b),
             A, RNG.standard_normal(2), 0.3),
        case("gradient", lambda a: np.gradient(a, 0.5, COORDINATES), lambda a: tuple(jnp.gradient(a, 0.5, COORDINATES)),
             A),
        case("gradient_axis", lambda a: np.gradient(a, COORDINATES, axis=-1),
             lambda a: jnp.gradient(a, COORDINATES, axis=-1), A),
        case("gradient_in_coordinates", lambda a, x: np.gradient(a, 0.5, x),
             lambda a, x: tuple(jnp.gradient(a, 0.5, x)), A, COORDINATES),
        case("gradient_in_the_spacing", lambda a, h: np.gradient(a, h), lambda a, h: tuple(jnp.gradient(a, h)), A, 0.7),
        case("gradient_in_one_coordinate_array", lambda a, x: np.gradient(a, x, axis=-1),
             lambda a, x: jnp.gradient(a, x, axis=-1), A, COORDINATES),
        case("trapezoid_x", lambda y, x: np.trapezoid(y, x), lambda y, x: jnp.trapezoid(y, x), A, COORDINATES),
        case("trapezoid_dx", lambda y, dx: np.trapezoid(y, None, dx, 0), lambda y, dx: jnp.trapezoid(y, None, dx, 0),
             A, 0.7),
        case("interp", lambda x, xp, fp: np.interp(x, xp, fp), lambda x, xp, fp: jnp.interp(x, xp, fp), X, XP, FP),
        case("interp_left_right", lambda x, fp, left, right: np.interp(x, XP, fp, left, right),
             lambda x, fp, left, right: jnp.interp(x, XP, fp, left, right), X, FP, -3.0, 4.0),
        case("interp_period", lambda x, xp, fp: np.interp(x, xp, fp, period=3.0),
             lambda x, xp, fp: jnp.interp(x, xp, fp, period=3.0), X, XP[[3, 0, 2, 1]] + [3.0, 0, -3.0, 6.0], FP[:4]),
        *[case(f"{f}_{mode}_{order}", lambda a, v, f=f, mode=mode: getattr(np, f)(a, v, mode),
               lambda a, v, f=f, mode=mode: getattr(jnp, f)(a, v, mode), *args)
          for f in ("convolve", "correlate") for mode in ("full", "same", "valid")
          for order, args in (("shorter", pair), ("longer", pair[::-1]))],
        case("linspace", lambda a, b: np.linspace(a, b, 6, False, axis=-1),
             lambda a, b: jnp.linspace(a, b, 6, False, axis=-1), RNG.standard_normal((3, 1)), RNG.standard_normal(2)),
        case("linspace_retstep", lambda a, b: np.linspace(a, b, 4, retstep=True),
             lambda a, b: jnp.linspace(a, b, 4, retstep=True), RNG.standard_normal(3), RNG.standard_normal(3)),
        case("geomspace", lambda a, b: np.geomspace(a, b, 5, axis=1), lambda a, b: jnp.geomspace(a, b, 5, axis=1),
             RNG.uniform(1, 2, (2, 1)), RNG.uniform(1, 2, 3)),
        case("logspace", lambda a, b: np.logspace(a, b, 5, True, 2.0), lambda a, b: jnp.logspace(a, b, 5, True, 2.0),
             RNG.uniform(-1, 1, 3), 0.5),
        case("polyval", lambda p, x: np.polyval(p, x), lambda p, x: jnp.polyval(p, x),
             RNG.standard_normal(4), RNG.standard_normal((2, 3))),
        case("vander", lambda x: np.vander(x, 4), lambda x: jnp.vander(x, 4), RNG.standard_normal(5)),
        case("unwrap", lambda p: np.unwrap(p), lambda p: jnp.unwrap(p), np.array([0.1, 6.0, 0.5, -5.9, 0.2])),
    ]


def jax_vjp(jax_f, args, cotangent):
    jax.config.update("jax_enable_x64", True)
    pullback = jax.jit(lambda args, cotangent: jax.vjp(jax_f, *args)[1](cotangent))  # one compilation
    return pullback([np.asarray(a) for a in args], cotangent)


@pytest.mark.parametrize("numpy_f, jax_f, args", jax_cases())
def test_pullback_matches_jax_vjp(numpy_f, jax_f, args):
    pytest.importorskip("jax")
    y, back = db.pullback(numpy_f, *args)
    ys = y if isinstance(y, tuple) else (y,)
    cotangent = tuple(RNG.standard_normal(np.shape(o)) for o in ys)
    cotangent = cotangent if isinstance(y, tuple) else cotangent[0]
    ours = back(cotangent)
    ours = ours if len(args) > 1 else (ours,)
    theirs = jax_vjp(jax_f, args, cotangent)
    for mine, expected in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, expected, rtol=1e-10, atol=1e-12)


# --- np.gradient: the dense Jacobian NumPy gives, one result or a tuple --------------------------------------
@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("spacing", [(), (0.3,), (np.linspace(0.0, 2.0, 11),), (np.cumsum(RNG.uniform(0.2, 1, 11)),)],
                         ids=["none", "scalar", "uniform", "non-uniform"])
def test_gradient_jacobian_is_gradient_of_the_identity(spacing, edge_order):
    """Column j of ∂ np.gradient(f) / ∂f is np.gradient of the unit vector e_j: np.gradient of the identity."""
    f = RNG.standard_normal(11)
    jacobian = db.jacobian(lambda f: np.gradient(f, *spacing, edge_order=edge_order), f)
    np.testing.assert_allclose(jacobian, np.gradient(np.eye(11), *spacing, axis=0, edge_order=edge_order),
                               rtol=1e-13, atol=1e-13)


def test_gradient_of_one_axis_is_one_array_and_of_several_a_tuple():
    def loss(a):
        along_last = np.gradient(a, COORDINATES, axis=-1)
        both = np.gradient(a, 2.0)
        assert not isinstance(along_last, tuple) and np.shape(along_last) == A.shape
        assert isinstance(both, tuple) and len(both) == 2
        return np.sum(along_last * both[0] + both[1] ** 2)

    prepared = db.prepare_gradient(loss, A)
    expected = db.gradient(loss, A)
    db.check_gradient(loss, A)
    for _ in range(3):  # recorded, then replayed
        np.testing.assert_allclose(prepared(A), expected, rtol=1e-13)


# --- conventions -------------------------------------------------------------------------------------------
MODES = ["reverse", "prepared"]


def gradient_in(mode, f, *args):
    if mode == "reverse":
        return db.gradient(f, *args)
    prepared = db.prepare_gradient(f, *args)
    return [prepared(*args) for _ in range(3)][-1]


def slopes():
    return np.diff(FP) / np.diff(XP)


@pytest.mark.parametrize("mode", MODES)
def test_interp_derivative_at_knots_is_the_interval_to_the_right_and_the_last_interval_at_the_end(mode):
    """At an interior knot the slope of the interval to its right; at xp[0] the first interval's, at xp[-1]
    the last interval's; 0 beyond the knots."""
    at_knots = XP.copy()
    beyond = np.array([XP[0] - 1.0, XP[-1] + 1.0])
    g = gradient_in(mode, lambda x: np.sum(np.interp(x, XP, FP)), np.concatenate([at_knots, beyond]))
    s = slopes()
    np.testing.assert_array_equal(g, np.concatenate([s, [s[-1]], [0.0, 0.0]]))


@pytest.mark.parametrize("mode", MODES)
def test_interp_value_at_a_knot_is_that_knots_fp(mode):
    """f(xp[j]) = fp[j]: its cotangent goes to fp[j] alone, at every knot."""
    g = gradient_in(mode, lambda fp: np.sum(np.interp(XP, XP, fp) * np.arange(1.0, 6.0)), FP)
    np.testing.assert_array_equal(g, np.arange(1.0, 6.0))


@pytest.mark.parametrize("mode", MODES)
def test_interp_left_and_right_take_the_values_beyond_the_knots(mode):
    x = np.array([XP[0] - 1.0, 0.0, XP[-1] + 1.0, XP[-1] + 2.0])
    g_fp, g_left, g_right = gradient_in(mode, lambda fp, left, right: np.sum(np.interp(x, XP, fp, left, right)),
                                        FP, -3.0, 4.0)
    inside = (0.0 - XP[1]) / (XP[2] - XP[1])
    np.testing.assert_allclose(g_fp, [0, 1 - inside, inside, 0, 0], rtol=1e-15)
    assert (g_left, g_right) == (1.0, 2.0)


def test_interp_matches_jax_at_the_knots():
    pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    x = np.concatenate([XP, [XP[0] - 1.0, XP[-1] + 1.0]])
    ours = db.gradient(lambda x, xp, fp: np.sum(np.interp(x, xp, fp)), x, XP, FP)
    theirs = jax.jit(jax.grad(lambda x, xp, fp: jnp.sum(jnp.interp(x, xp, fp)), argnums=(0, 1, 2)))(x, XP, FP)
    for mine, expected in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("mode", MODES)
def test_unwrap_has_derivative_one_at_and_between_jumps(mode):
    p = np.array([0.0, 3.0, 6.2, -0.1, 3.2, 3.3])  # jumps of every size, one at exactly half a period
    w = np.arange(1.0, 7.0)
    np.testing.assert_array_equal(gradient_in(mode, lambda p: np.sum(np.unwrap(p) * w), p), w)


# --- errors --------------------------------------------------------------------------------------------------
def test_linspace_retstep_of_constants_is_plain():
    def loss(a):
        samples, step = np.linspace(0.0, 2.0, 5, retstep=True)
        return np.sum(samples * a) * step

    np.testing.assert_allclose(db.gradient(loss, 0.5), np.sum(np.linspace(0.0, 2.0, 5)) * 0.5)


def test_gradient_in_coordinates_matches_a_hand_written_stencil():
    """Interior rows (h_d = x_i - x_{i-1}, h_s = x_{i+1} - x_i) of NumPy's documented second-order formula, written
    with tracked coordinates: the complex step over NumPy's np.gradient must give the same coordinates' gradient."""
    f, x = V, np.cumsum(RNG.uniform(0.3, 1.0, V.size))

    def by_hand(f, x):
        hd, hs = x[1:-1] - x[:-2], x[2:] - x[1:-1]
        inner = (hd**2 * f[2:] - hs**2 * f[:-2] + (hs**2 - hd**2) * f[1:-1]) / (hd * hs * (hd + hs))
        return np.sum(np.sin(inner)) + np.sin((f[1] - f[0]) / (x[1] - x[0])) + np.sin((f[-1] - f[-2]) / (x[-1] - x[-2]))

    expected = db.gradient(by_hand, f, x)
    got = db.gradient(lambda f, x: np.sum(np.sin(np.gradient(f, x))), f, x)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("part", ["prepend", "append"])
def test_a_tracked_prepend_or_append_by_keyword_is_the_concatenation_differenced(part):
    """np.diff(a, append=p) passes NumPy's "not given" as prepend to the rule: nothing is prepended."""
    def joined(a, p):
        return np.concatenate([np.reshape(p, 1), a] if part == "prepend" else [a, np.reshape(p, 1)])

    got = db.gradient(lambda a, p: np.sum(np.sin(np.diff(a, **{part: p}))), V, 0.5)
    want = db.gradient(lambda a, p: np.sum(np.sin(np.diff(joined(a, p)))), V, 0.5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-14)


def test_constant_coordinates_stay_writable_once_recorded():
    """np.gradient reads its spacing when it is recorded, np.diff only prepend's shape: neither is kept."""
    coordinates, prepend = COORDINATES.copy(), np.zeros((4, 1))

    def loss(a):
        value = np.sum(np.gradient(a, coordinates, axis=-1) ** 2) + np.sum(np.diff(a, 1, -1, prepend) ** 2)
        coordinates[0] -= 1.0  # the user's arrays, changed after use: no gradient reads them again
        prepend[0] = 1.0
        return value

    g = db.gradient(loss, A)
    coordinates[0], prepend[0] = COORDINATES[0], 0.0
    expected = db.gradient(lambda a: np.sum(np.gradient(a, COORDINATES, axis=-1) ** 2)
                           + np.sum(np.diff(a, 1, -1, np.zeros((4, 1))) ** 2), A)
    np.testing.assert_allclose(g, expected, rtol=1e-13)
