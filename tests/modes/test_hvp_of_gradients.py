"""`hvp` of a function that takes a gradient inside (reverse over forward meeting forward over reverse), against
the gradient of ⟨∇g, v⟩ and JAX."""


import numpy as np
import pytest

import dualbroadcast as db


def _gradient_inside(how):
    """``⟨∇f(x), v⟩ / 2`` with the gradient taken inside by ``how``: a function whose Hessian holds third
    derivatives of f."""
    def f(x):
        return np.sum(np.exp(-x) * x ** 2) + np.sum(x) ** 2 + np.sum(np.sin(x) ** 3)

    x0 = np.linspace(0.1, 1, 5)
    inner = {"gradient": lambda x: db.gradient(f, x), "value_and_gradient": lambda x: db.value_and_gradient(f, x)[1],
             "prepared": db.prepare_gradient(f, x0)}[how]
    v = np.cos(np.arange(5.0))
    return (lambda x: np.dot(inner(x), v) * 0.5), x0, v


@pytest.mark.parametrize("how", ["gradient", "value_and_gradient", "prepared"])
def test_hvp_of_a_function_taking_a_gradient(how):
    """`hvp` of a function that takes a gradient inside: reverse over forward meets forward over reverse, which
    raised an ArgumentTypeError telling the user to call db.hvp; now hvp falls back to reverse over reverse, as it
    does where forward mode cannot go, and gives what the gradient of ⟨∇g, v⟩ gives; and so does forward over
    reverse, asked directly."""
    g, x, v = _gradient_inside(how)
    expected = db.gradient(lambda x: np.dot(db.gradient(g, x), v), x)
    np.testing.assert_allclose(db.hvp(g, x, v), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(db.prepare_hvp(g, x)(x, v), expected, rtol=1e-12, atol=1e-14)
    forward_over_reverse = db.jvp(lambda x: db.gradient(g, x), (x,), (v,))[1]  # once an error
    np.testing.assert_allclose(forward_over_reverse, expected, rtol=1e-12, atol=1e-14)


def test_hvp_of_a_gradient_inside_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    g, x, v = _gradient_inside("gradient")

    def g_jax(z):
        return 0.5 * jnp.dot(jax.grad(lambda y: jnp.sum(jnp.exp(-y) * y ** 2) + jnp.sum(y) ** 2
                                      + jnp.sum(jnp.sin(y) ** 3))(z), v)

    expected = np.asarray(jax.jvp(jax.grad(g_jax), (x,), (v,))[1])
    np.testing.assert_allclose(db.hvp(g, x, v), expected, rtol=1e-12, atol=1e-14)
