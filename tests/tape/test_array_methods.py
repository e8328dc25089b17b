"""ndarray methods whose arguments are not their NumPy function's (``x.clip(0)``, ``divmod``, ``x.mT``, ``x.flat``,
...), in every mode, and the in-place ones saying what to write."""

import numpy as np
import pytest

import dualbroadcast as db

from .test_in_place_updates import T, X, every_mode

# --- ndarray methods whose arguments are not their NumPy function's -----------------------------------
# x.clip(0) (ndarray's bounds may be one alone) was np.clip(x, 0): "clip() missing 1 required positional
# argument: 'a_max'"; divmod(x, y), x.mT, x.flat, x.compress, x.searchsorted, x.argpartition were
# AttributeErrors or "unsupported operand type(s) for divmod()".
M = np.array([[0.3, -1.2, 0.8], [1.5, -0.4, 0.9]])
METHODS = {
    "clip one bound": lambda x: np.sum(x.clip(0) ** 2 + x.clip(max=0.5) * x + x.clip(-0.3, 0.7)),
    "divmod": lambda x: np.sum(divmod(x * 3, 0.7)[1] * x + divmod(3.0, x + 2)[1]),
    "mT": lambda x: np.sum(x.reshape(2, 3).mT * np.arange(6.0).reshape(3, 2) ** x.reshape(2, 3).T),
    "flat": lambda x: x.flat[4] * sum(x.reshape(2, 3).flat),
    "compress": lambda x: np.sum(x.compress([True, False, True, True]) ** 3),
    "searchsorted argpartition": lambda x: np.sum(x * x.argpartition(2) + x * np.sort(x).searchsorted(0.5)),
}
FUNCTIONS = {
    "clip one bound": lambda x: np.sum(np.clip(x, 0, None) ** 2 + np.clip(x, None, 0.5) * x + np.clip(x, -0.3, 0.7)),
    "divmod": lambda x: np.sum(np.remainder(x * 3, 0.7) * x + np.remainder(3.0, x + 2)),
    "mT": lambda x: np.sum(np.swapaxes(np.reshape(x, (2, 3)), 0, 1) * np.arange(6.0).reshape(3, 2)
                           ** np.transpose(np.reshape(x, (2, 3)))),
    "flat": lambda x: x[4] * np.sum(x),
    "compress": lambda x: np.sum(x[[0, 2, 3]] ** 3),
    "searchsorted argpartition": lambda x: np.sum(x * np.argpartition(x, 2) + x * np.searchsorted(np.sort(x), 0.5)),
}


@pytest.mark.parametrize("name", METHODS)
def test_ndarray_methods_as_ndarray_in_every_mode(name):
    f, by_function = METHODS[name], FUNCTIONS[name]
    assert f(X) == pytest.approx(by_function(X), rel=1e-12)
    assert db.check_gradient(by_function, X)
    np.testing.assert_allclose(db.gradient(f, X), db.gradient(by_function, X), rtol=1e-12)
    np.testing.assert_allclose(db.prepare_gradient(f, X)(X * 0.9), db.gradient(by_function, X * 0.9), rtol=1e-12)
    np.testing.assert_allclose(db.jvp(f, (X,), (T,))[1], db.jvp(by_function, (X,), (T,))[1], rtol=1e-12)
    np.testing.assert_allclose(db.hvp(f, X, T), db.hvp(by_function, X, T), rtol=1e-12)
    np.testing.assert_allclose(db.prepare_hvp(f, X)(X, T), db.hvp(by_function, X, T), rtol=1e-12)


@pytest.mark.parametrize("method, advice", [
    (lambda x: x.sort(), r"x = np\.sort\(x\)"), (lambda x: x.partition(1), r"x = np\.partition\(x, k\)"),
    (lambda x: x.fill(1.0), r"np\.full_like"), (lambda x: x.put([0], 1.0), r"np\.where"),
    (lambda x: x.resize(3), r"np\.resize"), (lambda x: x.byteswap(True), r"np\.where"),
], ids=["sort", "partition", "fill", "put", "resize", "byteswap"])
def test_ndarray_methods_writing_in_place_say_what_to_write(method, advice):
    def f(x):
        y = x * 2.0
        method(y)
        return np.sum(y)

    for run in every_mode(f, X).values():
        with pytest.raises(db.InPlaceMutationError, match=advice):
            run()
