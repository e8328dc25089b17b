"""Exact conventions at kinks, ties and zeros, the same in every mode.

Finite differences cannot judge a gradient at a tie or a kink, so these tests pin the
conventions stated in dualbroadcast/derivatives.py (the comments of the table) and in
dualbroadcast/rules/reductions.py ("Conventions").  Every pinned value below is written
from that statement, not from the code's output.  Each convention holds in reverse mode
(on arrays, NumPy scalars and Python floats), in kernels (`db.sum` / `db.broadcast` on
every backend, and the planned path of a repeated call) and in prepared replay.  Away from
kinks the same functions are checked against finite differences and `jax.grad`.
"""

import importlib
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db

from ..cases import stable_id

BROADCAST = importlib.import_module("dualbroadcast.broadcast")  # the module, not db.broadcast
BACKENDS = ["numpy", "blocked", "numexpr"]
N = 40_000  # every backend is eligible from here (blocked from two blocks of 16384 elements)

ARRAY_MODES = ["reverse", "prepared", "prepared-kernel"] + [
    f"{form}-{b}" for form in ("sum", "broadcast") for b in BACKENDS]
SMALL_MODES = ["planned-sum", "planned-broadcast", "numpy-scalar", "python-float", "prepared-numpy-scalar",
               "prepared-python-float"]
MODES = ARRAY_MODES + SMALL_MODES
KERNEL_MODES = [m for m in MODES if m.startswith(("prepared-kernel", "sum-", "broadcast-", "planned-"))]


