"""db.prepare_hvp: the replayed Hessian-vector product gives what db.hvp gives, on new arguments too."""

import threading
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import dualbroadcast as db
from benchmarks.models import eam_dualbroadcast, eam_hand_gradient, eam_hvp_hand, eam_numpy
from dualbroadcast.program import SecondOrderStep, Step

from .. import programs


def tolerance(dtype):
    return 2e-4 if dtype == np.float32 else 1e-10


def assert_close(got, want, dtype=np.float64):
    assert type(got) is type(want) or (isinstance(got, np.ndarray) and isinstance(want, np.ndarray))
    if isinstance(want, np.ndarray):
        assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tolerance(dtype), atol=tolerance(dtype) * scale)


def programs_of(prog):
    """The recorded programs of every thread (a list of variants is kept under two keys: once each)."""
    found = {id(program): program for variants in prog.program.threads.values() for programs in variants.values()
             for program in programs}
    return list(found.values())


# --- models ----------------------------------------------------------------------------------------------
def smooth(x):
    """Elementwise functions, a reduction and a product of sums: a Hessian with a dense rank-one part."""
    return np.sum(np.log1p(np.exp(x))) + np.sum(np.sin(x)) * np.sum(x * x) + np.sum(np.cos(x) ** 3)


def neighbours(x):
    """Slices of the argument (views on the tape) multiplied together."""
    return np.sum(x[1:] * x[:-1] ** 2) + np.sum(np.tanh(x))


def kernel_with_a_coefficient(x, c):
    """A db.sum of an array and an uncut scalar: second partials of both shapes."""
    return db.sum(lambda a, b: np.exp(b * a) / (1 + a * a), x, c) ** 2


MODELS = {"eam": eam_numpy, "eam_fused": eam_dualbroadcast, "smooth": smooth, "neighbours": neighbours}


def gradient_differences(f, x, v, h=1e-6):
    """Central differences of db.gradient along ``v``: H · v to about 1e-9."""
    return (db.gradient(f, x + h * v) - db.gradient(f, x - h * v)) / (2 * h)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_replay_equals_hvp_and_central_differences(name, dtype, data):
    f = MODELS[name]
    shape = data.draw(array_shapes(min_dims=0 if name != "neighbours" else 1, max_dims=3, min_side=0, max_side=4))
    elements = st.floats(-1, 1, width=32)
    x = data.draw(arrays(dtype, shape, elements=elements))
    v = data.draw(arrays(dtype, shape, elements=elements))
    prog = db.prepare_hvp(f, np.full(shape, 0.25, dtype))
    for point in (x, x * dtype(0.5)):
        got = prog(point, v)
        assert_close(got, db.hvp(f, point, v), dtype)
        if dtype == np.float64:
            want = gradient_differences(f, point, v)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.max(np.abs(want), initial=0)))
    assert prog.recordings == 1


@settings(max_examples=15, deadline=None)
@given(x=arrays(np.float64, st.integers(1, 6), elements=st.floats(-1, 1)), c=st.floats(-1, 1))
def test_a_kernel_of_an_array_and_a_scalar(x, c):
    v = np.linspace(-1, 1, x.size)
    prog = db.prepare_hvp(kernel_with_a_coefficient, np.zeros_like(x), 0.5)
    got = prog(x, c, vectors=(v, 0.75))
    want = db.hvp(kernel_with_a_coefficient, x, c, vectors=(v, 0.75))
    assert_close(got[0], want[0])
    assert type(got[1]) is float and got[1] == pytest.approx(want[1], rel=1e-10, abs=1e-10)
    assert any(type(step) is SecondOrderStep for program in programs_of(prog) for step in program.steps)


def test_a_second_order_kernel_is_one_replayed_step():
    """EAM with its density a db.sum: the kernel's value, partial and second partial in one replayed pass (no
    step of its own for exp), against the hand-written H · v."""
    rng = np.random.default_rng(0)
    prog = db.prepare_hvp(eam_dualbroadcast, rng.random(50))
    for _ in range(3):
        x, v = rng.random(50), rng.standard_normal(50)
        np.testing.assert_allclose(prog(x, v), eam_hvp_hand(x, v), rtol=1e-12)
    (program,) = programs_of(prog)
    assert sum(type(step) is SecondOrderStep for step in program.steps) == 1
    assert not any(type(step) is Step and step.func is np.exp for step in program.steps)
    assert prog.recordings == 1


