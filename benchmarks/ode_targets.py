"""Issue 31's targets for dualbroadcast.scipy.integrate: gradients of ODE solves, their accuracy and cost.

1. Lotka-Volterra, 4 parameters, 1,000 output times, rtol=1e-10: the gradient against central
   differences and JAX's ``jax.experimental.ode.odeint``; its time over the forward solve's.
2. A 100-state linear ODE ``y' = A y`` (10,000 parameters): the adjoint's time over the forward
   solve's, and the peak memory (tracemalloc) of the gradient against the forward solve's and the
   checkpoints' (the output ``Y``, kept by the tape), on a horizon and on four times that horizon
   (over three times the steps, the same peak).
3. Robertson's stiff problem with BDF: the gradient against central differences.

Times are medians of CPU time (`time.process_time`: on a shared machine what other processes take is left out)
sampled in turns (`timing.interleaved_medians`).  Each target's gradient is also broken down (`breakdown`, CPU
time of one call): the prepared programs' recordings, their replays (the right-hand side's vector-Jacobian
products, counted), the calls of their scalar code (a small right-hand side's products and Jacobians), and the
rest (SciPy's stepping of the gradient's solve, dense output, the primal solve).  The programs are kept across
solves of the same right-hand side, so a gradient records only when its problem is new ("first gradient": with
the kept programs dropped).
Run: python -m benchmarks.ode_targets
"""

import time
import tracemalloc

import numpy as np
import scipy.integrate

import dualbroadcast as db
from dualbroadcast import prepared
from dualbroadcast.scipy import integrate

from .timing import interleaved_medians


def breakdown(gradient, forward):
    """Where one gradient call's CPU time goes, against one forward solve's: a line of text.  The right-hand side's
    products are prepared replays, or calls of their scalar code (`integrate.ScalarGradient`: a product, or the
    rows of a Jacobian in one call)."""
    spent = {"record": 0.0, "replay": 0.0, "replays": 0, "scalar": 0.0, "scalars": 0}
    originals = [(integrate, "prepare_gradient", "record"), (prepared.PreparedGradient, "__call__", "replay"),
                 (integrate.ScalarGradient, "__call__", "scalar"), (integrate.ScalarGradient, "gradients", "scalar")]

    def timed(function, name):
        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start
                if name + "s" in spent:
                    spent[name + "s"] += 1
        return call

    functions = [getattr(owner, attribute) for owner, attribute, _ in originals]
    for (owner, attribute, name), function in zip(originals, functions):
        setattr(owner, attribute, timed(function, name))
    try:
        start = time.process_time()
        gradient()
        total = time.process_time() - start
    finally:
        for (owner, attribute, _), function in zip(originals, functions):
            setattr(owner, attribute, function)
    start = time.process_time()
    evaluations = forward().nfev
    plain = time.process_time() - start
    rest = total - spent["record"] - spent["replay"] - spent["scalar"]
    return (f"CPU: forward {plain * 1e3:.1f} ms ({evaluations} evaluations); gradient {total * 1e3:.1f} ms: "
            f"recording {spent['record'] * 1e3:.1f} ms, {spent['replays']} vjp replays {spent['replay'] * 1e3:.1f} ms "
            f"({spent['replay'] / max(spent['replays'], 1) * 1e6:.0f} us each), {spent['scalars']} scalar-code calls "
            f"{spent['scalar'] * 1e3:.1f} ms ({spent['scalar'] / max(spent['scalars'], 1) * 1e6:.1f} us each), "
            f"the rest {rest * 1e3:.1f} ms")


def first_breakdown(gradient, forward):
    """`breakdown` of a gradient whose problem is new: the kept programs dropped first, so it records them."""
    integrate._PROGRAMS.clear()
    return breakdown(gradient, forward)


def lotka_volterra(t, y, p):
    u, v = y[0], y[1]
    return np.stack([p[0] * u - p[1] * u * v, -p[2] * v + p[3] * u * v])


def lotka_volterra_target(method="DOP853"):
    t = np.linspace(0.0, 15.0, 1000)
    y0, p = np.array([1.0, 1.0]), np.array([1.5, 1.0, 3.0, 1.0])
    data = np.random.default_rng(1).normal(size=(2, 1000))

    def loss(p, sensitivity="auto"):
        result = integrate.solve_ivp(lotka_volterra, (0.0, 15.0), y0, method=method, t_eval=t, args=(p,),
                                     rtol=1e-10, atol=1e-10, sensitivity=sensitivity)
        return np.sum((result.y - data) ** 2)

    def forward():
        return scipy.integrate.solve_ivp(lotka_volterra, (0.0, 15.0), y0, method=method, t_eval=t, args=(p,),
                                         rtol=1e-10, atol=1e-10)

    adjoint = db.gradient(lambda p: loss(p, "adjoint"), p)
    steps = 1e-5 * p
    differences = np.array([(loss(p + e) - loss(p - e)) / (2 * s) for e, s in zip(np.diag(steps), steps)])
    print(f"Lotka-Volterra ({method}, 1,000 times, rtol=1e-10): adjoint {adjoint}")
    relative = np.max(np.abs(adjoint - differences) / np.abs(differences))
    print(f"  relative difference to central differences: {relative:.1e}")
    forward_gradient = db.gradient(lambda p: loss(p, "forward"), p)
    relative = np.max(np.abs(adjoint - forward_gradient) / np.abs(forward_gradient))
    print(f"  to forward sensitivities: {relative:.1e}")
    jax_gradient = _jax_lotka_volterra_gradient(y0, p, t, data)
    if jax_gradient is not None:
        print(f"  to JAX's odeint: {np.max(np.abs(adjoint - jax_gradient) / np.abs(jax_gradient)):.1e}")
    auto = db.gradient(loss, p)
    print(f"  sensitivity='auto' (forward sensitivities here) to the adjoint: "
          f"{np.max(np.abs(auto - adjoint) / np.abs(adjoint)):.1e}")
    times = interleaved_medians([forward, lambda: db.gradient(loss, p),
                                 lambda: db.gradient(lambda p: loss(p, "adjoint"), p)], budget=3.0, max_runs=10,
                                 clock=time.process_time)
    print(f"  forward solve {times[0] * 1e3:.0f} ms; gradient with sensitivity='auto' {times[1] * 1e3:.0f} ms "
          f"({times[1] / times[0]:.1f}x), by the adjoint {times[2] * 1e3:.0f} ms ({times[2] / times[0]:.1f}x)")
    print("  auto:", breakdown(lambda: db.gradient(loss, p), forward))
    print("  adjoint:", breakdown(lambda: db.gradient(lambda p: loss(p, "adjoint"), p), forward))
    print("  auto, first gradient:", first_breakdown(lambda: db.gradient(loss, p), forward))


