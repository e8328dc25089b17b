"""Each new elementwise entry against JAX: ``jax.grad`` of the ``jax.scipy.special`` / ``jax.numpy`` function of
the same name, in float64, where JAX has it (an independent implementation of every derivative).

The arguments come from the rule cases' domains (tests/cases/scipy_special.py); constants (orders,
degrees) are passed to both.  A function JAX lacks, or cannot differentiate, is skipped with the reason.
"""

import numpy as np
import pytest

import dualbroadcast as db

from ..cases import scipy_special

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jsp = pytest.importorskip("jax.scipy.special")
jax.config.update("jax_enable_x64", True)

N = 5  # elements per argument


def points(spec, seed):
    """Per argument of ``spec``: N values inside its interval, or its constant (a degree: 2.0)."""
    rng = np.random.default_rng(seed)
    return [drawn(rng, s) if type(s) is tuple else 2.0 if s == scipy_special.N else s for s in spec]


def drawn(rng, domain):
    """N values in an interval, or spread over the pieces of a domain a pole splits (a tuple of intervals)."""
    if type(domain[0]) is not tuple:
        return rng.uniform(*domain, N)
    pieces = np.stack([rng.uniform(*piece, N) for piece in domain])
    return pieces[rng.integers(len(domain), size=N), np.arange(N)]


def jax_name(func):
    name = func.__name__
    return {"_zeta": "zeta", "psi": "digamma"}.get(name, name)


SPECIAL = [(f, s) for f, s in scipy_special.SPECS.items() if f is not np.i0]
NUMPY = [  # (ours, JAX's, the arguments' intervals or constants)
    (np.sinc, jnp.sinc, [(-2, 2)]),
    (np.i0, jnp.i0, [(-2, 2)]),
    (np.nan_to_num, jnp.nan_to_num, [(-2, 2)]),
    (np.float_power, jnp.float_power, [(0.5, 2), (-2, 2)]),
    (lambda x: np.ldexp(x, 3), lambda x: jnp.ldexp(x, 3), [(-2, 2)]),
    (lambda x: np.frexp(x)[0], lambda x: jnp.frexp(x)[0], [(-3, 3)]),
    (lambda x: np.modf(x)[0], lambda x: jnp.modf(x)[0], [(-3, 3)]),
    (lambda x: np.divmod(x, 0.7)[1], lambda x: jnp.divmod(x, 0.7)[1], [(-3, 3)]),
    (np.maximum, jnp.maximum, [(-2, 2), (-2, 2)]),
    (np.minimum, jnp.minimum, [(-2, 2), (-2, 2)]),
]


def compare(ours, theirs, spec, seed=0):
    """The gradient of Σ w·f over the differentiated arguments, ours against JAX's."""
    values = points(spec, seed)
    active = [i for i, s in enumerate(spec) if type(s) is tuple]
    w = np.random.default_rng(seed + 1).standard_normal(N)

    def fill(call, xs):
        full = list(values)
        for i, x in zip(active, xs):
            full[i] = x
        return call(*full)

    def mine(*xs):
        return np.sum(fill(ours, xs) * w)

    def jaxs(*xs):
        return jnp.sum(fill(theirs, xs) * w)

    args = [values[i] for i in active]
    got = db.gradient(mine, *args)
    try:
        want = jax.jit(jax.grad(jaxs, argnums=tuple(range(len(args)))))(*[jnp.asarray(a) for a in args])
    except Exception as error:  # noqa: BLE001 - JAX has no derivative there: nothing to compare with
        pytest.skip(f"jax.grad fails: {type(error).__name__}: {error}"[:200])
    got = got if len(args) > 1 else (got,)
    for g, v in zip(got, want):
        v = np.asarray(v)
        finite = np.isfinite(v)  # JAX's spence has a NaN gradient for z > 1: compared where JAX has a number
        assert finite.sum() >= N // 2, f"JAX's gradient is not finite at {np.flatnonzero(~finite)}"
        np.testing.assert_allclose(np.asarray(g)[finite], v[finite], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("func, spec", SPECIAL, ids=lambda v: jax_name(v) if isinstance(v, np.ufunc) else "")
def test_scipy_special_against_jax(func, spec):
    theirs = getattr(jsp, jax_name(func), None) or getattr(jnp, jax_name(func), None)  # log1p: jax.numpy's
    if theirs is None:
        pytest.skip(f"neither jax.scipy.special nor jax.numpy has {jax_name(func)}")
    called = scipy_special.CALLED_AS.get(func, func)
    compare(called, theirs, spec)


@pytest.mark.parametrize("ours, theirs, spec", NUMPY, ids=[f"{i}" for i in range(len(NUMPY))])
def test_numpy_against_jax(ours, theirs, spec):
    compare(ours, theirs, spec)


@pytest.mark.parametrize("f", [jnp.maximum, jnp.minimum], ids=["maximum", "minimum"])
def test_ties_split_as_in_jax(f):
    """At x == y JAX gives ½ to each argument; relu at 0 gives ½: the library's convention is JAX's."""
    ours = {jnp.maximum: np.maximum, jnp.minimum: np.minimum}[f]
    x = np.array([1.0, 0.0, -2.0])
    want = jax.grad(lambda a, b: jnp.sum(f(a, b)), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(x))
    got = db.gradient(lambda a, b: np.sum(ours(a, b)), x, x.copy())
    for g, v in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(v))
    relu = jax.grad(lambda a: jnp.sum(f(a, 0.0)))(jnp.zeros(2))
    np.testing.assert_array_equal(db.gradient(lambda a: np.sum(ours(a, 0.0)), np.zeros(2)), np.asarray(relu))


