"""Every rule in the rule tables against finite differences, float64 and float32, each case drawn in the
calling forms NumPy accepts (positional, keyword, mixed, defaults written out: `cases.call`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.rules import BUILTIN_RULES

from ..cases import all_cases, complex_cases, reset_streams

CASES = all_cases()
COMPLEX_CASES = complex_cases(CASES)


def projection(out, seed):
    """A real scalar that depends on every element of ``out`` (arrays or tuples of arrays, real or complex)."""
    outs = out if isinstance(out, (list, tuple)) else [out]
    total = 0.0
    for k, o in enumerate(outs):
        value = o.value if isinstance(o, db.tracked.Tracked) else o
        shape, dtype = np.shape(value), value.dtype
        if dtype.kind not in "fc":
            continue
        rng = np.random.default_rng(seed + k)
        w = rng.standard_normal(shape)
        if dtype.kind == "c":  # Re Σ w o with a complex w: every real and imaginary part counts
            total = total + np.real(np.sum(o * (w + 1j * rng.standard_normal(shape)).astype(dtype)))
            continue
        total = total + np.sum(o * w.astype(dtype))
    return total


def test_every_rule_has_a_case():
    covered = {case.func for case in CASES}
    missing = [getattr(f, "__name__", repr(f)) for f in BUILTIN_RULES if f not in covered]
    assert not missing, f"rules without test cases: {missing}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_rule_matches_finite_differences(case, dtype, data):
    reset_streams()
    fn, args = case.build(data.draw, dtype)
    seed = data.draw(st.integers(0, 1000))
    out = fn(*args)
    expected = case.out_dtype or dtype
    for o in out if isinstance(out, (list, tuple)) else [out]:
        if np.result_type(o).kind == "f":  # not an integer output (np.frexp's exponent)
            assert np.result_type(o) == expected, f"{case}: {dtype.__name__} in, {np.result_type(o)} out"
    grads = db.gradient(lambda *a: projection(fn(*a), seed), *args)
    grads = grads if len(args) > 1 else (grads,)
    for a, g in zip(args, grads):
        assert np.shape(g) == np.shape(a) and np.result_type(g) == dtype
    db.check_gradient(lambda *a: projection(fn(*a), seed), *args, **case.tolerance)


@pytest.mark.parametrize("case", COMPLEX_CASES, ids=str)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_complex_rule_matches_finite_differences_in_x_and_y(case, data):
    """Complex arguments: the gradient of a real projection is ∂f/∂x - i ∂f/∂y (JAX's convention), each
    element's real and imaginary parts moved separately by check_gradient."""
    reset_streams()
    fn, args = case.build(data.draw, np.complex128)
    seed = data.draw(st.integers(0, 1000))
    grads = db.gradient(lambda *a: projection(fn(*a), seed), *args)
    grads = grads if len(args) > 1 else (grads,)
    for a, g in zip(args, grads):
        assert np.shape(g) == np.shape(a) and np.result_type(g) == np.result_type(a)
    db.check_gradient(lambda *a: projection(fn(*a), seed), *args, **case.tolerance)
