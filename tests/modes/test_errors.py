"""Every misuse is a clear error: its type, what went wrong, and what to do instead."""

import math

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast.registry import RULES

X = np.array([0.5, 1.0, 2.0])


def grad(f, *args):
    return db.gradient(f, *args if args else (X,))


# --- non-scalar outputs --------------------------------------------------------------
@pytest.mark.parametrize(
    "f,shape",
    [(lambda x: x * 2, r"\(3,\)"), (lambda x: np.sum(x) * np.ones((1,)), r"\(1,\)"),
     (lambda x: np.sin(x) + np.zeros((2, 3)), r"\(2, 3\)")],
    ids=["vector", "one-element", "matrix"],
)
def test_non_scalar_output(f, shape):
    with pytest.raises(db.NonScalarOutputError, match=rf"scalar.*{shape}.*db\.pullback.*db\.jacobian") as info:
        grad(f)
    assert isinstance(info.value, ValueError) and isinstance(info.value, db.DifferentiationError)
    with pytest.raises(db.NonScalarOutputError, match="pullback"):
        db.value_and_gradient(f, X)


def test_non_scalar_constant_output():
    with pytest.raises(db.NonScalarOutputError, match=r"db\.pullback"):
        grad(lambda x: np.ones(3))


@pytest.mark.parametrize("container", [tuple, list])
def test_tuple_output_is_a_non_scalar_output(container):
    with pytest.raises(db.NonScalarOutputError, match=r"db\.pullback"):
        grad(lambda x: container([np.sum(x), np.sum(x**2)]))


