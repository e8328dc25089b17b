"""Dicts pair their leaves by key (tangents, hvp vectors, cotangents, ``out=``), and other keys are a clear
error."""


import numpy as np
import pytest

import dualbroadcast as db


def test_dicts_pair_their_leaves_by_key():
    """Two dicts with the same keys inserted in another order (tangents, vectors, cotangents, ``out=``) were
    paired leaf by leaf in insertion order: the tangent of "a" went to "b", silently.  Dicts flatten in sorted
    key order now (JAX's), and are rebuilt in their own order."""
    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}

    def f(p):
        return np.sum(p["a"] ** 2) + np.sum(np.sin(p["b"]))

    va, vb = np.array([1.0, -1.0]), np.array([0.5, 2.0])
    ordered, reordered = {"a": va, "b": vb}, {"b": vb, "a": va}
    assert db.jvp(f, (p,), (reordered,))[1] == pytest.approx(db.jvp(f, (p,), (ordered,))[1], rel=1e-15)
    assert db.jvp(f, (p,), (ordered,))[1] == pytest.approx(np.dot(2 * p["a"], va) + np.dot(np.cos(p["b"]), vb))
    expected = {"a": 2 * va, "b": -np.sin(p["b"]) * vb}
    for got in (db.hvp(f, p, reordered), db.prepare_hvp(f, p)(p, reordered)):
        assert list(got) == ["a", "b"]  # the argument's own order
        for k in p:
            np.testing.assert_allclose(got[k], expected[k], rtol=1e-14)
    out = {"b": np.zeros(2), "a": np.zeros(2)}
    db.prepare_gradient(f, p)(p, out=out)
    np.testing.assert_allclose(out["a"], 2 * p["a"], rtol=1e-15)
    np.testing.assert_allclose(out["b"], np.cos(p["b"]), rtol=1e-15)
    _, back = db.pullback(lambda p: {"u": p["a"] * 2, "w": p["b"] * 3}, p)
    cotangent = back({"w": np.ones(2), "u": np.zeros(2)})
    np.testing.assert_array_equal(cotangent["a"], np.zeros(2))
    np.testing.assert_array_equal(cotangent["b"], np.full(2, 3.0))
    assert list(db.gradient(f, {"b": p["b"], "a": p["a"]})) == ["b", "a"]


def test_a_dict_of_keys_that_do_not_sort_keeps_its_order():
    p = {1: np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    g = db.gradient(lambda p: np.sum(p[1] ** 2) + np.sum(p["b"]), p)
    assert list(g) == [1, "b"]
    np.testing.assert_array_equal(g[1], 2 * p[1])


def test_a_dict_of_other_keys_is_a_clear_error():
    """Tangents, hvp vectors or cotangents whose dicts have other keys than the primal's (the same number of
    leaves) were paired by position: now a ShapeMismatchError naming both keys."""
    p = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}

    def f(p):
        return np.sum(p["a"] ** 2) + np.sum(np.sin(p["b"]))

    other = {"a": np.ones(2), "c": np.ones(2)}
    with pytest.raises(db.ShapeMismatchError, match=r"keys \[\('a', 'c'\)\], its primal's \[\('a', 'b'\)\]"):
        db.jvp(f, (p,), (other,))
    with pytest.raises(db.ShapeMismatchError, match="keys"):
        db.hvp(f, p, other)
    _, back = db.pullback(lambda p: {"u": p["a"], "w": p["b"]}, p)
    with pytest.raises(db.ShapeMismatchError, match=r"the output's \[\('u', 'w'\)\]"):
        back({"u": np.ones(2), "v": np.ones(2)})