# --- several arguments, pytrees, cut ------------------------------------------------------------------------
@dataclass
class Params:
    a: np.ndarray
    b: float


def pytree_model(p, c):
    return np.sum(np.sin(p.a) * c["w"]) * p.b ** 2 + c["k"] ** 3 * np.sum(p.a ** 2)


def test_several_arguments_pytrees_and_cut_leaves():
    c = db.cut({"w": np.arange(3.0), "k": db.uncut(1.5)})
    prog = db.prepare_hvp(pytree_model, Params(np.ones(3), 2.0), c)
    for scale in (1.0, 0.5):
        p = Params(np.array([0.3, -1.0, 2.0]) * scale, 0.7 * scale)
        c = db.cut({"w": np.arange(3.0) * scale, "k": db.uncut(1.5 * scale)})
        vectors = (Params(np.array([1.0, 0.5, -2.0]), -0.25), {"w": np.zeros(3), "k": 2.0})
        got_p, got_c = prog(p, c, vectors=vectors)
        want_p, want_c = db.hvp(pytree_model, p, c, vectors=vectors)
        assert_close(got_p.a, want_p.a)
        assert got_p.b == pytest.approx(want_p.b, rel=1e-12) and type(got_p.b) is float
        assert got_c["w"] is None and got_c["k"] == pytest.approx(want_c["k"], rel=1e-12)
    assert prog.recordings == 1


def test_a_cut_argument_gets_none_and_its_new_data_is_read():
    f = lambda x, data: np.sum(np.exp(x * data)) * np.sum(x)
    rng = np.random.default_rng(1)
    prog = db.prepare_hvp(f, np.ones(4), db.cut(np.ones(4)))
    for _ in range(3):
        x, data, v = rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4)
        hx, hdata = prog(x, db.cut(data), vectors=(v, None))
        assert hdata is None
        assert_close(hx, db.hvp(f, x, db.cut(data), vectors=(v, None))[0])
        np.testing.assert_allclose(hx, gradient_differences(lambda y: f(y, data), x, v), rtol=1e-6, atol=1e-6)
    assert prog.recordings == 1


def test_python_floats_stay_floats():
    f = lambda x, y: x ** 3 * np.sin(y)
    prog = db.prepare_hvp(f, 1.0, 2.0)
    got = prog(0.5, -1.5, vectors=(1.0, 2.0))
    want = db.hvp(f, 0.5, -1.5, vectors=(1.0, 2.0))
    assert all(type(g) is float for g in got)
    assert got == pytest.approx(want, rel=1e-12)


def test_float32_in_float32_out():
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    prog = db.prepare_hvp(eam_dualbroadcast, x)
    got = prog(x, np.ones(7, np.float32))
    assert got.dtype == np.float32
    assert_close(got, db.hvp(eam_dualbroadcast, x, np.ones(7, np.float32)), np.float32)


# --- out= ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", [eam_numpy, eam_dualbroadcast], ids=["plain", "sum"])
def test_out_is_written_in_place(model):
    rng = np.random.default_rng(2)
    prog = db.prepare_hvp(model, rng.random(20))
    out = np.empty(20)
    for _ in range(3):
        x, v = rng.random(20), rng.standard_normal(20)
        assert prog(x, v, out=out) is out
        np.testing.assert_allclose(out, eam_hvp_hand(x, v), rtol=1e-12)
    fresh = prog(x, v)
    assert fresh is not out and np.array_equal(fresh, out)