@pytest.fixture(autouse=True)
def quiet_floating_point():
    """Zeros, infinities and NaNs are the point here: NumPy's warnings about them are expected."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def gradients(mode, f, points, constants=()):
    """∂ Σ f(*points, *constants) / ∂pointᵢ for each point, in ``mode``, as a tuple of 1-d arrays.

    ``points`` and ``constants`` are 1-d arrays of one length: array modes tile them to N
    elements, scalar modes take them one element at a time."""
    if mode in ARRAY_MODES:
        return array_gradients(mode, f, [tiled(p) for p in points], [tiled(c) for c in constants])
    if mode.startswith("planned"):
        return planned_gradients(mode, f, [np.asarray(p, float) for p in points], constants)
    return scalar_gradients(mode, f, points, constants)


def tiled(values):
    """``values`` repeated to N elements, so that a forced kernel backend really runs."""
    return np.resize(np.asarray(values, dtype=float), N)


def as_tuple(g):
    return g if isinstance(g, tuple) else (g,)


def array_gradients(mode, f, args, constants):
    """On N-element arrays: reverse rules, prepared replay (of the reverse rules or of the
    kernel), or a kernel forced onto a backend."""
    def loss(*a):
        return np.sum(f(*a, *constants))

    if mode == "reverse":
        return as_tuple(db.gradient(loss, *args))
    if mode.startswith("prepared"):
        prepared = db.prepare_gradient(loss if mode == "prepared" else lambda *a: db.sum(f, *a, *constants), *args)
        return [as_tuple(prepared(*args)) for _ in range(3)][-1]  # recorded, then replayed twice
    form, backend = mode.split("-")
    kernel = db.sum if form == "sum" else lambda *a, **k: np.sum(db.broadcast(*a, **k))
    with db.kernel_log() as calls:
        g = as_tuple(db.gradient(lambda *a: kernel(f, *a, *constants, backend=backend), *args))
    # numexpr lacks a few operations (np.reciprocal): such a kernel runs on NumPy instead
    assert [c.backend for c in calls] in ([backend], ["numpy"] if backend == "numexpr" else [])
    return g


def planned_gradients(mode, f, args, constants):
    """The second call of a closure-free kernel on small arrays runs its `_Plan`."""
    assert f.__closure__ is None and not constants, "a planned call needs a closure-free kernel"
    reduce = mode == "planned-sum"
    kernel = db.sum if reduce else lambda *a: np.sum(db.broadcast(*a))
    db.gradient(lambda *a: kernel(f, *a), *args)
    if (id(f.__code__), reduce) not in BROADCAST._plans:
        pytest.skip("no plan for this kernel: a partial is a constant, not an array of its own")
    return as_tuple(db.gradient(lambda *a: kernel(f, *a), *args))


def scalar_gradients(mode, f, points, constants):
    """The gradient at each element separately, from NumPy scalars or Python floats; prepared
    at the first element and replayed at each, or not."""
    kind = float if mode.endswith("python-float") else np.float64
    calls = [[kind(p[i]) for p in points] + [db.cut(np.float64(c[i])) for c in constants]
             for i in range(len(points[0]))]
    if mode.startswith("prepared"):
        prepared = db.prepare_gradient(f, *calls[0])
        results = [as_tuple(prepared(*args)) for args in calls]
    else:
        results = [as_tuple(db.gradient(f, *args)) for args in calls]
    return tuple(np.array([float(r[j]) for r in results]) for j in range(len(points)))


def assert_gradients(mode, f, points, expected, constants=(), rtol=1e-12, label=""):
    """The gradients in ``mode`` equal ``expected`` (one 1-d array per point), tiled as computed."""
    got = gradients(mode, f, points, constants)
    assert len(got) == len(expected)
    for k, (g, want) in enumerate(zip(got, expected)):
        want = np.resize(np.asarray(want, float), np.shape(g))
        np.testing.assert_allclose(g, want, rtol=rtol, atol=0, err_msg=f"{mode} {label}: argument {k}")


# --- power: x ** k with integer-valued k, at zero and negative bases ----------------------
EXPONENTS = [0, 1, 2, 3, -1, -2, -3]
NONZERO_BASES = np.array([-2.0, -0.5, 1.5, 3.0])


def exponent_forms(k):
    """k as each kind of number NumPy code writes an exponent as (a kernel sees them as literals)."""
    return {"int": k, "float": float(k), "np.int64": np.int64(k), "np.float64": np.float64(k),
            "0-d array": np.array(float(k))}


def power_partial_in_x(x, k):
    """The stated convention: k · x^(k-1), and 0 where k = 0 (even at x = 0)."""
    if k == 0:
        return 0.0
    if x == 0:
        return {1: 1.0}.get(k, 0.0 if k > 0 else -np.inf)  # 0^(k-1) is 1, 0 or +inf; times k
    return k * x ** (k - 1)


def power_partial_in_k(x, k):
    """The stated convention: x^k log x; 0 at x = 0 (for every k); nan at x < 0 (no derivative in k)."""
    if x == 0:
        return 0.0
    return np.nan if x < 0 else x ** k * np.log(x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", EXPONENTS)
def test_power_partial_in_the_base_away_from_zero(k, mode):
    expected = [power_partial_in_x(x, k) for x in NONZERO_BASES]
    for form, exponent in exponent_forms(k).items():
        f = lambda r, e=exponent: r ** e  # a default, not a closure: the planned path runs it too
        assert_gradients(mode, f, (NONZERO_BASES,), (expected,), label=form)


AT_ZERO = [(k, mode) for k in EXPONENTS for mode in MODES if k > -2 or mode not in KERNEL_MODES]


@pytest.mark.parametrize("k, mode", AT_ZERO)
def test_power_partial_in_the_base_at_zero(k, mode):
    for form, exponent in exponent_forms(k).items():
        f = lambda r, e=exponent: r ** e
        assert_gradients(mode, f, (np.array([0.0]),), ([power_partial_in_x(0.0, k)],), label=form)


@pytest.mark.parametrize("k", [-2, -3])
def test_negative_integer_power_at_zero_in_kernels(k):
    for mode in KERNEL_MODES:
        assert_gradients(mode, lambda r, e=k: r ** e, (np.array([0.0]),), ([power_partial_in_x(0.0, k)],))


def power(x, k):
    return x ** k


BASES = np.repeat([0.0, -2.0, -0.5, 1.5], len(EXPONENTS))  # every base with every exponent
POWERS = np.tile(np.array(EXPONENTS, float), 4)


@pytest.mark.parametrize("mode", MODES)
def test_power_with_a_tracked_exponent(mode):
    expected = ([power_partial_in_x(x, k) for x, k in zip(BASES, POWERS)],
                [power_partial_in_k(x, k) for x, k in zip(BASES, POWERS)])
    assert_gradients(mode, power, (BASES, POWERS), expected)


@pytest.mark.parametrize("mode", [m for m in MODES if not m.startswith("planned")])
def test_power_with_a_constant_array_exponent(mode):
    expected = ([power_partial_in_x(x, k) for x, k in zip(BASES, POWERS)],)
    assert_gradients(mode, power, (BASES,), expected, constants=(POWERS,))


@pytest.mark.parametrize("k", [0, 2, -1])
def test_power_keeps_float32(k):
    x = np.resize(np.array([0.0, -2.0, 1.5], np.float32), N)
    f = lambda r, e=k: r ** e
    expected = np.array([power_partial_in_x(v, k) for v in x[:3]], np.float32)
    grads = {"reverse": db.gradient(lambda a: np.sum(f(a)), x), "scalar": np.array([db.gradient(f, v) for v in x[:3]]),
             "prepared": db.prepare_gradient(lambda a: np.sum(f(a)), x)(x)}
    grads.update({b: db.gradient(lambda a, b=b: db.sum(f, a, backend=b), x) for b in BACKENDS})
    for mode, g in grads.items():
        assert g.dtype == np.float32, mode
        np.testing.assert_allclose(g[:3], expected, rtol=1e-6, atol=0, err_msg=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k, expected", [(0.5, np.inf), (1.5, 0.0), (2.5, 0.0), (-0.5, -np.inf)])
def test_fractional_power_at_zero(k, expected, mode):
    # k · 0^(k-1) in IEEE arithmetic: 0^(k-1) is +inf below k = 1, 0 above it
    assert_gradients(mode, lambda r, e=k: r ** e, (np.array([0.0]),), ([expected],))


def exponent_of(k, base):
    return base ** k


@pytest.mark.parametrize("mode", [m for m in MODES if not m.startswith("planned")])
def test_power_of_a_constant_base(mode):
    bases = np.repeat([0.0, 2.0, -2.0], 3)
    ks = np.tile([2.0, 0.0, -1.0], 3)
    expected = [power_partial_in_k(b, k) for b, k in zip(bases, ks)]
    assert_gradients(mode, exponent_of, (ks,), (expected,), constants=(bases,))


def test_power_zero_exponent_at_zero_is_zero_in_python_floats():
    """The issue's case: x ** 0.0 at 0 is the constant 1, so its derivative is 0 (was nan)."""
    assert db.gradient(lambda x: x ** 0.0, 0.0) == 0.0
    assert db.gradient(lambda x: x ** 0, np.float64(0.0)) == 0.0


