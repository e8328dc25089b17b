"""Cases for the rules of complex numbers' own functions (real, imag, conj, angle, real_if_close).

In float64 and float32 they see real arguments (the real rules); ``tests/rules/test_rules.py`` sweeps them,
with every case whose function has a rule for complex values, in complex128 too (`uniform` draws
complex values for a complex dtype).
"""

import numpy as np
from hypothesis import strategies as st

from . import Case, X, array_shape, call, uniform


def unary_case(func, **kwargs):
    def build(draw, dtype):
        shape = array_shape(draw, min_dims=0)
        fn = func if isinstance(func, np.ufunc) else call(draw, func, X, **kwargs)  # a ufunc's keywords: the tape's
        return fn, [uniform(draw, shape, dtype)]

    return Case(func, build, name=f"{func.__name__}{''.join(f'_{k}_{v}' for k, v in kwargs.items())}")


def build_angle(draw, dtype):
    """angle in radians or degrees; real arguments away from 0 (where the angle jumps from π to 0)."""
    shape = array_shape(draw, min_dims=0)
    z = uniform(draw, shape, dtype, 0.25, 2.0) * draw(st.sampled_from([1, -1]))
    return call(draw, np.angle, X, deg=draw(st.booleans())), [z]


def build_real_if_close(draw, dtype):
    """real_if_close of real values, or of complex ones whose imaginary parts are far from 0 (it returns them
    as they are); imaginary parts within ``tol`` machine epsilons of 0 are dropped, a jump no finite
    difference in y sees (tests/rules/test_complex.py checks that branch)."""
    shape = array_shape(draw, min_dims=0)
    return call(draw, np.real_if_close, X, tol=draw(st.sampled_from([100, 1000]))), [uniform(draw, shape, dtype)]


CASES = [
    unary_case(np.real),
    unary_case(np.imag),
    unary_case(np.conjugate),
    Case(np.angle, build_angle),
    Case(np.real_if_close, build_real_if_close),
]
