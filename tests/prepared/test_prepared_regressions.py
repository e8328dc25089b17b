"""Prepared gradients agree with db.gradient, in values and types, or give its clear error.

Each class here was found by random programs or by changing state between calls; each regression test
failed on the code before its fix (a crash where db.gradient works, a wrong type, or a silently stale
gradient).  The last sections take paths no test took: one prepared gradient over many calls, and
the code the replay generates for constant cotangents and kernels (found by a mutation run).
Expected values come from db.gradient and from gradients written by hand.
"""

import collections
import dataclasses

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast import pytree

RNG = np.random.default_rng(7)


def assert_same(got, expected):
    """Equal values with the same structure, types, shapes and dtypes (None where expected is None)."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
    elif isinstance(expected, dict) or dataclasses.is_dataclass(expected):
        got_leaves, expected_leaves = pytree.flatten(got)[0], pytree.flatten(expected)[0]
        assert len(got_leaves) == len(expected_leaves)
        for g, e in zip(got_leaves, expected_leaves):
            assert_same(g, e)
    elif expected is not None:
        assert np.shape(got) == np.shape(expected) and np.result_type(got) == np.result_type(expected)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def assert_replays_like_gradient(f, example, *calls):
    """The prepared gradient of ``f`` (recorded on ``example``) on each call, twice (a replay), equals
    `db.gradient`'s and `db.value_and_gradient`'s; returns the prepared gradient."""
    prog = db.prepare_gradient(f, *example)
    for args in (example, *calls):
        expected_value, expected = db.value_and_gradient(f, *args)
        assert_same(prog(*args), expected)
        value, g = prog.value_and_gradient(*args)
        assert_same(g, expected)
        assert_same(value, expected_value)
    return prog


# --- 1. zero-derivative functions ------------------------------------------------------------------
@pytest.mark.parametrize("zero", [np.floor, np.ceil, np.sign, np.round, np.rint, np.trunc, lambda x: x // 0.5,
                                  lambda x: np.heaviside(x, 0.5)],
                         ids=["floor", "ceil", "sign", "round", "rint", "trunc", "floor_divide", "heaviside"])
def test_a_zero_derivative_function_of_a_differentiated_value_replays(zero):
    f = lambda x: np.sum(zero(x) * x)
    x = np.array([1.3, -0.7, 2.2, 0.4])
    prog = assert_replays_like_gradient(f, (x,), (x * 3.1,), (-x,))
    np.testing.assert_array_equal(prog(x * 1.7), zero(x * 1.7))  # by hand: d/dx (z(x) x) = z(x), z' = 0


@pytest.mark.parametrize("f", [lambda x: np.floor(x[0]), lambda x: np.sign(np.sum(x)) * 2.0], ids=["floor", "sign"])
def test_a_zero_derivative_function_giving_the_result(f):
    """The result is recorded without parents: the replay sends its seed nowhere."""
    assert_replays_like_gradient(f, (np.array([1.5, 2.0]),), (np.array([-2.5, 1.0]),))


def test_a_result_that_depends_on_no_argument_gives_zeros_like_gradient():
    x = np.array([1.0, -2.0])
    assert_replays_like_gradient(lambda x: 3.0, (x,), (x * 2,))
    branch = lambda x: np.float64(2.0) if x[0] > 0 else np.sum(x * x)
    prog = assert_replays_like_gradient(branch, (x,), (-x,), (x * 3,), (-x * 2,))
    assert prog.recordings == 2  # the branch is a guard of the constant result too


# --- 2. kernels whose arguments broadcast --------------------------------------------------------
@pytest.mark.parametrize("backend", [None, "numpy", "blocked", "numexpr"])
@pytest.mark.parametrize("rows", [4, 300])
def test_a_broadcast_kernel_of_arguments_of_different_shapes(backend, rows):
    c, a = RNG.random(200), RNG.random((rows, 200))
    kernel = lambda p, q: p * q  # the partial for q is p: the shape of c, not of the value
    f = lambda a, c: np.sum(db.broadcast(kernel, c, a, backend=backend) * a)
    prog = assert_replays_like_gradient(f, (a, c), (a * 2, c + 1), (a - 1, c * 3))
    ga, gc = prog(a + 0.5, c * 0.5)
    np.testing.assert_allclose(ga, 2 * (c * 0.5) * (a + 0.5), rtol=1e-12)  # by hand: f = sum(c a²)
    np.testing.assert_allclose(gc, np.sum((a + 0.5) ** 2, axis=0), rtol=1e-12)
    assert_replays_like_gradient(f, (a, db.cut(c)), (a * 2, db.cut(c + 1)))


@pytest.mark.parametrize("backend", [None, "numpy", "blocked", "numexpr"])
@pytest.mark.parametrize(
    "make",
    [
        lambda c: np.broadcast_to(c, (300, 200)),
        lambda c: np.repeat(c[None], 300, axis=0),
        lambda c: np.repeat(np.broadcast_to(c, (2, 200)), 150, axis=0),
    ],
    ids=["broadcast_to", "repeat", "broadcast_to-repeat"],
)
def test_a_broadcast_kernel_after_broadcast_to_and_repeat_chains(make, backend):
    c, a = RNG.random(200), RNG.random((300, 200))
    for kernel in (lambda p, q: p * q, lambda p, q: p + np.exp(q), lambda p, q: 2.0 * q):
        f = lambda c, a, kernel=kernel: np.sum(db.broadcast(kernel, make(c), a[:1], backend=backend) * a)
        assert_replays_like_gradient(f, (c, a), (c * 2, a + 1))


@pytest.mark.parametrize("backend", [None, "numpy", "blocked", "numexpr"])
def test_summed_and_broadcast_kernels_of_one_argument_twice_and_a_scalar(backend):
    x, s = RNG.random((50, 40)), 0.7
    f = lambda x, s: (db.sum(lambda p, q, r: p * q * r, x, x, s, backend=backend)
                      + np.sum(db.broadcast(lambda p, r: p * r, x[0], s, backend=backend) * x))
    assert_replays_like_gradient(f, (x, s), (x * 2, 1.5), (x - 3, -0.25))


# --- 3. selections: their partials take the kernel's float dtype ---------------------------------
SELECTIONS = {
    "min-of-min": lambda p, q: np.minimum(np.minimum(q, p - 0.01), q - 0.01),
    "max": lambda p, q: np.maximum(p, q) * 2.0,
    "where": lambda p, q: np.where(p > q, p, q * q),
    "clip": lambda p, q: np.clip(p, 0.2, 0.8) * q,
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [6, 40_000])
@pytest.mark.parametrize("name", list(SELECTIONS))
def test_selection_partials_in_kernels_replay(name, n, dtype):
    kernel = SELECTIONS[name]
    x, y = RNG.random(n).astype(dtype), RNG.random(n).astype(dtype)  # no ties: x == y has probability 0
    summed = lambda x, y: db.sum(kernel, x, y)
    broadcast = lambda x, y: np.sum(db.broadcast(kernel, x, y) * x)
    for f in (summed, broadcast):
        prog = db.prepare_gradient(f, x, y)
        for args in ((x, y), (y, x), (x * 2, y)):
            expected = db.gradient(f, *args)
            got = prog(*args)
            for g, e in zip(got, expected):
                assert g.dtype == e.dtype == dtype
                np.testing.assert_allclose(g, e, rtol=2e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("n", [6, 40_000])
def test_min_of_min_by_hand(n):
    x, y = RNG.random(n), RNG.random(n)
    prog = db.prepare_gradient(lambda p, q: db.sum(SELECTIONS["min-of-min"], p, q), x, y)
    p, q = x * 2, y  # min(min(q, p - .01), q - .01) = min(p, q) - .01, without ties
    gp, gq = prog(p, q)
    np.testing.assert_array_equal(gp, (p < q).astype(float))
    np.testing.assert_array_equal(gq, (q < p).astype(float))


# --- 4. functions without a rule on values that carry no gradient --------------------------------
def test_a_function_without_a_rule_on_a_cut_argument_is_a_plain_step():
    f = lambda x, d: np.sum(x * np.sort(d)) + np.sum(np.histogram_bin_edges(d, 2)) * np.sum(x)
    x, d = np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])
    prog = assert_replays_like_gradient(f, (x, db.cut(d)), (x * 2, db.cut(d[::-1] * 5)), (x, db.cut(d + 1)))
    gx, gd = prog(x, db.cut(np.array([9.0, 7.0, 8.0])))  # new data is seen: sort and the bin edges run again
    np.testing.assert_array_equal(gx, [7.0 + 24.0, 8.0 + 24.0, 9.0 + 24.0])
    assert gd is None and prog.recordings == 1


def test_a_function_without_a_rule_on_a_cut_value_inside_f():
    f = lambda x: np.sum(x * np.sort(db.cut(x)))
    assert_replays_like_gradient(f, (np.array([3.0, 1.0, 2.0]),), (np.array([0.5, 4.0, -1.0]),))


def test_a_function_without_a_rule_on_a_differentiated_value_is_still_gradient_s_error():
    f = lambda x: np.sum(np.histogram_bin_edges(x, 2))
    with pytest.raises(db.UnsupportedFunctionError, match=r"np\.histogram_bin_edges has no derivative") as expected:
        db.gradient(f, np.ones(3))
    with pytest.raises(db.UnsupportedFunctionError) as got:
        db.prepare_gradient(f, np.ones(3))
    assert str(got.value) == str(expected.value)


def test_an_index_holding_values_computed_from_data_is_rebuilt_on_replay():
    """``x[i, 0]`` with ``i`` from np.argmax (no gradient) crashed; now i is read on every replay."""
    def f(x, d):
        order = np.argsort(d)
        return np.sum(x[order, 0] * np.arange(3.0)) + np.sum(x[[order[0], 1], :]) + x[np.argmax(d), 1]

    x, d = np.arange(6.0).reshape(3, 2), np.array([3.0, 1.0, 2.0])
    prog = assert_replays_like_gradient(f, (x, db.cut(d)), (x * 2, db.cut(-d)), (x, db.cut(np.array([1.0, 1.0, 0.0]))))
    assert prog.recordings == 1


def test_the_arrays_of_np_nonzero_are_one_guard_not_a_recording_per_call():
    f = lambda x, d: np.sum(x[np.nonzero(d > 0)] ** 2)
    x, d = np.arange(5.0), np.array([1.0, -1.0, 2.0, -3.0, 4.0])
    prog = assert_replays_like_gradient(f, (x, db.cut(d)), (x + 1, db.cut(d)), (x + 2, db.cut(d * 2)))
    assert prog.recordings == 1  # the same mask each time: replayed
    assert_same(prog(x, db.cut(-d)), db.gradient(f, x, db.cut(-d)))
    assert prog.recordings == 2  # another mask: the guard fails, recorded anew


Counted = collections.namedtuple("Counted", "kept count")


@db.primitive
def _positives(x):
    return Counted(x * (x > 0), int(np.sum(x > 0)))


db.defvjp_outputs(_positives, lambda j, ans, x: (lambda g: g * (x > 0)) if j == 0 else None)


def test_a_plain_output_of_a_tuple_valued_function_is_a_guard():
    """The count was baked into the program: replayed with another count, the gradient was stale."""
    def f(x):
        kept, count = _positives(x)
        return np.sum(kept) * count

    x = np.array([1.0, -2.0, 3.0])
    prog = assert_replays_like_gradient(f, (x,), (-x,), (x * 2,), (-x * 3,))
    assert prog.recordings == 2
    np.testing.assert_array_equal(prog(-x), [0.0, 1.0, 0.0])  # by hand: one positive, counted once


def test_a_differentiated_value_inside_a_tuple_argument_is_an_error():
    f = lambda x: np.sum(np.reshape(x, (x[0], 2)))  # a gradient cannot flow through a shape
    with pytest.raises(db.UnsupportedFunctionError, match="differentiated value inside a tuple"):
        db.prepare_gradient(f, np.array([2.0, 1.0, 3.0, 4.0]))


# --- 5. the gradient's types, shapes and dtypes --------------------------------------------------
Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Params:
    a: np.ndarray
    b: float


KINDS = {
    "float": lambda v: float(v),
    "float64": lambda v: np.float64(v),
    "float32": lambda v: np.float32(v),
    "0-d": lambda v: np.array(v),
    "0-d float32": lambda v: np.array(v, np.float32),
    "array": lambda v: np.full(3, v),
    "array float32": lambda v: np.full(3, v, np.float32),
    "floats": lambda v: (float(v), float(2 * v)),
    "list": lambda v: [np.float64(v), np.full(2, v)],
    "dict": lambda v: {"k": float(v), "w": np.full(2, v, np.float32)},
    "namedtuple": lambda v: Pair(np.full(2, v), float(v)),
    "dataclass": lambda v: Params(np.full(2, v), float(v)),
}


def _total(tree):
    return sum(np.sum(np.sin(leaf) * 1.5) for leaf in pytree.flatten(tree)[0])


@pytest.mark.parametrize("with_cut", [False, True], ids=["plain", "with-cut"])
@pytest.mark.parametrize("recorded", list(KINDS))
def test_gradient_types_equal_gradient_s_for_every_input_kind(recorded, with_cut):
    """Recorded with one kind, called with every kind (a 0-d array and a NumPy scalar share a program)."""
    if with_cut:
        f = lambda x, c: _total(x) * np.sum(c)
        prog = db.prepare_gradient(f, KINDS[recorded](0.3), db.cut(np.ones(2)))
    else:
        f = _total
        prog = db.prepare_gradient(f, KINDS[recorded](0.3))
    for kind in KINDS.values():
        args = (kind(0.7), db.cut(np.full(2, 2.0))) if with_cut else (kind(0.7),)
        expected_value, expected = db.value_and_gradient(f, *args)
        for _ in range(2):
            value, g = prog.value_and_gradient(*args)
            assert_same(g, expected)
            assert_same(value, expected_value)
            assert_same(prog(*args), expected)


# --- 6. a tracked value kept from an earlier call ------------------------------------------------
STALE_USES = {
    "multiply": lambda x, s: np.sum(x * s),
    "reflected": lambda x, s: np.sum(s * x),
    "function": lambda x, s: np.sum(x) + np.sum(np.exp(s)),
    "kernel": lambda x, s: np.sum(x) + db.sum(lambda p: p * 2.0, s),
    "kernel with it": lambda x, s: db.sum(lambda p, q: p * q, x, s),
    "index": lambda x, s: np.sum(x) * s[0],
}


@pytest.mark.parametrize("use", list(STALE_USES))
def test_a_stale_tracked_value_is_gradient_s_clear_error(use):
    kept = []

    def f(x):
        if not kept:
            kept.append(x * 2.0)  # kept beyond the call that made it
            return np.sum(x)
        return STALE_USES[use](x, kept[0])

    prog = db.prepare_gradient(f, np.ones(3))
    with pytest.raises(db.DifferentiationError, match="finished gradient evaluation") as prepared_error:
        prog(np.ones(3, np.float32))  # another dtype: f is recorded again, and uses the kept value
    with pytest.raises(db.DifferentiationError, match="finished gradient evaluation") as gradient_error:
        db.gradient(f, np.ones(3))
    assert type(prepared_error.value) is type(gradient_error.value)
    assert isinstance(prepared_error.value, ValueError)


def test_a_prepared_gradient_inside_a_gradient_is_a_nested_gradient():
    """The outer value reaches the recording by a closure: recorded as a value of the inner program, a replay
    once read whatever that index held there (zeros, silently).  Inside a gradient a prepared gradient is a
    nested gradient: d/dy Σ ∂/∂x Σ(x·y) = d/dy Σ y = 1."""
    def outer(inner):
        return lambda y: np.sum(inner(lambda x: np.sum(x * y), np.ones(2)))

    prepared = lambda f, x: db.prepare_gradient(f, x)(x)
    np.testing.assert_array_equal(db.gradient(outer(db.gradient), np.array([1.0, 2.0])), [1.0, 1.0])
    np.testing.assert_array_equal(db.gradient(outer(prepared), np.array([1.0, 2.0])), [1.0, 1.0])


def test_a_stale_tracked_value_cut_is_its_value_as_in_gradient():
    kept = []

    def f(x):
        if not kept:
            kept.append(x * 2.0)
        return np.sum(x * db.cut(kept[0]))

    x = np.array([1.0, 2.0, 3.0], np.float32)
    prog = db.prepare_gradient(f, x.astype(np.float64))
    for z in (x, x * 5):  # another dtype: f is recorded again, with the kept value, then replayed
        assert_same(prog(z), db.gradient(f, z))


# --- 7. results a prepared gradient cannot carry -------------------------------------------------
@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sum(x.astype(object)),
        lambda x: np.sum(x.astype(str) == "0.3") * np.sum(x),
    ],
    ids=["astype-object", "astype-str"],
)
def test_a_result_that_cannot_be_carried_is_an_error_naming_the_operation(f):
    x = np.array([0.3, 0.5, 1.5])
    with pytest.raises(db.UnsupportedFunctionError, match=r"(np\.|x\.)\w+ of a tracked value gave a result of dtype"):
        db.prepare_gradient(f, x)


@pytest.mark.parametrize(
    "f",
    [
        lambda x: np.sum(np.abs(x + 1j)),
        lambda x: np.sum(np.real(np.exp(1j * x))),
        lambda x: np.sum(np.abs(x.astype(complex))),
        lambda x: np.abs(np.sum(x, dtype=complex)),
        lambda x: np.sum(np.abs(np.split(x * 1j, 3)[0])),
    ],
    ids=["add", "exp", "astype-complex", "sum-dtype", "split"],
)
def test_complex_intermediates_are_left_to_gradient_and_right(f):
    """A prepared gradient does not replay complex computations: it evaluates them with db.gradient."""
    x = np.array([0.3, 0.5, 1.5])
    prog = db.prepare_gradient(f, x)
    for z in (x, x * 2):
        assert_same(prog(z), db.gradient(f, z))
    db.check_gradient(f, x)


def test_complex_values_of_cut_data_are_constants_like_in_gradient():
    f = lambda x, d: np.sum(x * np.real(np.fft.fft(d)))
    x, d = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, -1.0, 2.0, 0.0])
    prog = assert_replays_like_gradient(f, (x, db.cut(d)), (x * 2, db.cut(d + 1)))
    np.testing.assert_allclose(prog(x, db.cut(d * 3))[0], np.real(np.fft.fft(d * 3)), rtol=1e-12)


# --- 8. state f reads besides its arguments ------------------------------------------------------
K = 2.0
W = np.array([1.0, 2.0, 3.0])
W0 = np.array(2.0)


def _times_k(x):
    return x * K


def _set(name, value):
    globals()[name] = value


STATE_CASES = {  # f, its change, and the state restored
    "global float": (lambda x: np.sum(K * x * x), lambda: _set("K", 5.0), lambda: _set("K", 2.0)),
    "global float in a function": (lambda x: np.sum(_times_k(x) * x), lambda: _set("K", 5.0), lambda: _set("K", 2.0)),
    "global float in a kernel": (lambda x: db.sum(lambda p: K * p * p, x), lambda: _set("K", 5.0),
                                 lambda: _set("K", 2.0)),
    "global array rebound": (lambda x: np.sum(W * x * x), lambda: _set("W", np.array([5.0, 6.0, 7.0])),
                             lambda: _set("W", np.array([1.0, 2.0, 3.0]))),
    "global array in place": (lambda x: np.sum(W * x * x), lambda: W.__setitem__(slice(None), [5.0, 6.0, 7.0]),
                              lambda: W.__setitem__(slice(None), [1.0, 2.0, 3.0])),
    "global array in place, dot": (lambda x: np.dot(W, x * np.ones(3)) ** 2,
                                   lambda: W.__setitem__(slice(None), [5.0, 6.0, 7.0]),
                                   lambda: W.__setitem__(slice(None), [1.0, 2.0, 3.0])),
    "global array in place, kernel": (lambda x: db.sum(lambda p, w: w * p * p, x, W),
                                      lambda: W.__setitem__(slice(None), [5.0, 6.0, 7.0]),
                                      lambda: W.__setitem__(slice(None), [1.0, 2.0, 3.0])),
    "global 0-d array in place": (lambda x: np.sum(x) * W0, lambda: W0.__setitem__((), 5.0),
                                  lambda: W0.__setitem__((), 2.0)),
}


@pytest.mark.parametrize("x", [np.array([0.5, -1.0, 2.0]), 1.5], ids=["array", "float"])
@pytest.mark.parametrize("case", list(STATE_CASES))
def test_state_changed_between_calls_gives_gradient_s_result_on_the_new_state(case, x):
    f, change, restore = STATE_CASES[case]
    try:
        prog = db.prepare_gradient(f, x)
        assert_same(prog(x), db.gradient(f, x))
        change()
        for _ in range(2):
            expected_value, expected = db.value_and_gradient(f, x)
            value, g = prog.value_and_gradient(x)
            assert_same(g, expected)
            assert_same(value, expected_value)
        assert prog.recordings == (2 if "in place" not in case else 1)  # rebound: recorded again; in place: read
    finally:
        restore()


def test_a_constant_changed_by_f_after_use_is_gradient_s_error():
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = x * c
        c[:] = 100.0  # the replay would read 100 for x * c
        return np.sum(y)

    for evaluate in (db.gradient, db.prepare_gradient):
        with pytest.raises(db.InPlaceMutationError, match="read-only"):
            evaluate(f, np.ones(3))


def test_an_index_or_kernel_constant_changed_by_f_after_use_replays_its_value_at_use():
    """db.gradient needs neither after its use (the index is copied, the partials computed), so f may
    change them; a replay uses each as it was where f used it, as db.gradient does."""
    def f(x):
        idx, c = np.array([0, 1]), np.array([1.0, 2.0, 3.0])
        y = np.sum(x[idx] ** 2) + db.sum(lambda p, q: p * q * p, x, c)
        idx[:] = 2
        c[:] = 10.0
        z = np.sum(x[idx]) + db.sum(lambda p, q: p * q, x, c)
        idx[:] = [0, 1]  # back as it was at its first use
        return y + z

    x = np.array([0.5, 1.0, 2.0])
    assert_replays_like_gradient(f, (x,), (x * 2,), (-x,))
    by_hand = np.r_[2 * x[:2], 0.0] + 2 * x * [1.0, 2.0, 3.0] + [0.0, 0.0, 2.0] + 10.0
    np.testing.assert_allclose(db.prepare_gradient(f, x)(x), by_hand, rtol=1e-12)


@pytest.mark.parametrize(
    "f",
    [
        lambda x, d: np.sum(x) * len(d[d > 0]),
        lambda x, d: np.sum(x) * d[d > 0].shape[0],
        lambda x, d: np.sum(x) * d[d > 0].size,
        lambda x, d: np.sum(x) * sum(1.0 for _ in d[d > 0]),
    ],
    ids=["len", "shape", "size", "iteration"],
)
def test_a_data_dependent_length_read_by_python_is_a_guard(f):
    """A length f reads from a value whose shape depends on the data is a decision, like an if."""
    x, d = np.array([1.0, 2.0, 3.0]), np.array([1.0, -1.0, 2.0])
    prog = db.prepare_gradient(f, x, db.cut(d))
    assert_same(prog(x, db.cut(-d)), db.gradient(f, x, db.cut(-d)))  # one element > 0 where two were


# --- 9. one prepared gradient over many calls ----------------------------------------------------
def _model(x, s, d):
    """A branch on the data, a kernel, a reduction, an index and a cotangent two parents share."""
    shared = x * s  # its cotangent reaches x and s, and x gets more later
    if np.sum(d) > 0:
        y = db.sum(lambda p, q: np.exp(-p * q), shared, d) + np.sum(shared[1:] * x[:-1])
    else:
        y = np.sum(np.tanh(shared) * d) - x[0] * s
    return y + np.sum(x * x) * s


def test_one_prepared_gradient_over_many_calls_switching_variants_and_back():
    x, d = RNG.random(5), RNG.random(5)
    prog = db.prepare_gradient(_model, x, 0.5, db.cut(d))
    calls = [(x, 0.5, d), (x * 2, -1.5, d), (x, 0.5, -d), (x - 1, 2.0, d * 3), (x + 3, 0.25, -d * 2),
             (RNG.random(7), 1.0, RNG.random(7)), (x, 0.5, d), (x * 5, 0.75, -d), (x / 3, -2.0, -d / 3)]
    for k, (xs, s, ds) in enumerate(calls):
        expected_value, expected = db.value_and_gradient(_model, xs, s, db.cut(ds))
        if k % 2:
            assert_same(prog(xs, s, db.cut(ds)), expected)
            value, g = prog.value_and_gradient(xs, s, db.cut(ds))
            assert_same(g, expected)
            assert_same(value, expected_value)
        else:  # the gradient written into the caller's arrays (the float's into a 0-d array)
            out = (np.empty_like(xs), np.empty(()), None)
            value, result = prog.value_and_gradient(xs, s, db.cut(ds), out=out)
            assert result is out and value == pytest.approx(expected_value, rel=1e-12)
            np.testing.assert_allclose(out[0], expected[0], rtol=1e-12)
            np.testing.assert_allclose(out[1], expected[1], rtol=1e-12)
    assert prog.recordings == 3  # two branches and one new shape; every later call was a replay


def test_one_prepared_gradient_of_a_loop_whose_count_depends_on_the_value():
    def f(a):
        x = a
        while np.abs(x * x - a) > 1e-10:
            x = 0.5 * (x + a / x)
        return x * a

    prog = db.prepare_gradient(f, 4.0)
    for a in (4.0, 9.0, 4.0, 2.0, 9.0, 100.0, 2.0, 4.0):
        assert_same(prog.value_and_gradient(a), db.value_and_gradient(f, a))
        assert prog(a) == pytest.approx(1.5 * np.sqrt(a), rel=1e-9)  # by hand: d/da a^{3/2}


def test_value_and_gradient_into_one_array_on_every_replay():
    """One array argument, out= one array: the value is f(x) on the recording call and on each replay
    after it, the gradient is written into out."""

    def f(x):
        return np.sum(np.sin(x) * x)

    x = RNG.random(5)
    prog = db.prepare_gradient(f, x)
    out = np.empty(5)
    for k in range(4):
        xs = x + k
        value, g = prog.value_and_gradient(xs, out=out)
        assert g is out
        assert_same(value, np.sum(np.sin(xs) * xs))  # plain NumPy
        np.testing.assert_allclose(out, np.sin(xs) + xs * np.cos(xs), rtol=1e-12)  # by hand


# --- 10. the code replay generates: folded constant cotangents, reductions of kernels ----------
@pytest.mark.parametrize("f, partial", [
    (lambda x: np.deg2rad(np.sum(x)), np.pi / 180),
    (lambda x: np.rad2deg(np.sum(x)), 180 / np.pi),
    (lambda x: np.deg2rad(np.rad2deg(np.deg2rad(np.sum(x)))), np.pi / 180),
    (lambda x: np.negative(np.sum(x)), -1.0),
    (lambda x: np.positive(np.sum(x)), 1.0),
    (lambda x: np.subtract(1.0, np.sum(x)), -1.0),
    (lambda x: np.subtract(np.sum(x), 1.0), 1.0),
    (lambda x: np.add(2.0, np.sum(x)), 1.0),
    (lambda x: np.remainder(np.sum(x), 100.0), 1.0),
    (lambda x: np.fmod(np.sum(x), 100.0), 1.0),
], ids=["deg2rad", "rad2deg", "deg2rad-rad2deg-deg2rad", "negative", "positive", "subtract-from", "subtract",
        "add", "remainder", "fmod"])
def test_a_constant_partial_of_a_constant_cotangent_replays(f, partial):
    """The cotangent of f's scalar result is a number while the replay is generated: times a constant
    partial from the derivative table, it is folded into the code as a number."""
    x = RNG.random(4)
    prog = assert_replays_like_gradient(f, (x,), (x * 3,), (-x,))
    for xs in (x * 2, x - 1):
        np.testing.assert_allclose(prog(xs), np.full(4, partial), rtol=1e-14)  # by hand: d/dx f(Σx) = f'


@pytest.mark.parametrize("kernel, by_hand", [
    (lambda p: p * p, lambda x: 3 * x**2),  # d/dx Σ x²·x
    (lambda p: np.exp(p) * p, lambda x: np.exp(x) * (x * x + 2 * x)),  # d/dx Σ x eˣ·x
], ids=["p*p", "exp(p)*p"])
def test_a_broadcast_kernel_times_its_argument_summed_replays(kernel, by_hand):
    """A broadcast kernel (not a reduction) whose result meets x again: the kernel's adjoint has the
    result's shape."""

    def f(x):
        return np.sum(db.broadcast(kernel, x) * x)

    x = RNG.random(6)
    prog = assert_replays_like_gradient(f, (x,), (x * 3,), (RNG.random(6),))
    xs = RNG.random(6)
    np.testing.assert_allclose(prog(xs), by_hand(xs), rtol=1e-12)