# --- selections: ties split the cotangent equally; NaN in fmax/fmin -----------------------
def maximum_of_itself(r):
    return np.maximum(r, r)


def minimum_of_itself(r):
    return np.minimum(r, r)


def relu(r):
    return np.maximum(r, 0.0)


def relu_written_backwards(r):
    return np.maximum(0.0, r)


def clip_between_0_and_3(r):
    return np.clip(r, 0.0, 3.0)


def clip_above(r):
    return np.clip(r, None, 3.0)


def clip_below(r):
    return np.clip(r, 0.0, None)


def absolute(r):
    return np.abs(r)


def fabs(r):
    return np.fabs(r)


def copysign_negative(r):
    return np.copysign(r, -1.0)


POINTS = np.array([0.0, -2.0, 3.0, 1.5])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, expected", [
    # maximum(x, x) and minimum(x, x) are x: the tie gives x both halves, ½ + ½ = 1
    (maximum_of_itself, [1.0, 1.0, 1.0, 1.0]),
    (minimum_of_itself, [1.0, 1.0, 1.0, 1.0]),
    # relu at 0 is a tie of x and 0: x gets half, written either way round
    (relu, [0.5, 0.0, 1.0, 1.0]),
    (relu_written_backwards, [0.5, 0.0, 1.0, 1.0]),
    # clip exactly at a bound (0 and 3) is a tie of x and the bound: ½ at both bounds, 0 outside
    (clip_between_0_and_3, [0.5, 0.0, 0.5, 1.0]),
    (clip_above, [1.0, 1.0, 0.5, 1.0]),
    (clip_below, [0.5, 0.0, 1.0, 1.0]),
    # abs and fabs at 0: sign(0) = 0; copysign(x, -1) = -|x|: 0 at 0 too
    (absolute, [0.0, -1.0, 1.0, 1.0]),
    (fabs, [0.0, -1.0, 1.0, 1.0]),
    (copysign_negative, [0.0, 1.0, -1.0, -1.0]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_selection_conventions(f, expected, mode):
    assert_gradients(mode, f, (POINTS,), (expected,))


def maximum(x, y):
    return np.maximum(x, y)


def minimum(x, y):
    return np.minimum(x, y)


def fmax(x, y):
    return np.fmax(x, y)


def fmin(x, y):
    return np.fmin(x, y)


def clip(x, lo, hi):
    return np.clip(x, lo, hi)


NAN = np.nan


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, points, expected", [
    # a tie splits the cotangent, ½ each; otherwise the argument selected gets 1
    (maximum, ([1.0, 2.0, 1.0], [1.0, 1.0, 2.0]), ([0.5, 1, 0], [0.5, 0, 1])),
    (minimum, ([1.0, 2.0, 1.0], [1.0, 1.0, 2.0]), ([0.5, 0, 1], [0.5, 1, 0])),
    # a tie of infinities too (inf - inf is NaN: the convention is not computed from a difference)
    (maximum, ([np.inf, -np.inf], [np.inf, -np.inf]), ([0.5, 0.5], [0.5, 0.5])),
    # a NaN argument of maximum/minimum: both partials 0 (comparisons with NaN are false)
    (maximum, ([NAN, 1.0, NAN], [1.0, NAN, NAN]), ([0, 0, 0], [0, 0, 0])),
    (minimum, ([NAN, 1.0, NAN], [1.0, NAN, NAN]), ([0, 0, 0], [0, 0, 0])),
    # fmax/fmin select the argument that is not NaN, x when both are; a tie splits, ½ each
    (fmax, ([NAN, 1.0, NAN, 2.0, 1.0], [1.0, NAN, NAN, 2.0, 3.0]), ([0, 1, 1, 0.5, 0], [1, 0, 0, 0.5, 1])),
    (fmin, ([NAN, 1.0, NAN, 2.0, 1.0], [1.0, NAN, NAN, 2.0, 3.0]), ([0, 1, 1, 0.5, 1], [1, 0, 0, 0.5, 0])),
    # clip with tracked bounds: at a bound x and the bound tie (½ each); past it, the bound gets 1
    (clip, ([0.0, 3.0, -1.0, 4.0, 1.5], [0.0] * 5, [3.0] * 5),
     ([0.5, 0.5, 0, 0, 1], [0.5, 0, 1, 0, 0], [0, 0.5, 0, 1, 0])),
    # clip with equal bounds at x: maximum(x, lo) splits, then minimum(·, hi) splits again
    (clip, ([1.0], [1.0], [1.0]), ([0.25], [0.25], [0.5])),
], ids=lambda v: getattr(v, "__name__", ""))
def test_two_argument_selection_conventions(f, points, expected, mode):
    assert_gradients(mode, f, tuple(np.array(p) for p in points), expected)


