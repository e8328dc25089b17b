"""Realistic models (issue 27): what a user writes in plain NumPy every day, timed against ``jax.jit``.

Each model is written once over a NumPy-like namespace ``xp`` (as in `benchmarks.peers`): with ``xp = np``
it is the user's plain NumPy (no `db.sum`), and JAX, PyTorch and autograd compute the same code.  Every
column is checked against JAX's gradient (autograd's where JAX is absent; SciPy's hand-written one for
Rosenbrock) before it is timed.  The warm figures of a row are sampled in turns (`Workload.in_turns`), and
each row prints its first calls (preparing or compiling included) and what its dualbroadcast columns ran on.
Run with ``python -m benchmarks --only realistic --threads 1`` (BLAS on one thread, as the issue measured).
"""

import itertools
import time

import numpy as np
import scipy.optimize

import dualbroadcast as db
from dualbroadcast import loops

from .suite import Row, Workload, _higher_order_peers, _peer_columns, _prepared, explained_call

LOG_2PI = float(np.log(2 * np.pi))
ADAM_STEPS = 20


# --- the models, once, over a namespace -------------------------------------------------------
def logistic_loss(xp, w, X, y):
    """Mean logistic loss of labels ``y`` in {-1, 1} with an L2 penalty."""
    margins = y * (X @ w)
    return xp.mean(xp.logaddexp(0.0, -margins)) + 0.01 * xp.sum(w**2)


def logsumexp(xp, a, axis):
    """log(sum(exp(a))) along ``axis`` (kept), shifted by the maximum as users write it."""
    top = xp.max(a, axis=axis, keepdims=True)
    return xp.log(xp.sum(xp.exp(a - top), axis=axis, keepdims=True)) + top


def gmm_nll(xp, params, X):
    """Mean negative log-likelihood of points ``X`` (N, D) under K isotropic Gaussians."""
    means, log_scales, logits = params  # (K, D), (K,), (K,)
    dims = X.shape[1]
    squared = xp.sum((X[:, None, :] - means[None, :, :]) ** 2, axis=2)  # (N, K)
    log_weights = logits - logsumexp(xp, logits, 0)
    log_p = log_weights - dims * log_scales - 0.5 * squared * xp.exp(-2 * log_scales) - 0.5 * dims * LOG_2PI
    return -xp.mean(logsumexp(xp, log_p, 1))


def mlp_loss(xp, params, X, y):
    """Mean squared error of a two-hidden-layer tanh network."""
    W1, b1, W2, b2, W3, b3 = params
    h = xp.tanh(X @ W1 + b1)
    h = xp.tanh(h @ W2 + b2)
    return xp.mean((h @ W3 + b3 - y) ** 2)


def pair_energy(xp, pos):
    """Softened Coulomb energy of every pair of atoms (the constant self terms included)."""
    d = pos[:, None] - pos[None]
    r2 = xp.sum(d**2, axis=-1)
    return 0.5 * xp.sum(1.0 / xp.sqrt(r2 + 0.01))


def lotka_volterra(xp, u, p):
    """The Lotka-Volterra vector field at ``u`` = (prey, predators)."""
    x, y = u[0], u[1]
    return xp.stack([p[0] * x - p[1] * x * y, p[2] * x * y - p[3] * y])


def rk4_step(xp, u, p, dt):
    k1 = lotka_volterra(xp, u, p)
    k2 = lotka_volterra(xp, u + 0.5 * dt * k1, p)
    k3 = lotka_volterra(xp, u + 0.5 * dt * k2, p)
    k4 = lotka_volterra(xp, u + dt * k3, p)
    return u + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def rk4_loss(xp, p, u0, steps=80, dt=0.05):
    """Sum over the RK4 trajectory's steps of |u|^2, a Python loop of small steps."""
    u, loss = u0, 0.0
    for _ in range(steps):
        u = rk4_step(xp, u, p, dt)
        loss = loss + xp.sum(u**2)
    return loss


def rk4_loss_scan(jax, xp, p, u0, steps=80, dt=0.05):
    """`rk4_loss` as a JAX user writes it: the loop a ``lax.scan``."""
    def step(u, _):
        u = rk4_step(xp, u, p, dt)
        return u, xp.sum(u**2)

    _, losses = jax.lax.scan(step, u0, None, length=steps)
    return xp.sum(losses)


def rosenbrock(xp, x):
    """SciPy's ``rosen``, written with slices."""
    return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


# --- data -------------------------------------------------------------------------------------
def logistic_data(quick):
    rng = np.random.default_rng(0)
    n = 5_000 if quick else 50_000
    X = rng.standard_normal((n, 40))
    y = np.sign(X @ rng.standard_normal(40) + 0.5 * rng.standard_normal(n))
    return 0.1 * rng.standard_normal(40), X, y


