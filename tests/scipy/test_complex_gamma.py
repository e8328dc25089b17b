"""gamma, rgamma, loggamma and digamma of complex values to third order: ψ's derivatives on complex values
(`rules.scipy_special.complex_polygamma_series`, which SciPy has for real values only) against mpmath."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import dualbroadcast as db

sc = pytest.importorskip("scipy.special")
mpmath = pytest.importorskip("mpmath")

from dualbroadcast.rules import scipy_special  # noqa: E402

scipy_special.register()  # the table's entries (registered lazily, at the first scipy.special function met)


@settings(max_examples=30, deadline=None)
@given(re=st.floats(-45, 45), im=st.floats(-30, 30), order=st.integers(1, 4))
@example(re=-24.25, im=3.25, order=4)  # 1.1e-12 of the result: the terms' cancellation
def test_complex_polygamma_against_mpmath(re, im, order):
    """Left of the poles (shifted up to the expansion), near the real axis and far from it."""
    z = complex(re, im)
    if abs(z.imag) < 0.05 and abs(z.real - round(z.real)) < 0.05 and z.real < 0.5:
        return  # at a pole
    want = complex(mpmath.polygamma(order, z))
    got = complex(scipy_special.complex_polygamma_series(np.array(z), order))
    assert abs(got - want) <= 1e-12 * max(abs(want), _recurrence_scale(z, order))


def _recurrence_scale(z, order):
    """The size of the terms n!/(z+k)^(n+1) the recurrence adds on its way to Re z >= 16: left of the poles they
    cancel to a smaller sum, so rounding is relative to them (ψ⁽⁴⁾ at Re z = -44 to about 2e-12 of the result)."""
    terms = np.arange(max(0, int(np.ceil(16 - z.real))))
    return math.factorial(order) * float(np.sum(np.abs(z + terms) ** -(order + 1.0)))


FUNCTIONS = {"gamma": (sc.gamma, mpmath.gamma), "rgamma": (sc.rgamma, mpmath.rgamma),
             "loggamma": (sc.loggamma, mpmath.loggamma), "digamma": (sc.digamma, mpmath.digamma)}


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("z0", [complex(1.3, 0.4), complex(-2.6, 0.7), complex(4.0, -3.0)])
def test_every_second_order_composition_and_a_third_against_mpmath(name, z0):
    """F(x, y) = Re f(x + iy) is harmonic; along v = (a, b), dz = a + ib: the second directional derivative is
    Re(f''(z) dz²) and the gradient of it (third order) is (Re, -Im) of f'''(z) dz²."""
    f, reference = FUNCTIONS[name]
    if name == "loggamma" and z0.real < 0:
        z0 = complex(-z0.real, z0.imag)  # loggamma's branch cuts: SciPy's and mpmath's differ left of 0
    F = lambda x: np.real(f(x[0] + 1j * x[1]))
    x0, v = np.array([z0.real, z0.imag]), np.array([0.7, -0.2])
    dz = complex(*v)
    second = complex(mpmath.diff(reference, z0, 2)) * dz * dz
    third = complex(mpmath.diff(reference, z0, 3)) * dz * dz
    want = second.real
    compositions = {
        "rev_rev": db.hessian(F, x0) @ v @ v,
        "hvp": db.hvp(F, x0, vectors=v) @ v,
        "fwd_rev": db.jvp(lambda x: db.gradient(F, x), (x0,), (v,))[1] @ v,
        "rev_fwd": db.gradient(lambda x: db.jvp(F, (x,), (v,))[1], x0) @ v,
        "fwd_fwd": db.jvp(lambda x: db.jvp(F, (x,), (v,))[1], (x0,), (v,))[1],
    }
    for composition, got in compositions.items():
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), composition
    third_order = db.gradient(lambda x: db.hvp(F, x, vectors=v) @ v, x0)
    np.testing.assert_allclose(third_order, [third.real, -third.imag], rtol=1e-9, atol=1e-12)


def test_a_complex_gradient_of_digamma_is_holomorphic():
    """JAX's convention, ``∂F/∂x - i ∂F/∂y``: for F = Re f(z) with f holomorphic that is f'(z), here ψ'(z)."""
    z = np.array([1.3 + 0.4j, -0.5 - 2.0j])
    want = [complex(mpmath.polygamma(1, complex(v))) for v in z]
    np.testing.assert_allclose(db.gradient(lambda z: np.sum(np.real(sc.digamma(z))), z), want, rtol=1e-12)
