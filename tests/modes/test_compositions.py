"""Every composition of forward and reverse mode, to third order, over every rule case: a `check_grads`-style sweep.

For each rule case (real, and complex128 where the rule takes complex values) ``F`` is a real scalar projection of
the case's result, and a composition computes a directional derivative of ``F``: first order along ``v``, second
along ``v`` and ``u``, third along ``v``, ``u`` and ``w``, each through `db.jvp` (fwd) and `db.gradient` (rev) in
the order its name says, outermost first (``fwd_rev``: ``jvp(grad F)``, JAX's Hessian-vector product).  Each is
compared with central differences along the last direction of the composition one order below taken by reverse
mode (first order: of ``F`` itself), so a wrong second derivative cannot hide behind the same wrong one; and, for
real cases JAX can replay (`tests/rules/test_oracle.py`), with ``jax.jvp`` nested to the same order.  A complex
argument's derivatives pair with directions as JAX's do: ``dF = Re Σ g·v`` for ``g = ∂F/∂x - i ∂F/∂y``.

The default run checks a fixed sample of cases per composition; ``-m sweep`` runs every case (``DB_SWEEP_EVERY=k``:
every k-th; ``DB_SWEEP_JAX=0``: without the JAX comparison, the slow part)::

    python -m pytest tests/modes/test_compositions.py -m sweep -p no:cacheprovider

A composition that still refuses a case is named in `STILL_REFUSED` with its reason, and checked to refuse with a
clear error (never a NumPy exception from inside the library), so the table can only shrink.
"""

import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dualbroadcast as db

from ..cases import all_cases, complex_cases, reset_streams
from ..compositions import derivative
from ..compositions import jax_derivative as nested_jax_jvp
from ..rules.test_rules import projection

# The gradient jumps at a tie (it is split there): no difference quotient of it means anything.
AT_A_TIE = {"max_two_way_tie", "min_two_way_tie"}
REAL = [c for c in all_cases() if str(c) not in AT_A_TIE]
COMPLEX = complex_cases(REAL)

COMPOSITIONS = ("fwd", "rev", "fwd_fwd", "fwd_rev", "rev_fwd", "rev_rev", "fwd_rev_rev")

# (composition, case name, dtype) -> why it refuses; checked to raise a `db.DifferentiationError`.
STILL_REFUSED: dict[tuple[str, str, str], str] = {}

# (composition, case name, dtype) -> why the value is wrong: strict expected failures, so a fix shows (and the
# entry must go).  Reported, not hidden: each is a bug to fix.
STILL_WRONG: dict[tuple[str, str, str], str] = {}

EVERY = int(os.environ.get("DB_SWEEP_EVERY", "1"))  # -m sweep with DB_SWEEP_EVERY=k: every k-th case (a quicker sweep)
SAMPLE = 5  # cases per composition and dtype in the default run


def sampled(cases, composition):
    """A fixed sample of ``cases`` for ``composition``: a different one per composition, stable across runs."""
    ranked = sorted(cases, key=lambda c: zlib.crc32(f"{composition}:{c}".encode()))
    return ranked[:SAMPLE]


def parameters(full):
    """(composition, case, dtype) triples: all of them under ``-m sweep``, else the sample."""
    out = []
    for composition in COMPOSITIONS:
        for dtype, cases in ((np.float64, REAL), (np.complex128, COMPLEX)):
            chosen = cases[::EVERY] if full else sampled(cases, composition)
            for case in chosen:
                marks = [pytest.mark.sweep] if full else []
                wrong = STILL_WRONG.get((composition, str(case), np.dtype(dtype).name))
                if wrong is not None:
                    marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=wrong))
                out.append(pytest.param(composition, case, dtype, marks=marks,
                                        id=f"{composition}-{np.dtype(dtype).name}-{case}"))
    return out


# --- the compositions (tests/compositions.py) ----------------------------------------------------------------------
def reference(composition, F, args, directions, h=1e-6):
    """Central differences along the outermost direction of the reverse-mode derivative one order below (of F at
    first order), and their error scale."""
    order = len(composition.split("_"))
    below = (lambda *xs: F(*xs)) if order == 1 else \
        (lambda *xs: derivative("_".join(["rev"] * (order - 1)), F, xs, directions))
    d = directions[order - 1]
    plus = below(*[a + h * dv for a, dv in zip(args, d)])
    minus = below(*[a - h * dv for a, dv in zip(args, d)])
    return (plus - minus) / (2 * h), max(1.0, abs(float(np.real(plus))))