# --- remainder and fmod with negative arguments: finite differences away from the jumps --------
def remainder(x, y):
    return np.remainder(x, y)


def fmod(x, y):
    return np.fmod(x, y)


def central_differences(f, points, h=1e-6):
    """∂f/∂pointᵢ elementwise by central differences (f elementwise, float64)."""
    result = []
    for i in range(len(points)):
        up = [p + h if j == i else p for j, p in enumerate(points)]
        down = [p - h if j == i else p for j, p in enumerate(points)]
        result.append((f(*up) - f(*down)) / (2 * h))
    return tuple(result)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f", [remainder, fmod], ids=lambda f: f.__name__)
def test_remainder_and_fmod_with_negative_arguments(f, mode):
    # every sign of x and y; x / y is at least 0.2 away from an integer, so both functions are smooth here
    x = np.array([-3.7, 3.7, -3.7, 3.7, -0.4, 0.4, -5.3])
    y = np.array([1.5, -1.5, -1.5, 1.5, 1.3, -1.3, 2.0])
    assert np.all(np.abs(x / y - np.round(x / y)) > 0.2)
    assert_gradients(mode, f, (x, y), central_differences(f, (x, y)), rtol=1e-7)


# --- max and min: ties share, where= masks, initial ----------------------------------------
REDUCTION_MODES = ["reverse", "prepared"]


def reduction_gradient(mode, f, x):
    """∂ f(x) / ∂x for a scalar-valued f, by the reverse rules or a prepared gradient replayed twice."""
    if mode == "reverse":
        return db.gradient(f, x)
    prepared = db.prepare_gradient(f, x)
    return [prepared(x) for _ in range(3)][-1]


X = np.array([3.0, 1.0, 3.0, 2.0, 3.0])
MASK = np.array([True, True, False, True, True])
ROWS = np.array([[2.0, 5.0, 5.0, 1.0], [4.0, 4.0, 4.0, 4.0], [0.0, -1.0, 7.0, -1.0]])
COLUMNS = np.array([[4.0, 5.0, 1.0], [4.0, 5.0, 3.0], [4.0, 2.0, 3.0]])
COLUMN_MASK = np.array([[True, True, False], [True, False, True], [False, True, True]])  # each column
# leaves out one element, equal to the column's extreme in the first two


@pytest.mark.parametrize("mode", REDUCTION_MODES)
@pytest.mark.parametrize("f, x, expected", [
    # tied extremes share the cotangent equally
    (lambda x: np.max(x), X, [1 / 3, 0, 1 / 3, 0, 1 / 3]),
    (lambda x: np.amax(x), X, [1 / 3, 0, 1 / 3, 0, 1 / 3]),
    (lambda x: np.min(-x), X, [-1 / 3, 0, -1 / 3, 0, -1 / 3]),
    (lambda x: np.amin(x), X, [0, 1, 0, 0, 0]),
    # a masked-out element equal to the extreme takes no share
    (lambda x: np.max(x, where=MASK, initial=-np.inf), X, [1 / 2, 0, 0, 0, 1 / 2]),
    (lambda x: np.min(-x, where=MASK, initial=np.inf), X, [-1 / 2, 0, 0, 0, -1 / 2]),
    # an extreme set by initial alone: every element 0; an element equal to initial takes the
    # cotangent (shared among tied elements), as maximum(x, c) gives it to x at a tie
    (lambda x: np.max(x, initial=10.0), X, [0, 0, 0, 0, 0]),
    (lambda x: np.min(x, initial=-10.0), X, [0, 0, 0, 0, 0]),
    (lambda x: np.max(x, initial=3.0), X, [1 / 3, 0, 1 / 3, 0, 1 / 3]),
    (lambda x: np.max(x, where=MASK, initial=3.0), X, [1 / 2, 0, 0, 0, 1 / 2]),
    # along an axis, per row (weights [1, 2, 3] tell the rows apart)
    (lambda x: np.sum(np.max(x, axis=1) * [1, 2, 3]), ROWS, [[0, 1 / 2, 1 / 2, 0], [1 / 2] * 4, [0, 0, 3, 0]]),
    (lambda x: np.sum(np.min(x, axis=-1, keepdims=True) * [[1], [2], [3]]), ROWS,
     [[0, 0, 0, 1], [1 / 2] * 4, [0, 3 / 2, 0, 3 / 2]]),
    (lambda x: np.sum(np.max(x, axis=0, where=COLUMN_MASK, initial=-np.inf)), COLUMNS,
     [[1 / 2, 1, 0], [1 / 2, 0, 1 / 2], [0, 0, 1 / 2]]),
])
def test_max_and_min_conventions(f, x, expected, mode):
    np.testing.assert_allclose(reduction_gradient(mode, f, x), expected, rtol=1e-15, atol=0)


