"""Forward mode's last resort, the pullback transposed element by element (`forward._transpose`'s dense path),
on complex values: a conjugated or sign-flipped tangent must fail here."""

import numpy as np
import pytest

import dualbroadcast as db

jax = pytest.importorskip("jax")


@db.primitive
def cube(z):
    return z**3


@db.primitive
def conjugate(z):
    return np.conj(z)


@db.primitive
def real_times(z):
    return np.real(z) * z


# Pullbacks that are not NumPy code on tracked values (np.asarray): forward mode must transpose them densely.
db.defvjp(cube, lambda ans, z: lambda g: np.asarray(g) * 3 * np.asarray(z) ** 2)
db.defvjp(conjugate, lambda ans, z: lambda g: np.conj(np.asarray(g)))
# w = Re(z) z, dw = Re(dz) z + Re(z) dz: in JAX's convention z's cotangent is Re(g z) + Re(z) g (compared with
# jax.vjp below, so the fallback transposes a pullback known to be right).
db.defvjp(real_times, lambda ans, z: lambda g: np.real(np.asarray(g) * np.asarray(z)) + np.real(z) * np.asarray(g))

Z = np.array([1.0 + 2.0j, -0.5 + 0.25j, 3.0 - 1.0j])
T = np.array([0.3 - 1.1j, 2.0 + 0.5j, -1.0 + 0.0j])


@pytest.mark.parametrize("ours, theirs", [
    (cube, lambda z: z**3),
    (conjugate, lambda z: jax.numpy.conj(z)),
    (real_times, lambda z: jax.numpy.real(z) * z),
], ids=["holomorphic", "conjugate", "real-linear"])
def test_dense_transpose_of_a_complex_pullback_matches_jax(ours, theirs):
    with jax.enable_x64(True):
        want = np.asarray(jax.jvp(theirs, (jax.numpy.asarray(Z),), (jax.numpy.asarray(T),))[1])
        _, vjp = jax.vjp(theirs, jax.numpy.asarray(Z))
        g = np.array([0.7 + 0.2j, -1.0 + 1.5j, 0.1 - 0.4j])
        np.testing.assert_allclose(db.pullback(ours, Z)[1](g), np.asarray(vjp(g)[0]), rtol=1e-12)
    _, tangent = db.jvp(ours, (Z,), (T,))
    np.testing.assert_allclose(tangent, want, rtol=1e-12)
