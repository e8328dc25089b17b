"""Reverse mode never loses a gradient without a word: results the tape cannot carry, ufunc keywords it
cannot honour, constants changed after use, results that are not real scalars, and the errors for each.

Each test here failed on the code before its fix with a silently wrong number or a bare NumPy error.
"""

import gc
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db

X = np.array([0.3, 0.5, 1.5])


# --- results the tape cannot carry ---------------------------------------------------------------
@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sum(x.astype(object)),
        lambda x: np.sum(x * np.array([1, 2, 3], dtype=object)),
    ],
    ids=["astype-object", "object-constant"],
)
def test_a_result_the_tape_cannot_carry_is_an_error(f):
    with pytest.raises(db.UnsupportedFunctionError, match="tape cannot carry"):
        db.gradient(f, X)


@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sum(np.abs(x + 1j)),
        lambda x: np.sum(np.real(np.exp(1j * x))),
        lambda x: abs(np.sum(x) * 1j),
        lambda x: np.sum(np.abs(x.astype(complex))),
        lambda x: np.abs(np.sum(x, dtype=complex)),
        lambda x: np.sum(np.abs(np.dot(x, np.ones((3, 2)) * 1j))),
        lambda x: np.sum(np.abs(np.split(x * 1j, 3)[0])),
    ],
    ids=["add", "multiply-exp", "scalar", "astype-complex", "sum-dtype", "dot", "split"],
)
def test_complex_intermediates_of_a_real_function_give_its_real_gradient(f):
    g = db.gradient(f, X)
    assert g.dtype == X.dtype
    db.check_gradient(f, X)


def test_integer_and_boolean_results_are_constants():
    g = db.gradient(lambda x: np.sum(x * (x > 0.4)) + np.sum(x.astype(int)), X)
    np.testing.assert_array_equal(g, (X > 0.4).astype(float))


def test_python_functions_per_element_are_an_error_naming_the_way():
    with pytest.raises(db.UnsupportedFunctionError, match=r"np\.frompyfunc or np\.vectorize"):
        db.gradient(lambda x: np.sum(np.frompyfunc(lambda v: 2 * v, 1, 1)(x)), X)
    with pytest.raises(db.ValueConversionError):
        db.gradient(lambda x: np.sum(np.vectorize(lambda v: 2 * v)(x)), X)


# --- ufunc keywords --------------------------------------------------------------------------------
def test_a_ufunc_where_keyword_is_an_error_naming_np_where():
    with pytest.raises(db.UnsupportedFunctionError, match=r"np.where\(mask, np.exp\(x\), fill\)"):
        db.gradient(lambda x: np.sum(np.exp(x, where=x > 0.4)), X)


def test_a_ufunc_dtype_keyword_is_an_error():
    with pytest.raises(db.UnsupportedFunctionError, match="dtype"):
        db.gradient(lambda x: np.sum(np.multiply(x, x, dtype=np.float32)), X)


@pytest.mark.parametrize("keywords", [{"casting": "same_kind"}, {"order": "C"}, {"subok": True}])
def test_ufunc_keywords_that_keep_the_values_are_differentiated(keywords):
    g = db.gradient(lambda x: np.sum(np.multiply(x, x, **keywords)), X)
    np.testing.assert_allclose(g, 2 * X)


# --- constants changed after use --------------------------------------------------------------------
def _mutates_after(use):
    """f(x) computes use(x, c) with a fresh constant c, then overwrites c."""

    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = use(x, c)
        c[:] = 0.0
        return np.sum(y)

    return f


@pytest.mark.parametrize(
    "use",
    [
        lambda x, c: x * c,
        lambda x, c: c * x,
        lambda x, c: np.dot(x, c),
        lambda x, c: x @ c,
        lambda x, c: np.outer(x, c),
        lambda x, c: np.einsum("i,i->", x, c),
        lambda x, c: np.where(c, x, 0.0),
        lambda x, c: np.dot(x[:2], c[:2]),
        lambda x, c: np.sum(x[1] * c),
        lambda x, c: np.concatenate([x, c]) * np.concatenate([c, x]),
    ],
    ids=["mul", "rmul", "dot", "matmul", "outer", "einsum", "where-mask", "dot-slices", "slice-scalar", "sequence"],
)
def test_a_constant_changed_after_use_is_an_error_not_a_changed_gradient(use):
    with pytest.raises(db.InPlaceMutationError, match="read-only until the gradient is computed"):
        db.gradient(_mutates_after(use), np.ones(3))


