"""Every rule case against JAX: the same computation, differentiated by `jax.grad`, in float64.

A case's function is recorded once as a prepared program (`db.prepare_gradient`), whose steps
name each NumPy function called and its arguments; `jax_replay` runs those steps on the
`jax.numpy` (or `jax.scipy`) function of the same name, so the oracle differentiates exactly the
calls the library recorded, in the calling form the case drew.  A case whose functions JAX lacks
is skipped with the function named; one JAX rejects the arguments of is skipped with JAX's reason.
Skipped without JAX.  One drawn example a case per run: JAX runs each call op by op, the sweep's cost.

In complex128 (complex computations are not recorded as prepared programs) the oracle makes the one call a
case draws (`cases.call` keeps its form) on JAX and compares ``jax.grad`` of a real projection of it; a case
of several calls is compared with JAX in tests/rules/test_complex.py.
"""

import inspect
import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.numpy_facts import astype, getitem
from dualbroadcast.program import Const, Guard, KernelStep, Step
from dualbroadcast.registry import OUTPUTS, SEQUENCE

from ..cases import Arg, all_cases, complex_cases, filled, reset_streams
from ..rules.test_rules import projection

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jsp = pytest.importorskip("jax.scipy.special")

CASES = all_cases()

# Where this library's documented convention gives a number and JAX gives NaN (tests/rules/test_conventions.py pins
# ours): there the elements JAX leaves NaN are not compared.
JAX_GIVES_NAN = {
    np.std: "std of a constant slice (one element) has gradient 0 here, a subgradient; NaN in JAX",
}
try:
    import scipy.special

    JAX_GIVES_NAN[scipy.special.spence] = "JAX's spence has a NaN gradient for z > 1 (ours matches finite differences)"
except ImportError:
    pass
# Cases whose input is not symmetric where NumPy reads one triangle (the other holds noise, so a gradient in the
# unread triangle would show): JAX symmetrises the input instead, a different function.
# tests/rules/test_decompositions.py compares these rules with JAX on symmetric inputs.
ONE_TRIANGLE = {np.linalg.eigh, np.linalg.eigvalsh, np.linalg.cholesky}


def reads_one_triangle(step):
    """Whether ``step`` reads one triangle of a matrix it takes as symmetric (``hermitian=True`` too)."""
    return type(step) is Step and (step.func in ONE_TRIANGLE or step.kwargs.get("hermitian") is True)


class NoOracle(Exception):
    """JAX has no function for a recorded step, or rejects its arguments."""


def jax_function(func):
    """The JAX function that computes what the NumPy or SciPy ``func`` computes: the one of the same name
    in the JAX module that mirrors ``func``'s (a ufunc without a module is SciPy's)."""
    if func is getitem:
        return operator.getitem
    if func is astype:
        return lambda x, dtype, **options: x.astype(dtype)
    if func == "cut":
        return jax.lax.stop_gradient
    module = getattr(func, "__module__", None) or "scipy.special"
    mirrors = {"numpy": jnp, "numpy.linalg": jnp.linalg, "numpy.fft": jnp.fft}
    mirror = jsp if module.startswith("scipy.special") else mirrors.get(module)
    found = getattr(mirror, func.__name__, None)
    if found is None:
        raise NoOracle(f"JAX has no {module}.{func.__name__}")
    return found


def without_numpy_defaults(func, args, kwargs):
    """``func``'s call with every argument left at NumPy's default dropped (``out=None``, ``casting=``):
    JAX's functions take NumPy's parameters but not all of them.  Arguments after a dropped one go by name."""
    try:
        signature = inspect.signature(func)
        bound = signature.bind(*args, **kwargs).arguments
    except (TypeError, ValueError):  # a ufunc, or a function without a signature
        return args, kwargs
    positional, named = [], {}
    for p in signature.parameters.values():
        if p.name not in bound:
            continue
        v = bound[p.name]
        if p.kind is p.VAR_POSITIONAL:
            positional += v
        elif p.kind is p.VAR_KEYWORD:
            named.update(v)
        elif v is p.default or (type(v) is type(p.default) and type(v) in (str, bool, int) and v == p.default):
            continue
        elif p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and not named
                                             and len(positional) == list(signature.parameters).index(p.name)):
            positional.append(v)
        else:
            named[p.name] = v
    return positional, named


def jax_replay(program):
    """A function of the program's leaves computing its result with JAX, step by step."""

    def value(ref, values):
        if type(ref) is int:
            return values[ref]
        if type(ref) is Const:  # a NumPy bool scalar (a mask a guard fixed) as Python's: JAX's indexer takes that
            return bool(ref.value) if type(ref.value) is np.bool_ else ref.value
        return ref.kind(value(r, values) for r in ref.refs)  # a Pack

    def run(*leaves):
        values = dict(zip((i for _, i in program.leaves), leaves))
        for step in program.recorded_steps:  # as recorded: before elementwise steps are fused into kernels
            if type(step) is Guard:
                continue
            if type(step) is KernelStep:
                raise NoOracle("a db.sum/db.broadcast kernel")
            assert type(step) is Step
            args = [value(r, values) for r in step.refs]
            if step.kind == SEQUENCE:
                args = [args, *step.rest]
            try:
                args, kwargs = without_numpy_defaults(step.func, args, step.kwargs)
                out = jax_function(step.func)(*args, **kwargs)
            except (TypeError, NotImplementedError, ValueError, IndexError) as error:
                raise NoOracle(f"JAX's {getattr(step.func, '__name__', step.func)} rejects the call: {error}") \
                    from error
            outs = out if step.kind == OUTPUTS or len(step.outs) > 1 else (out,)
            for index, o in zip(step.outs, outs):
                if index is not None:
                    real = program.meta[index][1].kind == "f"  # eigvals: real here where all are, complex in JAX
                    values[index] = jnp.real(o) if real and jnp.iscomplexobj(o) else o
        return values[program.out]

    return run


