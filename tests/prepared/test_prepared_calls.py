"""A prepared gradient's call of one array or one float (issue 18, per-call overhead): its shortcuts against
the general paths.

- ``one``: a program of one leaf is also compiled to a function of that leaf returning its gradient alone;
  `PreparedGradient.__call__` calls it for one array or one float, finding the thread's programs through the
  last ones it used (``array``, ``floats``) and checking the globals through `replay.globals_check`.
- a term ``1 · d`` of a scalar whose cotangent is a known one is written ``d`` where that keeps its type
  (`replay_backward.BackwardWriter.unit_cotangent`).
- a fold of Python floats returns its known gradient as one constant tuple.

Each must give what `db.gradient` gives: numbers (bit for bit where the operations are the same), types
and dtypes, for Python floats, NumPy scalars, 0-d arrays, float32 and float64; guards and rebound or deleted
globals must still record again; threads must not share a program.
"""

import re
import threading

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import demo


def assert_identical(got, expected):
    assert type(got) is type(expected), (type(got), type(expected))
    assert np.result_type(got) == np.result_type(expected)
    np.testing.assert_array_equal(got, expected)


def central(f, x, h=1e-6):
    return (float(f(x + h)) - float(f(x - h))) / (2 * h)


def _poly(x):
    """Terms whose cotangents are known ones (x**2, x**3) or a known number (0.25 x**4)."""
    return x**2 + x**3 + 0.25 * x**4


def _mixed(x):
    """A product whose partial is the leaf itself (``g · x``: a 0-d array stays one, a Python float a float)."""
    return np.sin(x) * x + np.exp(x) / x


def _sech_sin(x):
    return 1 / np.cosh(np.sin(x))


def _tanh_cos(x):
    return np.tanh(np.cos(x))


LEAVES = [0.7, np.float64(0.7), np.float32(0.7), np.array(0.7), np.array(0.7, np.float32)]


@pytest.mark.parametrize("x", LEAVES, ids=["float", "float64", "float32", "0-d", "0-d float32"])
@pytest.mark.parametrize("f", [_poly, _mixed, _sech_sin, _tanh_cos])
def test_scalar_programs_like_gradient(f, x):
    """Scalar steps only: the prepared gradient and value are db.gradient's, bit for bit and of its type, on
    every call (the first replays, the others take ``one``), at the recorded point and a moved one."""
    prog = db.prepare_gradient(f, x)
    for point in (x, x * 1.5, x):
        expected = db.gradient(f, point)
        for _ in range(3):
            assert_identical(prog(point), expected)
        value, gradient = prog.value_and_gradient(point)
        assert_identical(gradient, expected)
        assert_identical(value, db.value_and_gradient(f, point)[0])
    assert prog.recordings == 1
    if np.result_type(x) == np.float64:
        assert abs(float(prog(x)) - central(f, float(x))) < 1e-6


def test_calls_of_other_kinds_in_turns():
    """One prepared gradient called in turns with a Python float, a NumPy scalar, a 0-d array, an array and a
    tuple: each call db.gradient's (the thread's last program of one float or one array says it is not for the
    others, and they take the general path), each kind recorded once."""
    f = lambda x: np.sum(np.sin(x) * x)
    calls = [0.5, np.float64(0.25), np.array(0.75), np.linspace(0.1, 1.0, 3), np.float32(0.5)]
    prog = db.prepare_gradient(f, 0.5)
    for _ in range(3):
        for x in calls:
            assert_identical(prog(x), db.gradient(f, x))
    assert prog.recordings == 4  # a float, a 0-d float64 (a scalar or an array: one signature), (3,), float32
    g = lambda xs: xs[0] * np.sin(xs[1])
    prog = db.prepare_gradient(g, (0.5, 0.25))
    for _ in range(3):
        for xs in [(0.5, 0.25), [0.5, 0.25], np.array([0.5, 0.25])]:
            got, expected = prog(xs), db.gradient(g, xs)
            assert type(got) is type(expected)
            np.testing.assert_array_equal(np.asarray(got, float), np.asarray(expected, float))


def _sources(prog):
    (program,) = next(iter(prog.variants.values()))
    return program.source, program.gradient.__globals__