# --- cumprod and prod with zeros: exact --------------------------------------------------
def multilinear_gradient(f, x):
    """∂f/∂x of a function affine in each element (a weighted sum of products): f(xᵢ=1) - f(xᵢ=0),
    exact and independent of any derivative rule."""
    x = np.asarray(x, np.float64)
    g = np.empty_like(x)
    for i in np.ndindex(x.shape):
        one, zero = x.copy(), x.copy()
        one[i], zero[i] = 1.0, 0.0
        g[i] = f(one) - f(zero)
    return g


@st.composite
def arrays_with_zeros(draw):
    """A float array of 1-3 dimensions with some (possibly many, possibly adjacent) exact zeros."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, shape)
    x[rng.random(shape) < draw(st.sampled_from([0.0, 0.2, 0.5]))] = 0.0
    return x, rng.standard_normal(shape)


@st.composite
def cumulative_axis(draw, ndim):
    return draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))


@settings(max_examples=30, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float64, np.float32]))
def test_cumprod_is_exact_with_zeros(data, dtype):
    x, w = data.draw(arrays_with_zeros())
    axis = data.draw(cumulative_axis(x.ndim))
    weights = w.ravel() if axis is None else w

    def loss(v):
        return np.sum(np.cumprod(v, axis=axis) * weights.astype(v.dtype))

    g = db.gradient(loss, x.astype(dtype))
    assert g.dtype == dtype
    want = multilinear_gradient(loss, x)
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-12}
    np.testing.assert_allclose(g, want, **tolerance)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float64, np.float32]))
def test_prod_is_exact_with_zeros(data, dtype):
    x, w = data.draw(arrays_with_zeros())
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    keepdims = data.draw(st.booleans())
    options = data.draw(st.sampled_from([{}, {"initial": -1.5}, {"where": w > -0.5}, {"where": w > 0, "initial": 2.0}]))
    weights = np.sum(w, axis=axis, keepdims=keepdims)

    def loss(v):
        return np.sum(np.prod(v, axis=axis, keepdims=keepdims, **options) * np.asarray(weights, v.dtype))

    g = db.gradient(loss, x.astype(dtype))
    assert g.dtype == dtype
    want = multilinear_gradient(loss, x)
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-12}
    np.testing.assert_allclose(g, want, **tolerance)


def test_cumprod_with_a_zero_the_issue_case():
    """y = (x₀, x₀x₁, x₀x₁x₂) at (1, 0, 2): ∂Σy/∂x = (1 + x₁ + x₁x₂, x₀ + x₀x₂, x₀x₁) = (1, 3, 0) (was nan)."""
    g = db.gradient(lambda x: np.sum(np.cumprod(x)), np.array([1.0, 0.0, 2.0]))
    np.testing.assert_array_equal(g, [1.0, 3.0, 0.0])


MATRIX_WITH_ZEROS = np.array([[1.5, 0.0, -2.0], [0.0, 3.0, 0.0], [2.0, -1.0, 0.5]])
JAX_PRODUCT_CASES = [  # each product with the issue's case, several zeros (flattened), and along each axis
    (np.array([1.0, 0.0, 2.0]), None, np.float64),
    (np.array([1.0, 0.0, 2.0]), None, np.float32),
    (np.array([0.0, 0.0, 3.0, 0.0, 2.0]), None, np.float64),
    (MATRIX_WITH_ZEROS, 0, np.float64),
    (MATRIX_WITH_ZEROS, -1, np.float64),
]


@pytest.mark.parametrize("x, axis, dtype", JAX_PRODUCT_CASES)
@pytest.mark.parametrize("name", ["cumprod", "prod"])
def test_products_with_zeros_match_jax(name, x, axis, dtype):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    w = np.linspace(-1.0, 2.0, x.size).reshape(x.shape).astype(dtype)
    w = w if name == "prod" else (w.ravel() if axis is None else w)
    weights = np.sum(w, axis=axis) if name == "prod" else w
    x = x.astype(dtype)
    ours = db.gradient(lambda v: np.sum(getattr(np, name)(v, axis=axis) * weights), x)
    with jax.enable_x64(dtype == np.float64):
        theirs = np.asarray(jax.jit(jax.grad(lambda v: jnp.sum(getattr(jnp, name)(v, axis=axis) * weights)))(x))
    assert ours.dtype == theirs.dtype == dtype
    single = dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-6 if single else 1e-13, atol=1e-6 if single else 1e-14)


# --- np.linalg.norm: every ord, against finite differences away from kinks, pinned at them -----
VECTOR_ORDS = [None, 2, 1, -1, -2, 3, 0.5, np.inf, -np.inf, 0]
MATRIX_ORDS = [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]
VECTOR_LAYOUTS = [((5,), None, False), ((3, 4), 1, True), ((3, 4), -2, False), ((2, 3, 2), 0, True)]
MATRIX_LAYOUTS = [((3, 4), None, False), ((2, 3, 4), (1, 2), True), ((3, 2, 4), (2, 0), False),
                  ((4, 3), (-1, -2), True)]


def away_from_kinks(shape, seed):
    """Random values with no zero, no tie in magnitude, in row or column sums, or in singular values."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


