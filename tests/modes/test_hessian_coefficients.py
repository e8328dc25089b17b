"""The Hessian of a `db.sum` in scalar coefficients: its fast path against hand formulas and plain NumPy.

`db.hessian` of ``db.sum(term, x, c[0], ..., c[k-1])`` runs a second-order kernel whose outputs are all
summed whole: on the numpy backend the products of two full-size factors are summed as entries of one matrix
product (`kernel_source.summed_whole_array_kernel`, `gram`), elsewhere one by one (`sum_of_product`:
float32, factors of other shapes, literal factors).  The inner gradient's cotangents of ``c[0], ..., c[k-1]``
are c's own vector (`tape._whole_vector`), and the kernel's partials reach c along one edge
(`sweeps.vector_elements`).  Each variation of those conditions is compared here with a Hessian computed
without them: by hand, or by `db.hessian` of the same function written in plain NumPy (no kernel).
"""

import numpy as np
import pytest

import dualbroadcast as db


def term(x, c0, c1, c2, c3, c4):
    return np.exp(c0 + x * (c1 + x * (c2 + x * (c3 + x * c4))))


def exp_poly_hessian(c, xs):
    """∂²/∂c_j∂c_k Σ exp(Σ c_i x^i) = Σ x^j x^k exp(p(x)), in float64."""
    xs = np.asarray(xs, np.float64)
    powers = xs.reshape(1, -1) ** np.arange(len(c)).reshape(-1, 1)
    e = np.exp(np.asarray(c, np.float64) @ powers)
    return (powers * e) @ powers.T


XS = np.random.default_rng(3).uniform(-1, 1, 1000)
C = np.array([0.1, -0.2, 0.3, 0.05, -0.1])


@pytest.mark.parametrize("backend", [None, "numpy", "blocked", "numexpr"])
@pytest.mark.parametrize("n", [1, 7, 1000, 5000])
def test_coefficients_on_every_backend(backend, n):
    xs = XS[:n] if n <= len(XS) else np.resize(XS, n)
    with db.kernel_log() as calls:
        H = db.hessian(lambda c: db.sum(term, db.cut(xs), *c, backend=backend), C)
    np.testing.assert_allclose(H, exp_poly_hessian(C, xs), rtol=1e-12)
    assert H.shape == (5, 5) and H.dtype == np.float64
    assert calls[0].width == 5 and calls[0].second == 15


def test_float32_sums_each_product_alone_and_stays_float32():
    xs, c = XS.astype(np.float32), C.astype(np.float32)
    H = db.hessian(lambda c: db.sum(term, db.cut(xs), *c), c)
    assert H.dtype == np.float32
    np.testing.assert_allclose(H, exp_poly_hessian(c, xs), rtol=2e-5)


def test_points_of_other_shapes_broadcast():
    """x of shape (20, 1) and y of (1, 30): the factors have the broadcast shape only after a product."""
    x = np.linspace(-1, 1, 20).reshape(20, 1)
    y = np.linspace(0, 1, 30).reshape(1, 30)

    def f(c):
        return db.sum(lambda x, y, a, b, d: np.exp(a * x + b * y + d * x * y), db.cut(x), db.cut(y), c[0], c[1], c[2])

    c = np.array([0.3, -0.4, 0.2])
    features = np.stack(np.broadcast_arrays(x, y, x * y)).reshape(3, -1)
    e = np.exp(c @ features)
    np.testing.assert_allclose(db.hessian(f, c), (features * e) @ features.T, rtol=1e-12)


def test_literal_factors_and_constant_second_partials():
    """Second partials 2x (a literal times x) and 0 (a literal): no factor pair for those."""
    def f(c):
        return db.sum(lambda x, a, b: a * a * x + b * x + a * b, db.cut(XS), c[0], c[1])

    c = np.array([0.7, -1.3])
    n = len(XS)
    want = np.array([[2 * XS.sum(), n], [n, 0.0]])
    np.testing.assert_allclose(db.hessian(f, c), want, rtol=1e-12)


