"""Random programs composed from the registered rules, each checked in four ways (tests/programs.py).

1. ``db.gradient`` against central finite differences and its value against plain NumPy (float64);
   against ``jax.grad`` of the same source on jax.numpy when JAX is installed;
2. ``db.prepare_gradient`` replayed on new inputs and on the example, against ``db.gradient``; and compiled as
   at large sizes (regions fused, blocked in chunks on threads, or on whole arrays), also into ``out=``;
3. each ``db.sum`` / ``db.broadcast`` kernel, with random cuts, on every backend, against the plain reverse form;
4. float32 against float64;
5. ``db.hvp`` (a gradient of a gradient) against central differences of the gradient;
6. a nested composition of ``db.jvp`` and ``db.gradient`` (fwd∘fwd, fwd∘rev, rev∘fwd, rev∘rev or fwd∘rev∘rev,
   tests/compositions.py) against JAX's nested ``jax.jvp`` (on one program in ``COMPOSITION_SHARE``).

A failure prints a standalone reproduction, which hypothesis shrinks.

Long mode, 10^4 programs (about an hour on two cores):

    python -m pytest tests/test_random_programs.py -m long -p no:cacheprovider

``DB_LONG=N`` (with ``-m long``) runs N programs instead.
"""

import os
import zlib

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from . import programs

try:
    import jax  # noqa: F401
except ImportError:
    HAVE_JAX = False
else:
    HAVE_JAX = True

NORMAL = 100  # a default run's programs (CI's too); DB_LONG asks for more
JAX_SHARE = 5  # the normal run compares one program in JAX_SHARE with jax.grad (its first call of a shape compiles)
SECOND_ORDER_SHARE = 2  # the normal run checks db.hvp on one program in SECOND_ORDER_SHARE (three evaluations)
COMPOSITION_SHARE = 5  # one program in COMPOSITION_SHARE checks a nested composition against JAX (long mode: 2)
LONG = int(os.environ.get("DB_LONG") or 0)  # 0: not asked for; 1: 10^4 programs; N > 1: N programs
SLOW_DRAWS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def check_program(data, jax_share, composition_share=COMPOSITION_SHARE):
    """Draw a program and run every check on it (JAX on one program in ``jax_share``, a nested composition against
    JAX on one in ``composition_share``)."""
    program = data.draw(programs.programs(drawers=programs.WITH_UPDATES), label="program")
    event("near a kink: no finite differences or JAX" if program.trace.kink <= programs.KINK_MARGIN else "smooth")
    event(f"{sum(step.body is not None for step in program.steps)} kernel(s)")
    grads = programs.check_gradient(program)
    event("refused with a clear error" if grads is None else "differentiated")
    if grads is None:
        programs.check_refused(program)
        programs.check_kernels(program)
        return
    if HAVE_JAX and data.draw(st.integers(0, jax_share - 1), label="not compared with JAX") == 0:
        programs.check_jax(program, grads)
    programs.check_prepared(program, replays=data.draw(st.integers(2, 3), label="replays"))
    programs.check_prepared_paths(program)
    programs.check_pullback(program, grads)
    programs.check_kernels(program)
    programs.check_float32(program, grads)
    if data.draw(st.integers(0, SECOND_ORDER_SHARE - 1), label="second order not checked") == 0:
        programs.check_second_order(program, grads)
    if HAVE_JAX and data.draw(st.integers(0, composition_share - 1), label="no nested composition") == 0:
        composition = programs.NESTED[zlib.crc32(repr(program).encode()) % len(programs.NESTED)]  # (a draw favours one)
        event(f"{composition}: {programs.check_composition(program, composition)}")


@settings(max_examples=NORMAL, deadline=None, suppress_health_check=SLOW_DRAWS)
@given(data=st.data())
def test_random_programs(data):
    check_program(data, JAX_SHARE)


@pytest.mark.long
def test_random_programs_long(request):
    marks = request.config.getoption("markexpr")
    if not LONG and not ("long" in marks and "not long" not in marks):
        pytest.skip("long mode: python -m pytest tests/test_random_programs.py -m long")
    run = given(data=st.data())(lambda data: check_program(data, jax_share=1, composition_share=2))
    settings(max_examples=LONG if LONG > 1 else 10_000, deadline=None, suppress_health_check=SLOW_DRAWS)(run)()


def sine_program():
    """f(x0) = sum(sin(x0) * weights), x0 of shape (3,): smooth, no kernel."""
    x0 = programs.Input("x0", (3,), "array", cut=False)
    program = programs.Program([x0], [programs.Step("v1", "np.sin({0})", ("x0",))], seed=1,
                               shapes={"x0": (3,), "v1": (3,)})
    program.trace = programs.trace(program, programs.build_inputs(program))
    return program


def test_each_check_rejects_a_wrong_gradient(monkeypatch):
    """The checks can fail: a gradient off by 1% is caught by finite differences, prepared replay and float32."""
    program = sine_program()
    values = programs.build_inputs(program)
    right = programs.check_gradient(program)
    wrong = (right[0] * 1.01,)
    assert programs.finite_difference_error(program, values, wrong) is not None
    assert programs.finite_difference_error(program, values, right) is None
    with pytest.raises(AssertionError, match="against the float64 one"):
        programs.check_float32(program, wrong)
    programs.check_prepared(program)
    gradient = programs.db.gradient
    monkeypatch.setattr(programs.db, "prepare_gradient", lambda f, *example: lambda *a: gradient(f, *a) * 1.01)
    with pytest.raises(AssertionError, match=r"against db\.gradient"):
        programs.check_prepared(program)
    programs.check_pullback(program, right)
    with pytest.raises(AssertionError, match="pullback call 1"):
        programs.check_pullback(program, wrong)
    pullback = programs.db.pullback

    def scaling_pullback(f, *args):  # the bug class the check guards: a later call sees a changed partial
        value, back = pullback(f, *args)
        calls = []
        return value, lambda g: calls.append(g) or back(g) * len(calls)

    monkeypatch.setattr(programs.db, "pullback", scaling_pullback)
    with pytest.raises(AssertionError, match="pullback call 2"):
        programs.check_pullback(program, right)


def test_jax_is_compared_when_installed():
    """The JAX comparison is not skipped silently: where JAX is importable it runs (and can fail)."""
    pytest.importorskip("jax")
    assert HAVE_JAX
    program = sine_program()
    right = programs.check_gradient(program)
    programs.check_jax(program, right)
    with pytest.raises(AssertionError, match=r"against jax\.grad"):
        programs.check_jax(program, (right[0] * 1.01,))
