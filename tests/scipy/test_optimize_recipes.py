"""The scipy.optimize recipes of docs/guide/scipy-solvers.md: each run with this library's derivatives and with
SciPy's own (the Rosenbrock function's), taking the same iterates."""

import numpy as np
import scipy.integrate
import scipy.optimize
from scipy.optimize import rosen, rosen_der, rosen_hess_prod

import dualbroadcast as db

X0 = np.array([-1.2, 1.0, 0.8, -0.5])


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def same_run(ours, theirs):
    assert ours.nit == theirs.nit and ours.nfev == theirs.nfev
    np.testing.assert_allclose(ours.x, theirs.x, rtol=1e-10, atol=1e-12)


def test_minimize_jac_true_from_value_and_gradient():
    ours = scipy.optimize.minimize(lambda x: db.value_and_gradient(rosenbrock, x), X0, jac=True, method="BFGS")
    theirs = scipy.optimize.minimize(rosen, X0, jac=rosen_der, method="BFGS")
    same_run(ours, theirs)


def test_minimize_hessp_from_prepare_hvp():
    hvp = db.prepare_hvp(rosenbrock, X0)
    gradient = db.prepare_gradient(rosenbrock, X0)
    ours = scipy.optimize.minimize(rosenbrock, X0, jac=gradient, hessp=hvp, method="trust-ncg")
    theirs = scipy.optimize.minimize(rosen, X0, jac=rosen_der, hessp=rosen_hess_prod, method="trust-ncg")
    same_run(ours, theirs)


def test_least_squares_jac_from_jacobian():
    t = np.linspace(0.0, 3.0, 20)
    data = 2.0 * np.exp(-1.3 * t) + 0.1

    def residuals(p):
        return p[0] * np.exp(-p[1] * t) + p[2] - data

    def by_hand(p):
        e = np.exp(-p[1] * t)
        return np.stack([e, -p[0] * t * e, np.ones_like(t)], axis=1)

    ours = scipy.optimize.least_squares(residuals, np.ones(3), jac=lambda p: db.jacobian(residuals, p))
    theirs = scipy.optimize.least_squares(residuals, np.ones(3), jac=by_hand)
    assert ours.nfev == theirs.nfev and ours.njev == theirs.njev
    np.testing.assert_allclose(ours.x, theirs.x, rtol=1e-10)


def test_constraint_jacobian():
    def circle(x):
        return np.stack([1.0 - np.sum(x ** 2)])

    ours = scipy.optimize.minimize(rosenbrock, X0 / 4, jac=db.prepare_gradient(rosenbrock, X0), method="SLSQP",
                                   constraints={"type": "ineq", "fun": circle, "jac": lambda x: db.jacobian(circle, x)})
    theirs = scipy.optimize.minimize(rosen, X0 / 4, jac=rosen_der, method="SLSQP",
                                     constraints={"type": "ineq", "fun": circle, "jac": lambda x: -2.0 * x[None, :]})
    same_run(ours, theirs)


def test_fitting_ode_parameters_with_l_bfgs_b():
    from dualbroadcast.scipy import integrate

    def rhs(t, y, p):
        return np.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])

    t, y0, truth = np.linspace(0.0, 6.0, 25), np.array([1.0, 1.0]), np.array([1.5, 1.0, 3.0, 1.0])
    data = scipy.integrate.solve_ivp(rhs, (0.0, 6.0), y0, t_eval=t, args=(truth,), rtol=1e-8, atol=1e-8).y
    data = data + 0.01 * np.random.default_rng(0).normal(size=data.shape)

    def loss(p):
        fit = integrate.solve_ivp(rhs, (0.0, 6.0), y0, t_eval=t, args=(p,), rtol=1e-8, atol=1e-8)
        return np.sum((fit.y - data) ** 2)

    result = scipy.optimize.minimize(lambda p: db.value_and_gradient(loss, p), np.array([1.2, 0.8, 2.5, 0.8]),
                                     jac=True, method="L-BFGS-B", bounds=[(0.1, 5.0)] * 4)
    assert result.success
    np.testing.assert_allclose(result.x, truth, rtol=0.05)