def _twice(s):
    return s + s


def _three_times(s):
    return s + s + s


def _minus_twice(s):
    return s - s * 3.0


def _degrees_and_itself(s):
    return np.deg2rad(s) + s


@pytest.mark.parametrize("g, scale", [(_twice, 2.0), (_three_times, 3.0), (_minus_twice, -2.0),
                                      (_degrees_and_itself, 1 + np.pi / 180)],
                         ids=["s+s", "s+s+s", "s-3s", "deg2rad(s)+s"])
def test_two_constant_cotangents_into_one_value_replay(g, scale):
    """s = Σx receives two numbers as cotangents while the replay is generated: they add."""

    def f(x):
        return g(np.sum(x))

    x = RNG.random(4)
    prog = assert_replays_like_gradient(f, (x,), (x * 3,), (-x,))
    np.testing.assert_allclose(prog(x * 2), np.full(4, scale), rtol=1e-14)  # by hand: g'(Σx)


def test_code_a_replay_cannot_repeat_on_a_cut_argument_runs_db_gradient():
    """np.vectorize on a cut argument turns its traced values into a plain array: nothing to replay, so those
    calls are db.gradient's (it was a ValueConversionError where db.gradient works)."""
    import math

    def f(x, d):
        return np.sum(x * np.vectorize(math.sin)(d)) + np.sum(x * x)

    x, d = np.array([0.3, -0.4]), np.array([0.7, 1.2])
    prog = db.prepare_gradient(f, x, db.cut(d))
    for x_new, d_new in [(x, d), (x + 1.0, d * 2.0), (x - 0.5, d - 3.0)]:
        expected = db.value_and_gradient(f, x_new, db.cut(d_new))
        value, (g, g_cut) = prog.value_and_gradient(x_new, db.cut(d_new))
        assert value == expected[0] and g_cut is None
        np.testing.assert_array_equal(g, expected[1][0])
        out = np.empty(2)
        prog(x_new, db.cut(d_new), out=out)
        np.testing.assert_array_equal(out, expected[1][0])


