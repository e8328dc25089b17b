"""The shape and assembly rules of issue 15 beside an independent computation (JAX's gradients), their
convention at ties (np.pad's maximum/minimum modes), and the errors that name the spelling that works."""

import warnings

import numpy as np
import pytest

import dualbroadcast as db

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4))
V = RNG.standard_normal(5)


def jax_gradient(f_jnp, x, weights):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return np.asarray(jax.jit(jax.grad(lambda x: (f_jnp(x) * weights).sum()))(x))  # one compilation


def numpy_and_jax(name):
    """The NumPy function ``name`` and jax.numpy's (``np.pad``, ``jnp.pad``)."""
    jnp = pytest.importorskip("jax.numpy")
    return getattr(np, name), getattr(jnp, name)


# --- against JAX -----------------------------------------------------------------------------------------
PADS = [
    ("constant", {}), ("constant", {"constant_values": 2.5}), ("edge", {}), ("wrap", {}),
    ("linear_ramp", {}), ("linear_ramp", {"end_values": (1.0, -3.0)}),
    ("reflect", {}), ("reflect", {"reflect_type": "odd"}), ("symmetric", {}), ("symmetric", {"reflect_type": "odd"}),
    ("mean", {}), ("mean", {"stat_length": ((1, 2), (3, 1))}),
    ("maximum", {}), ("maximum", {"stat_length": 2}), ("minimum", {}), ("minimum", {"stat_length": (1, 3)}),
    ("median", {}), ("median", {"stat_length": 2}), ("median", {"stat_length": ((1, 2), (3, 4))}),
]


@pytest.mark.parametrize("width", [((2, 7), (1, 3)), (0, 2)], ids=["per-axis", "pair"])
@pytest.mark.parametrize("mode, keywords", PADS, ids=[f"{m}-{k}" for m, k in PADS])
def test_pad_gradient_is_jax_s(mode, keywords, width):
    """Wider than the array (7 > 3 rows): reflect and wrap pad in several rounds."""
    pad, jax_pad = numpy_and_jax("pad")
    weights = RNG.standard_normal(np.pad(A, width, mode, **keywords).shape)
    got = db.gradient(lambda x: np.sum(pad(x, width, mode, **keywords) * weights), A)
    np.testing.assert_allclose(got, jax_gradient(lambda x: jax_pad(x, width, mode, **keywords), A, weights),
                               rtol=1e-12, atol=1e-12)


def test_pad_of_a_float32_array_gives_float32():
    g = db.gradient(lambda x: np.sum(np.pad(x, 2, "linear_ramp", end_values=1.0) ** 2), A.astype(np.float32))
    assert g.dtype == np.float32


CALLS = {
    "rot90": lambda np_: lambda x: np_.rot90(x, 3, (1, 0)),
    "rollaxis": lambda np_: lambda x: np_.rollaxis(x.reshape(3, 2, 2), 2, 1),
    "delete": lambda np_: lambda x: np_.delete(x, np.array([0, 3]), axis=1),
    "append": lambda np_: lambda x: np_.append(x, x[:1] * 2, axis=0),
    "resize": lambda np_: lambda x: np_.resize(x, (5, 6)),
    "take_along_axis": lambda np_: lambda x: np_.take_along_axis(x, np.array([[3, 0, 3]] * 3), 1),
    "diagflat": lambda np_: lambda x: np_.diagflat(x, -2),
    "column_stack": lambda np_: lambda x: np_.column_stack([x[:, 0], x, x[:, 1]]),
    "dstack": lambda np_: lambda x: np_.dstack([x, x[::-1]]),
    "atleast_3d": lambda np_: lambda x: np_.atleast_3d(x[0]) * np_.atleast_3d(x[0]),
}


@pytest.mark.parametrize("name", CALLS)
def test_gradient_is_jax_s(name):
    jnp = pytest.importorskip("jax.numpy")
    weights = RNG.standard_normal(np.shape(CALLS[name](np)(A)))
    got = db.gradient(lambda x: np.sum(CALLS[name](np)(x) * weights), A)
    np.testing.assert_allclose(got, jax_gradient(CALLS[name](jnp), A, weights), rtol=1e-12, atol=1e-12)


# jnp.insert takes 12 s to differentiate: np.insert beside the same result built by other rules
INSERTS = {
    "columns": (lambda x: np.insert(x, [2, 0, 2], x[:, 1], axis=1),  # x[:, 1] is broadcast: a row of values
                lambda x: np.concatenate([np.broadcast_to(x[:, 1], (3, 3))[:, [1]], x[:, :2],
                                          np.broadcast_to(x[:, 1], (3, 3))[:, [0, 2]], x[:, 2:]], axis=1)),
    "flat": (lambda x: np.insert(x, 5, x[0, :2]), lambda x: np.concatenate([x.ravel()[:5], x[0, :2], x.ravel()[5:]])),
    "rows of a slice": (lambda x: np.insert(x, slice(0, 3, 2), x[1] * 2, axis=0),
                        lambda x: np.stack([x[1] * 2, x[0], x[1], x[1] * 2, x[2]])),
}


