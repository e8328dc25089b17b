"""`db.cut` of a container inside a differentiated function is a stop-gradient of each of its leaves: a dual
leaf (forward mode, and reverse over forward in `db.hvp`) becomes its plain value, a leaf under `uncut` stays
a variable; checked against JAX's ``stop_gradient``."""

import numpy as np
import pytest

import dualbroadcast as db

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

CONTAINERS = {  # name: (the cut of (x, sin x) in dualbroadcast, the same in JAX), each returning the pair
    "list": (lambda x: db.cut([x, np.sin(x)]), lambda x: jax.lax.stop_gradient([x, jnp.sin(x)])),
    "tuple": (lambda x: db.cut((x, np.sin(x))), lambda x: jax.lax.stop_gradient((x, jnp.sin(x)))),
    "dict": (lambda x: list(db.cut({"a": x, "b": np.sin(x)}).values()),
             lambda x: list(jax.lax.stop_gradient({"a": x, "b": jnp.sin(x)}).values())),
    "uncut inside": (lambda x: db.cut((x, db.uncut(np.sin(x)))),
                     lambda x: (jax.lax.stop_gradient(x), jnp.sin(x))),
}


def program(xp, pair_of):
    """A scalar function of ``x`` reading both leaves of a cut pair of values of ``x``."""
    def f(x):
        a, b = pair_of(x)
        return xp.sum(b * x ** 2 + a * xp.cos(x))
    return f


@pytest.mark.parametrize("name", CONTAINERS)
def test_a_cut_container_stops_the_tangent_of_each_leaf(name):
    ours, theirs = CONTAINERS[name]
    rng = np.random.default_rng(5)
    x, t = rng.standard_normal(4), rng.standard_normal(4)
    value, tangent = db.jvp(program(np, ours), (x,), (t,))
    want_value, want_tangent = jax.jvp(program(jnp, theirs), (x,), (t,))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(tangent, want_tangent, rtol=1e-12)


@pytest.mark.parametrize("name", CONTAINERS)
def test_a_cut_container_stops_the_hessian_of_each_leaf(name):
    ours, theirs = CONTAINERS[name]
    rng = np.random.default_rng(6)
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    want = jax.jvp(jax.grad(program(jnp, theirs)), (x,), (v,))[1]
    np.testing.assert_allclose(db.hvp(program(np, ours), x, v), want, rtol=1e-12, atol=1e-14)