def test_known_one_cotangents_are_not_multiplied():
    """``p**2 + p**3`` of a sum: the powers' cotangents are known ones, and no line multiplies by a one (there
    were two such products, ~60 ns each); the 0.25 of ``0.25 p**4`` is still multiplied."""
    f = lambda x: _poly(np.sum(np.exp(-3 * (x + 1))))
    x = np.linspace(0.1, 1.0, 7)
    prog = db.prepare_gradient(f, x)
    np.testing.assert_allclose(prog(x), db.gradient(f, x), rtol=1e-14)
    source, names = _sources(prog)
    ones = [n for n, v in names.items() if type(v) is np.float64 and v == 1]
    quarters = [n for n, v in names.items() if type(v) is np.float64 and v == 0.25]
    assert quarters and any(re.search(rf"\b{n} \*", source) for n in quarters)
    assert not any(re.search(rf"\b{n} \*|\* {n}\b", source) for n in ones), source


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_of_leaves_keep_their_types(dtype):
    """``x * y`` of two 0-d arrays and of two NumPy scalars: each partial is the other argument, a known-one
    cotangent times it; the gradients keep db.gradient's types (an array is not returned as a scalar)."""
    f = lambda x, y: x * y + x
    for x, y in [(np.array(0.5, dtype), np.array(-2.0, dtype)), (dtype(0.5), dtype(-2.0))]:
        prog = db.prepare_gradient(f, x, y)
        for _ in range(3):
            for got, expected in zip(prog(x, y), db.gradient(f, x, y)):
                assert_identical(got, expected)


def test_a_known_one_times_a_partial_of_another_dtype_stays_a_product():
    """``sin(x) · (w · z)``, x and w float32, z float64: the product's cotangent is a known float64 one, its partial
    ``sin(x)`` a float32 scalar; written alone it would make ``w · z``'s cotangent float32, and z's gradient
    ``g · w`` a float32 product.  The gradients are db.gradient's, bit for bit, in each leaf's dtype."""
    f = lambda x, w, z: np.sin(x) * (w * z)
    rng = np.random.default_rng(7)
    for _ in range(5):
        x, w = rng.uniform(-2, 2, 2).astype(np.float32)
        z = rng.uniform(-2, 2)
        for args in [(x, w, np.float64(z)), (np.array(x), np.array(w), np.array(z))]:
            prog = db.prepare_gradient(f, *args)
            for got, expected in zip(prog(*args), db.gradient(f, *args)):
                assert_identical(got, expected)


