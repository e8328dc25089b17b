"""dualbroadcast.scipy.integrate: SciPy's values, gradients against central differences, JAX's odeint and
the other sensitivity method, for every SciPy method; stiff problems; closures; dense output; errors."""

import numpy as np
import pytest
import scipy.integrate

import dualbroadcast as db
from dualbroadcast.errors import UnsupportedFunctionError
from dualbroadcast.scipy import integrate

from ..tape.test_fast_paths import central as central_differences

METHODS = ["RK45", "RK23", "DOP853", "BDF", "Radau", "LSODA"]
T = np.linspace(0.0, 4.0, 6)
Y0 = np.array([1.0, 0.5])
P = np.array([1.5, 1.0, 3.0, 1.0])
W = np.random.default_rng(0).normal(size=(6, 2))


def lotka_volterra(y, t, a, b, c, d):
    u, v = y[0], y[1]
    return np.stack([a * u - b * u * v, -c * v + d * u * v])


def lv(t, y, p):
    return lotka_volterra(y, t, p[0], p[1], p[2], p[3])


def odeint_loss(y0, p, t, sensitivity="auto"):
    Y = integrate.odeint(lotka_volterra, y0, t, args=(p[0], p[1], p[2], p[3]), rtol=1e-9, atol=1e-9,
                         sensitivity=sensitivity)
    return np.sum(W * Y)


def solve_ivp_loss(y0, p, t, method, sensitivity="auto"):
    result = integrate.solve_ivp(lambda t, y, p: lotka_volterra(y, t, p[0], p[1], p[2], p[3]), (t[0], t[-1]), y0,
                                 method=method, t_eval=t, args=(p,), rtol=1e-9, atol=1e-9, sensitivity=sensitivity)
    return np.sum(W * result.y.T)



def assert_close_to_differences(loss, args, rtol):
    grads = db.gradient(loss, *args)
    for i, g in enumerate(grads):
        moved = lambda x, i=i: loss(*args[:i], x, *args[i + 1:])
        expected = central_differences(moved, args[i], h=1e-5)
        np.testing.assert_allclose(g, expected, rtol=rtol, atol=rtol * np.max(np.abs(expected)))


def test_values_are_scipys():
    ours = integrate.odeint(lotka_volterra, Y0, T, args=tuple(P))
    np.testing.assert_array_equal(ours, scipy.integrate.odeint(lotka_volterra, Y0, T, args=tuple(P)))
    fun = lambda t, y: lotka_volterra(y, t, *P)
    for method in METHODS:
        ours = integrate.solve_ivp(fun, (0.0, 4.0), Y0, method=method, t_eval=T)
        theirs = scipy.integrate.solve_ivp(fun, (0.0, 4.0), Y0, method=method, t_eval=T)
        np.testing.assert_array_equal(ours.y, theirs.y)
        assert ours.nfev == theirs.nfev


@pytest.mark.parametrize("sensitivity", ["adjoint", "forward"])
def test_odeint_gradient(sensitivity):
    assert_close_to_differences(lambda y0, p, t: odeint_loss(y0, p, t, sensitivity), (Y0, P, T), 1e-5)


@pytest.mark.parametrize("method, sensitivity", [(method, "adjoint") for method in METHODS]
                         + [("RK45", "forward"), ("BDF", "forward")])
def test_solve_ivp_gradient(method, sensitivity):
    loss = lambda y0, p: solve_ivp_loss(y0, p, T, method, sensitivity)
    assert_close_to_differences(loss, (Y0, P), 1e-5)


def test_adjoint_equals_forward_sensitivities():
    adjoint = db.gradient(lambda y0, p, t: odeint_loss(y0, p, t, "adjoint"), Y0, P, T)
    forward = db.gradient(lambda y0, p, t: odeint_loss(y0, p, t, "forward"), Y0, P, T)
    for a, f in zip(adjoint, forward):
        np.testing.assert_allclose(a, f, rtol=1e-6, atol=1e-6 * np.max(np.abs(f)))  # both to the tolerance