def test_a_cut_value_changed_after_use_is_an_error():
    def f(x):
        y = x * 2.0
        z = db.cut(y)
        total = np.sum(y * y)
        z += 1.0  # would change y, which y * y's pullback reads
        return total

    with pytest.raises(db.InPlaceMutationError):
        db.gradient(f, X)


@pytest.mark.parametrize("view_first", [True, False])
def test_kept_constants_are_writeable_again_after_the_gradient(view_first):
    c = np.array([1.0, 2.0, 3.0])
    view = c[1:]
    uses = [lambda x: np.sum(x[1:] * view), lambda x: np.sum(x * c)]
    g = db.gradient(lambda x: uses[not view_first](x) + uses[view_first](x), X)
    np.testing.assert_allclose(g, c + np.r_[0.0, view])
    assert c.flags.writeable and view.flags.writeable
    with pytest.raises(db.InPlaceMutationError):
        db.gradient(lambda x: (np.sum(x * c), c.__setitem__(0, 5.0))[0], X)
    assert c.flags.writeable  # also after a failed evaluation
    c[0] = 5.0


def test_a_read_only_constant_stays_read_only():
    c = np.array([1.0, 2.0, 3.0])
    c.flags.writeable = False
    db.gradient(lambda x: np.sum(x * c), X)
    assert not c.flags.writeable


def test_a_pullback_keeps_its_constants_read_only_while_it_lives():
    c = np.array([1.0, 2.0, 3.0])
    _, back = db.pullback(lambda x: x * c, np.ones(3))
    with pytest.raises(ValueError, match="read-only"):
        c[0] = 100.0
    np.testing.assert_allclose(back(np.ones(3)), [1.0, 2.0, 3.0])
    del back
    if not c.flags.writeable:  # held in a reference cycle: the collector frees it (a full collection late in
        gc.collect()  # the suite takes seconds, so only then)
    c[0] = 100.0


def test_an_index_array_may_still_be_reused_in_place():
    """x[idx] copies an integer index (the getitem rule keeps a copy), so it is not made read-only."""
    idx = np.array([0, 1])
    db.gradient(lambda x: np.sum(x[idx] ** 2), X)
    idx += 1
    assert idx.flags.writeable


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2), st.sampled_from(["mul", "dot", "where"]))
def test_a_mutated_constant_never_changes_the_gradient(position, op):
    """Whatever element is changed, the gradient is the one of the values used, or an error."""
    use = {"mul": lambda x, c: x * c, "dot": np.dot, "where": lambda x, c: np.where(c > 1.5, x * c, x)}[op]

    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = np.sum(use(x, c))
        c[position] = -7.0
        return y

    expected = db.gradient(lambda x: np.sum(use(x, np.array([1.0, 2.0, 3.0]))), X)
    try:
        g = db.gradient(f, X)
    except db.InPlaceMutationError:
        return
    np.testing.assert_allclose(g, expected)


# --- results that are not real scalars ----------------------------------------------------------------
@pytest.mark.parametrize("result", [None, "a", b"a", object(), 1j, np.complex128(1j), [1.0]])
def test_a_result_that_is_not_a_real_scalar_is_a_clear_error(result):
    with pytest.raises(db.DifferentiationError, match="real"):
        db.gradient(lambda x: result, X)


# --- every error is a DifferentiationError and the builtin it resembles ----------------------------------
@db.primitive
def _opaque(x):
    return x ** 2


db.defvjp(_opaque, lambda ans, x: lambda g: g * 2 * np.asarray(x))  # a pullback that cannot run on tracked values


@pytest.mark.parametrize(
    "call, builtin",
    [
        (lambda: db.gradient(lambda x: x * 2, np.arange(3)), TypeError),
        (lambda: db.gradient(lambda x: np.sum(x * 2), np.ones(3, complex)), ValueError),
        (lambda: db.gradient(lambda x: x, np.array(["a"], dtype=object)), TypeError),
        (lambda: db.jacobian(lambda x: x, {"a": 1.0}), TypeError),
        (lambda: db.pullback(lambda x: 2 * x, np.ones(3))[1](np.ones(2)), ValueError),
        (lambda: db.gradient(lambda x: np.sum(_stale[0] * x), X), ValueError),
        (lambda: db.hessian(lambda x: np.sum(_opaque(x)), X), TypeError),
    ],
    ids=["integer", "complex", "object", "jacobian-tree", "cotangent-shape", "stale", "not twice"],
)
def test_errors_derive_from_differentiation_error_and_the_builtin(call, builtin):
    """Each error is also the built-in exception user code would catch (a rule that cannot be differentiated
    twice: a TypeError, as a function without a rule)."""
    with pytest.raises(db.DifferentiationError) as error:
        call()
    assert isinstance(error.value, builtin)


