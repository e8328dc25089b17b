"""The realistic benchmark rows (issue 27): every model's gradient, as each column computes it, equals JAX's in
float64 (SciPy's hand-written one for Rosenbrock); the runner's bookkeeping (groups, faults, ratios, backends).
Nothing here times anything."""

import numpy as np
import pytest
import scipy.optimize

import dualbroadcast as db
from benchmarks import realistic as r
from benchmarks import suite

jax = pytest.importorskip("jax")
jnp = jax.numpy


def small_cases():
    """(name, model, differentiated argument, constants) at sizes a test runs in milliseconds."""
    rng = np.random.default_rng(7)
    X = rng.standard_normal((50, 40))
    mlp_params, mlp_X, mlp_y = r.mlp_data(32)
    gmm_params, _ = r.gmm_data(True)
    return [
        ("logistic", r.logistic_loss, 0.1 * rng.standard_normal(40), (X, np.sign(rng.standard_normal(50)))),
        ("gmm", r.gmm_nll, gmm_params, (2 * rng.standard_normal((60, 2)),)),
        ("mlp", r.mlp_loss, mlp_params, (mlp_X, mlp_y)),
        ("pairs", r.pair_energy, rng.uniform(0, 3, (12, 3)), ()),
        ("rk4", rk4_short, np.array([1.1, 0.4, 0.1, 0.4]), (np.array([10.0, 5.0]),)),
        ("rosenbrock", r.rosenbrock, rng.uniform(0, 2, 30), ()),
    ]


def rk4_short(xp, p, u0):
    """The RK4 loop of 3 steps (80 in the benchmark): the same code, compiled in a test's time (XLA takes
    seconds a step to compile the unrolled loop)."""
    return r.rk4_loss(xp, p, u0, steps=3)


def jax_gradient(model, diff, consts):
    with jax.enable_x64(True):
        return jax.tree_util.tree_map(np.asarray, jax.jit(jax.grad(lambda d: model(jnp, d, *consts)))(diff))


def assert_same_tree(got, expected, rtol=1e-10):
    got, expected = suite._leaves(got), suite._leaves(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * np.max(np.abs(e)))


@pytest.mark.parametrize("case", small_cases(), ids=lambda case: case[0])
def test_plain_and_prepared_gradients_equal_jax(case):
    _, model, diff, consts = case
    expected = jax_gradient(model, diff, consts)

    def plain(d):
        return model(np, d, *consts)

    assert_same_tree(db.gradient(plain, diff), expected)
    prog = db.prepare_gradient(plain, diff)
    prog(diff)
    assert_same_tree(prog(diff), expected)


def test_rosenbrock_is_scipys_and_its_gradient_scipys_hand_written_one():
    x = np.random.default_rng(1).uniform(0, 2, 50)
    assert r.rosenbrock(np, x) == pytest.approx(scipy.optimize.rosen(x), rel=1e-14)
    np.testing.assert_allclose(db.gradient(lambda x: r.rosenbrock(np, x), x), scipy.optimize.rosen_der(x),
                               rtol=1e-12)


def test_the_scan_the_jax_column_times_is_the_python_loop():
    p, u0 = np.array([1.1, 0.4, 0.1, 0.4]), np.array([10.0, 5.0])
    with jax.enable_x64(True):
        scanned = jax.grad(lambda p: r.rk4_loss_scan(jax, jnp, p, u0, steps=3))(p)
    np.testing.assert_allclose(scanned, jax_gradient(rk4_short, p, (u0,)), rtol=1e-12)


def test_torch_columns_compute_the_same_gradients():
    torch_peer = pytest.importorskip("benchmarks.peers").Torch()
    for _, model, diff, consts in small_cases():
        call = torch_peer.make("torch", model, diff, consts)
        assert_same_tree(torch_peer.to_numpy(call()), jax_gradient(model, diff, consts), rtol=1e-9)


def test_adam_and_minimize_columns_reach_the_references():
    params, X, y = r.mlp_data(16)
    with jax.enable_x64(True):
        expected = r.jax_train(jax, params, (jnp.asarray(X), jnp.asarray(y)), steps=3)()
        trained = r.train(lambda p: db.value_and_gradient(lambda p: r.mlp_loss(np, p, X, y), p), params, steps=3)
        assert_same_tree(trained, [np.asarray(e) for e in expected], rtol=1e-9)
    x0 = np.random.default_rng(2).uniform(0, 2, 20)
    def plain(x):
        return r.rosenbrock(np, x)
    found = r.minimize(x0, lambda x: db.value_and_gradient(plain, x), lambda x, v: db.hvp(plain, x, v))
    own = scipy.optimize.minimize(scipy.optimize.rosen, x0, jac=scipy.optimize.rosen_der,
                                  hessp=scipy.optimize.rosen_hess_prod, method="trust-ncg").x
    np.testing.assert_allclose(found, own, rtol=1e-8)