@pytest.mark.parametrize("case", CASES, ids=str)
@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rule_matches_jax(case, data):
    reset_streams()
    fn, args = case.build(data.draw, np.float64)
    seed = data.draw(st.integers(0, 1000))

    def f(*a):
        return projection(fn(*a), seed)

    want_grads = db.gradient(f, *args)
    want_grads = want_grads if len(args) > 1 else (want_grads,)
    prepared = db.prepare_gradient(f, *args)
    if prepared.unreplayable:  # tests/rules/test_fft.py compares the FFT rules, which make complex values, with JAX
        pytest.skip("complex values: a prepared gradient leaves them to db.gradient, so there is no program to replay")
    [program] = [p for programs in prepared.variants.values() for p in programs]
    if program.out is None:
        pytest.skip("the result depends on no argument")
    if any(map(reads_one_triangle, program.recorded_steps)):
        pytest.skip("NumPy reads one triangle of this non-symmetric input, JAX symmetrises it")
    with jax.enable_x64(True):
        try:
            got = jax.jit(jax.grad(jax_replay(program), argnums=tuple(range(len(args)))))(*map(jnp.asarray, args))
        except NoOracle as reason:
            pytest.skip(str(reason))
    for k, (ours, theirs) in enumerate(zip(want_grads, got)):
        assert_agrees(case, ours, theirs, f"gradient of argument {k}")


def assert_agrees(case, ours, theirs, what):
    """Our gradient equals JAX's to rounding (but where JAX gives NaN at a point our convention defines)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if case.func in JAX_GIVES_NAN:
        ours, theirs = ours[~np.isnan(theirs)], theirs[~np.isnan(theirs)]
    np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-9, err_msg=f"{case}: {what} against jax.grad")


# --- complex128: the single call a case draws, made on JAX ----------------------------------------------
def drawn_call(fn, n_args):
    """``(function, positional, keywords)`` of the one call a case's ``fn`` makes (a ufunc case is the ufunc
    itself), or None for a case composed of several calls (tests/rules/test_complex.py compares those with JAX)."""
    if isinstance(fn, np.ufunc):
        return fn, [Arg(k) for k in range(n_args)], {}
    return getattr(fn, "form", None)


def drawn_keywords(func, front, named):
    """Every argument of the drawn call by name (``hermitian`` may be drawn positionally)."""
    try:
        return dict(inspect.signature(func).bind(*front, **named).arguments)
    except (TypeError, ValueError):  # a ufunc, or a function without a signature
        return named


def complex_projection(outs, seed, xp):
    """Re Σ w·o over every output with fixed complex weights w: a real scalar reading each real and imaginary
    part, written on the array module ``xp`` (NumPy on tracked values, or jax.numpy)."""
    total = 0.0
    for k, o in enumerate(outs if isinstance(outs, (list, tuple)) else [outs]):
        rng = np.random.default_rng(seed + k)
        w = rng.standard_normal(np.shape(o)) + 1j * rng.standard_normal(np.shape(o))
        total = total + xp.real(xp.sum(o * w))
    return total


@pytest.mark.parametrize("case", complex_cases(CASES), ids=str)
@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_complex_rule_matches_jax(case, data):
    reset_streams()
    fn, args = case.build(data.draw, np.complex128)
    call = drawn_call(fn, len(args))
    if call is None:
        pytest.skip("a case of several calls (tests/rules/test_complex.py compares complex compositions with JAX)")
    func, front, named = call
    if func in ONE_TRIANGLE or drawn_keywords(func, front, named).get("hermitian") is True:
        pytest.skip("NumPy reads one triangle of this non-Hermitian input, JAX symmetrises it")
    seed = data.draw(st.integers(0, 1000))
    ours = db.gradient(lambda *a: complex_projection(fn(*a), seed, np), *args)
    ours = ours if len(args) > 1 else (ours,)
    with jax.enable_x64(True):
        try:
            jax_func = jax_function(func)

            def theirs(*a):
                positional, keywords = without_numpy_defaults(func, filled(front, a), dict(zip(named, filled(
                    named.values(), a))))
                return complex_projection(jax_func(*positional, **keywords), seed, jnp)

            got = jax.jit(jax.grad(theirs, argnums=tuple(range(len(args)))))(*map(jnp.asarray, args))
        except (NoOracle, TypeError, NotImplementedError, ValueError, IndexError) as reason:
            pytest.skip(f"JAX: {reason}")
    for k, (mine, jax_grad) in enumerate(zip(ours, got)):
        assert_agrees(case, mine, jax_grad, f"complex gradient of argument {k}")