def test_wofz_against_jax_in_complex128_and_of_reals():
    """w'(z) = -2z w(z) + 2i/√π against jax.grad of a real projection (Re Σ c·w, complex c): JAX's convention,
    ∂/∂x - i ∂/∂y, for complex z all over the plane and for real x (the real part of that)."""
    import scipy.special as sc

    rng = np.random.default_rng(3)
    c = rng.standard_normal(N) + 1j * rng.standard_normal(N)
    for z in (rng.uniform(-3, 3, N) + 1j * rng.uniform(-3, 3, N), rng.uniform(-3, 3, N)):
        got = db.gradient(lambda z: np.real(np.sum(c * sc.wofz(z))), z)
        want = jax.grad(lambda z: jnp.real(jnp.sum(c * jsp.wofz(z))))(jnp.asarray(z))
        assert got.dtype == z.dtype
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-9, atol=1e-12)


def test_hurwitz_zeta_in_its_exponent_against_mpmath():
    """∂ζ(x, q)/∂x (the differentiated Euler-Maclaurin expansion) against mpmath's ζ'(x, q), an independent
    implementation, near the pole x = 1, for large x, small and large q; float32 to its precision."""
    mpmath = pytest.importorskip("mpmath")
    import scipy.special as sc

    x = np.array([1.01, 1.1, 1.5, 2.0, 3.0, 6.0, 20.0, 3.0, 45.0])
    q = np.array([0.05, 0.3, 0.5, 1.0, 2.5, 0.7, 1.5, 40.0, 0.9])
    want = np.array([float(mpmath.zeta(a, b, 1)) for a, b in zip(x, q)])
    np.testing.assert_allclose(db.gradient(lambda x: np.sum(sc.zeta(x, q)), x), want, rtol=1e-13)
    np.testing.assert_allclose(db.gradient(lambda x: db.sum(sc.zeta, x, q), x), want, rtol=1e-13)
    got = db.gradient(lambda x: np.sum(sc.zeta(x, q.astype(np.float32))), x.astype(np.float32))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5)


def test_incomplete_gamma_in_its_parameter_against_mpmath():
    """∂P(a, x)/∂a in both of its regimes (series: x <= 1 or x <= a; continued fraction: beyond), small and
    large a, against mpmath's derivative of its own P; ∂Q/∂a is its negative; 0 at x = 0 and x = inf (P
    is constant there in a), NaN where SciPy's P is NaN."""
    mpmath = pytest.importorskip("mpmath")
    import scipy.special as sc

    mpmath.mp.dps = 40
    a = np.array([0.1, 0.5, 1.5, 3.0, 10.0, 50.0, 0.7, 2.0, 30.0, 200.0, 1.0, 1e-3, 1000.0])
    x = np.array([0.05, 2.0, 0.3, 7.0, 10.0, 45.0, 30.0, 0.01, 60.0, 210.0, 1.0, 0.5, 1010.0])
    want = np.array([float(mpmath.diff(lambda s: mpmath.gammainc(s, 0, b, regularized=True), c))
                     for c, b in zip(a, x)])
    mpmath.mp.dps = 15
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(sc.gammainc(a, x)), a), want, rtol=1e-12)
    np.testing.assert_allclose(db.gradient(lambda a: np.sum(sc.gammaincc(a, x)), a), -want, rtol=1e-12)
    np.testing.assert_allclose(db.gradient(lambda a: db.sum(sc.gammainc, a, x), a), want, rtol=1e-12)
    edges = db.gradient(lambda a: np.sum(sc.gammainc(a, np.array([0.0, np.inf, 1.0, -1.0]))),
                        np.array([2.0, 2.0, -1.0, 2.0]))
    np.testing.assert_array_equal(edges, [0.0, 0.0, np.nan, np.nan])
