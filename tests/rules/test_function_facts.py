"""The table of facts per elementwise function (`derivatives.ELEMENTWISE`): every NumPy ufunc is covered or
refused by name, each fact a row states holds when checked against NumPy, numexpr and finite differences, and a
table function that is not a ufunc gets its arguments by name (a keyword argument once reached the partials of a
`db.defderivative` primitive as its default: a silently wrong gradient in every mode)."""

import math

import numexpr
import numpy as np
import pytest
import scipy.special

import dualbroadcast as db
from dualbroadcast.derivatives import ELEMENTWISE, HOLOMORPHIC, NUMEXPR_COMPLEX, NUMEXPR_FUNCTIONS, SMOOTH
from dualbroadcast.errors import UnsupportedFunctionError
from dualbroadcast.numpy_facts import COMPARISONS, INFIX, OPERATOR_FUNCTIONS, qualified_name
from dualbroadcast.registry import NONDIFFERENTIABLE, RULES, complex_rule

UFUNCS = sorted({f for f in vars(np).values() if isinstance(f, np.ufunc)}, key=lambda f: f.__name__)
REAL = np.array([-2.5, -0.7, -0.1, 0.3, 0.9, 1.7, 3.2])
COMPLEX = np.array([0.3 + 0.4j, -0.8 + 0.2j, 1.5 - 0.7j, -0.2 - 1.1j, 2.0 + 0.5j])
NEAR_0 = np.array([1e-11 - 2e-11j, -3e-12 + 1e-12j])  # where numexpr's complex arcsin, arctan... lose digits


def name(f):
    return qualified_name(f)


@pytest.mark.parametrize("ufunc", UFUNCS, ids=name)
def test_every_numpy_ufunc_has_a_rule_or_is_refused_by_name(ufunc):
    if ufunc in RULES or ufunc in NONDIFFERENTIABLE:
        return
    x = np.array([0.5, 1.5])
    with pytest.raises(UnsupportedFunctionError, match=name(ufunc)):
        db.gradient(lambda x: np.sum(ufunc(*[x] * ufunc.nin)), x)


@pytest.mark.parametrize("func", list(ELEMENTWISE), ids=name)
def test_a_row_is_either_differentiable_or_declared_without_a_gradient(func):
    facts = ELEMENTWISE[func]
    if facts.partials is None:
        assert func not in RULES or func in NONDIFFERENTIABLE, "a row without partials whose function has a rule"
    else:
        assert not facts.piecewise_constant and RULES[func].makers
    assert facts.numexpr_complex <= (facts.numexpr is not None or func in {**INFIX, **COMPARISONS}
                                     or func in (np.logical_and, np.logical_or))


def arguments_for(func, values):
    """``values`` for each argument of ``func`` (shifted per argument, so that no two are equal)."""
    n = len(ELEMENTWISE[func].partials) if ELEMENTWISE[func].partials else func.nin
    return [values * (1 + 0.25 * k) + 0.05 * k for k in range(n)]


@pytest.mark.parametrize("func", sorted(NUMEXPR_FUNCTIONS, key=name), ids=name)
def test_numexpr_spelling_computes_the_function(func):
    spelling = NUMEXPR_FUNCTIONS[func]
    args = arguments_for(func, REAL)
    if func is np.where:
        args = [REAL > 0, REAL, -REAL]
    elif func is np.logical_not:
        args = [REAL > 0]
    names = {f"a{k}": a for k, a in enumerate(args)}
    text = f"({spelling}a0)" if spelling in "-~" else f"{spelling}({', '.join(names)})"
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(numexpr.evaluate(text, local_dict=names), func(*args), rtol=1e-13)


@pytest.mark.parametrize("func", sorted(NUMEXPR_COMPLEX - {np.logical_and, np.logical_or, np.logical_not}, key=name),
                         ids=name)
def test_numexpr_computes_on_complex_numbers_as_numpy_where_the_row_says_so(func):
    values = np.concatenate([COMPLEX, NEAR_0])
    args = [values.real > 0, values, -values] if func is np.where else arguments_for(func, values)
    names = {f"a{k}": a for k, a in enumerate(args)}
    spelling = {**INFIX, **COMPARISONS}.get(func)
    if spelling is not None:
        text = f"(a0 {spelling} a1)"
    elif NUMEXPR_FUNCTIONS[func] in "-~":
        text = f"({NUMEXPR_FUNCTIONS[func]}a0)"
    else:
        text = f"{NUMEXPR_FUNCTIONS[func]}({', '.join(names)})"
    np.testing.assert_allclose(numexpr.evaluate(text, local_dict=names), func(*args), rtol=1e-12)


@pytest.mark.parametrize("func", [f for f, facts in ELEMENTWISE.items() if facts.float_safe], ids=name)
def test_a_float_safe_function_gives_the_same_bits_on_python_floats(func):
    """Replay writes it as Python's operator, which may then run on Python floats: the same bits as float64's."""
    operator = OPERATOR_FUNCTIONS[func]
    for row in np.array(arguments_for(func, np.array([-2.5, 0.1, 1e300, -0.0, 0.0, 3.0, 7e-310, math.inf]))).T:
        on_floats = operator(*map(float, row))
        with np.errstate(all="ignore"):
            on_float64 = func(*map(np.float64, row))
        assert type(on_floats) is float and np.float64(on_floats).tobytes() == on_float64.tobytes()