@pytest.mark.parametrize("order", [[3, 1, 0, 4, 2], [0, 0, 1, 2, 3], [4, 3, 2, 1, 0]])
def test_coefficients_in_any_order_or_repeated(order):
    """c[3], c[1], ... or c[0] twice: the partials reach each element of c along one edge, added where repeated."""
    def f(c):
        return db.sum(term, db.cut(XS), *[c[k] for k in order])

    def plain(c):
        return np.sum(term(XS, *[c[k] for k in order]))

    np.testing.assert_allclose(db.hessian(f, C), db.hessian(plain, C), rtol=1e-12)
    np.testing.assert_allclose(db.gradient(f, C), db.gradient(plain, C), rtol=1e-12)


def test_some_coefficients_unused_and_a_second_argument():
    """c of 7 elements of which 4 are used, and a scalar of a pytree beside them: zeros, and the cross terms."""
    c7 = np.array([0.1, -0.2, 0.3, 0.05, 9.0, 9.0, 9.0])

    def f(p):
        c, s = p
        return db.sum(term, db.cut(XS), c[0], c[1], c[2], c[3], s)

    def plain(p):
        c, s = p
        return np.sum(term(XS, c[0], c[1], c[2], c[3], s))

    point = (c7, -0.1)
    got, want = db.hessian(f, point), db.hessian(plain, point)
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(got[i][j], want[i][j], rtol=1e-12, atol=1e-300)
    assert not got[0][0][4:].any() and not got[0][0][:, 4:].any()


def test_a_few_elements_of_a_long_vector():
    """theta[0], ..., theta[4] of 10^4 parameters: an edge each (no 5 x 10^4 pullback), the same Hessian."""
    theta = np.concatenate([C, np.full(10**4 - 5, 0.5)])

    def f(theta):
        return db.sum(term, db.cut(XS), *[theta[k] for k in range(5)])

    v = np.zeros_like(theta)
    v[:5] = [1.0, -2.0, 0.5, 0.0, 3.0]
    hv = db.hvp(f, theta, v)
    np.testing.assert_allclose(hv[:5], exp_poly_hessian(C, XS) @ v[:5], rtol=1e-12)
    assert not hv[5:].any()
    g = db.gradient(lambda t: db.gradient(f, t)[2], theta)
    np.testing.assert_allclose(g[:5], exp_poly_hessian(C, XS)[2], rtol=1e-12)


def test_scaled_sum_and_a_hessian_inside_a_gradient():
    """2·sum (the inner cotangents are products, no vector's elements) and a gradient of a Hessian's trace."""
    def f(c):
        return 2.0 * db.sum(term, db.cut(XS), *c)

    np.testing.assert_allclose(db.hessian(f, C), 2 * exp_poly_hessian(C, XS), rtol=1e-12)
    g = db.gradient(lambda c: np.trace(db.hessian(lambda d: db.sum(term, db.cut(XS), *d), c)), C)
    powers = XS ** np.arange(5).reshape(-1, 1)
    e = np.exp(C @ powers)
    np.testing.assert_allclose(g, powers @ (e * (powers**2).sum(axis=0)), rtol=1e-12)


def test_hvp_and_prepared_hvp_agree_with_the_hessian():
    f = lambda c: db.sum(term, db.cut(XS), *c)
    v = np.array([1.0, -2.0, 0.5, 0.0, 3.0])
    want = exp_poly_hessian(C, XS) @ v
    np.testing.assert_allclose(db.hvp(f, C, v), want, rtol=1e-12)
    prog = db.prepare_hvp(f, C)
    np.testing.assert_allclose(prog(C, v), want, rtol=1e-12)


def test_elements_of_a_zero_d_array_twice():
    """x[()] twice of a 0-d x: an empty index, no element, so not stacked (a ValueError in scatter before)."""
    def f(x0, x1):
        return np.sum(x1 * 2.0) + np.sum(x0[()] * 3.0) + np.sum(x0[()] * x0[()])

    x0, x1 = np.array(0.5), np.ones((1, 1))
    H = db.hessian(lambda x: f(x, x1), x0)
    assert float(H) == 2.0
    prog = db.prepare_hvp(f, x0, x1)
    hv = prog(x0, x1, vectors=(np.array(1.0), np.zeros((1, 1))))
    assert float(hv[0]) == 2.0 and not hv[1].any()
