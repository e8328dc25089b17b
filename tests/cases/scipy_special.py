"""Cases for the scipy.special rules (dualbroadcast/rules/scipy_special.py): every function inside its domain.

``SPECS[f]`` gives, per argument, the interval its values are drawn from (a differentiated argument) or
a constant (an order, a degree, a parameter without a derivative).  Without SciPy there are no cases.
"""

import numpy as np
from hypothesis import strategies as st

from . import Case, broadcast_shapes, from_domain, uniform

try:
    import scipy.special as sc
    from scipy.special import _ufuncs
except ImportError:
    sc = None

N = "degree"  # a polynomial's degree: drawn from 0, 1, 3 (as floats: integers promote float32 results)


def specs():
    if sc is None:
        return {}
    unit = (0.1, 0.9)
    poles = ((-0.9, -0.1), (0.5, 3))  # between the poles at 0 and -1, and right of them
    return {
        np.i0: [(-2, 2)],
        sc.erf: [(-2, 2)], sc.erfc: [(-2, 2)], sc.erfinv: [(-0.9, 0.9)], sc.erfcinv: [(0.1, 1.9)],
        sc.erfcx: [(-1, 2)], sc.erfi: [(-1.5, 1.5)], sc.dawsn: [(-2, 2)], sc.ndtr: [(-2, 2)],
        sc.log_ndtr: [(-3, 2)], sc.ndtri: [(0.05, 0.95)], sc.ndtri_exp: [(-3, -0.1)], sc.owens_t: [(-2, 2), (-2, 2)],
        sc.expit: [(-3, 3)], sc.logit: [(0.05, 0.95)], sc.log_expit: [(-3, 3)],
        sc.gamma: [poles], sc.rgamma: [poles], sc.gammaln: [poles], sc.loggamma: [(0.5, 3)],
        sc.digamma: [poles], sc.beta: [(0.5, 3), (0.5, 3)], sc.betaln: [(0.5, 3), (0.5, 3)],
        sc.poch: [(0.5, 2), (0.2, 2)], sc.binom: [(2, 5), (0.5, 1.5)], _ufuncs._zeta: [(1.5, 4), (0.5, 3)],
        sc.gammainc: [(0.5, 4), (0.3, 6)], sc.gammaincc: [(0.5, 4), (0.3, 6)],  # a: series and fraction
        sc.gammaincinv: [1.5, unit],
        sc.gammainccinv: [1.5, unit], sc.betainc: [1.5, 2.5, unit], sc.betaincc: [1.5, 2.5, unit],
        sc.betaincinv: [1.5, 2.5, unit], sc.betainccinv: [1.5, 2.5, unit],
        sc.exp1: [(0.5, 3)], sc.expi: [((-3, -0.5), (0.5, 3))], sc.expn: [2.0, (0.5, 3)], sc.spence: [(0.2, 3)],
        sc.ellipk: [(-2, 0.9)], sc.ellipe: [(-2, 0.9)], sc.ellipkm1: [unit],
        sc.entr: [(0.2, 3)], sc.rel_entr: [(0.2, 3), (0.2, 3)], sc.kl_div: [(0.2, 3), (0.2, 3)],
        sc.xlogy: [(-2, 2), (0.2, 3)], sc.xlog1py: [(-2, 2), (-0.5, 3)],
        sc.huber: [(0.5, 1.5), (-3, 3)], sc.pseudo_huber: [(0.5, 2), (-2, 2)],
        sc.boxcox: [(0.5, 3), (-1, 1)], sc.boxcox1p: [(-0.5, 2), (-1, 1)],
        sc.inv_boxcox: [(-0.5, 0.5), (-1, 1)], sc.inv_boxcox1p: [(-0.5, 0.5), (-1, 1)],
        sc.exprel: [(-2, 2)], sc.powm1: [(0.5, 2), (-2, 2)], sc.cosm1: [(-2, 2)], sc.exp10: [(-1, 1)],
        sc.exp2: [(-2, 2)], sc.expm1: [(-2, 2)], sc.log1p: [(-0.5, 3)], sc.cbrt: [((-3, -0.5), (0.5, 3))],
        sc.sindg: [(-100, 100)], sc.cosdg: [(-100, 100)], sc.tandg: [(-60, 60)], sc.cotdg: [((-160, -20), (20, 160))],
        sc.radian: [(-3, 3)] * 3,
        sc.j0: [(-5, 5)], sc.j1: [(-5, 5)], sc.y0: [(0.5, 5)], sc.y1: [(0.5, 5)],
        sc.i0: [(-2, 2)], sc.i0e: [((-2, -0.1), (0.1, 2))], sc.i1: [(-2, 2)], sc.i1e: [((-2, -0.1), (0.1, 2))],
        sc.k0: [(0.5, 3)], sc.k1: [(0.5, 3)], sc.k0e: [(0.5, 3)], sc.k1e: [(0.5, 3)],
        sc.jv: [1.5, (0.5, 5)], sc.jve: [1.5, (0.5, 5)], sc.yv: [1.5, (0.5, 5)], sc.yve: [1.5, (0.5, 5)],
        sc.yn: [2.0, (0.5, 5)], sc.iv: [1.5, (0.2, 2)], sc.ive: [1.5, (0.2, 2)], sc.kv: [1.5, (0.5, 3)],
        sc.kve: [1.5, (0.5, 3)], sc.kn: [2.0, (0.5, 3)], sc.struve: [1.5, (0.5, 3)], sc.modstruve: [1.5, (0.5, 3)],
        sc.hyp0f1: [1.5, (-2, 2)], sc.hyp1f1: [0.5, 1.5, (-2, 2)], sc.hyp2f1: [0.5, 1.5, 2.5, (-0.8, 0.8)],
        sc.hyperu: [0.5, 1.5, (0.5, 3)],
        sc.eval_legendre: [N, (-0.9, 0.9)], sc.eval_sh_legendre: [N, (-0.9, 0.9)], sc.eval_chebyt: [N, (-0.9, 0.9)],
        sc.eval_sh_chebyt: [N, (-0.9, 0.9)], sc.eval_chebyu: [N, (-0.9, 0.9)], sc.eval_sh_chebyu: [N, (-0.9, 0.9)],
        sc.eval_chebyc: [N, (-1.8, 1.8)], sc.eval_chebys: [N, (-1.8, 1.8)], sc.eval_gegenbauer: [N, 0.7, (-0.9, 0.9)],
        sc.eval_jacobi: [N, 0.5, 1.5, (-0.9, 0.9)], sc.eval_laguerre: [N, (-3, 3)],
        sc.eval_genlaguerre: [N, 0.5, (-3, 3)],
    }