@pytest.mark.parametrize("func", sorted(HOLOMORPHIC, key=name), ids=name)
def test_a_holomorphic_row_differentiates_complex_values_as_written(func):
    """Its complex rule is the real one, and each partial is the complex derivative: the central difference of
    ``func`` along the real and the imaginary direction alike (Cauchy-Riemann)."""
    assert complex_rule(func) is RULES[func]
    if func is np.where:
        return  # a selection: its partials are its condition, real in every direction
    args = arguments_for(func, COMPLEX)
    ans = func(*args)
    h = 1e-6
    for i, d in enumerate(ELEMENTWISE[func].partials):
        partial = d(ans, *args) if callable(d) else d
        for step in (h, 1j * h):
            ahead = [a + step if k == i else a for k, a in enumerate(args)]
            behind = [a - step if k == i else a for k, a in enumerate(args)]
            difference = (func(*ahead) - func(*behind)) / (2 * step)
            np.testing.assert_allclose(np.broadcast_to(partial, difference.shape), difference, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("func", sorted(SMOOTH, key=name), ids=name)
def test_a_smooth_row_has_finite_partials_wherever_its_arguments_are_finite(func):
    values = np.array([-1e300, -3.0, -1.0, -0.0, 0.0, 1e-310, 0.5, 1.0, 1e300])
    grids = np.meshgrid(*[values] * len(ELEMENTWISE[func].partials))
    args = [g.ravel() for g in grids]
    with np.errstate(all="ignore"):
        ans = func(*args)
        for d in ELEMENTWISE[func].partials:
            assert np.all(np.isfinite(d(ans, *args) if callable(d) else d))


# --- arguments by name -----------------------------------------------------------------------------------------
@db.primitive
def scaled_softplus(x, beta=1.0, *, shift=0.0):
    return np.logaddexp(0.0, beta * (x - shift)) / beta


def scaled_sigmoid(ans, x, beta=1.0, *, shift=0.0):
    return 1 / (1 + np.exp(-beta * (x - shift)))


db.defderivative(scaled_softplus, scaled_sigmoid, None)
X = np.array([0.3, -1.2, 0.8, 2.0])
BY_NAME = {
    "defaults": scaled_softplus,
    "positional": lambda x: scaled_softplus(x, 3.0),
    "by name": lambda x: scaled_softplus(x, beta=3.0),
    "keyword-only": lambda x: scaled_softplus(x, 3.0, shift=0.5),
    "both by name": lambda x: scaled_softplus(x, shift=0.5, beta=3.0),
}
BY_NAME_EXPECTED = {"defaults": (1.0, 0.0), "positional": (3.0, 0.0), "by name": (3.0, 0.0), "keyword-only": (3.0, 0.5),
                    "both by name": (3.0, 0.5)}


@pytest.mark.parametrize("call", list(BY_NAME))
def test_a_primitives_partials_get_its_arguments_given_by_name_in_every_mode(call):
    f = BY_NAME[call]
    beta, shift = BY_NAME_EXPECTED[call]
    s = 1 / (1 + np.exp(-beta * (X - shift)))
    np.testing.assert_allclose(db.gradient(lambda x: np.sum(f(x)), X), s, rtol=1e-12)
    assert db.check_gradient(lambda x: np.sum(f(x)), X) < 1
    v = np.array([1.0, -2.0, 0.5, 3.0])
    np.testing.assert_allclose(db.jvp(f, (X,), (v,))[1], s * v, rtol=1e-12)
    np.testing.assert_allclose(db.prepare_gradient(lambda x: np.sum(f(x)), X)(X), s, rtol=1e-12)
    np.testing.assert_allclose(db.hvp(lambda x: np.sum(f(x)), X, v), beta * s * (1 - s) * v, rtol=1e-10)


def test_a_keyword_the_partials_do_not_take_is_an_error_naming_the_function():
    @db.primitive
    def tilted(x, *, tilt=0.0):
        return np.exp(x) + tilt * x

    db.defderivative(tilted, lambda ans, x: np.exp(x))  # forgets tilt: an error, not tilt's partial dropped
    with pytest.raises(UnsupportedFunctionError, match="tilted"):
        db.gradient(lambda x: np.sum(tilted(x, tilt=2.0)), X)


@pytest.mark.parametrize("f, derivative", [
    (lambda x: np.nan_to_num(x, nan=2.0, posinf=5.0), lambda x: np.isfinite(x) * 1.0),
    (lambda x: np.sinc(x=x), lambda x: (np.cos(math.pi * x) - np.sinc(x)) / x),
    (lambda x: np.i0(x=x), scipy.special.i1),
], ids=["nan_to_num", "sinc", "i0"])
def test_numpy_table_functions_that_are_not_ufuncs_take_arguments_by_name(f, derivative):
    np.testing.assert_allclose(db.gradient(lambda x: np.sum(f(x)), X), derivative(X), rtol=1e-12)