def gmm_data(quick):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2_000 if quick else 20_000, 2)) * 2
    params = (rng.standard_normal((4, 2)), 0.1 * rng.standard_normal(4), 0.1 * rng.standard_normal(4))
    return params, X


def mlp_data(rows):
    rng = np.random.default_rng(2)
    sizes = (16, 128, 128, 1)
    params = tuple(p for a, b in itertools.pairwise(sizes) for p in (rng.standard_normal((a, b)) / np.sqrt(a),
                                                                     0.1 * rng.standard_normal(b)))
    X = rng.standard_normal((rows, 16))
    return params, X, np.sin(X[:, :1]) + 0.1 * rng.standard_normal((rows, 1))


def pair_data(quick):
    return np.random.default_rng(3).uniform(0, 10, (300 if quick else 1_500, 3))


# --- rows -------------------------------------------------------------------------------------
def _reference(peers, model, diff, consts):
    """The gradient every column is checked against: JAX's (compiled), autograd's where JAX is absent."""
    by_name = {peer.name: peer for peer in peers}
    for name, column in (("jax", "jax.jit"), ("autograd", "autograd")):
        if name in by_name:
            peer = by_name[name]
            return lambda: peer.to_numpy(peer.make(column, model, diff, consts)())
    raise RuntimeError("the realistic rows check every gradient against JAX's or autograd's: install one")


def gradient_row(label, model, diff, consts, peers, params, hand=None, tol=1e-8):
    """A row timing the gradient of ``model(xp, diff, *consts)`` in ``diff`` by every implementation."""
    def plain(d):
        return model(np, d, *consts)

    impls = {"db": lambda: (lambda: db.gradient(plain, diff)), "db prep": _prepared([plain], (diff,))}
    impls.update(_peer_columns(peers, model, diff, consts))
    reference = None if hand is not None else _reference(peers, model, diff, consts)
    return Row(label, lambda: plain(diff), hand, impls, tol, params, reference=reference)


def _workload(key, title, *builds):
    return Workload(key, title, list(builds), omit=("db.sum", "jax"), in_turns=True)  # eager jax: seconds a call


def workloads(quick, peers):
    """The realistic workloads, one row each (`suite.GROUPS["realistic"]` names their keys)."""
    w, X, y = logistic_data(quick)
    gmm_params, gmm_X = gmm_data(quick)
    mlp_params, mlp_X, mlp_y = mlp_data(4096)
    pos = pair_data(quick)
    x_rosen = np.random.default_rng(4).uniform(0, 2, 2_000)
    return [
        _workload("logistic", f"L2 logistic regression, {X.shape[0]} x 40, np.logaddexp; d/dw",
                  lambda: gradient_row(f"{X.shape[0]}x40", logistic_loss, w, (X, y), peers, {"N": X.shape[0]})),
        _workload("gmm", f"Gaussian mixture NLL, {gmm_X.shape[0]} points in 2-d, 4 components, own logsumexp; "
                         "d/d(means, log scales, logits)",
                  lambda: gradient_row(f"N={gmm_X.shape[0]}", gmm_nll, gmm_params, (gmm_X,), peers,
                                       {"N": gmm_X.shape[0]})),
        _workload("mlp", "MLP 16-128-128-1, tanh, 4096 rows, mean squared error; d/d(weights, biases)",
                  lambda: gradient_row("4096 rows", mlp_loss, mlp_params, (mlp_X, mlp_y), peers, {"rows": 4096})),
        _workload("pairs", f"All-pairs softened Coulomb energy, {pos.shape[0]} atoms, pos[:, None] - pos[None]; "
                           "d/dpos",
                  lambda: gradient_row(f"{pos.shape[0]} atoms", pair_energy, pos, (), peers,
                                       {"atoms": pos.shape[0]})),
        Workload("rk4", "RK4 time loop, Lotka-Volterra, 80 steps of 2-element arrays; d/d(4 rates) (jax.jit: "
                        "lax.scan; db prep: as prepared, its loop run as Python scalar code until the calls have "
                        f"taken {loops.TIER_UP:g} s; db tiered: after that, Numba compiled in the background)",
                 [lambda: rk4_row(peers)], extra=("db tiered",), omit=("db.sum", "jax"), in_turns=True),
        _workload("rosenbrock", "Rosenbrock, 2000 variables (hand: scipy.optimize.rosen_der); d/dx",
                  lambda: gradient_row("n=2000", rosenbrock, x_rosen, (), peers, {"n": 2000},
                                       hand=lambda: scipy.optimize.rosen_der(x_rosen))),
        _workload("adam", f"Training: {ADAM_STEPS} Adam steps on the MLP, 256-row batch (primal: {ADAM_STEPS} "
                          "loss evaluations; db: value_and_gradient, db prep: prepared; jax.jit: the whole step "
                          "jitted; torch: torch.optim.Adam); the parameters after training",
                  lambda: adam_row(peers)),
        _workload("trust_ncg", "scipy.optimize.minimize(method='trust-ncg'), Rosenbrock of 1000 variables: one "
                               "hvp (hand: rosen_hess_prod), and the whole minimization with jac= and hessp= "
                               "(its primal: SciPy's own rosen, rosen_der, rosen_hess_prod)",
                  lambda: hvp_row(peers), lambda: minimize_row(peers)),
    ]