def _branch(x):
    return np.sum(x**2) if x[0] > 0 else np.sum(np.sin(x) * x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_array_guards_record_and_replay_both_ways(dtype):
    """A branch on one array's value: each way recorded once, then replayed in turns from ``__call__``'s
    shortcut, each call db.gradient's gradient; a fresh array each call."""
    up, down = np.linspace(0.5, 1.0, 4).astype(dtype), np.linspace(-1.0, 0.5, 4).astype(dtype)
    prog = db.prepare_gradient(_branch, up)
    previous = None
    for x in (up, down, up, down, down, up):
        got = prog(x)
        assert_identical(got, db.gradient(_branch, x))
        assert got is not previous
        previous = got
    assert prog.recordings == 2
    assert prog(np.linspace(0.5, 1.0, 5).astype(dtype)).shape == (5,)  # another shape: another variant
    assert prog.recordings == 3


OFFSET = 1.0


def _offset(x):
    return np.sum(x * OFFSET)


def _bind(value):
    """Bind the global ``OFFSET`` to ``value``; None: delete it."""
    global OFFSET
    if value is None:
        del OFFSET
    else:
        OFFSET = value


@pytest.mark.parametrize("x", [np.ones(3), 0.5], ids=["array", "float"])
def test_deleted_or_rebound_global_records_again(x):
    """A global rebound records again; deleted, the call raises f's own NameError (not a stale replay);
    bound again, the gradient follows it."""
    _bind(1.0)
    prog = db.prepare_gradient(_offset, x)
    assert_identical(prog(x), db.gradient(_offset, x))
    _bind(3.0)
    assert np.all(prog(x) == 3.0) and prog.recordings == 2
    _bind(None)
    with pytest.raises(NameError):
        prog(x)
    _bind(2.0)
    assert_identical(prog(x), db.gradient(_offset, x))
    assert np.all(prog(x) == 2.0)


def test_globals_of_another_module_are_checked(monkeypatch):
    """The globals of a function called by a global name, in its own module (demo's ``energy``), rebound:
    recorded again."""
    x = np.linspace(0.1, 1.0, 5)
    eam = demo.eam
    g = lambda x: eam(x)  # reads demo's globals (energy, rho) through eam
    prog = db.prepare_gradient(g, x)
    np.testing.assert_allclose(prog(x), demo.eam_hand_gradient(x), rtol=1e-12)
    monkeypatch.setattr(demo, "energy", lambda p: 2.0 * p)
    np.testing.assert_allclose(prog(x), db.gradient(g, x), rtol=1e-14)
    np.testing.assert_allclose(prog(x), 2.0 * -3 * np.exp(-3 * (x + 1)), rtol=1e-14)
    assert prog.recordings == 2


def test_threads_replay_programs_of_their_own():
    """Threads calling one prepared gradient of one array at once: each its own programs (a program's buffers
    are reused by its calls), each result the gradient of its own argument."""
    n = 4
    prog = db.prepare_gradient(demo.eam, np.linspace(0.1, 1.0, 50))
    barrier = threading.Barrier(n)
    errors = []

    def work(k):
        try:
            x = np.linspace(0.1, 1.0, 50) * (k + 1)
            expected = demo.eam_hand_gradient(x)
            barrier.wait()
            for _ in range(200):
                np.testing.assert_allclose(prog(x), expected, rtol=1e-12)
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _fold(xs):
    total = xs[0]
    for v in xs[1:]:
        total = total - v
    return total


def test_a_fold_returns_its_known_gradient_as_one_tuple():
    """A fold of floats: its gradient is known when compiled, returned as one tuple of floats (the same on every
    call, it cannot be changed); a list call gets a new list; the value still computed by value_and_gradient."""
    xs = (0.5, 0.25, 2.0, -1.0)
    prog = db.prepare_gradient(_fold, xs)
    first = prog(xs)
    assert first == db.gradient(_fold, xs) == (1.0, -1.0, -1.0, -1.0)
    assert all(type(g) is float for g in first) and prog(xs) == first
    got = prog(list(xs))
    got[0] = 5.0
    assert prog(list(xs)) == [1.0, -1.0, -1.0, -1.0]
    assert prog.value_and_gradient(xs) == db.value_and_gradient(_fold, xs)


def test_a_scalar_step_of_constants_alone_does_not_stop_the_compiler():
    """A 0-d elementwise step computed from cut arguments alone keeps no result (its ``outs`` is [None]): the
    scalars the backward code writes skip it (found by the long random programs: a KeyError at compile)."""

    def f(x, c):
        return np.sum(x * np.sin(x)) + np.sum(np.real(np.exp(1j * np.sin(c))) * np.cos(0.5))

    x, c = np.linspace(0.1, 1, 3), np.asarray(0.7)
    prog = db.prepare_gradient(f, x, db.cut(c))
    for point in (x, 2 * x):
        expected = db.gradient(f, point, db.cut(c))
        got = prog(point, db.cut(c))
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-15)
        np.testing.assert_allclose(got[0], np.sin(point) + point * np.cos(point), rtol=1e-14)
        assert got[1] is None


def test_a_tuple_or_list_of_arrays_is_replayed_by_a_cheap_key_like_gradient():
    """A model's parameters, a tuple or list of arrays (float32 among them, a 0-d one, a NumPy scalar): replayed by
    the key of their shapes and dtypes (`prepared._plain`: no pytree signature per call), each gradient
    db.gradient's, of its type and dtype, into ``out=`` too; other shapes record anew."""
    x = np.linspace(-1, 1, 12).reshape(4, 3)

    def loss(params):
        w, b, scale, shift = params
        return np.sum(np.tanh(x @ w + b) * scale) + shift * np.sum(w)

    for kind in (tuple, list):
        params = kind([np.linspace(0.1, 0.6, 6).reshape(3, 2), np.array([0.5, -0.25], np.float32), np.array(1.5),
                       np.float64(0.3)])
        prog = db.prepare_gradient(loss, params)
        for point in (params, kind(p * 1.5 for p in params), params):
            expected_value, expected = db.value_and_gradient(loss, point)
            for got in (prog(point), prog.value_and_gradient(point)[1]):
                assert type(got) is kind and len(got) == len(expected)
                for g, e in zip(got, expected):
                    assert_identical(g, e)
            assert_identical(prog.value_and_gradient(point)[0], expected_value)
        assert ((kind, tuple((np.shape(p), p.dtype) for p in params)),) in prog.variants
        out = kind(np.empty_like(p) for p in params[:3]) + kind([np.empty(())])
        prog(params, out=out)
        for o, e in zip(out, db.gradient(loss, params)):
            np.testing.assert_array_equal(o, e)
        wider = kind([np.ones((3, 4)), np.ones(4, np.float32), np.array(1.0), np.float64(0.0)])
        for g, e in zip(prog(wider), db.gradient(loss, wider)):
            assert_identical(g, e)
        assert prog.recordings == 2