def test_the_realistic_group_names_every_realistic_workload():
    assert {w.key for w in r.workloads(True, [])} == set(suite.GROUPS["realistic"])
    assert set(suite.GROUPS["realistic"]) <= set(suite.WORKLOAD_KEYS)


def test_a_row_in_turns_gets_prepared_over_jit_first_calls_faults_and_backends(monkeypatch):
    x = np.linspace(0.0, 1.0, 10)

    def f(x):
        return np.sum(np.exp(x) * x)

    prog = db.prepare_gradient(f, x)
    impls = {"db": lambda: (lambda: db.gradient(f, x)), "db prep": lambda: suite.explained_call(prog, (x,)),
             "jax.jit": lambda: (lambda: (np.exp(x) * (1 + x)))}
    row = suite.Row("tiny", lambda: f(x), None, impls, 1e-12, reference=lambda: np.exp(x) * (1 + x))
    seconds = {"db prep": 3e-3, "jax.jit": 2e-3}
    monkeypatch.setattr(suite, "measure", lambda fn, budget, cap, warm: (1e-3, 5, 0.0))
    monkeypatch.setattr(suite, "interleaved_medians", lambda fns, budget: [1e-3, 2e-3, 3e-3, 2e-3][:len(fns)])
    monkeypatch.setattr(suite, "_cold", lambda *args: None)
    workload = suite.Workload("tiny", "tiny", [lambda: row], omit=("db.sum", "jax", "torch", "autograd"),
                              in_turns=True)
    with suite.Progress(len(workload.columns), enabled=False) as bar:
        result = suite._run_row(workload, row, 0.05, 10.0, bar, [], cold_rounds=3)
    cells = result["cells"]
    assert cells["hand"]["status"] == "n/a"
    assert [cells[c]["seconds"] for c in ("primal", "db", "db prep", "jax.jit")] == [1e-3, 2e-3, 3e-3, 2e-3]
    assert result["prep_over_jit"] == seconds["db prep"] / seconds["jax.jit"]
    assert all(cells[c]["max_rel_err"] <= 1e-12 for c in ("db", "db prep", "jax.jit"))
    assert cells["db"]["backend"] == "numpy"
    assert cells["db prep"]["backend"].startswith("replay, ")
    assert all(cells[c]["first_seconds"] > 0 for c in ("db", "db prep", "jax.jit"))
    table = suite.format_table({"meta": {"quick": True, "numpy": "", "python": "", "cpus": 2, "peers": {},
                                         "peers_missing": {}, "prepare_gradient": True},
                                "workloads": [{"key": "tiny", "title": "tiny", "columns": list(workload.columns),
                                               "rows": [result], "details": True}]})
    assert "prep/jax.jit" in table and "1.50" in table and "0pf" in table and "ran on db: numpy" in table


FAULTS_SCRIPT = """
import sys
import numpy as np
from benchmarks import allocator
pinned = sys.argv[1] == "pin" and allocator.pin()
x = np.random.default_rng(0).random(10**6)
def eam():  # the EAM primal's 8 MB temporaries, and one of 40 MB (above the largest mmap threshold)
    return np.sum(np.exp(-3 * (x + 1))) + np.ones(5 * 10**6).sum()
eam()
print(pinned, allocator.faults_per_call(eam, 10))
"""


@pytest.mark.parametrize("mode", ["pin", "defaults"])
def test_pinning_takes_page_faults_per_call_to_zero(mode):
    """In a process of its own (the settings are for the whole process): with glibc's defaults the 40 MB
    temporary is mapped and unmapped on every call (a fault per page, or per huge page); pinned, no call
    faults."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(suite.__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", FAULTS_SCRIPT, mode], cwd=root, capture_output=True, text=True,
                         check=True).stdout.split()
    pinned, faults = out[0] == "True", float(out[1])
    if mode == "pin":
        if not pinned:
            pytest.skip("not glibc: no mallopt to pin")
        assert faults < 1
    else:
        assert faults >= 10  # 40 MB: 9766 pages, or 20 huge ones


def test_measure_reports_the_faults_of_the_timed_calls(monkeypatch):
    counter = iter(range(0, 10**6, 3))  # each reading 3 faults after the last: 3 faults per call
    faults = {"now": 0}

    def fn():
        faults["now"] = next(counter)

    monkeypatch.setattr(suite.allocator, "minor_faults", lambda: faults["now"])
    _, calls, per_call = suite.measure(fn, budget=1e-3)
    assert calls >= 1 and per_call == pytest.approx(3.0)
