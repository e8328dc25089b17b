"""A replay keeps no array longer than `db.gradient`'s tape does (`replay._freed`, and ``@``'s inline pullbacks).

Memory is measured by tracemalloc (NumPy reports its arrays to it): deterministic, no clock."""

import re
import tracemalloc

import numpy as np

import dualbroadcast as db
from dualbroadcast import replay
from dualbroadcast.regions import FUSE_REGIONS

rng = np.random.default_rng(0)
X = rng.standard_normal((1024, 16))
T = rng.standard_normal((1024, 1))
PARAMS = {"W1": rng.standard_normal((16, 128)) * 0.25, "b1": np.zeros(128),
          "W2": rng.standard_normal((128, 128)) * 0.09, "b2": np.zeros(128),
          "W3": rng.standard_normal((128, 1)) * 0.09, "b3": np.zeros(1)}


def mlp(p):
    h = np.tanh(X @ p["W1"] + p["b1"])
    h = np.tanh(h @ p["W2"] + p["b2"])
    y = h @ p["W3"] + p["b3"]
    return np.mean((y - T) ** 2)


def _peak(call):
    call()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _as_recorded():
    token = FUSE_REGIONS.set(False)
    try:
        return db.prepare_gradient(mlp, PARAMS)
    finally:
        FUSE_REGIONS.reset(token)


def test_the_replay_peaks_no_higher_than_the_tape():
    """Each layer (1 MiB) is freed after its last read: the replay's peak is at most `db.gradient`'s."""
    prog = _as_recorded()
    expected = db.gradient(mlp, PARAMS)
    for k, g in prog(PARAMS).items():
        np.testing.assert_allclose(g, expected[k], rtol=1e-12, atol=1e-15)
    assert _peak(lambda: prog(PARAMS)) <= _peak(lambda: db.gradient(mlp, PARAMS))


def test_large_values_are_deleted_small_ones_left():
    """``del`` follows the last read of the layers' values and cotangents, never of a small one; ``@``'s adjoints
    are the dot formulas, which do not read the product."""
    prog = _as_recorded()
    (programs,) = prog.variants.values()
    source = programs[0].source
    gradient = source[source.index("def gradient"):]
    deleted = {name for line in gradient.splitlines() if line.startswith("    del ")
               for name in line[len("    del "):].split(", ")}
    large = replay._large_names(programs[0])
    assert deleted and deleted <= large
    assert {f"v{i}" for i, (shape, _) in programs[0].meta.items() if shape == (1024, 128)} <= deleted
    # g @ b.T and a.T @ g, as written or through a product split across the cores (`region_runners.matmul_runner`)
    assert re.search(r"(\bv\d+\.T @ g\d+|\bk\d+\(v\d+\.T, g\d+\))", gradient)
    assert re.search(r"(\bg\d+ @ v\d+\.T|\bk\d+\(g\d+, v\d+\.T\))", gradient)