@pytest.mark.parametrize("ord, layout", [(o, v) for o in VECTOR_ORDS for v in VECTOR_LAYOUTS]
                         + [(o, m) for o in MATRIX_ORDS for m in MATRIX_LAYOUTS], ids=stable_id)
def test_norm_matches_finite_differences(ord, layout):
    shape, axis, keepdims = layout
    x = away_from_kinks(shape, 0)
    w = np.random.default_rng(1).standard_normal(np.shape(np.linalg.norm(x, ord, axis, keepdims)))

    def loss(v):
        return np.sum(np.linalg.norm(v, ord, axis, keepdims) * w)

    db.check_gradient(loss, x)
    prepared = db.prepare_gradient(loss, x)
    for _ in range(3):  # recorded, then replayed
        np.testing.assert_array_equal(prepared(x), db.gradient(loss, x))


@pytest.mark.parametrize("mode", REDUCTION_MODES)
@pytest.mark.parametrize("x, ord, axis, expected", [
    # the abs kinks: a zero element has partial sign(0) = 0 in the 1, inf and -inf norms
    ([0.0, -2.0, 3.0], 1, None, [0, -1, 1]),
    ([0.0, 0.0], 1, None, [0, 0]),
    ([0.0, 2.0, -1.0], -np.inf, None, [0, 0, 0]),
    ([0.0, 0.0], np.inf, None, [0, 0]),
    # the max/min norms share ties
    ([3.0, -3.0, 1.0], np.inf, None, [1 / 2, -1 / 2, 0]),
    ([1.0, -1.0, 3.0], -np.inf, None, [1 / 2, -1 / 2, 0]),
    ([[2.0, -2.0, 1.0], [1.0, 1.0, -1.0]], np.inf, 1, [[1 / 2, -1 / 2, 0], [1 / 3, 1 / 3, -1 / 3]]),
    # ord 0 counts the nonzero elements: piecewise constant, gradient 0
    ([0.0, 2.0, -1.0], 0, None, [0, 0, 0]),
    # at x = 0 the 2-norm and the p-norms with p > 1 have partials 0 (as hypot's, |x|'s sign(0), PyTorch's);
    # p < 1 at a zero element is 0 · ∞: NaN
    ([0.0, 0.0], None, None, [0, 0]),
    ([0.0, 0.0], 3, None, [0, 0]),
    ([0.0, 2.0], 0.5, None, [NAN, 1]),
    ([0.0, 2.0], -1, None, [NAN, 0]),
    # matrix 1/-1 norms: tied column sums share; inf/-inf norms: tied row sums
    ([[1.0, -2.0], [2.0, -1.0]], 1, None, [[1 / 2, -1 / 2], [1 / 2, -1 / 2]]),
    ([[1.0, -2.0], [2.0, -1.0]], -1, None, [[1 / 2, -1 / 2], [1 / 2, -1 / 2]]),
    ([[1.0, -2.0], [-2.0, 1.0]], np.inf, None, [[1 / 2, -1 / 2], [-1 / 2, 1 / 2]]),
    ([[1.0, -2.0], [-2.0, 1.0]], -np.inf, None, [[1 / 2, -1 / 2], [-1 / 2, 1 / 2]]),
    ([[0.0, 1.0], [3.0, 1.0]], 1, None, [[0, 0], [1, 0]]),
    ([[0.0, 1.0], [2.0, 3.0]], -np.inf, (1, 0), [[0, 0], [1, 0]]),  # axes swapped: the rows are x's columns
], ids=stable_id)
def test_norm_conventions_at_kinks(x, ord, axis, expected, mode):
    x = np.array(x)
    g = reduction_gradient(mode, lambda v: np.sum(np.linalg.norm(v, ord, axis)), x)
    np.testing.assert_allclose(g, expected, rtol=1e-15, atol=0)