@pytest.mark.parametrize("name", INSERTS)
def test_insert_gradient_is_that_of_the_same_array_joined(name):
    inserted, joined = INSERTS[name]
    np.testing.assert_array_equal(inserted(A), joined(A))
    weights = RNG.standard_normal(np.shape(inserted(A)))
    np.testing.assert_allclose(db.gradient(lambda x: np.sum(inserted(x) * weights), A),
                               db.gradient(lambda x: np.sum(joined(x) * weights), A), rtol=1e-13, atol=1e-13)


# --- np.pad's maximum, minimum and median at ties ---------------------------------------------------------
TIES = np.array([1.0, 3.0, -2.0, 3.0, -2.0])


@pytest.mark.parametrize("mode, stat_length, shares", [
    ("maximum", None, {3: 1.0}), ("minimum", None, {2: 1.0}),
    ("median", 3, {0: 1.0}),  # 1, 3, -2: the middle one is 1
    ("median", 4, {0: 0.5, 1: 0.5}),  # 1, 3, -2, 3: the middle two are 1 and the first 3
])
def test_pad_statistics_take_which_of_tied_elements(mode, stat_length, shares):
    """Equal maxima: the last one gets the pad's cotangent; equal minima: the first; a median: its one or two
    middle elements, sorted by value, then by position (rules/shape.py)."""
    def f(x):
        return np.sum(np.pad(x, (2, 0), mode, stat_length=stat_length))

    expected = np.ones(5)
    for position, share in shares.items():
        expected[position] += 2 * share  # two padded elements
    np.testing.assert_array_equal(db.gradient(f, TIES), expected)
    np.testing.assert_array_equal(db.prepare_gradient(f, TIES)(TIES), expected)


# --- compositions: tracked arrays inside lists, one result per argument ----------------------------------
@pytest.mark.parametrize("func", [np.atleast_1d, np.atleast_2d, np.atleast_3d])
def test_atleast_nd_of_several_arrays_gives_each_its_gradient(func):
    ys, back = db.pullback(lambda x, s: func(x, s * x[0], 2 * x), V, 3.0)
    assert [y.shape for y in ys] == [y.shape for y in func(V, 3.0 * V[0], 2 * V)]
    gx, gs = back(tuple(np.ones_like(y) for y in ys))
    np.testing.assert_allclose(gx, np.ones(5) * 3 + np.eye(5)[0] * 3.0)
    assert gs == V[0]


def test_select_chooses_the_first_true_condition_and_checks_its_arguments():
    conditions = [V > 0, V < 1]  # both hold on [0, 1): the first chooses
    g = db.gradient(lambda x: np.sum(np.select(conditions, [x, x**2], 0.5)), V)
    np.testing.assert_allclose(g, np.select(conditions, [np.ones(5), 2 * V], 0.0))
    for conditions, choices, error in [([V > 0], [V, V], ValueError), ([], [], ValueError), ([V], [V], TypeError)]:
        with pytest.raises(error):
            np.select(conditions, choices)  # NumPy's error ...
        with pytest.raises(error):
            db.gradient(lambda x: np.sum(np.select(conditions, [x] * len(choices))), V)  # ... and ours


@pytest.mark.parametrize("blocks", [lambda x: [[x, x], [x, 2 * x]], lambda x: [x, x], lambda x: [[x[0]], [x]]],
                         ids=["nested", "flat", "promoted"])
def test_block_of_lists_is_its_concatenations(blocks):
    y, _ = db.pullback(lambda x: np.block(blocks(x)), A)
    np.testing.assert_array_equal(y, np.block(blocks(A)))
    g = db.gradient(lambda x: np.sum(np.block(blocks(x)) * np.block(blocks(A))), A)
    np.testing.assert_allclose(g, _block_gradient(blocks))
    with pytest.raises(ValueError):
        db.gradient(lambda x: np.sum(np.block([[x], x])), A)  # mismatched depths: NumPy's error


def _block_gradient(blocks):
    """d/dA of sum(block(A) * block(A0)), a linear function of A, by its value at each unit matrix."""
    flat = np.zeros(A.size)
    for k in range(A.size):
        e = np.zeros(A.size)
        e[k] = 1.0
        flat[k] = np.sum(np.block(blocks(e.reshape(A.shape))) * np.block(blocks(A)))
    return flat.reshape(A.shape)


def test_block_of_one_tracked_array_is_that_array_not_its_rows_joined():
    y, back = db.pullback(lambda x: np.block(x), A)
    np.testing.assert_array_equal(y, A)
    np.testing.assert_array_equal(back(A), A)


