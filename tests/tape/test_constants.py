"""Backward work proportional to what is active: constants cost nothing, rules keep only what they need.

Memory is measured with tracemalloc, not time, so these tests are stable on a busy machine.
"""

import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import dualbroadcast as db


def backward_allocation(f, x):
    """Peak bytes allocated by the backward pass alone (the forward pass is excluded)."""
    _, back = db.pullback(f, x)
    back(1.0)  # warm up any lazily created state
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        back(1.0)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "model",
    [
        lambda c, proj: (lambda p: c[0] * p),
        lambda c, proj: (lambda p: (c @ proj) * p),
        lambda c, proj: (lambda p: np.sum(c * proj) * p + np.dot(c, proj) * p**2),
    ],
    ids=["c[0]*p", "(c@proj)*p", "sum(c*proj)*p"],
)
def test_backward_allocation_does_not_grow_with_a_constant(model):
    sizes = {}
    for n in (10**3, 10**6):
        c = np.ones(n)
        proj = np.zeros(n)
        proj[0] = 1.0
        f = model(c, proj)
        sizes[n] = backward_allocation(f, 1.5)
        assert db.gradient(f, 1.5) == pytest.approx(_fd(f, 1.5), rel=1e-6)
    assert sizes[10**6] <= sizes[10**3] + 1024, f"backward allocated {sizes} bytes"
    assert sizes[10**6] < 8 * 10**3, "the backward pass allocated something of the constant's size"


def _fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def test_cut_argument_costs_no_backward_work():
    data = np.random.default_rng(0).random(10**6)
    f = lambda p, d: np.sum(d) * p**2
    assert backward_allocation(lambda p: f(p, data), 1.0) < 8 * 10**3
    gp, gd = db.gradient(f, 2.0, db.cut(data))
    assert gd is None and gp == pytest.approx(4.0 * np.sum(data))


def test_matmul_with_a_constant_keeps_the_constant_not_the_variable():
    A = np.random.default_rng(1).random((50, 40))
    seen = {}

    def f(x):
        B = x * 2.0  # multiply's pullback for x keeps only the constant 2.0
        seen["B"] = weakref.ref(B.value)
        return np.sum(A @ B)

    _, back = db.pullback(f, np.ones((40, 3)))
    gc.collect()
    assert seen["B"]() is None, "the tape kept the active operand's value, which no cotangent needs"
    np.testing.assert_allclose(back(1.0), 2.0 * np.broadcast_to(A.sum(axis=0)[:, None], (40, 3)))


def test_value_used_many_times_accumulates_in_one_buffer():
    x = np.random.default_rng(2).random(10**5)

    def many_uses(x):
        total = 0.0
        for k in range(50):
            total = total + np.sum(x * float(k))
        return total

    _, back = db.pullback(many_uses, x)
    back(1.0)
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        g = back(1.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(g, np.full_like(x, sum(range(50))))
    assert peak < 6 * x.nbytes, f"accumulating 50 cotangents peaked at {peak / x.nbytes:.1f} arrays"