def test_a_constant_used_only_with_values_without_gradient_may_change_after_use():
    """db.gradient records nothing for np.floor(x) * c, so it does not keep c; neither may prepare_gradient
    (it made c read-only, an error where db.gradient works; found by the random programs)."""

    def f(x):
        c = np.array([0.5, 1.5])
        y = np.floor(x) * c
        c.fill(100.0)
        return np.sum(y * x)

    x = np.array([1.3, -0.4])
    prog = db.prepare_gradient(f, x)
    for x_new in (x, x + 2.0, x - 1.0):
        np.testing.assert_array_equal(prog(x_new), db.gradient(f, x_new))


def test_a_replay_raises_where_gradient_does_though_the_gradient_does_not_read_the_value():
    """inv of a matrix whose values reach the gradient nowhere (x2 enters through an integer cast): a replay
    left out the step, whose value no cotangent reads, so on inputs that make the matrix singular it returned
    a gradient where db.gradient (and f itself) raise LinAlgError.  np.linalg steps are always replayed."""
    def f(x0, x2):
        v4 = np.linalg.inv(x2.astype(np.int64) * 1.5 + 3.0 * np.eye(2))
        return np.sum(x0 * 2.0) + np.sum(v4)

    prog = db.prepare_gradient(f, np.ones(1), np.array([0.5, 0.5]))
    np.testing.assert_array_equal(prog(np.ones(1), np.array([0.5, 0.5]))[0], [2.0])
    singular = np.array([-1.0, -1.0])  # [[v0 + 3, v1], [v0, v1 + 3]] has determinant 3 (v0 + v1) + 9 = 0
    with pytest.raises(np.linalg.LinAlgError):
        db.gradient(f, np.ones(1), singular)
    with pytest.raises(np.linalg.LinAlgError):
        prog(np.ones(1), singular)