SPECS = specs()
# Complex results for real arguments too: reverse rules only, no kernel cases.  Of real arguments a case
# returns the real and imaginary parts (a gradient is of a real function); tests/rules/test_rules.py sweeps them in
# float64, float32 and complex128 (real and imaginary parts both drawn from the interval).
COMPLEX_VALUED = {} if sc is None else {
    sc.wofz: [(-2, 2)], sc.hankel1: [1.5, (0.5, 4)], sc.hankel2: [1.5, (0.5, 4)], sc.hankel1e: [0.5, (0.5, 4)],
    sc.hankel2e: [2.5, (0.5, 4)],
}
OUTPUTS = {} if sc is None else {sc.sici: (0.5, 3), sc.shichi: (0.5, 2), sc.fresnel: (-2, 2), sc.airy: (-2, 2)}
# Through the public function: scipy.special.zeta(x, q) calls the ufunc the rule is registered on.
CALLED_AS = {} if sc is None else {_ufuncs._zeta: sc.zeta}


def special_case(func, spec):
    def build(draw, dtype):
        domains = [s for s in spec if type(s) is tuple]
        shapes = iter(broadcast_shapes(draw, len(domains)))
        constants = [draw(st.sampled_from([0.0, 1.0, 3.0])) if s == N else s for s in spec]
        arrays = [from_domain(draw, next(shapes), dtype, d) for d in domains]
        called = CALLED_AS.get(func, func)

        def fn(*xs):
            it = iter(xs)
            return called(*[next(it) if type(s) is tuple else c for s, c in zip(spec, constants)])

        if func in COMPLEX_VALUED and np.dtype(dtype).kind == "f":  # a real function of real arguments
            return (lambda *xs: (np.real(fn(*xs)), np.imag(fn(*xs)))), arrays
        return fn, arrays

    def promoted():
        """float64 if the function has no float32 loop for these arguments (gammainc, an integer order; wofz
        has one, but NumPy finds its complex128 loop first)."""
        sample = [np.float32(np.mean(s)) if type(s) is tuple else 1.0 if s == N else s for s in spec]
        with np.errstate(all="ignore"):
            return np.float64 if np.result_type(np.real(func(*sample))) == np.float64 else None  # wofz: complex128

    name = getattr(func, "__name__", repr(func))
    prefix = "np" if func is np.i0 else "scipy.special"
    return Case(func, build, name=f"{prefix}.{name}".replace("._zeta", ".zeta"),
                out_dtype=promoted())


def outputs_case(func, domain):
    def build(draw, dtype):
        return func, [uniform(draw, broadcast_shapes(draw, 1)[0], dtype, *domain)]

    return Case(func, build, name=f"scipy.special.{func.__name__}")


def build_softplus(draw, dtype):
    """scipy.special.softplus is np.logaddexp(0, x): NumPy's rule serves it."""
    return sc.softplus, [uniform(draw, broadcast_shapes(draw, 1)[0], dtype, -3, 3)]


KERNEL_CASES = [special_case(f, s) for f, s in SPECS.items()]
KERNEL_CASES += [] if sc is None else [Case(np.logaddexp, build_softplus, name="scipy.special.softplus")]
CASES = KERNEL_CASES + [outputs_case(f, d) for f, d in OUTPUTS.items()]
CASES += [special_case(f, s) for f, s in COMPLEX_VALUED.items()]
