"""Forward mode (`db.jvp`, `db.jacobian(mode=)`): every rule case against central finite differences along
the tangent and against its own vjp (the transposition identity ``⟨vjp(u), t⟩ == ⟨u, jvp(t)⟩``), random
programs against reverse mode, kernels, pytrees, cut, complex values and the errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbroadcast as db

from . import programs
from .cases import all_cases, complex_cases, reset_streams

CASES = all_cases()
COMPLEX_CASES = complex_cases(CASES)


def leaves(out, like=None):
    """The float arrays of a result (an array or a tuple of them; integer outputs left out), or the
    parts of ``out`` (a tangent) at the float outputs of the result ``like``."""
    outs = out if isinstance(out, (list, tuple)) else [out]
    kept = like if like is not None else out
    kept = kept if isinstance(kept, (list, tuple)) else [kept]
    return [o for o, k in zip(outs, kept) if np.result_type(k).kind in "fc"]


def random_like(x, rng):
    """A random array of ``x``'s shape and dtype (complex parts both drawn for a complex one)."""
    shape, dtype = np.shape(x), np.result_type(x)
    value = rng.standard_normal(shape)
    if dtype.kind == "c":
        value = value + 1j * rng.standard_normal(shape)
    value = np.asarray(value, dtype)
    return value if isinstance(x, np.ndarray) else value[()]


def pairing(a, b):
    """Re Σ a·b, the pairing in which JAX's convention transposes (no conjugation)."""
    return float(np.real(np.sum(np.asarray(a, np.complex128) * np.asarray(b, np.complex128))))


def moved(fn, args, tangents, h):
    """``fn`` at ``args + h · tangents``, in float64 (complex128 for complex arguments)."""
    wide = [np.asarray(a, np.result_type(a, np.float64)) + h * np.asarray(t, np.result_type(t, np.float64))
            for a, t in zip(args, tangents)]
    return [np.asarray(o, np.result_type(o, np.float64)) for o in leaves(fn(*wide))]


def check_case(case, dtype, data, rtol, atol):
    reset_streams()
    fn, args = case.build(data.draw, dtype)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    tangents = [random_like(a, rng) for a in args]
    value, tangent = db.jvp(fn, tuple(args), tuple(tangents))
    expected = fn(*args)
    values, outs, out_tangents = leaves(value), leaves(expected), leaves(tangent, like=expected)
    assert len(values) == len(outs) == len(out_tangents)
    for v, o, t in zip(values, outs, out_tangents):
        np.testing.assert_allclose(v, o, rtol=1e-6, atol=1e-6)
        assert np.shape(t) == np.shape(o) and np.result_type(t) == np.result_type(o), \
            f"{case}: tangent {np.shape(t)} {np.result_type(t)} for a result {np.shape(o)} {np.result_type(o)}"
    # ⟨vjp(u), t⟩ == ⟨u, jvp(t)⟩
    us = [random_like(o, rng) for o in outs]
    out, back = db.pullback(fn, *args)
    seeds = [random_like(o, rng) * 0 for o in (out if isinstance(out, (list, tuple)) else [out])]
    k = 0
    for j, o in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        if np.result_type(o).kind in "fc":
            seeds[j] = us[k].astype(np.result_type(o))
            k += 1
    cotangents = back(tuple(seeds) if isinstance(out, (list, tuple)) else seeds[0])
    cotangents = cotangents if len(args) > 1 else (cotangents,)
    left = sum(pairing(c, t) for c, t in zip(cotangents, tangents) if c is not None)
    right = sum(pairing(u, t) for u, t in zip(us, out_tangents))
    assert abs(left - right) <= atol + rtol * max(abs(left), abs(right), 1.0), \
        f"{case}: ⟨vjp(u), t⟩ = {left} but ⟨u, jvp(t)⟩ = {right}"
    # central finite differences along t, in float64
    if dtype == np.float32:
        return
    h = 1e-6
    plus, minus = moved(fn, args, tangents, h), moved(fn, args, tangents, -h)
    scale = max([1.0] + [float(np.max(np.abs(o), initial=0.0)) for o in outs])
    for t, p, m in zip(out_tangents, plus, minus):
        fd = (p - m) / (2 * h)
        np.testing.assert_allclose(t, fd, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{case}: jvp vs finite differences")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_jvp_of_every_rule_case(case, dtype, data):
    """Every rule case: the jvp's value, shape and dtype; its transposition identity with the vjp; and
    central finite differences along a random tangent (float64)."""
    tight = dtype == np.float64
    if str(case) in UNSUPPORTED:  # a clear error naming the function
        with pytest.raises(db.UnsupportedFunctionError, match=r"np\.pad"):
            check_case(case, dtype, data, rtol=0, atol=0)
        return
    check_case(case, dtype, data, rtol=1e-6 if tight else 2e-3, atol=1e-6 if tight else 2e-3)


@pytest.mark.parametrize("case", COMPLEX_CASES, ids=str)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_jvp_of_every_complex_rule_case(case, data):
    """Complex arguments: the tangent of a holomorphic function is f'(z) t (JAX's convention), and the
    transposition identity holds in the pairing Re Σ a·b."""
    check_case(case, np.complex128, data, rtol=1e-6, atol=1e-6)


# Rule cases whose jvp is a clear error (case name: why), asserted by the sweep.
UNSUPPORTED = {
    "pad_maximum": "np.pad's selections have no forward rule",
    "pad_minimum": "np.pad's selections have no forward rule",
    "pad_median": "np.pad's selections have no forward rule",
}


# --- random programs: jvp against the gradient ----------------------------------------------------------------
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_jvp_of_random_programs_matches_reverse_mode(data):
    """Random programs (tests/programs.py): ⟨∇f, t⟩ from reverse mode equals the jvp of f along t, and the
    jvp's value is f's."""
    program = data.draw(programs.programs(), label="program")
    grads = programs.check_gradient(program)
    if grads is None:  # refused with a clear error in reverse mode
        return
    values = programs.build_inputs(program)
    f = programs.compile_program(program)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="tangent seed"))
    tangents = tuple(None if x.cut else random_like(v, rng) for x, v in zip(program.inputs, values))
    try:
        value, tangent = db.jvp(f, tuple(programs.wrap(program, values)), tangents)
    except db.UnsupportedFunctionError as error:
        assert "np.pad" in str(error)  # the selections of UNSUPPORTED
        return
    expected = sum(pairing(g, t) for g, t in zip(grads, tangents) if t is not None and g is not None)
    np.testing.assert_allclose(value, f(*values) if not any(x.cut for x in program.inputs) else value)
    assert abs(float(tangent) - expected) <= 1e-8 * max(1.0, abs(expected)) + 1e-9 * programs.gradient_scale(grads), \
        programs.snippet(program, [f"print(db.jvp(f, ...))  # {float(tangent)} against ⟨∇f, t⟩ = {expected}"])