def test_out_of_several_arguments_has_none_for_a_cut_one():
    f = lambda x, c, y: np.sum(x ** 2 * y ** 3 * c)
    x, c, y = np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([3.0, 0.25])
    prog = db.prepare_hvp(f, x, db.cut(c), y)
    vectors = (np.array([1.0, -1.0]), None, np.array([0.5, 2.0]))
    out = (np.empty(2), None, np.empty(2))
    assert prog(x, db.cut(c), y, vectors=vectors, out=out) is out
    want = db.hvp(f, x, db.cut(c), y, vectors=vectors)
    assert_close(out[0], want[0])
    assert_close(out[2], want[2])
    with pytest.raises(ValueError, match="out= has 1 arrays"):
        prog(x, db.cut(c), y, vectors=vectors, out=(np.empty(2), None))


def test_calls_like_db_hvp():
    prog = db.prepare_hvp(eam_numpy, np.ones(3))
    with pytest.raises(TypeError, match="one argument and its vector"):
        prog(np.ones(3))
    assert_close(prog(np.ones(3), vectors=np.ones(3)), db.hvp(eam_numpy, np.ones(3), np.ones(3)))
    two = db.prepare_hvp(kernel_with_a_coefficient, np.ones(3), 1.0)
    with pytest.raises(db.ShapeMismatchError, match="1 vectors for 2 arguments"):
        two(np.ones(3), 1.0, vectors=(np.ones(3),))


# --- guards ------------------------------------------------------------------------------------------------------
def test_a_branch_on_a_value_records_again_and_both_paths_stay():
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x ** 3)
        return np.sum(np.sin(x)) ** 2

    prog = db.prepare_hvp(f, np.ones(3))
    v = np.array([1.0, -2.0, 0.5])
    for x in (np.full(3, 2.0), np.full(3, -1.0), np.array([1.0, 2.0, -0.5]), np.array([-2.0, 0.5, 0.1])):
        assert_close(prog(x, v), db.hvp(f, x, v))
    assert prog.recordings == 2


def test_a_branch_inside_the_gradient_is_guarded():
    """A decision the inner gradient's function takes (a loop's count) is checked on every replay."""
    def f(x):
        y = x
        while np.max(np.abs(y)) > 1:
            y = y / 2
        return np.sum(y ** 4)

    prog = db.prepare_hvp(f, np.full(2, 0.5))
    v = np.array([1.0, 0.5])
    for x in (np.full(2, 0.5), np.array([3.0, 0.5]), np.array([9.0, -0.5]), np.array([0.25, 0.75])):
        assert_close(prog(x, v), db.hvp(f, x, v))
    assert prog.recordings == 3


def test_an_element_chosen_by_a_value_is_not_baked_in():
    """np.max's pullback picks the largest element: a replay on arguments whose largest element moved gives the
    new one's second derivative."""
    f = lambda x: np.max(x ** 3) + np.sum(x ** 2)
    prog = db.prepare_hvp(f, np.array([1.0, 2.0, 3.0]))
    v = np.ones(3)
    for x in (np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]), np.array([1.0, 4.0, 2.0])):
        assert_close(prog(x, v), db.hvp(f, x, v))


def test_a_global_rebound_records_again():
    prog = db.prepare_hvp(_scaled, np.ones(2))
    global SCALE
    old = SCALE
    try:
        x, v = np.array([0.5, 1.5]), np.array([1.0, 2.0])
        assert_close(prog(x, v), db.hvp(_scaled, x, v))
        SCALE = 3.0
        assert_close(prog(x, v), db.hvp(_scaled, x, v))
        assert prog.recordings == 2
    finally:
        SCALE = old


SCALE = 2.0


def _scaled(x):
    return SCALE * np.sum(x ** 3)


def test_inside_a_gradient_it_is_differentiated():
    """A prepared hvp inside a function another gradient differentiates: that gradient's third derivatives."""
    v = np.array([1.0, -0.5, 2.0])
    prog = db.prepare_hvp(smooth, np.ones(3))
    x = np.array([0.3, -0.2, 0.9])
    got = db.gradient(lambda y: np.sum(prog(y, v) * v), x)
    want = db.gradient(lambda y: np.sum(db.hvp(smooth, y, v) * v), x)
    assert_close(got, want)