# === Order statistics, ptp and the nan functions: ties share, NaN gets 0 (rules/reductions.py) ====

# Each expected gradient is computed by hand from the stated convention: tied elements share equally the
# cotangents of the sorted positions they occupy; a quantile (1 - t) s[i] + t s[i+1] sends (1 - t) and t to
# positions i and i+1; NaN elements of the nan functions, and a result that is NaN, get 0.
POSITION_WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0, 5.0])  # the cotangent of each sorted position
TIES = [3.0, 1.0, 3.0, 2.0, 1.0]  # sorts to [1, 1, 2, 3, 3]
QUARTILE_TIES = [5.0, 1.0, 1.0, 3.0, 1.0]  # sorts to [1, 1, 1, 3, 5]


@pytest.mark.parametrize("mode", REDUCTION_MODES)
@pytest.mark.parametrize("f, x, expected", [
    # the 1s share positions 0 and 1: (1 + 2) / 2; the 2 takes position 2; the 3s share (4 + 5) / 2
    (lambda x: np.sum(np.sort(x) * POSITION_WEIGHTS), TIES, [4.5, 1.5, 4.5, 3, 1.5]),
    (lambda x: np.sum(np.sort(x, axis=None) * POSITION_WEIGHTS), TIES, [4.5, 1.5, 4.5, 3, 1.5]),
    (lambda x: np.sum(np.sort(x, axis=0) * [[1.0], [2.0]]), [[2.0, 0.0], [2.0, 1.0]], [[1.5, 1], [1.5, 2]]),
    # partition: the element np.argpartition puts at each position (no sharing)
    (lambda x: np.sum(np.partition(x, 2) * POSITION_WEIGHTS), [4.0, 0.0, 2.0, 3.0, 1.0],
     [POSITION_WEIGHTS[list(np.argpartition([4.0, 0.0, 2.0, 3.0, 1.0], 2)).index(i)] for i in range(5)]),
    # median of an odd count: position 1 (a 2) tied with position 2: each 2 gets 1/2
    (np.median, [2.0, 1.0, 2.0], [1 / 2, 0, 1 / 2]),
    # median of an even count: (s[1] + s[2]) / 2 over three tied 2s at positions 0, 1, 2: (0 + 1/2 + 1/2) / 3
    (np.median, [2.0, 2.0, 2.0, 5.0], [1 / 3, 1 / 3, 1 / 3, 0]),
    # (s[1] + s[2]) / 2 with s = [1, 1, 3, 4]: the 1s share (0 + 1/2) / 2, the 3 takes 1/2
    (np.median, [1.0, 3.0, 1.0, 4.0], [1 / 4, 1 / 2, 1 / 4, 0]),
    # the quartile of 5 elements is s[1], tied with s[0] and s[2]: 1/3 each
    (lambda x: np.quantile(x, 0.25), QUARTILE_TIES, [0, 1 / 3, 1 / 3, 0, 1 / 3]),
    # the 60th percentile is 0.6 s[2] + 0.4 s[3]: the three 1s share 0.6, the 3 takes 0.4
    (lambda x: np.percentile(x, 60.0), QUARTILE_TIES, [0, 0.2, 0.2, 0.4, 0.2]),
    # the 'lower' method at 0.6 is s[2]; 'midpoint' (s[2] + s[3]) / 2
    (lambda x: np.quantile(x, 0.6, method="lower"), QUARTILE_TIES, [0, 1 / 3, 1 / 3, 0, 1 / 3]),
    (lambda x: np.quantile(x, 0.6, method="midpoint"), QUARTILE_TIES, [0, 1 / 6, 1 / 6, 1 / 2, 1 / 6]),
    # a median whose value is NaN has gradient 0; nanmedian leaves the NaN out: [1, 2, 2] has median s[1]
    (np.median, [1.0, NAN, 3.0], [0, 0, 0]),
    (np.nanmedian, [NAN, 2.0, 1.0, 2.0], [0, 1 / 2, 0, 1 / 2]),
    (lambda x: np.nanquantile(x, 0.5), [NAN, NAN], [0, 0]),
    # ptp = max - min, each with its tie rule; a constant slice: 0
    (np.ptp, TIES, [1 / 2, -1 / 2, 1 / 2, 0, -1 / 2]),
    (np.ptp, [2.0, 2.0], [0, 0]),
    # the nan reductions: NaN elements 0, the others as the plain reduction of the rest
    (np.nansum, [1.0, NAN, 2.0], [1, 0, 1]),
    (np.nanmean, [1.0, NAN, 2.0], [1 / 2, 0, 1 / 2]),
    (np.nanmax, [3.0, NAN, 3.0], [1 / 2, 0, 1 / 2]),
    (np.nanmin, [NAN, NAN], [0, 0]),
    (np.nanprod, [2.0, NAN, 3.0], [3, 0, 2]),
    (np.nanvar, [1.0, NAN, 3.0], [-1, 0, 1]),  # 2 (x - mean) / n
    (lambda x: np.sum(np.nancumsum(x)), [1.0, NAN, 2.0], [3, 0, 1]),
    (lambda x: np.sum(np.nancumprod(x)), [2.0, NAN, 3.0], [1 + 1 + 3, 0, 2]),  # [x0, x0, x0 x2]
    # the ufunc reductions are max's and nanmax's
    (np.maximum.reduce, [3.0, 1.0, 3.0], [1 / 2, 0, 1 / 2]),
    (np.minimum.reduce, [1.0, 1.0, 3.0], [1 / 2, 1 / 2, 0]),
    (np.fmax.reduce, [3.0, NAN, 3.0], [1 / 2, 0, 1 / 2]),
    # the running max [3, 3, 3, 3, 4, 4, 4] with cotangents 1..7: at k = 2 and 3 the two 3s share,
    # at k = 5 and 6 the two 4s: x0 = 1 + 2 + 3/2 + 4/2, x2 = 3/2 + 4/2, x4 = 5 + 6/2 + 7/2, x5 = 6/2 + 7/2
    (lambda x: np.maximum.accumulate(x) * np.arange(1.0, 8.0), [3.0, 1.0, 3.0, 2.0, 4.0, 4.0, 0.0],
     [6.5, 0, 3.5, 0, 11.5, 6.5, 0]),
    (lambda x: np.minimum.accumulate(-x) * np.arange(1.0, 8.0), [3.0, 1.0, 3.0, 2.0, 4.0, 4.0, 0.0],
     [-6.5, 0, -3.5, 0, -11.5, -6.5, 0]),
    # past a NaN the running max is NaN: no gradient; fmax leaves the NaN out
    (np.maximum.accumulate, [1.0, NAN, 2.0], [1, 0, 0]),
    (np.fmax.accumulate, [NAN, 1.0, 2.0], [0, 1, 1]),
], ids=stable_id)
def test_order_statistic_and_nan_conventions(f, x, expected, mode):
    g = reduction_gradient(mode, lambda v: np.sum(f(v)), np.array(x))
    np.testing.assert_allclose(g, expected, rtol=1e-15, atol=1e-15)