_stale = []
db.gradient(lambda x: (_stale.append(x * 2), np.sum(x))[1], X)


def test_functions_are_named_by_the_module_users_import_them_from():
    special = pytest.importorskip("scipy.special")
    with pytest.raises(db.UnsupportedFunctionError, match=r"db.defvjp\(scipy.special.ber,") as error:
        db.gradient(lambda x: np.sum(special.ber(x)), X)
    assert "np.ber" not in str(error.value)


def test_the_advice_for_a_missing_rule_works_when_followed():
    special = pytest.importorskip("scipy.special")
    saved = dict(db.registry.RULES)
    try:
        db.defvjp(special.ber, lambda ans, x: lambda g: g * special.berp(x))
        db.check_gradient(lambda x: np.sum(special.ber(x)), X)
    finally:
        db.registry.RULES.clear()
        db.registry.RULES.update(saved)


# --- conversions a user trips on --------------------------------------------------------------------------
def test_assigning_a_tracked_value_into_an_array_names_the_way():
    def f(x):
        y = np.zeros(3)
        y[0] = x[0]
        return np.sum(y)

    with pytest.raises(db.ValueConversionError, match=r"np\.stack"):
        db.gradient(f, X)


def test_round_of_a_tracked_value_names_np_round():
    with pytest.raises(db.ValueConversionError, match=r"np.round"):
        db.gradient(lambda x: round(x[0]), X)


def test_formatting_a_tracked_value_formats_its_value():
    seen = []
    g = db.gradient(lambda x: (seen.append(f"{np.sum(x):.2f} {x[0]}"), np.sum(x))[1], X)
    assert seen == [f"{np.sum(X):.2f} {X[0]}"]
    np.testing.assert_array_equal(g, np.ones(3))


# --- functions whose result depends on a value argument ------------------------------------------------
def test_full_like_differentiates_its_fill_value():
    """np.full_like was declared non-differentiable, so a tracked fill value's gradient was dropped."""
    x = np.array([0.1, 0.5, 2.0])
    g = db.gradient(lambda x: np.sum(np.full_like(x, x[0] * x[1]) * x), x)
    s = np.sum(x)
    np.testing.assert_allclose(g, np.array([x[1] * s, x[0] * s, 0.0]) + x[0] * x[1])
    db.check_gradient(lambda x: np.sum(np.full_like(x, np.sum(x ** 2)) * np.sin(x)), x)


# --- a user's rule that returns the wrong shape ---------------------------------------------------------------
def test_a_user_rule_returning_the_wrong_shape_names_the_rule_and_the_shapes():
    @db.primitive
    def shifted(x, y):
        return x + y

    db.defvjp(shifted, lambda ans, x, y: lambda g: np.sum(g), lambda ans, x, y: lambda g: g)
    message = r"shifted returned a cotangent of shape \(\) for its argument 0 of shape \(3,\)"
    with pytest.raises(db.DifferentiationError, match=message) as error:
        db.gradient(lambda x: np.sum(shifted(x, 1.0)), X)
    assert isinstance(error.value, ValueError)
    db.defvjp(shifted, lambda ans, x, y: lambda g: g, lambda ans, x, y: lambda g: np.sum(g))
    g = db.gradient(lambda x, y: np.sum(shifted(x, y) ** 2), X, 2.0)
    np.testing.assert_allclose(g[0], 2 * (X + 2.0))
    np.testing.assert_allclose(g[1], np.sum(2 * (X + 2.0)))


# --- check_gradient at kinks ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sum(np.where(x > 0, x, 0) ** 2),  # f'' jumps at 0: the central difference is off by h/2
        lambda x: np.sum(np.maximum(x, 0)),  # relu at 0: ½, the tie split (the central difference)
        lambda x: np.sum(np.minimum(x, 0)) + np.sum(np.abs(x)),
        lambda x: np.sum(np.clip(x, 0.0, 1.0)),
    ],
)
def test_check_gradient_accepts_an_exact_gradient_at_a_kink(f):
    db.check_gradient(f, np.array([0.0, 1.0, -1.0]))