def directions_for(args, seed):
    """Three random directions (v, u, w), each one array per argument of its shape and dtype."""
    rng = np.random.default_rng(seed)

    def one(a):
        shape, dtype = np.shape(a), np.result_type(a)
        d = rng.standard_normal(shape)
        if dtype.kind == "c":
            d = d + 1j * rng.standard_normal(shape)
        d = np.asarray(d, dtype)
        return d if isinstance(a, np.ndarray) else d[()]

    return [[one(a) for a in args] for _ in range(3)]


# --- JAX, where it replays the case ------------------------------------------------------------------------------
def jax_derivative(F, args, directions, order):
    """The same directional derivative by JAX's nested ``jax.jvp`` on the case's recorded program, or None where JAX
    cannot replay it (complex values, a kernel, a function JAX lacks)."""
    from ..rules import test_oracle

    try:
        prepared = db.prepare_gradient(F, *args)
    except db.DifferentiationError:
        return None
    if prepared.unreplayable:
        return None
    programs = [p for ps in prepared.variants.values() for p in ps]
    if len(programs) != 1 or programs[0].out is None \
            or any(map(test_oracle.reads_one_triangle, programs[0].recorded_steps)):
        return None
    with test_oracle.jax.enable_x64(True):
        replayed = test_oracle.jax_replay(programs[0])
    try:
        return nested_jax_jvp(replayed, args, directions, order)
    except (test_oracle.NoOracle, TypeError, NotImplementedError, ValueError, IndexError):
        return None


# --- the sweep ---------------------------------------------------------------------------------------------------
NAMES = {"fwd": "db.jvp", "rev": "db.gradient"}


def reproduction(composition, case, dtype):
    """How to run one failing composition again, and what it computes."""
    nested = " of ".join(NAMES[m] for m in composition.split("_"))
    return (f"\nreproduce: python -m pytest 'tests/modes/test_compositions.py::test_composition"
            f"[{composition}-{np.dtype(dtype).name}-{case}]' -m sweep -p no:cacheprovider"
            f"\n  ({composition}: {nested} of a projection of case {case!s}'s result; hypothesis prints the drawn "
            "example above)")


def check(composition, case, dtype, data):
    reset_streams()
    fn, args = case.build(data.draw, dtype)
    seed = data.draw(st.integers(0, 1000), label="seed")
    F = lambda *a: projection(fn(*a), seed)
    directions = directions_for(args, seed)
    where = reproduction(composition, case, dtype)
    key = (composition, str(case), np.dtype(dtype).name)
    with np.errstate(all="ignore"):
        if key in STILL_REFUSED:
            with pytest.raises(db.DifferentiationError):
                derivative(composition, F, args, directions)
            return
        got = derivative(composition, F, args, directions)
        want, scale = reference(composition, F, args, directions)
    got = float(np.real(got))
    rtol = max(case.tolerance.get("rtol", 0), 1e-5)
    atol = max(case.tolerance.get("atol", 0), 1e-6) * scale
    assert abs(got - want) <= atol + rtol * abs(want), f"{composition}: {got!r}, differences {want!r}{where}"
    if np.dtype(dtype).kind == "f" and os.environ.get("DB_SWEEP_JAX", "1") != "0":
        order = len(composition.split("_"))
        theirs = jax_derivative(F, args, directions[:order], order)
        if theirs is not None and np.isfinite(theirs):
            assert abs(got - theirs) <= 1e-7 * scale + 1e-6 * abs(theirs), \
                f"{composition}: {got!r}, JAX {theirs!r}{where}"


# One derandomized draw per case, not shrunk: the first example fails as drawn.
ONE_DRAW = settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                    phases=[Phase.generate])


def test_the_tables_name_compositions_and_cases_that_exist():
    for table in (STILL_REFUSED, STILL_WRONG):
        assert {k[0] for k in table} <= set(COMPOSITIONS)
        assert {k[1] for k in table} <= {str(c) for c in REAL}


@pytest.mark.parametrize(("composition", "case", "dtype"), parameters(full=False))
@ONE_DRAW
@given(data=st.data())
def test_composition_sample(composition, case, dtype, data):
    check(composition, case, dtype, data)


@pytest.mark.parametrize(("composition", "case", "dtype"), parameters(full=True))
@ONE_DRAW
@given(data=st.data())
def test_composition(composition, case, dtype, data):
    check(composition, case, dtype, data)
