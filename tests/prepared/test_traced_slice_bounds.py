"""A slice whose bound a prepared program traces (``x[:np.argmax(x) + 1]``)."""

import numpy as np
import pytest

import dualbroadcast as db

from ..tape.test_in_place_updates import T, X

# --- a slice whose bound a prepared program traces -----------------------------------------------------
# x[:np.argmax(x) + 1]: the slice (a constant to the recording) held the traced bound, which the pullback
# converted to an int after the recording ended: "using it as an index on a tracked value would drop its
# gradient", a crash of prepare_gradient and prepare_hvp (db.gradient was right).
SLICED = {
    "x[:k]": lambda x: np.sum(x[:np.argmax(x) + 1] ** 2),
    "x[k:, None]": lambda x: np.sum(np.sin(x[np.argmax(x):, None] * np.ones(2))),
    "x[..., k::2]": lambda x: np.sum(np.expand_dims(x, 0)[..., np.argmin(x)::2] ** 3),
    "x[1:k] of a plain x": lambda x: np.sum(x * np.sum(np.arange(6.0)[1:np.argmax(x) + 1])),
}


@pytest.mark.parametrize("name", SLICED)
def test_a_slice_bound_computed_from_the_arguments_in_prepared_programs(name):
    f = SLICED[name]
    prepared, prepared_hvp = db.prepare_gradient(f, X), db.prepare_hvp(f, X)
    for x in (X, X[::-1].copy(), np.roll(X, 2), X):  # the bound moves: another shape, recorded anew
        np.testing.assert_allclose(prepared(x), db.gradient(f, x), rtol=1e-13)
        out = np.empty(6)
        prepared(x, out=out)
        np.testing.assert_allclose(out, db.gradient(f, x), rtol=1e-13)
        np.testing.assert_allclose(prepared_hvp(x, T), db.hvp(f, x, T), rtol=1e-12)
        assert db.check_gradient(f, x)