def test_piecewise_with_functions_matches_jax():
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    x = np.linspace(-2.0, 2.0, 9)
    cotangent = np.cos(np.arange(9.0))
    _, back = db.pullback(lambda x: np.piecewise(x, [x > 0.5, x < -0.5], [np.sin, lambda v: v**3, np.tanh]), x)
    _, expected = jax.vjp(lambda x: jnp.piecewise(x, [x > 0.5, x < -0.5], [jnp.sin, lambda v: v**3, jnp.tanh]), x)
    np.testing.assert_allclose(back(cotangent), expected(cotangent)[0], rtol=1e-12)


@pytest.mark.parametrize("write, match", [
    (lambda x: np.put(x, [0, 2], 1.0), r"np\.where\(mask, np\.take\(v, source"),
    (lambda x: np.put(np.zeros(5), [0, 2], x[:2]), "in place"),
    (lambda x: np.place(x, x > 0, [1.0]), r"np\.where\(mask, np\.take\(vals"),
    (lambda x: np.fill_diagonal(x, 2.0), r"np\.where\(mask, val, a\)"),
    (lambda x: np.full_like(np.zeros(3), x[0, 0]), r"np\.zeros_like\(a\) \+ v"),
], ids=["put", "put tracked values", "place", "fill_diagonal", "full_like of a constant"])
def test_writers_in_place_name_the_functional_spelling(write, match):
    with pytest.raises(db.InPlaceMutationError, match=match):
        db.gradient(lambda x: (write(x), np.sum(x))[1], A)


def test_put_along_axis_says_how_to_build_the_array():
    where = np.array([[1], [0], [3]])
    with pytest.raises(db.InPlaceMutationError, match=r"np\.where\(mask, np\.take_along_axis\("):
        db.gradient(lambda x: np.sum(np.put_along_axis(x, where, 1.0, 1)), A)
    with pytest.raises(db.InPlaceMutationError, match="in place"):  # a constant array and tracked values
        db.gradient(lambda x: np.sum(np.put_along_axis(np.zeros((3, 4)), where, x[:3, None], 1)), V)


def pad_with_ones(vector, widths, axis, keywords):  # np.pad's form of a mode given as a function
    vector[: widths[0]] = 1.0
    vector[len(vector) - widths[1]:] = 1.0


@pytest.mark.parametrize("mode", ["empty", pad_with_ones], ids=["empty", "function"])
def test_pad_modes_without_a_rule_are_an_error_naming_those_with_one(mode):
    with pytest.raises(db.UnsupportedFunctionError, match="linear_ramp"):
        db.gradient(lambda x: np.sum(np.pad(x, 1, mode)), A)


WRITTEN_INSTEAD = {  # what the message says to write instead, and that spelling
    "np.r_[x, y]": (lambda x: np.r_[x, 2 * x], r"np\.concatenate\(\[x, y\]\)", lambda x: np.concatenate([x, 2 * x])),
    "np.r_ of 0-d": (lambda x: np.r_[x[0], x], r"np\.hstack\(\[x, y\]\)", lambda x: np.hstack([x[0], x])),
    "np.c_[x, y]": (lambda x: np.c_[x, 2 * x], r"np\.column_stack\(\[x, y\]\)",
                    lambda x: np.column_stack([x, 2 * x])),
    "np.array([x, y])": (lambda x: np.array([x, 2 * x]), r"np\.stack\(\[x, y\]\)", lambda x: np.stack([x, 2 * x])),
    "np.asarray([x, y])": (lambda x: np.asarray([x[0], x[1]]), r"np\.stack\(\[x, y\]\)",
                           lambda x: np.stack([x[0], x[1]])),
}


@pytest.mark.parametrize("name", WRITTEN_INSTEAD)
def test_building_an_array_of_tracked_pieces_names_the_function_that_works(name):
    wrong, message, right = WRITTEN_INSTEAD[name]
    weights = RNG.standard_normal(np.shape(wrong(V)))
    with pytest.raises(db.ValueConversionError, match=message):
        db.gradient(lambda x: np.sum(wrong(x) * weights), V)
    db.check_gradient(lambda x: np.sum(right(x) * weights), V)
    np.testing.assert_array_equal(right(V), wrong(V))


def test_row_stack_is_vstack():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        g = db.gradient(lambda x: np.sum(np.row_stack([x, 2 * x]) ** 2), V)
    np.testing.assert_allclose(g, 10 * V)


def test_pad_with_tracked_constant_values_matches_jax():
    """Constants per axis and side, the corners taken by the later axis's, as NumPy and JAX pad."""
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    values = np.array([[1.0, 2.0], [3.0, 4.0]])
    y, back = db.pullback(lambda x, c: np.pad(x, ((1, 2), (2, 1)), constant_values=c), A, values)
    expected_y, expected_back = jax.vjp(lambda x, c: jnp.pad(x, ((1, 2), (2, 1)), constant_values=c), A, values)
    np.testing.assert_array_equal(y, expected_y)
    cotangent = np.cos(np.arange(y.size, dtype=float)).reshape(y.shape)
    for got, expected in zip(back(cotangent), expected_back(cotangent)):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