def test_jax_gives_a_tie_to_one_element_where_we_share():
    """JAX's sort pulls each position's cotangent back to one element (its stable order), so its median
    of [2, 1, 2] has gradient [1, 0, 0]; ours shares [1/2, 0, 1/2].  Both are subgradients (they sum to
    the same), and away from ties the two agree."""
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        tied = np.array([2.0, 1.0, 2.0])
        np.testing.assert_array_equal(np.asarray(jax.grad(jax.numpy.median)(tied)), [1, 0, 0])
        np.testing.assert_array_equal(db.gradient(np.median, tied), [1 / 2, 0, 1 / 2])
        distinct = np.array([2.0, 1.0, 2.5, 0.5])
        theirs = np.asarray(jax.grad(jax.numpy.median)(distinct))
        np.testing.assert_array_equal(db.gradient(np.median, distinct), theirs)

# --- issue 15: the new elementwise functions at their special points, in every mode ----------------
def sinc(r):
    return np.sinc(r)


def nan_to_num(r):
    return np.nan_to_num(r)


def float_power_cubed(r):
    return np.float_power(r, 3.0)


def float_power_of_zero(x, y):
    return np.float_power(x, y)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, points, expected", [
    # sinc is even and smooth at 0: derivative 0 there (not the 0/0 of its quotient formula)
    (sinc, [0.0, 1.0, -1.0], [0.0, -1.0, 1.0]),
    # finite elements pass through (1); NaN and ±inf are replaced by constants (0)
    (nan_to_num, [NAN, np.inf, -np.inf, 2.0], [0.0, 0.0, 0.0, 1.0]),
    (float_power_cubed, [0.0, 2.0, -1.0], [0.0, 12.0, 3.0]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_new_elementwise_conventions(f, points, expected, mode):
    assert_gradients(mode, f, (np.array(points),), (expected,))


@pytest.mark.parametrize("mode", MODES)
def test_float_power_keeps_power_conventions(mode):
    # ∂/∂x is 0 at y = 0 (also at x = 0); ∂/∂y is 0 at x = 0, as for x ** y
    x, y = np.array([0.0, 0.0, 2.0]), np.array([0.0, 2.0, 0.0])
    assert_gradients(mode, float_power_of_zero, (x, y), ([0.0, 0.0, 0.0], [0.0, 0.0, np.log(2.0)]))