# --- arguments that cannot be differentiated -------------------------------------------------
@pytest.mark.parametrize(
    "arg,kind",
    [
        (np.array([1, 2, 3]), "integer"),
        (np.array([1, 2], np.uint8), "integer"),
        (3, "integer"),
        (np.int64(3), "integer"),
        (np.array([True, False]), "boolean"),
        (True, "boolean"),
        (np.bool_(True), "boolean"),
        (np.array([1.0, None], dtype=object), "object"),
        (np.array(["a", "b"]), "<U1"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__ + str(getattr(v, "dtype", "")),
)
def test_non_float_argument(arg, kind):
    with pytest.raises(TypeError, match=rf"argument 0.* is .*{kind}.*floating-point.*db\.cut") as info:
        db.gradient(lambda x: np.sum(x * 1.0), arg)
    assert "nested" not in str(info.value)


@pytest.mark.parametrize("arg,kind", [("abc", "str"), (object(), "object")], ids=["str", "object"])
def test_non_float_python_value_names_its_kind(arg, kind):
    with pytest.raises(TypeError, match=rf"is .*{kind}.*db\.cut"):
        db.gradient(lambda x: x, arg)


def test_non_float_leaf_of_a_pytree_names_the_leaf_and_cut_fixes_it():
    params = {"x": X, "n": 3}  # leaves in sorted key order: "n" is leaf 0
    with pytest.raises(TypeError, match=r"argument 1 \(leaf 0\) to differentiate is integer.*db\.cut"):
        db.gradient(lambda a, p: np.sum(p["x"] ** p["n"]) * a, 1.0, params)
    g = db.gradient(lambda p: np.sum(p["x"] ** p["n"]), {"x": X, "n": db.cut(3)})
    np.testing.assert_allclose(g["x"], 3 * X**2)
    assert g["n"] is None


def test_integer_argument_can_be_cut():
    gx, gi = db.gradient(lambda x, i: np.sum(x * i), X, db.cut(np.array([1, 2, 3])))
    np.testing.assert_array_equal(gx, [1.0, 2.0, 3.0])
    assert gi is None


# --- functions without a rule ----------------------------------------------------------------
UNSUPPORTED = [
    ("np.fft.fft", lambda x: np.sum(np.fft.fft(x).real)),
    ("np.unwrap", lambda x: np.sum(np.unwrap(x))),
    ("np.poly", lambda x: np.sum(np.poly(x))),
    ("np.histogram_bin_edges", lambda x: np.sum(np.histogram_bin_edges(x, 2))),
]


@pytest.mark.parametrize("name,f", UNSUPPORTED, ids=[n for n, _ in UNSUPPORTED])
def test_unsupported_function(name, f):
    func = eval(name, {"np": np})
    if func in RULES:
        pytest.skip(f"{name} has a rule now")
    escaped = name.replace(".", r"\.")
    message = rf"^{escaped} has no derivative rule.*db\.defvjp\({escaped}"
    with pytest.raises(db.UnsupportedFunctionError, match=message) as info:
        grad(f)
    assert "db.cut" in str(info.value)
    assert isinstance(info.value, TypeError)


def test_unsupported_ufunc_method():
    with pytest.raises(db.UnsupportedFunctionError, match=r"np\.subtract\.reduce has no derivative rule.*db\.defvjp"):
        grad(lambda x: np.subtract.reduce(x))
    with pytest.raises(db.UnsupportedFunctionError, match=r"np\.divide\.accumulate.*db\.defvjp"):
        grad(lambda x: np.sum(np.divide.accumulate(x)))


def test_tracked_keyword_argument_is_differentiated():
    """A tracked bound by keyword: its gradient counts the elements it clips (here the sum of x, 3.5 at X,
    clips none; 0.875 at X / 4 clips 1.0 and 2.0)."""
    f = lambda x: np.sum(np.clip(X, a_min=0.0, a_max=np.sum(x)))
    np.testing.assert_array_equal(grad(f), np.zeros(3))
    np.testing.assert_array_equal(grad(f, X / 4), np.full(3, 2.0))


def test_unsupported_function_on_a_cut_value_is_fine():
    g = grad(lambda x: np.sum(x * np.sort(db.cut(x))))
    np.testing.assert_array_equal(g, np.sort(X))


# --- in-place mutation ---------------------------------------------------------------------
def setitem(x):
    x[0] = 1.0
    return np.sum(x)


def add_out(x):
    buf = np.zeros(3)
    np.add(x, 1.0, out=buf)
    return np.sum(buf)


def exp_out(x):
    buf = np.zeros(3)
    np.exp(x, out=buf)
    return np.sum(buf)


def sum_out(x):
    buf = np.zeros(())
    np.sum(x, out=buf)
    return buf


def iadd_plain(x):
    c = np.zeros(3)
    c += x
    return np.sum(c)


def imul_plain(x):
    c = np.ones(3)
    c *= x
    return np.sum(c)


def add_at_into_plain(x):
    c = np.zeros(5)
    np.add.at(c, [0, 0, 4], x)
    return np.sum(c)


def add_at_into_tracked(x):
    np.add.at(x, [0], 1.0)
    return np.sum(x)


IN_PLACE = [
    (setitem, r"x\[\.\.\.\] = v would mutate a tracked array.*np\.where"),
    (add_out, r"np\.add with out=.*drop its gradient.*instead of an in-place update"),
    (exp_out, r"np\.exp with out=.*drop its gradient.*instead of an in-place update"),
    (sum_out, r"np\.sum with out=.*drop its gradient.*instead of an in-place update"),
    (iadd_plain, r"np\.add with out= or an in-place operator \(\+=.*y = x \+ y"),
    (imul_plain, r"np\.multiply with out= or an in-place operator.*instead of an in-place update"),
    (add_at_into_plain, r"np\.add\.at mutates an array in place.*np\.where|np\.add\.at.*bincount"),
    (add_at_into_tracked, r"np\.add\.at mutates an array in place.*np\.where|np\.add\.at.*bincount"),
]


@pytest.mark.parametrize("f,message", IN_PLACE, ids=[f.__name__ for f, _ in IN_PLACE])
def test_in_place_mutation(f, message):
    with pytest.raises(db.InPlaceMutationError, match=message) as info:
        grad(f)
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("f", [add_at_into_plain, add_at_into_tracked])
def test_ufunc_at_is_the_in_place_error_in_forward_mode_too(f):
    message = dict(IN_PLACE)[f]
    with pytest.raises(db.InPlaceMutationError, match=message):
        db.jvp(f, (X,), (np.ones_like(X),))


def test_out_message_suggests_the_same_function():
    with pytest.raises(db.InPlaceMutationError, match=r"y = np\.exp\("):
        grad(exp_out)


def test_augmented_assignment_on_a_tracked_array_is_functional():
    # x += 1 on a tracked x rebinds x (guards._update, JAX's x = x + 1): no mutation, right gradient
    def f(x):
        x += 1.0
        x *= x
        return np.sum(x)

    np.testing.assert_allclose(grad(f), 2 * (X + 1))


# --- conversions that would drop the gradient ------------------------------------------------
def assign_into_plain(x):
    buf = np.zeros(2)
    buf[:] = x
    return np.sum(buf)


CONVERSIONS = [
    ("float", lambda x: float(x), r"float\(\).*drop its gradient.*np\.\*.*db\.cut"),
    ("np.float64", lambda x: np.float64(x) * x, r"plain NumPy array.*np\.float64\(x\).*db\.cut"),
    ("math.exp", lambda x: math.exp(x), r"math\.\* function.*drop its gradient.*np\.exp, not math\.exp.*db\.cut"),
    ("item", lambda x: x.item(), r"\.item\(\).*drop its gradient.*db\.cut"),
    ("tolist", lambda x: np.sum(x.tolist()), r"\.tolist\(\).*drop its gradient.*db\.cut"),
    ("asarray", lambda x: np.sum(np.asarray(x)), r"np\.asarray/np\.array.*np\.stack.*db\.cut"),
    ("array-of-list", lambda x: np.sum(np.array([x, x])), r"plain NumPy array.*np\.stack.*db\.cut"),
    ("slice-assign", lambda x: assign_into_plain(x), r"assignment into a NumPy array \(a\[i\] = x\).*np\.stack"),
]


@pytest.mark.parametrize("name,f,message", CONVERSIONS, ids=[c[0] for c in CONVERSIONS])
def test_conversion_of_a_tracked_value(name, f, message):
    with pytest.raises(db.ValueConversionError, match=message) as info:
        db.gradient(f, np.array(2.0))
    assert isinstance(info.value, TypeError)


INTEGER_CONVERSIONS = {
    "int": lambda x: x[0] * int(x[1]) + x[1] ** 2,
    "np.int64": lambda x: x[0] * np.int64(x[1]) + x[1] ** 2,
    "np.int32 of a sum": lambda x: x[0] * np.int32(np.sum(x)) + x[1] ** 2,
    "np.asarray int": lambda x: x[0] * np.asarray(x, int)[1] + x[1] ** 2,
}


@pytest.mark.parametrize("name", list(INTEGER_CONVERSIONS))
def test_an_integer_conversion_of_a_tracked_value_is_a_constant(name):
    """As x.astype(int) and np.trunc(x) (their derivative is 0 wherever it exists), and JAX's int(x)."""
    f = INTEGER_CONVERSIONS[name]
    x = np.array([1.5, 2.5])
    for point in (x, x + 1.25, x):  # a prepared gradient's guard records again where the integer changes
        n = np.trunc(point[1]) if name != "np.int32 of a sum" else np.trunc(np.sum(point))
        want = np.array([n, 2 * point[1]])
        np.testing.assert_allclose(db.gradient(f, point), want, rtol=1e-15)
        np.testing.assert_allclose(db.jvp(f, (point,), (np.array([1.0, 0.5]),))[1], want @ [1.0, 0.5], rtol=1e-15)
        np.testing.assert_allclose(db.hessian(f, point), [[0, 0], [0, 2]], atol=1e-15)
    prog = db.prepare_gradient(f, x)
    for point in (x, x + 1.25, x + 0.25):
        np.testing.assert_allclose(prog(point), db.gradient(f, point), rtol=1e-15)


def test_conversion_error_on_arrays_names_the_shape():
    with pytest.raises(db.ValueConversionError, match=r"shape \(3,\)"):
        grad(lambda x: np.sum(np.asarray(x)))


# --- tracked values outliving their gradient evaluation -------------------------------------------
def kept_value():
    kept = []

    def f(x):
        kept.append(x * 2.0)
        return np.sum(x**2)

    db.gradient(f, X)
    return kept[0]


STALE = r"tracked value from a finished gradient evaluation was used again.*db\.cut"


def test_kept_tracked_value_used_outside_a_gradient():
    kept = kept_value()
    with pytest.raises(ValueError, match=STALE):
        kept + 1.0
    with pytest.raises(ValueError, match=STALE):
        np.sin(kept)


def test_kept_tracked_value_used_first_in_a_later_gradient():
    kept = kept_value()
    with pytest.raises(ValueError, match=STALE):
        db.gradient(lambda y: np.sum(kept * y), X)


def test_kept_tracked_value_returned_from_a_later_gradient():
    kept = kept_value()
    with pytest.raises(ValueError, match=r"returned a tracked value from another gradient evaluation"):
        db.gradient(lambda y: kept, X)


def test_kept_tracked_value_used_second_in_a_later_gradient():
    kept = kept_value()  # index 1 of its (closed) tape

    def f(y):
        z = y * 3.0  # index 1 of the new tape
        return np.sum(z * kept)

    with pytest.raises(ValueError, match=STALE):
        db.gradient(f, np.array([1.0, 2.0, 3.0]))


def test_pullback_cotangent_with_the_wrong_shape_or_structure():
    _, back = db.pullback(lambda x: x * 2.0, X)
    with pytest.raises(ValueError, match=r"cotangent of shape \(2,\) for an output of shape \(3,\)"):
        back(np.ones(2))
    _, back = db.pullback(lambda x: (x, np.sum(x)), X)
    with pytest.raises(ValueError, match=r"output's structure \(2 arrays\)"):
        back(np.ones(3))


def test_jacobian_of_a_pytree_points_to_pullback():
    with pytest.raises(TypeError, match=r"db\.pullback"):
        db.jacobian(lambda p: p["a"] * 2.0, {"a": X})


def test_every_error_is_a_differentiation_error():
    for cls in (
        db.UnsupportedFunctionError, db.InPlaceMutationError, db.ValueConversionError,
        db.NonScalarOutputError, db.GradientMismatchError, db.KernelError,
    ):
        assert issubclass(cls, db.DifferentiationError)


@db.primitive
def _scaled(x, k):
    """``x * k``, registered below as differentiable in ``x`` only."""
    return x * k


db.defvjp(_scaled, lambda ans, x, k: lambda g: g * k, None)


@pytest.mark.parametrize("evaluate", [db.gradient, lambda f, x: db.prepare_gradient(f, x)(x)],
                         ids=["gradient", "prepared"])
def test_a_tracked_value_as_a_non_differentiable_argument_names_the_function(evaluate):
    with pytest.raises(db.UnsupportedFunctionError, match=r"argument 1 of .*_scaled is not differentiable"):
        evaluate(lambda x: np.sum(_scaled(x, x[0])), np.ones(3))
    got = evaluate(lambda x: np.sum(_scaled(x, db.cut(x)[0] * 2.0)), np.ones(3))
    np.testing.assert_array_equal(got, np.full(3, 2.0))


def test_a_rule_for_one_result_of_a_function_returning_several_is_an_error():
    """A tuple of float results under a one-result rule was taken for a constant (a shape): gradient 0."""
    @db.primitive
    def twice_and_thrice(x):
        return 2 * x, 3 * x

    db.defvjp(twice_and_thrice, lambda ans, x: lambda g: g)
    with pytest.raises(db.UnsupportedFunctionError, match="defvjp_outputs"):
        db.gradient(lambda x: np.sum(twice_and_thrice(x)[0]), np.ones(3))


def test_a_function_without_a_rule_gets_its_tuple_arguments_as_tuples():
    """The tape unwrapped a tuple ``axis`` into a list before calling a nondifferentiable function."""
    counts = lambda x: np.count_nonzero(x, (0, 1))
    assert db.gradient(lambda x: counts(x) * 1.0 + np.sum(x), np.ones((2, 2))).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_full_of_a_tracked_value_names_broadcast_to():
    """np.full does not hand a tracked fill value to the library: its error names the spelling that works."""
    with pytest.raises(db.ValueConversionError, match=r"np\.broadcast_to\(v, shape\) for np\.full\(shape, v\)"):
        db.gradient(lambda v: np.sum(np.full(3, v)), 2.0)
    assert db.gradient(lambda v: np.sum(np.broadcast_to(v, 3)), 2.0) == 3.0