@pytest.mark.parametrize("name", MODELS)
def test_a_prepared_gradient_of_a_jvp_is_replayed(name):
    """Reverse over forward written out, ``prepare_gradient(lambda x: db.jvp(f, (x,), (v,))[1])``: the jvp's
    reads of shapes and dtypes do not stop the recording (it is replayed, not left to `db.gradient`), and the
    replay on new points gives db.hvp and central differences of the gradient."""
    f, rng = MODELS[name], np.random.default_rng(3)
    v = rng.standard_normal(6)
    prog = db.prepare_gradient(lambda x: db.jvp(f, (x,), (v,))[1], rng.random(6))
    for _ in range(2):
        x = rng.random(6)
        got = prog(x)
        assert_close(got, db.hvp(f, x, v))
        np.testing.assert_allclose(got, gradient_differences(f, x, v), rtol=1e-5, atol=1e-6)
    assert not prog.unreplayable and prog.recordings == 1


def test_a_prepared_gradient_of_a_jvp_through_a_selection_is_left_to_gradient():
    """np.sort's tangent chooses elements by value: that recording is left to `db.gradient` (still right)."""
    v = np.linspace(-1, 1, 5)
    f = lambda x: np.sum(np.sort(x) ** 3 * np.arange(5))
    prog = db.prepare_gradient(lambda x: db.jvp(f, (x,), (v,))[1], np.array([0.5, 0.1, 0.9, 0.3, 0.7]))
    x = np.array([0.2, 0.8, 0.4, 0.6, 0.1])
    assert_close(prog(x), db.hvp(f, x, v))
    assert prog.unreplayable


# --- threads ----------------------------------------------------------------------------------------------------
def run_in_threads(work, n_threads=4):
    barrier = threading.Barrier(n_threads)
    errors = []

    def run(k):
        try:
            barrier.wait()
            work(k)
        except Exception as error:  # noqa: BLE001 (reported by the main thread)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


N_THREADED = 50_000  # large enough that the threads' kernels overlap


def test_threads_replay_programs_of_their_own():
    prog = db.prepare_hvp(eam_dualbroadcast, np.random.default_rng(0).random(N_THREADED))

    def work(k):
        rng = np.random.default_rng(k + 1)
        x, v = rng.random(N_THREADED) * (k + 1) / 4, rng.standard_normal(N_THREADED)
        out = np.empty(N_THREADED)
        for _ in range(5):
            np.testing.assert_allclose(prog(x, v), eam_hvp_hand(x, v), rtol=1e-10)
            np.testing.assert_allclose(prog(x, v, out=out), eam_hvp_hand(x, v), rtol=1e-10)

    run_in_threads(work)
    assert prog.recordings == 5  # the example's, and one per thread


def test_prepared_gradients_in_threads_do_not_share_buffers():
    """Regression: a prepared gradient's kernels write into buffers the program owns; threads replaying one
    program overwrote each other's partials (a wrong gradient in most calls)."""
    prog = db.prepare_gradient(eam_dualbroadcast, np.random.default_rng(0).random(N_THREADED))

    def work(k):
        x = np.random.default_rng(k + 1).random(N_THREADED) * (k + 1) / 4
        for _ in range(5):
            np.testing.assert_allclose(prog(x), eam_hand_gradient(x), rtol=1e-10)

    run_in_threads(work)


