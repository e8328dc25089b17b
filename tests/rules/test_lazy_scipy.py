"""SciPy's rules are registered on first need: ``import dualbroadcast`` does not import SciPy (0.2 s), and
a scipy.special function imported after it still just works, met first on the tape, in a kernel or as
``np.i0`` (whose rule needs SciPy).  Each scenario runs in a fresh interpreter, the only place where
SciPy is not imported yet."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("scipy.special")

START = """
import sys
import numpy as np
import dualbroadcast as db
assert "scipy" not in sys.modules, "import dualbroadcast imported SciPy"
x = np.array([0.3, -1.2, 2.5])
"""


def run(code):
    source = textwrap.dedent(START) + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_scipy_function_met_first_on_the_tape():
    run("""
        from scipy.special import erf, gammaln, digamma
        got = db.gradient(lambda x: np.sum(erf(x)), x)
        np.testing.assert_allclose(got, 2 / np.sqrt(np.pi) * np.exp(-x * x), rtol=1e-14)
        y = np.array([0.5, 1.5, 4.0])
        np.testing.assert_allclose(db.prepare_gradient(lambda y: np.sum(gammaln(y)), y)(y), digamma(y), rtol=1e-14)
        from dualbroadcast.rules import BUILTIN_RULES, BUILTIN_NONDIFFERENTIABLE
        import scipy.special as sc
        assert erf in BUILTIN_RULES and np.i0 in BUILTIN_RULES and sc.round in BUILTIN_NONDIFFERENTIABLE
    """)


def test_a_scipy_function_met_first_in_a_kernel_and_a_users_rule_stays():
    run("""
        import scipy.special as sc
        db.defderivative(sc.erfc, lambda ans, x: 2 * x)  # a user's (wrong on purpose) before SciPy's are registered
        z = np.linspace(-3.0, 3.0, 40_000)  # large enough for every backend
        expected = 2 / np.sqrt(np.pi) * np.exp(-z * z) * 2 * sc.erf(z)
        for backend in ("numpy", "blocked"):  # numexpr has no erf
            with db.kernel_log() as calls:
                got = db.gradient(lambda z: db.sum(lambda z: sc.erf(z) ** 2, z, backend=backend), z)
            np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-300)
            assert calls[0].backend == backend
        np.testing.assert_allclose(db.gradient(lambda x: np.sum(sc.erfc(x)), x), 2 * x)
        np.testing.assert_allclose(db.gradient(lambda x: np.sum(sc.round(x) * x), x), sc.round(x))
    """)


def test_np_i0_imports_scipy_for_its_rule():
    run("""
        got = db.gradient(lambda x: np.sum(np.i0(x)), x)
        from scipy.special import i1
        np.testing.assert_allclose(got, i1(x), rtol=1e-14)
        got = db.gradient(lambda x: db.sum(np.i0, x), x)
        np.testing.assert_allclose(got, i1(x), rtol=1e-14)
    """)