def rk4_row(peers):
    """The RK4 loop's row: its jax.jit column (and the reference) the ``lax.scan`` of the same steps."""
    p, u0 = np.array([1.1, 0.4, 0.1, 0.4]), np.array([10.0, 5.0])
    jax_peers = [peer for peer in peers if peer.name == "jax"]
    row = gradient_row("80 steps", rk4_loss, p, (u0,), peers, {"steps": 80})
    for peer in jax_peers:
        scanned = lambda xp, p, u0: rk4_loss_scan(peer.jax, xp, p, u0)  # noqa: E731
        row.impls["jax.jit"] = _peer_columns([peer], scanned, p, (u0,))["jax.jit"]
        row.reference = _reference([peer], scanned, p, (u0,))
    row.impls["db tiered"] = lambda: tiered_up(lambda p: rk4_loss(np, p, u0), p)
    return row


def tiered_up(f, x, patience=120.0):
    """``lambda: prog(x)`` of ``db.prepare_gradient(f, x)`` called until its loop has tiered up (Numba compiled
    in the background after `loops.TIER_UP` seconds of calls, then measured against the Python scalar code), or
    ``patience`` seconds passed: the steady state of a user's long optimisation."""
    prog = db.prepare_gradient(f, x)
    tier = next(p for ps in prog.variants.values() for p in ps).loop.tier
    deadline = time.perf_counter() + patience
    while type(tier) is loops.LoopTier and tier.numba and time.perf_counter() < deadline \
            and ("numba" not in tier.seconds or tier.chosen is None) and "Numba failed" not in (tier.failed or ""):
        prog(x)
        if tier.compiling is not None:
            tier.compiling.join(max(0.0, deadline - time.perf_counter()))
    return explained_call(prog, (x,))