# --- random programs ------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_programs(data):
    """Random programs (tests/programs.py): the prepared hvp on the example and on new inputs gives what db.hvp
    gives, or raises what it raises."""
    program = data.draw(programs.programs(), label="program")
    if programs.check_gradient(program) is None:  # refused with a clear error: nothing to differentiate twice
        return
    f = programs.compile_program(program)
    rng = np.random.default_rng(program.seed)
    values = programs.build_inputs(program)
    directions = tuple(None if x.cut else type(v)(rng.standard_normal()) if np.ndim(v) == 0 and
                       not isinstance(v, np.ndarray) else rng.standard_normal(np.shape(v))
                       for x, v in zip(program.inputs, values))
    script = programs.snippet(program, [f"prog = db.prepare_hvp(f, {programs.arguments(program)})"])
    prog, error = programs.outcome(lambda: db.prepare_hvp(f, *programs.wrap(program, values)))
    if error is not None:
        assert isinstance(error, db.UnsupportedFunctionError) and "cannot be differentiated again" in str(error), \
            f"db.prepare_hvp raised {error!r}\n{script}"
        return
    for replay in (1, 0, 2):
        args = programs.wrap(program, programs.build_inputs(program, replay))
        want, error = programs.outcome(lambda a=args: db.hvp(f, *a, vectors=directions))
        got, other = programs.outcome(lambda a=args: prog(*a, vectors=directions))
        if error is not None:
            assert type(other) is type(error), f"db.hvp raised {error!r}, the prepared hvp {other!r}\n{script}"
            continue
        assert other is None, f"the prepared hvp raised {other!r}, db.hvp gave {want}\n{script}"
        want, got = programs.as_tuple(want, len(args)), programs.as_tuple(got, len(args))
        scale = programs.gradient_scale([w for w in want if w is not None])
        finite = overflow_free(f, args)
        for x, g, w in zip(program.inputs, got, want):
            if not finite and w is not None:  # see `overflow_free`: compared where both products are finite
                g, w = both_finite(g, w)
            problem = programs.difference(g, w, rtol=1e-9, atol=1e-11 * scale)
            assert not problem, f"prepared hvp of {x.name} (replay {replay}) against db.hvp: {problem}\n{script}"


def overflow_free(f, args):
    """Whether ``f``'s value and gradient at ``args`` are finite.  Where they overflow, the two Hessian-vector
    products sum the same infinite terms in different orders, and IEEE gives ∞ - ∞ = NaN for one order and ±∞
    for another, so random programs compare their products only where both are finite (an overflow both
    modes must agree on is pinned by `test_an_overflowing_hvp_is_ieees_in_every_mode`)."""
    with np.errstate(all="ignore"):
        value, grads = db.value_and_gradient(f, *args)
    return all(np.isfinite(np.asarray(leaf, complex)).all()
               for leaf in (value, *programs.as_tuple(grads, len(args))) if leaf is not None)


def both_finite(got, want):
    """``got`` and ``want`` with 0 wherever either is not finite (same type, shape and dtype)."""
    keep = np.isfinite(got) & np.isfinite(want)
    return tuple(np.where(keep, a, 0).astype(a.dtype) if isinstance(a, np.ndarray) else type(a)(np.where(keep, a, 0))
                 for a in (got, want))


def test_an_overflowing_hvp_is_ieees_in_every_mode():
    """``Σ 2 ** 2 ** x`` (hypothesis, seed 14631: an exp2 broadcast, then ``2.0 ** ·``), where the value overflows
    at x = 11: the Hessian-vector product is NumPy's own arithmetic on the hand-written f''(x) · v, ±∞ with
    v's sign, in db.hvp and prepare_hvp, through plain NumPy and a db.sum/db.broadcast kernel (whose hvp gave
    NaN: the value's zero cotangent times its infinite partial)."""
    x, v = np.array([1.0, 5.0, 9.0, 11.0]), np.array([1.0, -0.5, 0.3, -2.0])
    ln2 = np.log(2.0)
    with np.errstate(over="ignore"):
        e = np.exp2(x)
        want = ln2 ** 3 * np.exp2(e) * e * (ln2 * e + 1) * v  # (ln2² 2^e e)' · v, e = 2^x
    assert want[-1] == -np.inf
    programs_ = {
        "numpy": lambda a: np.sum(2.0 ** np.broadcast_to(np.exp2(a), (3, 4))) / 3,
        "sum": lambda a: db.sum(lambda b: 2.0 ** np.exp2(b), a),
        "broadcast": lambda a: np.sum(db.broadcast(lambda b: 2.0 ** b, np.exp2(a))),
    }
    with np.errstate(all="ignore"):
        for name, f in programs_.items():
            prepared = db.prepare_hvp(f, x)
            for got in (db.hvp(f, x, v), prepared(x, v), prepared(x, v)):
                np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)


