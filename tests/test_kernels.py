"""Kernel-layer contracts: a pullback may overwrite its partials, so they never alias user data."""

import numpy as np
import pytest

import dualbroadcast as db

BACKENDS = ["numpy", "blocked", "numexpr"]
N = 70_000  # large enough that every backend is eligible


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", [False, True])
def test_partial_equal_to_an_input_does_not_alias_it(backend, reduce):
    y = np.linspace(1.0, 2.0, N)
    original = y.copy()
    op = db.sum if reduce else db.broadcast

    def f(x):
        return np.sum(op(lambda a, b: a * b, x, db.cut(y), backend=backend) * 2.0)

    g = db.gradient(f, np.ones(N))
    np.testing.assert_array_equal(y, original)
    np.testing.assert_allclose(g, 2.0 * original)


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_equal_to_the_value_does_not_alias_it(backend):
    seen = {}

    def f(x):
        out = db.broadcast(np.exp, x, backend=backend)  # ∂exp/∂x is exp itself
        seen["value"] = out.value
        return np.sum(out * 3.0)

    g = db.gradient(f, np.zeros(N))
    np.testing.assert_array_equal(seen["value"], np.ones(N))
    np.testing.assert_allclose(g, np.full(N, 3.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pullback_called_twice_gives_the_same_cotangent(backend):
    x = np.linspace(0.0, 1.0, N)
    y, back = db.pullback(lambda x: db.sum(lambda r: np.exp(-3 * (r + 1)), x, backend=backend), x)
    first = back(1.0)
    np.testing.assert_allclose(back(2.0), 2 * first)
    np.testing.assert_allclose(first, -3 * np.exp(-3 * (x + 1)))