def test_check_gradient_says_kink_when_the_gradient_matches_neither_side():
    @db.primitive
    def relu(x):
        return np.maximum(x, 0.0)

    db.defvjp(relu, lambda ans, x: lambda g: g * 0.25 * (x >= 0))  # wrong: neither 0 nor 1 at the kink
    with pytest.raises(db.GradientMismatchError, match="the point is a kink"):
        db.check_gradient(lambda x: np.sum(relu(x)), np.array([0.0]))


# --- the sweep: shared cotangents and pullbacks swept twice ------------------------------------------------------
def _shared_cotangent_program(x, w, v, u, before, after):
    """c = a + b hands a and b the same cotangent object.  The uses in ``before`` are recorded earlier, so
    the sweep adds them later, into the shared object if it wrongly took it for its own."""
    a, b = x * 2.0, np.sin(x)
    uses = {"a": lambda: np.sum(a * v), "b": lambda: np.sum(b * u), "ab": lambda: np.sum(a * b * w)}
    total = sum(uses[name]() for name in before)
    c = a + b
    total = total + np.sum(c * w)
    for name in after:
        total = total + uses[name]() + np.sum(np.exp(c) * u)
    return total


def _shared_cotangent_gradient(x, w, v, u, before, after):
    """The same gradient by hand, through ∂/∂a and ∂/∂b."""
    a, b = x * 2.0, np.sin(x)
    ga, gb = w.copy(), w.copy()
    for name in list(before) + list(after):
        if name == "a":
            ga = ga + v
        elif name == "b":
            gb = gb + u
        else:
            ga, gb = ga + b * w, gb + a * w
    for _ in after:
        ga, gb = ga + np.exp(a + b) * u, gb + np.exp(a + b) * u
    return ga * 2.0 + gb * np.cos(x)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "ab"]), max_size=3), st.lists(st.sampled_from(["a", "b", "ab"]), max_size=2),
       st.integers(1, 4), st.booleans())
def test_a_cotangent_shared_by_two_parents_is_never_added_into_in_place(before, after, n, scalar):
    rng = np.random.default_rng(n)
    x, w, v, u = (rng.uniform(-1, 1, () if scalar else n) for _ in range(4))
    g = db.gradient(lambda x: _shared_cotangent_program(x, w, v, u, before, after), x)
    np.testing.assert_allclose(g, _shared_cotangent_gradient(x, w, v, u, before, after), rtol=1e-12)


def test_a_pullback_swept_twice_gives_the_same_cotangents():
    w = np.array([1.0, -2.0, 0.5])

    def f(x):
        a = x * 2.0
        return np.sin(a + a) * w + x[::-1] * x[1] + np.sum(x * x)

    _, back = db.pullback(f, X)
    seeds = [np.array([1.0, 0.5, -1.0]), np.array([0.0, 2.0, 3.0])]
    first = [back(s) for s in seeds]
    second = [back(s) for s in seeds]
    J = db.jacobian(f, X)
    for s, g1, g2 in zip(seeds, first, second):
        np.testing.assert_allclose(g1, s @ J, rtol=1e-12)
        np.testing.assert_array_equal(g1, g2)


# --- memory layouts -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
@pytest.mark.parametrize("layout", ["C", "F", "transposed"])
def test_ravel_in_every_order_of_every_layout(order, layout):
    """ravel's cotangent goes back to the element each output came from, whatever the order and layout."""
    a = {"C": np.arange(6.0).reshape(2, 3), "F": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
         "transposed": np.arange(6.0).reshape(3, 2).T}[layout] + 0.5
    w = np.linspace(1.0, 2.0, 6)
    positions = np.empty_like(a, dtype=np.intp)  # each element's own C position, in a's layout
    positions[...] = np.arange(6).reshape(a.shape)
    expected = np.zeros(6)
    expected[np.ravel(positions, order=order)] = w
    for g in (db.gradient(lambda a: np.sum(np.ravel(a, order=order) * w), a),
              db.gradient(lambda a: np.sum((a * 2.0).ravel(order) * w), a) / 2.0):
        np.testing.assert_array_equal(g, expected.reshape(a.shape))


def test_every_error_class_is_public_and_a_differentiation_error():
    import dualbroadcast.errors as errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    for c in classes:
        assert getattr(db, c.__name__) is c and c.__name__ in db.__all__
        assert issubclass(c, db.DifferentiationError)
        assert c is db.DifferentiationError or len(c.__mro__) > 3  # also derives from a builtin error