# --- training: Adam --------------------------------------------------------------------------
def adam_update(xp, params, grads, m, v, c1, c2, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step over lists of arrays; ``c1``, ``c2``: the bias corrections 1 - b1^t, 1 - b2^t."""
    m = [b1 * mk + (1 - b1) * g for mk, g in zip(m, grads)]
    v = [b2 * vk + (1 - b2) * g * g for vk, g in zip(v, grads)]
    params = [p - lr * (mk / c1) / (xp.sqrt(vk / c2) + eps) for p, mk, vk in zip(params, m, v)]
    return params, m, v


def corrections(t, b1=0.9, b2=0.999):
    return 1 - b1**t, 1 - b2**t


def train(gradients, params, steps=ADAM_STEPS):
    """The parameters after ``steps`` Adam steps in NumPy, ``gradients(params)`` giving (value, gradient)."""
    params = list(params)
    m, v = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        _, grads = gradients(tuple(params))
        params, m, v = adam_update(np, params, grads, m, v, *corrections(t))
    return tuple(params)


def jax_train(jax, params, consts, steps=ADAM_STEPS):
    """`train` as a JAX user writes it: the whole step (loss, gradient, update) one jitted function."""
    xp = jax.numpy

    @jax.jit
    def step(params, m, v, c1, c2):
        grads = jax.grad(lambda p: mlp_loss(xp, p, *consts))(params)
        return adam_update(xp, params, grads, m, v, c1, c2)

    def run():
        p, m, v = list(params), [xp.zeros_like(a) for a in params], [xp.zeros_like(a) for a in params]
        for t in range(1, steps + 1):
            p, m, v = step(p, m, v, *corrections(t))
        return jax.block_until_ready(p)

    return run


def torch_train(peer, params, consts, steps=ADAM_STEPS):
    """`train` as a PyTorch user writes it: ``torch.optim.Adam`` over leaf tensors."""
    torch = peer.torch
    X, y = peer.convert(consts)

    def run():
        leaves = [torch.tensor(p, requires_grad=True) for p in params]
        optimizer = torch.optim.Adam(leaves, lr=1e-3)
        for _ in range(steps):
            optimizer.zero_grad()
            mlp_loss(peer.xp, leaves, X, y).backward()
            optimizer.step()
        return leaves

    return run, lambda leaves: [t.detach().numpy() for t in leaves]


def adam_row(peers):
    params, X, y = mlp_data(256)

    def loss(p):
        return mlp_loss(np, p, X, y)

    def prepared():
        prog = db.prepare_gradient(loss, params)
        call = lambda: train(prog.value_and_gradient, params)  # noqa: E731
        call.explained = lambda: db.explain(prog, params)
        return call

    impls = {"db": lambda: (lambda: train(lambda p: db.value_and_gradient(loss, p), params)), "db prep": prepared}
    reference = None
    for peer in peers:
        if peer.name == "jax":
            run = jax_train(peer.jax, params, peer.convert((X, y)))
            impls["jax.jit"] = lambda run=run: run
            reference = lambda run=run: [np.asarray(p) for p in run()]  # noqa: E731
        elif peer.name == "torch":
            impls["torch"] = lambda peer=peer: torch_train(peer, params, (X, y))
        elif peer.name == "autograd":
            vg = peer.autograd.value_and_grad(lambda p: mlp_loss(peer.xp, p, X, y))
            impls["autograd"] = lambda vg=vg: (lambda: train(vg, params))
    if reference is None:
        raise RuntimeError("the Adam row checks the trained parameters against JAX's: install JAX")
    return Row(f"{ADAM_STEPS} steps", lambda: [loss(params) for _ in range(ADAM_STEPS)], None, impls, 1e-8,
               {"steps": ADAM_STEPS, "rows": 256}, reference=reference)


# --- scipy.optimize.minimize(method="trust-ncg") -----------------------------------------------
def rosen_data():
    rng = np.random.default_rng(5)
    return rng.uniform(0, 2, 1_000), rng.standard_normal(1_000)


def hvp_row(peers):
    """One Hessian-vector product of Rosenbrock, as trust-ncg asks for hundreds of them."""
    x, v = rosen_data()

    def plain(x):
        return rosenbrock(np, x)

    def prepared():
        prog = db.prepare_hvp(plain, x)
        call = lambda: prog(x, v)  # noqa: E731
        call.explained = lambda: db.explain(prog.program, x, db.cut((v,)))  # its program: <grad f(x), v> in x
        return call

    impls = {"db": lambda: (lambda: db.hvp(plain, x, v)), "db prep": prepared}
    impls.update(_higher_order_peers(peers, rosenbrock, (x, v),
                                     jax=lambda jax, f: lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1],
                                     torch=lambda func, f: lambda x, v: func.jvp(func.grad(f), (x,), (v,))[1]))
    return Row("hvp, n=1000", lambda: plain(x), lambda: scipy.optimize.rosen_hess_prod(x, v), impls, 1e-8,
               {"n": 1000})


def minimize(x0, fun_and_jac, hessp):
    """The minimizer trust-ncg finds from ``x0`` with ``fun_and_jac(x)`` = (value, gradient) and ``hessp``."""
    return scipy.optimize.minimize(fun_and_jac, x0, jac=True, hessp=hessp, method="trust-ncg").x


def minimize_row(peers):
    x0, _ = rosen_data()

    def plain(x):
        return rosenbrock(np, x)

    def scipy_own():
        return scipy.optimize.minimize(scipy.optimize.rosen, x0, jac=scipy.optimize.rosen_der,
                                       hessp=scipy.optimize.rosen_hess_prod, method="trust-ncg").x

    def prepared():
        gradient, hvp = db.prepare_gradient(plain, x0), db.prepare_hvp(plain, x0)
        call = lambda: minimize(x0, gradient.value_and_gradient, hvp)  # noqa: E731
        call.explained = lambda: db.explain(gradient, x0)
        return call

    impls = {"db": lambda: (lambda: minimize(x0, lambda x: db.value_and_gradient(plain, x),
                                             lambda x, v: db.hvp(plain, x, v))),
             "db prep": prepared}
    for peer in peers:
        if peer.name == "jax":
            impls["jax.jit"] = lambda jax=peer.jax, xp=peer.xp: jax_minimize(jax, xp, x0)
    return Row("minimize", scipy_own, None, impls, 1e-6, {"n": 1000}, reference=scipy_own)


def jax_minimize(jax, xp, x0):
    """`minimize` with JAX's jitted value_and_grad and forward-over-reverse hvp, results as NumPy."""
    f = lambda x: rosenbrock(xp, x)  # noqa: E731
    value_and_grad = jax.jit(jax.value_and_grad(f))
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])

    def fun_and_jac(x):
        value, grad = value_and_grad(x)
        return float(value), np.asarray(grad)

    return lambda: minimize(x0, fun_and_jac, lambda x, v: np.asarray(hvp(x, v)))