def test_against_jax_odeint():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from jax.experimental.ode import odeint as jax_odeint
    jnp = jax.numpy

    def jax_loss(y0, p, t):
        f = lambda y, t, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])
        return jnp.sum(W * jax_odeint(f, y0, t, p, rtol=1e-9, atol=1e-9))

    expected = jax.grad(jax_loss, argnums=(0, 1, 2))(Y0, P, T)
    ours = db.gradient(lambda y0, p, t: odeint_loss(y0, p, t, "adjoint"), Y0, P, T)
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-6, atol=1e-6 * np.max(np.abs(b)))


@pytest.mark.parametrize("method", ["RK23", "RK45", "DOP853"])
def test_many_parameters_by_quadrature(method):
    """A linear ODE's matrix (the explicit adjoint's parameter integral is a quadrature over its backward steps)
    against JAX's gradient of the exact solution expm(A t) y0."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(3)
    A, y0, t = rng.normal(size=(5, 5)) / 2 - np.eye(5), rng.normal(size=5), np.array([0.0, 0.7, 1.5, 3.0])
    weights = rng.normal(size=(5, 4))

    def loss(A):
        result = integrate.solve_ivp(lambda t, y, A: A @ y, (0.0, 3.0), y0, method=method, t_eval=t, args=(A,),
                                     rtol=1e-11, atol=1e-12, sensitivity="adjoint")
        return np.sum(weights * result.y)

    def exact(A):
        return jax.numpy.sum(weights * jax.numpy.stack([jax.scipy.linalg.expm(A * s) @ y0 for s in t], axis=1))

    np.testing.assert_allclose(loss(A), float(exact(A)), rtol=1e-8)
    expected = np.asarray(jax.grad(exact)(A))
    np.testing.assert_allclose(db.gradient(loss, A), expected, rtol=1e-6, atol=1e-7 * np.max(np.abs(expected)))


@pytest.mark.parametrize("method, sensitivity", [(method, "adjoint") for method in METHODS]
                         + [("RK45", "forward"), ("DOP853", "forward")])
def test_backward_in_time(method, sensitivity):
    """A solve from t=4 back to 0: its adjoint runs forward in time (the quadrature's sign follows)."""
    def loss(y0, p):
        result = integrate.solve_ivp(lambda t, y, p: lotka_volterra(y, t, p[0], p[1], p[2], p[3]), (4.0, 0.0), y0,
                                     method=method, t_eval=T[::-1], args=(p,), rtol=1e-9, atol=1e-9,
                                     sensitivity=sensitivity)
        return np.sum(W * result.y.T)

    assert_close_to_differences(loss, (Y0, P / 4), 1e-5)


def test_auto_sensitivity_weighs_measured_costs():
    """Forward sensitivities for few states (their Jacobian costs a few products an evaluation), the adjoint for
    many states or a stiff method, from the measured seconds of an evaluation and of a product."""
    def chosen(fun, y0, p, t_eval, method="RK45"):
        choices = []
        original = integrate.Problem.chosen_sensitivity

        def spied(problem, *args):
            choices.append(original(problem, *args))
            return choices[-1]

        def loss(p):
            result = integrate.solve_ivp(fun, (0.0, 15.0), y0, method=method, t_eval=t_eval, args=(p,))
            return np.sum(result.y)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(integrate.Problem, "chosen_sensitivity", spied)
            db.gradient(loss, p)
        return choices[0]

    many, few = np.linspace(0.0, 15.0, 1000), np.array([0.0, 15.0])
    assert chosen(lv, Y0, P, many) == "forward"
    assert chosen(lv, Y0, P, few) == "forward"
    assert chosen(lv, Y0, P, many, "BDF") == "adjoint"
    assert chosen(lambda t, y, k: -k * y, np.ones(100), np.linspace(0.5, 1.5, 100), np.linspace(0.0, 15.0, 3)) \
        == "adjoint"


def test_closure_parameters_and_cut():
    def loss(k, y0):
        decay = lambda t, y: -k * y
        return np.sum(integrate.solve_ivp(decay, (0.0, 2.0), y0, t_eval=[1.0, 2.0], rtol=1e-10, atol=1e-12).y)

    k, y0 = 0.7, np.array([1.0, 2.0])
    gk, gy = db.gradient(loss, k, y0)
    np.testing.assert_allclose(gk, -3.0 * (np.exp(-k) + 2 * np.exp(-2 * k)), rtol=1e-7)
    np.testing.assert_allclose(gy, np.exp(-k) + np.exp(-2 * k), rtol=1e-7)
    assert db.gradient(loss, db.cut(k), y0)[0] is None


def test_robertson_bdf():
    def robertson(t, y, k):
        return np.stack([-k[0] * y[0] + k[2] * y[1] * y[2],
                         k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
                         k[1] * y[1] ** 2])

    def loss(k):
        result = integrate.solve_ivp(robertson, (0.0, 100.0), np.array([1.0, 0.0, 0.0]), method="BDF",
                                     t_eval=[1.0, 10.0, 100.0], args=(k,), rtol=1e-10, atol=1e-14)
        return np.sum(result.y[0] + 1e4 * result.y[1])

    k = np.array([0.04, 3e7, 1e4])
    g = db.gradient(loss, k)
    steps = 1e-6 * k  # relative steps: the rates span 11 orders of magnitude
    expected = [(loss(k + np.eye(3)[i] * steps) - loss(k - np.eye(3)[i] * steps)) / (2 * steps[i]) for i in range(3)]
    np.testing.assert_allclose(g, expected, rtol=1e-5)


def test_dense_output_carries_the_gradient():
    def loss(y0):
        result = integrate.solve_ivp(lambda t, y: -y, (0.0, 2.0), y0, dense_output=True, rtol=1e-10, atol=1e-12)
        return np.sum(result.sol(np.array([0.5, 1.5])))

    y0 = np.array([1.0, 3.0])
    np.testing.assert_allclose(db.gradient(loss, y0), np.exp(-0.5) + np.exp(-1.5), rtol=1e-6)


def test_start_and_end_times():
    def loss(t0, t1):
        return np.sum(integrate.solve_ivp(lambda t, y: -y, (t0, t1), np.array([2.0]), rtol=1e-11, atol=1e-12).y[:, -1])

    g0, g1 = db.gradient(loss, 0.5, 1.5)
    np.testing.assert_allclose([g0, g1], [2 * np.exp(-1.0), -2 * np.exp(-1.0)], rtol=1e-6)


def decay_at_one(k):
    return integrate.solve_ivp(lambda t, y: -k * y, (0, 1), np.ones(2), rtol=1e-10, atol=1e-12).y[:, -1]


SECOND_ORDER = {
    "hessian": lambda: db.hessian(lambda p: odeint_loss(Y0, p, T), P),
    "hvp": lambda: db.hvp(lambda k: np.sum(decay_at_one(k)), np.array([0.7]), np.array([1.0])),
    "nested gradient": lambda: db.gradient(lambda k: db.gradient(lambda k: np.sum(decay_at_one(k)), k), 0.7),
}
FORWARD_MODE = {
    "jvp": lambda: db.jvp(lambda k: np.sum(decay_at_one(k)), (0.7,), (1.0,)),
    "jvp of a gradient": lambda: db.jvp(lambda k: db.gradient(lambda k: np.sum(decay_at_one(k)), k), (0.7,), (1.0,)),
    "jacfwd": lambda: db.jacfwd(decay_at_one, np.array([0.7])),
    "jacobian, auto mode": lambda: db.jacobian(decay_at_one, np.array([0.7])),
}


@pytest.mark.parametrize("composition", SECOND_ORDER)
def test_second_derivatives_are_a_clear_error(composition):
    with pytest.raises(UnsupportedFunctionError, match=r"not differentiable again.*Gauss-Newton.*mode='reverse'"):
        SECOND_ORDER[composition]()


@pytest.mark.parametrize("composition", FORWARD_MODE)
def test_forward_mode_names_the_reverse_calls(composition):
    with pytest.raises(UnsupportedFunctionError, match=r"db\.jvp .*does not reach.*mode='reverse'"):
        FORWARD_MODE[composition]()


def test_the_named_compositions_work():
    """What the errors offer: the Jacobian in reverse mode (its Gauss-Newton JᵀJ) and db.jacrev."""
    k = np.array([0.7])
    expected = -np.exp(-0.7) * np.ones((2, 1))
    np.testing.assert_allclose(db.jacobian(decay_at_one, k, mode="reverse"), expected, rtol=1e-7)
    np.testing.assert_allclose(db.jacrev(decay_at_one, k), expected, rtol=1e-7)


def test_events_are_refused_when_differentiated():
    event = lambda t, y: y[0] - 0.5
    with pytest.raises(UnsupportedFunctionError, match="events"):
        db.gradient(lambda k: np.sum(integrate.solve_ivp(lambda t, y: -k * y, (0, 1), np.ones(1), events=event).y), 1.0)


def test_sensitivity_keyword_is_checked():
    with pytest.raises(ValueError, match="sensitivity"):
        integrate.odeint(lotka_volterra, Y0, T, args=tuple(P), sensitivity="backward")


def test_forward_mode_through_odeint_is_a_clear_error():
    with pytest.raises(UnsupportedFunctionError, match=r"db\.jvp"):
        db.jvp(lambda y0: np.sum(integrate.odeint(lambda y, t: -y, y0, [0.0, 1.0])), (np.ones(2),), (np.ones(2),))


def products_problem(fun, p):
    """A `Problem` of ``fun(t, y, p)``, its parameter ``p`` tracked (made inside a gradient, as a solve's is)."""
    made = []

    def loss(p):
        made.append(integrate.Problem("solve_ivp", (fun, (p,)), dict(method="RK45"), "auto"))
        return np.sum(p)

    db.gradient(loss, p)
    return made[0]


def test_small_right_hand_sides_run_as_scalar_code():
    """A small right-hand side's products run as Python scalar code, and give the prepared replay's values."""
    problem = products_problem(lv, P)
    z = np.random.default_rng(4).normal(size=9)
    program = problem.program(2, P, True, 1, z)
    assert type(program) is integrate.ScalarGradient
    np.testing.assert_allclose(program(z), program.prepared(z), rtol=1e-13)
    f, jy, jp = problem.jacobian(2, P)(0.3, z[1:3])
    expected = [program.prepared(np.concatenate([[0.3], z[1:3], unit, P])) for unit in np.eye(2)]
    np.testing.assert_allclose(f, expected[0][3:5], rtol=1e-13)
    np.testing.assert_allclose(jy, [g[1:3] for g in expected], rtol=1e-13)
    np.testing.assert_allclose(jp, [g[5:] for g in expected], rtol=1e-13)


def test_a_call_python_raises_on_is_replayed():
    """Where the scalar code raises (math.log of a negative number) the prepared replay gives NumPy's NaN."""
    problem = products_problem(lambda t, y, p: p * np.log(y), np.array([2.0, 3.0]))
    z = np.array([0.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0])
    program = problem.program(2, np.array([2.0, 3.0]), True, 1, z)
    assert type(program) is integrate.ScalarGradient
    z[1] = -1.0
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(program(z), program.prepared(z))
        assert np.isnan(program(z)[3])  # F = p log(y), the gradient in a


def test_what_the_scalar_code_does_not_write_is_replayed():
    """A matrix product is not written as scalars: the products replay the prepared program."""
    A = np.eye(3)
    problem = products_problem(lambda t, y, A: A @ y, A)
    z = np.arange(16.0)
    assert type(problem.program(3, A.ravel(), True, 1, z)) is not integrate.ScalarGradient
    f, jy, jp = problem.jacobian(3, A.ravel())(0.0, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(f, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(jy, A)
    np.testing.assert_array_equal(jp, np.kron(np.eye(3), [1.0, 2.0, 3.0]))