def test_a_finite_singular_partial_is_a_guard_not_a_strong_product():
    """Rosenbrock's squares: a partial the recording tracks (2x, 200(x' - x²)) is finite there, so the program
    multiplies by it (IEEE's product, no strong product's five steps) behind a guard that it still is; where a
    replay meets an infinite one the guard fails and the strong product is recorded, its 0 · ∞ = 0 kept."""
    from dualbroadcast.derivatives import all_finite

    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    rng = np.random.default_rng(7)
    x, v = rng.uniform(0, 2, 50), rng.standard_normal(50)
    prog = db.prepare_hvp(rosen, x)
    np.testing.assert_allclose(prog(x, v), scipy_rosen_hess_prod(x, v), rtol=1e-12, atol=1e-9)
    (program,) = {id(p): p for ps in prog.program.variants.values() for p in ps}.values()
    assert np.where not in {getattr(s, "func", None) for s in program.steps}
    assert sum(getattr(s, "convert", None) is all_finite for s in program.steps) == 3
    y = x.copy()
    y[10] = np.inf
    with np.errstate(all="ignore"):
        got, expected = prog(y, v), db.hvp(rosen, y, v)
    assert prog.program.recordings == 2
    np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True)


def scipy_rosen_hess_prod(x, v):
    scipy_optimize = pytest.importorskip("scipy.optimize")
    return scipy_optimize.rosen_hess_prod(x, v)


def test_a_scattered_gradient_is_gathered_without_its_scatter():
    """The inner gradient of slices is scattered into zeros of x's shape (`pullbacks.scatter`), a shape every replay
    gives: no guard on it, and the Hessian-vector product gathers ``v[index]`` where the scatter's pullback was, so
    the gradient alone computes no scatter (Rosenbrock: three zero arrays and three index additions a call)."""
    from dualbroadcast import pullbacks

    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    rng = np.random.default_rng(3)
    x, v = rng.uniform(0, 2, 40), rng.standard_normal(40)
    prog = db.prepare_hvp(rosen, x)
    for y, w in ((x, v), (x * 0.7, v[::-1].copy())):
        np.testing.assert_allclose(prog(y, w), scipy_rosen_hess_prod(y, w), rtol=1e-12, atol=1e-9)
    (program,) = programs_of(prog)
    scatters = [k for k, s in enumerate(program.steps) if getattr(s, "func", None) is pullbacks.SCATTER_RECORDED]
    assert len(scatters) == 3 and set(scatters) <= set(program.removed["gradient"])
    assert not any(getattr(s, "convert", None) in (np.shape, np.ndim) for s in program.steps)


def test_a_gather_of_repeated_and_array_indices():
    """Elements read twice (an integer array index with repeats: a scatter with ``np.add.at``) and a boolean mask:
    the gathered product is JAX's Hessian-vector product."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    index, mask = np.array([0, 3, 3, 1, 0]), np.array([True, False, True, True, False, True])

    def f(x, xp=np):
        return xp.sum(xp.sin(x[index]) * x[index] ** 2) + xp.sum(xp.exp(x[mask]) * x[::-1][mask])

    x, v = np.linspace(0.1, 0.9, 6), np.array([1.0, -2.0, 0.5, 0.25, 3.0, -1.0])
    want = np.asarray(jax.jvp(jax.grad(lambda a: f(a, jax.numpy)), (x,), (v,))[1])
    prog = db.prepare_hvp(f, x)
    for _ in range(2):
        np.testing.assert_allclose(prog(x, v), want, rtol=1e-12)
    np.testing.assert_allclose(db.hvp(f, x, v), want, rtol=1e-12)


def test_a_returned_product_is_the_callers_own():
    """The product a replay returns is an array no later call writes (the cotangent the call made is returned as it
    is, not copied)."""
    x, v = np.linspace(0.2, 1.2, 8), np.linspace(-1.0, 1.0, 8)
    prog = db.prepare_hvp(neighbours, x)
    want = db.hvp(neighbours, x, v)
    first = prog(x, v)
    second = prog(x, v)
    assert first is not second and not np.shares_memory(first, second)
    first[:] = np.nan
    np.testing.assert_allclose(prog(x, v), want, rtol=1e-12)
    np.testing.assert_allclose(second, want, rtol=1e-12)