def test_a_users_rule_for_a_function_returning_a_plain_tuple():
    """_record_outputs rebuilt the outputs with type(ans)(*outs), which a plain tuple refuses."""

    @db.primitive
    def halves(x):
        return (x * 0.5, x * 1.5)

    db.defvjp_outputs(halves, lambda j, ans, x: lambda g: g * (0.5, 1.5)[j])
    g = db.gradient(lambda x: np.sum(halves(x)[0] * halves(x)[1]), X)
    np.testing.assert_allclose(g, 1.5 * X)


# --- two evaluations meeting: every recording path -----------------------------------------------------------------
_COND = np.array([True, False, True])
MIXING_OPERATIONS = {  # x tracked by the outer gradient, y by the inner one, in both orders
    "x * y": lambda x, y: x * y,
    "y * x": lambda x, y: y * x,
    "x + y": lambda x, y: x + y,
    "x ** y": lambda x, y: x ** y,
    "np.multiply(x, y)": lambda x, y: np.multiply(x, y),
    "np.maximum(y, x)": lambda x, y: np.maximum(y, x),
    "np.arctan2(x, y)": lambda x, y: np.arctan2(x, y),
    "np.where(c, x, y)": lambda x, y: np.where(_COND, x, y),
    "np.where(c, y, x)": lambda x, y: np.where(_COND, y, x),
    "np.clip(x, y, z)": lambda x, y: np.clip(x, y, y + 10.0),
    "np.clip(y, x, z)": lambda x, y: np.clip(y, x, x + 10.0),
    "np.dot(x, y)": lambda x, y: np.dot(x, y),
    "x @ y": lambda x, y: x @ y,
    "np.stack([x, y])": lambda x, y: np.stack([x, y]),
    "np.einsum(x, y)": lambda x, y: np.einsum("i,i->", x, y),
}


@pytest.mark.parametrize("name", list(MIXING_OPERATIONS))
def test_values_of_nested_gradient_evaluations_meeting_are_recorded_on_both(name):
    """y tracked by an inner db.gradient that is still recording, x by the outer one: an operation on both is
    recorded on the inner tape with x its constant, and on the outer tape from x, by every recording path;
    never a record on one tape pointing into the other.  The outer gradient of the inner one matches finite
    differences of it."""
    operation = MIXING_OPERATIONS[name]
    y0 = np.array([1.0, 2.0, 0.2])

    def outer(x):
        return np.sum(db.gradient(lambda y: np.sum(operation(x, y) ** 2), y0))

    assert db.check_gradient(outer, np.array([0.5, 1.5, 2.5])) < 1


# --- comparisons of tracked values ---------------------------------------------------------------------------------
COMPARISONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq,
               "!=": operator.ne}
_POINTS = np.array([0.2, 0.5, 0.9, 0.5, 0.7])  # ties with 0.5 and with _OTHER
_OTHER = np.array([0.5, 0.5, 0.1, 0.7, 0.7])


def _masks(compare, x):
    """``compare`` of x with a number, an array and (tracked) itself reversed, each way round."""
    return [compare(x, 0.5), compare(0.5, x), compare(x, _OTHER), compare(_OTHER, x), compare(x, x[::-1])]


@pytest.mark.parametrize("op", list(COMPARISONS))
def test_comparisons_of_a_tracked_value_are_the_plain_masks(op):
    """Inside db.gradient a comparison is a plain boolean array, the one NumPy gives for the values; the
    gradient through np.where of it takes the branch each element took."""
    compare = COMPARISONS[op]
    seen = []

    def f(x):
        masks = _masks(compare, x)
        seen.append(masks)
        return sum(np.sum(np.where(m, x * x, -x)) for m in masks)

    for x in (_POINTS, _POINTS[::-1].copy()):
        seen.clear()
        g = db.gradient(f, x)
        expected = _masks(compare, x)  # plain NumPy
        for got, want in zip(seen[0], expected):
            assert type(got) is np.ndarray and got.dtype == bool
            np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(g, sum(np.where(m, 2 * x, -1.0) for m in expected), rtol=1e-15)  # by hand


@pytest.mark.parametrize("op", list(COMPARISONS))
def test_comparisons_of_a_tracked_value_are_recorded_in_a_prepared_gradient(op):
    """Under prepare_gradient a comparison is recorded: replayed, the masks are the new values'."""
    compare = COMPARISONS[op]

    def f(x):
        return sum(np.sum(np.where(m, x * x, -x)) for m in _masks(compare, x))

    prog = db.prepare_gradient(f, _POINTS)
    for x in (_POINTS, _POINTS[::-1].copy(), np.array([0.5, 0.1, 0.7, 0.7, 0.2]), _POINTS):
        expected = sum(np.where(m, 2 * x, -1.0) for m in _masks(compare, x))  # by hand, on plain values
        np.testing.assert_allclose(prog(x), expected, rtol=1e-15)
        np.testing.assert_allclose(db.gradient(f, x), expected, rtol=1e-15)