def _jax_lotka_volterra_gradient(y0, p, t, data):
    try:
        import jax
        from jax.experimental.ode import odeint
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def loss(p):
        f = lambda y, t, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])  # noqa
        return jnp.sum((odeint(f, jnp.asarray(y0), jnp.asarray(t), p, rtol=1e-10, atol=1e-10).T - data) ** 2)

    grad = jax.jit(jax.grad(loss))
    grad(p).block_until_ready()
    start = time.perf_counter()
    out = np.asarray(grad(p))
    print(f"  JAX odeint gradient (jit, compiled): {(time.perf_counter() - start) * 1e3:.0f} ms")
    return out


def linear_target(n=100, outputs=20, horizon=5.0):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(n, n)) / np.sqrt(n) - 0.5 * np.eye(n)
    y0 = rng.normal(size=n)
    t = np.linspace(0.0, horizon, outputs)

    def loss(A):
        return np.sum(integrate.solve_ivp(lambda t, y, A: A @ y, (0.0, horizon), y0, t_eval=t, args=(A,),
                                          rtol=1e-8, atol=1e-8, sensitivity="adjoint").y ** 2)

    def forward():
        return scipy.integrate.solve_ivp(lambda t, y, A: A @ y, (0.0, horizon), y0, t_eval=t, args=(A,), rtol=1e-8,
                                         atol=1e-8)

    evaluations = forward().nfev
    times = interleaved_medians([forward, lambda: db.gradient(loss, A)], budget=3.0, max_runs=10,
                                 clock=time.process_time)
    peaks = []
    for run in (forward, lambda: db.gradient(loss, A)):
        tracemalloc.start()
        run()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    g = db.gradient(loss, A)
    i, j = 3, 7
    e = np.zeros_like(A)
    e[i, j] = 1e-6
    difference = (loss(A + e) - loss(A - e)) / 2e-6
    checkpoints = n * outputs * 8
    print(f"Linear ODE, {n} states, {n * n} parameters, RK45, {outputs} output times on [0, {horizon:g}] "
          f"({evaluations} evaluations): "
          f"forward {times[0] * 1e3:.0f} ms, adjoint gradient {times[1] * 1e3:.0f} ms ({times[1] / times[0]:.1f}x); "
          f"peak memory forward {peaks[0] / 1e6:.2f} MB, gradient {peaks[1] / 1e6:.2f} MB (the gradient itself "
          f"{A.nbytes / 1e6:.2f} MB, the checkpoints {checkpoints / 1e6:.3f} MB); "
          f"dA[3,7] {g[i, j]:.8f} vs central difference {difference:.8f}")
    print("  " + breakdown(lambda: db.gradient(loss, A), forward))
    print("  first gradient: " + first_breakdown(lambda: db.gradient(loss, A), forward))


def robertson_target():
    def robertson(t, y, k):
        return np.stack([-k[0] * y[0] + k[2] * y[1] * y[2], k[0] * y[0] - k[1] * y[1] ** 2 - k[2] * y[1] * y[2],
                         k[1] * y[1] ** 2])

    def loss(k, sensitivity="adjoint"):
        result = integrate.solve_ivp(robertson, (0.0, 1e3), np.array([1.0, 0.0, 0.0]), method="BDF",
                                     t_eval=np.geomspace(1e-2, 1e3, 20), args=(k,), rtol=1e-10, atol=1e-14,
                                     sensitivity=sensitivity)
        return np.sum(result.y[0] + 1e4 * result.y[1])

    k = np.array([0.04, 3e7, 1e4])
    steps = 1e-6 * k
    differences = np.array([(loss(k + e) - loss(k - e)) / (2 * s) for e, s in zip(np.diag(steps), steps)])
    for sensitivity in ("adjoint",):  # forward sensitivities with BDF: minutes (see integrate.py)
        g = db.gradient(lambda k: loss(k, sensitivity), k)
        print(f"Robertson (BDF, {sensitivity}): relative difference to central differences "
              f"{np.max(np.abs(g - differences) / np.abs(differences)):.1e}")


if __name__ == "__main__":
    lotka_volterra_target()
    robertson_target()
    linear_target()
    linear_target(horizon=20.0)  # four times the horizon, over three times the steps: the same peak memory