# --- methods taking a tuple or separate integers ---------------------------------------------------------------------
METHOD_FORMS = {  # name -> (the method on a 2x3 value, the same in NumPy's function form)
    "reshape(3, 2)": (lambda a: a.reshape(3, 2), lambda a: np.reshape(a, (3, 2))),
    "reshape((3, 2))": (lambda a: a.reshape((3, 2)), lambda a: np.reshape(a, (3, 2))),
    "reshape([3, 2])": (lambda a: a.reshape([3, 2]), lambda a: np.reshape(a, (3, 2))),
    "reshape(-1, 2)": (lambda a: a.reshape(-1, 2), lambda a: np.reshape(a, (3, 2))),
    "reshape(6)": (lambda a: a.reshape(6), lambda a: np.reshape(a, 6)),
    "reshape((6,))": (lambda a: a.reshape((6,)), lambda a: np.reshape(a, 6)),
    "reshape(1, 6, 1)": (lambda a: a.reshape(1, 6, 1), lambda a: np.reshape(a, (1, 6, 1))),
    "transpose()": (lambda a: a.transpose(), lambda a: np.transpose(a)),
    "transpose(1, 0)": (lambda a: a.transpose(1, 0), lambda a: np.transpose(a)),
    "transpose((1, 0))": (lambda a: a.transpose((1, 0)), lambda a: np.transpose(a)),
    "transpose([1, 0])": (lambda a: a.transpose([1, 0]), lambda a: np.transpose(a)),
    "transpose(None)": (lambda a: a.transpose(None), lambda a: np.transpose(a)),
    "transpose((0, 1))": (lambda a: a.transpose((0, 1)), lambda a: a),
    "3-d transpose(2, 0, 1)": (lambda a: a.reshape(1, 2, 3).transpose(2, 0, 1),
                               lambda a: np.transpose(np.reshape(a, (1, 2, 3)), (2, 0, 1))),
    "3-d transpose((2, 0, 1))": (lambda a: a.reshape(1, 2, 3).transpose((2, 0, 1)),
                                 lambda a: np.transpose(np.reshape(a, (1, 2, 3)), (2, 0, 1))),
}


@pytest.mark.parametrize("name", list(METHOD_FORMS))
def test_reshape_and_transpose_methods_in_every_form(name):
    """x.reshape(2, 3) and x.reshape((2, 3)), x.transpose(1, 0) and x.transpose((1, 0)): NumPy's value,
    and as gradient the weights moved back to the element each output came from."""
    method, plain = METHOD_FORMS[name]
    a = np.arange(6.0).reshape(2, 3) + 0.5
    w = np.linspace(1.0, 2.0, 6).reshape(plain(a).shape)
    np.testing.assert_array_equal(method(a), plain(a))  # the form is one NumPy takes
    positions = plain(np.arange(6).reshape(2, 3))  # the source of each output element
    expected = np.zeros(6)
    expected[positions.ravel()] = w.ravel()
    seen = []

    def f(x):
        y = method(x)
        seen.append(y.shape)
        return np.sum(y * w)

    for g in (db.gradient(f, a), db.prepare_gradient(f, a)(a)):
        np.testing.assert_array_equal(g, expected.reshape(2, 3))
    assert seen[0] == plain(a).shape


@pytest.mark.parametrize("rows", [slice(0, 2), slice(1, None), slice(None, None, 2), slice(None)])
def test_dots_of_partial_column_slices_in_a_loop(rows):
    """X[rows, j] in a loop is gathered as a column only when rows is everything (X[:, j]); the two
    mutation survivors in that check treated X[0:2, j] as a whole column."""
    X = np.arange(1.0, 13.0).reshape(3, 4)
    w = np.array([0.5, -1.0, 2.0])[rows]
    f = lambda X: sum(np.dot(X[rows, j], w) * (j + 1) + np.dot(X[rows, j], X[rows, j]) for j in range(4))
    g = db.gradient(f, X)
    expected = np.zeros_like(X)
    for j in range(4):
        expected[rows, j] += w * (j + 1) + 2 * X[rows, j]
    np.testing.assert_allclose(g, expected, rtol=1e-14)
