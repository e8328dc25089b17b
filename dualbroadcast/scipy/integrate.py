"""Mirrors of ``scipy.integrate.odeint`` and ``solve_ivp``: SciPy's signatures and values, gradients by
the adjoint method or by forward sensitivities.

The solution ``Y[k] = y(τ[k])`` of ``dy/dt = F(t, y, p)`` from ``y(s) = y0`` is differentiable in ``y0``,
the start ``s``, the output times ``τ`` and the parameters ``p``: the tracked leaves of ``args`` and of
the right-hand side's own state (its closure, ``functools.partial`` arguments, a callable object's
attributes: the pytree of `db.cut`; a cut one is a constant).  With ``G[k]`` the cotangent of ``Y[k]``:

* adjoint: ``a`` (``n`` states) and ``q`` (one per parameter) solved backward from ``τ[-1]`` to ``s``,
  ``a' = -∂F/∂yᵀ a``, ``q' = -∂F/∂pᵀ a``, with ``G[k]`` added to ``a`` at each ``τ[k]``; then
  ``ȳ0 = a(s)``, ``p̄ = q(s)``;
* forward sensitivities: ``S = ∂y/∂(y0, p)`` (``n`` by ``n+P``) solved with ``y`` from ``s``,
  ``S' = ∂F/∂y S + [0 | ∂F/∂p]``, ``S(s) = [I | 0]``; then ``[ȳ0 | p̄] = Σₖ S(τ[k])ᵀ G[k]``;
* in either, ``τ̄[k] = G[k] · F(τ[k], Y[k])`` and ``s̄ = -ȳ0 · F(s, y0)``.

Both solve with SciPy's own solver and the call's method and tolerances.  ``sensitivity="auto"`` takes
the one of lower cost (`Problem.chosen_sensitivity`), from the forward solve's measured seconds an evaluation
and a vector-Jacobian product's: forward sensitivities take ``n`` products per evaluation of the forward solve,
the adjoint one, plus a restart at each output time, and its other work (`ADJOINT_COST`), so few states
(Lotka-Volterra, chains of up to about 16 states with 20 output times or more) go forward; a stiff method always
takes the adjoint (its Newton iterations converge slowly with the forward system's block-diagonal Jacobian:
Robertson's took minutes).  An explicit method's ``S`` is left out of the step-size control (SUNDIALS'
``errconS=False``).

The adjoint needs ``y`` between output times: the explicit Runge-Kutta methods (RK23, RK45, DOP853)
solve it backward beside ``a`` from the checkpoint ``Y[k]`` (each restart trying the previous interval's
longest step first), and ``q`` is a quadrature, not states: Gauss-Legendre nodes in each backward step, exact
to the method's order, with ``y`` and ``a`` from the step's dense output (`Quadrature`), so the steps and
their arithmetic do not grow with the number of parameters (10,000 of them for a 100-state linear ODE).  The
stiff ones (BDF, Radau, LSODA; odeint is LSODA) re-solve ``y`` forward from ``Y[k-1]`` and interpolate, with
``q`` as states beside ``a``.  Memory is the output plus one interval's steps, never the whole solve's; the
backward solves step SciPy's solver classes directly and keep no trajectory.

``Fᵀa`` products come from prepared programs (`db.prepare_gradient` of ``⟨a, F(t, y, p)⟩``, whose gradient in
``a`` is ``F`` itself), replayed at every evaluation: one differentiating the parameters too (the quadrature's
nodes, forward sensitivities, the stiff adjoint), one with them as constants (the explicit adjoint's stages);
the stiff methods' Jacobians and the forward sensitivities' are ``n`` of them.  A program whose recorded values
are all small (a few states and parameters: each at most `loops.SCALAR_MAX` elements, the operations the loops'
scalar code writes) runs as Python scalar code instead (`ScalarGradient`: `loops.ScalarProgram` without a loop,
checked against the replay on the recorded arguments; a call Python raises on is replayed): a Lotka-Volterra
product takes 1.4 us against the replay's 13, a Jacobian's rows come from one call, and the forward sensitivities'
gradient went from 6.3x the forward solve to 2.5x.  The programs are kept across solves under the key kernels use
(`kernel_keys`: the right-hand side's code, closure, defaults and the globals it reads, its constant leaves by
value), so a second gradient of the same problem records nothing and a changed one records anew.

The gradient is computed on plain values: a second derivative (a nested gradient, `db.hvp`) through a
solver is an error naming what to do instead.
"""

import collections
import functools
import math
import threading
import time

import numpy as np
import scipy.integrate
import scipy.sparse

from .. import pytree
from ..context import FORWARD
from ..errors import UnsupportedFunctionError
from ..guards import Guarded, untracked
from ..kernel_cache import CACHE_SIZE
from ..kernel_keys import Reads, structure_key
from ..loops import SCALAR_MAX, ScalarProgram, Unsupported
from ..prepared import prepare_gradient
from ..registry import defvjp_argnum
from ..tracked import Tracked, primitive

__all__ = ["odeint", "solve_ivp"]

EXPLICIT = ("RK23", "RK45", "DOP853")
SENSITIVITIES = ("auto", "adjoint", "forward")
ADJOINT_COST = 2.0  # the adjoint's cost over its evaluations' and products': y solved beside a, the quadrature, dense
# output (fitted to Lotka-Volterra with 2 and 100 outputs, chains of 4-40 states, a linear ODE of 10: 1.3-2.9; with 2
# "auto" chose the faster in each, with 1.5 not)
_PROGRAMS = collections.OrderedDict()  # `Problem.program_key` -> (program, seconds a call), the last CACHE_SIZE used
_PROGRAMS_LOCK = threading.Lock()


def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None, rtol=None, atol=None,
           tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0, mxhnil=0, mxordn=12, mxords=5, printmessg=0,
           tfirst=False, sensitivity="auto"):
    """``scipy.integrate.odeint``, differentiable in ``y0``, ``t``, ``args`` and ``func``'s state.

    ``sensitivity``: "adjoint", "forward" or "auto" (see the module docstring)."""
    options = dict(Dfun=Dfun, col_deriv=col_deriv, ml=ml, mu=mu, rtol=rtol, atol=atol, tcrit=tcrit, h0=h0,
                   hmax=hmax, hmin=hmin, ixpr=ixpr, mxstep=mxstep, mxhnil=mxhnil, mxordn=mxordn, mxords=mxords,
                   printmessg=printmessg, tfirst=tfirst)
    _refuse_forward_mode([y0, t])
    problem = Problem("odeint", (func, tuple(args) if isinstance(args, (tuple, list)) else (args,)), options,
                      sensitivity)
    ys = odeint_of(problem, y0, t, *problem.parameters)
    return (ys, problem.info) if full_output else ys


def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, dense_output=False, events=None, vectorized=False,
              args=None, sensitivity="auto", **options):
    """``scipy.integrate.solve_ivp``: SciPy's ``OdeResult``, whose ``y`` (and ``sol(t)``) is differentiable in
    ``y0``, ``t_span``, ``t_eval``, ``args`` and ``fun``'s state.

    ``sensitivity``: "adjoint", "forward" or "auto" (see the module docstring)."""
    args = () if args is None else tuple(args) if isinstance(args, (tuple, list)) else (args,)
    options = dict(options, method=method, dense_output=dense_output, events=events, vectorized=vectorized)
    _refuse_forward_mode([y0, *t_span, *([] if t_eval is None else [t_eval])])
    problem = Problem("solve_ivp", (fun, args), options, sensitivity)
    if events is not None and problem.parameters:
        raise UnsupportedFunctionError(
            "dualbroadcast.scipy.integrate.solve_ivp does not differentiate through events (their times "
            "depend on the solution); solve without events=, or cut the tracked values (db.cut)")
    t0, t1 = t_span
    y = solve_ivp_of(problem, y0, t0, t1, t_eval, *problem.parameters)
    result = problem.result
    result.y = y
    if dense_output and result.sol is not None and problem.parameters + [v for v in (y0, t0, t1) if _tracked(v)]:
        problem.sol = result.sol  # SciPy's interpolant, which dense_of evaluates
        result.sol = Dense(problem, y0, t0, result.sol)
    return result


def _tracked(x):
    return isinstance(x, Guarded)


class Dense:
    """``sol`` of a differentiated ``solve_ivp``: ``sol(t)`` is SciPy's interpolant, its gradient the adjoint's
    at the times ``t``."""

    def __init__(self, problem, y0, t0, sol):
        self.problem, self.y0, self.t0, self.sol = problem, y0, t0, sol
        self.t_min, self.t_max = sol.t_min, sol.t_max

    def __call__(self, t):
        return dense_of(self.problem, self.y0, self.t0, t, *self.problem.parameters)


class Problem:
    """One call's right-hand side ``F(t, y, p)`` (its parameters the tracked leaves of ``(fun, args)``), its
    options, and the solves of its gradient."""

    def __init__(self, interface, system, options, sensitivity):
        if sensitivity not in SENSITIVITIES:
            raise ValueError(f"sensitivity={sensitivity!r}; pass one of {', '.join(SENSITIVITIES)}")
        self.interface, self.options, self.sensitivity = interface, options, sensitivity
        self.leaves, self.treedef = pytree.flatten(system)
        _refuse_forward_mode(self.leaves)
        self.active = [k for k, leaf in enumerate(self.leaves) if isinstance(leaf, Tracked)]
        self.parameters = [self.leaves[k] for k in self.active]
        self.shapes = [np.shape(untracked(v)) for v in self.parameters]
        self.system = RightHandSide(interface, options, self.treedef, self.leaves, self.active, self.shapes)
        method = options.get("method", "LSODA")
        self.method = method if isinstance(method, str) else method.__name__
        self.solver = getattr(scipy.integrate, method) if isinstance(method, str) else method
        self.info = self.result = self.sol = self.evaluation_seconds = None
        self._cache = None

    # --- the right-hand side -------------------------------------------------------------------------------
    def user_jacobian(self, params):
        """The user's Jacobian (odeint's ``Dfun``, solve_ivp's ``jac``) as ``jac(t, y)``, or None."""
        if self.interface == "solve_ivp":
            jac = self.options.get("jac")
            if jac is None or not callable(jac):
                return jac
            args = pytree.unflatten(self.treedef, self._leaves(params))[1]
            return lambda t, y: jac(t, y, *args)
        dfun = self.options["Dfun"]
        if dfun is None:
            return None
        args = pytree.unflatten(self.treedef, self._leaves(params))[1]
        flip = (lambda j: j.T) if self.options["col_deriv"] else (lambda j: j)
        if self.options["tfirst"]:
            return lambda t, y: flip(np.asarray(dfun(t, y, *args)))
        return lambda t, y: flip(np.asarray(dfun(y, t, *args)))

    def _leaves(self, params):
        leaves = list(self.leaves)
        for k, value in zip(self.active, params):
            leaves[k] = value
        return leaves

    def tolerances(self):
        """(rtol, atol) of the call, SciPy's defaults where not given."""
        if self.interface == "odeint":
            rtol, atol = self.options["rtol"], self.options["atol"]
            return (1.49012e-8 if rtol is None else rtol), (1.49012e-8 if atol is None else atol)
        return self.options.get("rtol", 1e-3), self.options.get("atol", 1e-6)

    def solver_options(self, params):
        """The keyword arguments of a solver class like the call's (tolerances, step limits, Jacobian)."""
        rtol, atol = self.tolerances()
        kept = {k: v for k, v in self.options.items() if k in ("max_step", "min_step", "lband", "uband")}
        if self.interface == "odeint" and self.options["hmax"]:
            kept["max_step"] = self.options["hmax"]
        jac = self.user_jacobian(params)
        if jac is not None and self.method not in EXPLICIT:
            kept["jac"] = jac
        return dict(kept, rtol=rtol, atol=atol)

    # --- the forward solves (SciPy's own calls) --------------------------------------------------------------
    def odeint(self, y0, t, params):
        fun, args = pytree.unflatten(self.treedef, self._leaves(params))
        out = scipy.integrate.odeint(fun, y0, t, args, full_output=1, **self.options)
        self.info = out[1]
        return out[0]

    def solve_ivp(self, y0, t0, t1, t_eval, params):
        fun, args = pytree.unflatten(self.treedef, self._leaves(params))
        start = time.perf_counter()
        self.result = scipy.integrate.solve_ivp(fun, (t0, t1), y0, t_eval=t_eval, args=args or None, **self.options)
        self.evaluation_seconds = (time.perf_counter() - start) / max(self.result.nfev, 1)  # with SciPy's stepping
        return self.result.y

    # --- the gradient ---------------------------------------------------------------------------------------
    def cotangents(self, g, G, y0, s, taus, Y, params):
        """``(ȳ0, s̄, () -> τ̄, p̄)`` (p̄ a list, one per parameter) for the cotangent ``G`` of ``Y`` (one row per
        output time), computed once per output cotangent ``g``: the arguments' pullbacks share it."""
        if self._cache is not None and self._cache[0] is g:
            return self._cache[1]
        _refuse_nested(g, y0, s, taus, Y, *params)
        y0 = np.asarray(y0, dtype=float).ravel()
        G = np.asarray(G, dtype=float).reshape(len(taus), -1)
        p = np.concatenate([np.ravel(v) for v in params]) if params else np.zeros(0)
        forward = self.chosen_sensitivity(y0.size, p, len(taus)) == "forward"
        solve = self.forward_sensitivities if forward else self.adjoint
        a, q = solve(G, y0, float(s), np.asarray(taus, dtype=float), Y, p)
        rhs = self.system.rhs(params)
        s_bar = -a @ np.ravel(rhs(s, y0))

        @functools.cache
        def tau_bar():  # called only when the output times are differentiated: an evaluation of F per time
            return np.array([G[k] @ np.ravel(rhs(t, Y[k])) for k, t in enumerate(taus)])

        result = (a, s_bar, tau_bar, self.system.plain(q))
        self._cache = (g, result)
        return result

    def chosen_sensitivity(self, n, p, outputs):
        """The call's ``sensitivity``; for "auto" the one of lower cost, from the forward solve's seconds an evaluation
        (SciPy's stepping with it) and a product's (`kept`): forward sensitivities take a Jacobian (``n`` products)
        per evaluation of the forward solve, the adjoint a product per evaluation and per restart (the first
        evaluation and a step's stages at each output time), times `ADJOINT_COST`.  A stiff method takes the adjoint
        (Newton iterations with the forward system's block Jacobian: Robertson's took minutes)."""
        if self.sensitivity != "auto":
            return self.sensitivity
        if self.method not in EXPLICIT:
            return "adjoint"
        product = self.kept(n, p, True, 1, np.concatenate([np.zeros(1 + 2 * n), p]))[1]
        evaluation, evaluations = self.evaluation_seconds, self.result.nfev
        forward = evaluations * (evaluation + n * product)
        adjoint = ADJOINT_COST * (evaluations + outputs * (self.solver.n_stages + 1)) * (evaluation + product)
        return "forward" if forward <= adjoint else "adjoint"

    def products(self, n, p, parameters=True, points=1):
        """``vjp(t, y, a) -> (F, ∂F/∂yᵀ a, ∂F/∂pᵀ a)``, replayed by one prepared program (`program`); without
        ``parameters`` the parameters are its constants and ``∂F/∂pᵀ a`` is empty (the stages of the adjoint, whose
        parameter integral is a quadrature).  With ``points`` > 1, ``t`` holds that many times and ``y``, ``a`` as
        many rows: ``F`` and ``∂F/∂yᵀ a`` come flat, row after row, and ``∂F/∂pᵀ a`` summed over them (one
        replay for a quadrature step's nodes)."""
        k = points
        start = k * (1 + 2 * n)
        buffer = np.concatenate([np.zeros(start), p if parameters else []])  # this solve's: programs are shared
        program = self.program(n, p, parameters, k, buffer)
        shape = (n,) if k == 1 else (k, n)  # views of the buffer, written without a ravel
        times, states, cotangents = buffer[:k], buffer[k:k + k * n].reshape(shape), buffer[k + k * n:start].reshape(
            shape)

        def vjp(t, y, a):
            times[:], states[...], cotangents[...] = t, y, a
            g = program(buffer)
            return g[k + k * n:start], g[k:k + k * n], g[start:]

        return vjp

    def program(self, n, p, parameters, points, example):
        """The prepared gradient of ``Σⱼ ⟨aⱼ, F(tⱼ, yⱼ, p)⟩`` in ``z = (t, y, a[, p])`` (``points`` terms), recorded
        once per right-hand side (`kept`)."""
        return self.kept(n, p, parameters, points, example)[0]

    def kept(self, n, p, parameters, points, example):
        """``(program, seconds a call)`` of `program`, kept in `_PROGRAMS` under `program_key` (a second solve
        replays it), the seconds measured when it was recorded."""
        key = self.program_key(n, p, parameters, points)
        with _PROGRAMS_LOCK:  # solves in other threads share the cache (each records and replays its own variants)
            kept = _PROGRAMS.get(key)
            if kept is not None:
                _PROGRAMS.move_to_end(key)
                return kept
        k, constants, system = points, self.system.plain(p), self.system  # the program keeps no tracked value
        start = k * (1 + 2 * n)

        def inner_product(product, z):
            rhs, total = system.rhs(system.plain(z[start:]) if parameters else constants), None
            for j in range(k):
                y, a = z[k + j * n:k + (j + 1) * n], z[k + (k + j) * n:k + (k + j + 1) * n]
                term = product(a, rhs(z[j], y))
                total = term if total is None else total + term
            return total

        replay = prepare_gradient(functools.partial(inner_product, _dot), example)
        candidates = [replay]
        if n <= SCALAR_MAX and (not parameters or all(math.prod(shape) <= SCALAR_MAX for shape in self.shapes)):
            scalar = scalar_code(prepare_gradient(functools.partial(inner_product, _multiply_sum), example), replay,
                                 example)  # (a larger state or parameter is not written as scalars: not recorded)
            candidates += [scalar] if scalar is not None else []
        kept = _fastest(candidates, example)
        with _PROGRAMS_LOCK:
            _PROGRAMS[key] = kept
            if len(_PROGRAMS) > CACHE_SIZE:
                _PROGRAMS.popitem(last=False)
        return kept

    def program_key(self, n, p, parameters, points):
        """What a recording of ``⟨a, F⟩`` depends on, as kernels are keyed (`structure_key`, `Reads`): the
        right-hand side's code, defaults, closure and the globals it reads, its constant leaves by value, the
        parameters' shapes (and, baked into a program without ``parameters``, their values), the state's size,
        the number of terms and how ``F`` is called."""
        reads = Reads()
        structure = structure_key(self.treedef, reads)
        names = tuple(sorted(reads.names))
        shapes = dict(zip(self.active, self.shapes))
        leaves = tuple(("parameter", shapes[k]) if k in shapes else reads.key(leaf, names)
                       for k, leaf in enumerate(self.leaves))
        values = None if parameters else p.tobytes()
        form = (self.system.flipped, self.system.vectorized)
        return structure, leaves, p.dtype, values, n, points, form

    def jacobian(self, n, p):
        """``(F, ∂F/∂y, ∂F/∂p)`` at ``(t, y)``: ``n`` vector-Jacobian products with the rows of the identity, in one
        call of the scalar code where the right-hand side has it (`ScalarGradient.gradients`), else replayed one by
        one into the two Jacobians."""
        vjp, program = self.products(n, p), self.program(n, p, True, 1, np.concatenate([np.zeros(1 + 2 * n), p]))
        identity = np.eye(n)
        units, tail = identity.tolist(), p.tolist()

        def value_and_jacobians(t, y):
            if type(program) is ScalarGradient:
                head = [t, *y.tolist()]
                rows = program.gradients([head + unit + tail for unit in units])
                if rows is not None:
                    return rows[0, 1 + n:1 + 2 * n], rows[:, 1:1 + n], rows[:, 1 + 2 * n:]
            jy, jp = np.empty((n, n)), np.empty((n, p.size))
            for i in range(n):
                f, jy[i], jp[i] = vjp(t, y, identity[i])
            return f, jy, jp
        return value_and_jacobians

    def adjoint(self, G, y0, s, taus, Y, p):
        """``(a(s), q(s))``: the adjoint solved backward interval by interval (see the module docstring)."""
        n, m = y0.size, len(taus)
        explicit = self.method in EXPLICIT
        vjp = self.products(n, p, parameters=not explicit)
        quadrature = Quadrature(functools.partial(self.products, n, p), self.solver.order, n, p.size) \
            if explicit else None
        rtol, atol = self.tolerances()
        # a and q are not in the states' units: a's absolute tolerance follows G's size, q's (states of the stiff
        # methods' solve) is rtol (relative to a unit cotangent) at least (Robertson's adjoint with the states'
        # atol=1e-14 asks BDF for steps below the float spacing)
        atol_a = np.full(n, max(float(np.min(atol)), rtol * float(np.max(np.abs(G)))))
        atol_q = np.full(p.size, max(float(np.min(atol)), rtol))
        a, q, step = np.zeros(n), np.zeros(p.size), None
        for k in range(m - 1, -1, -1):
            a = a + G[k]
            lo = taus[k - 1] if k else s
            if lo == taus[k]:
                continue
            if explicit:
                tolerances = np.concatenate([np.broadcast_to(atol, (n,)), atol_a])
                a, step = self.backsolve(vjp, taus[k], lo, np.ravel(Y[k]), a, rtol, tolerances, step, quadrature)
            else:
                y_lo = np.ravel(Y[k - 1]) if k else y0
                a, q = self.interpolated(vjp, taus[k], lo, y_lo, a, q, rtol, np.concatenate([atol_a, atol_q]), p)
        return a, (quadrature.total if explicit else q)

    def backsolve(self, vjp, hi, lo, y_hi, a, rtol, atol, step, quadrature):
        """``(a(lo), the longest step)`` from ``a(hi)``, ``y`` solved backward beside ``a`` from the checkpoint
        ``y_hi``; each step's part of the parameter integral goes to ``quadrature``.  ``step``: the previous
        interval's longest step, the first step tried (no initial step selection at each output time)."""
        n = y_hi.size

        def augmented(t, w):
            f, ja, _ = vjp(t, w[:n], w[n:])
            return np.concatenate([f, -ja])

        first = {} if step is None else {"first_step": min(step, abs(hi - lo))}
        run = self.solver(augmented, hi, np.concatenate([y_hi, a]), lo, rtol=rtol, atol=atol, **first)
        longest = 0.0
        while run.status == "running":
            message = run.step()
            if run.status == "failed":
                raise RuntimeError(f"the gradient's solve failed between t={hi} and t={lo} (at t={run.t}): {message}")
            quadrature.add(run)
            longest = max(longest, run.step_size)
        return run.y[n:], longest

    def interpolated(self, vjp, hi, lo, y_lo, a, q, rtol, atol, p):
        """``(a, q)`` at ``lo`` from ``hi``, ``y`` re-solved forward from the checkpoint ``y_lo`` and interpolated."""
        n = y_lo.size
        params = self.system.plain(p)
        y_of = _trajectory(self.solver, self.system.rhs(params), lo, y_lo, hi, self.solver_options(params))
        jacobian = self.jacobian(n, p)

        def augmented(t, w):
            _, ja, pa = vjp(t, y_of(t), w[:n])
            return np.concatenate([-ja, -pa])

        def jac(t, w):
            _, jy, jp = jacobian(t, y_of(t))
            return _block_jacobian(-jy.T, -jp.T, sparse=self.method != "LSODA")

        w = _solve(self.solver, augmented, hi, np.concatenate([a, q]), lo, dict(rtol=rtol, atol=atol, jac=jac))
        return w[:n], w[n:]

    def forward_sensitivities(self, G, y0, s, taus, Y, p):
        """``(Σ S_y0ᵀ G, Σ S_pᵀ G)``: ``S`` solved forward with ``y`` (see the module docstring)."""
        n, P = y0.size, p.size
        jacobian = self.jacobian(n, p)
        m = n + P
        rtol, atol = self.tolerances()

        def augmented(t, w):  # (F, ∂F/∂y S + [0 | ∂F/∂p]) into one fresh array (SciPy keeps it as a stage)
            f, jy, jp = jacobian(t, w[:n])
            out = np.empty(w.size)
            out[:n] = f
            dS = out[n:].reshape(n, m)
            np.matmul(jy, w[n:].reshape(n, m), out=dS)
            dS[:, n:] += jp
            return out

        def jac(t, w):
            _, jy, _ = jacobian(t, w[:n])
            blocks = scipy.sparse.block_diag([jy] * (m + 1), format="csc")
            return blocks.toarray() if self.method == "LSODA" else blocks

        # An explicit method's S rides on y's steps (an infinite absolute tolerance leaves it out of the error norm:
        # its equation is linear with y's coefficients, integrated to the same order; SUNDIALS' errconS=False); a
        # stiff method's Newton iterations need it in the norm, in units where rtol is the least absolute tolerance
        atol_s = np.inf if self.method in EXPLICIT else max(float(np.min(atol)), rtol)
        tolerances = np.concatenate([np.broadcast_to(atol, (n,)), np.full(n * m, atol_s)])
        options = dict(rtol=rtol, atol=tolerances)
        if self.method not in EXPLICIT:
            options["jac"] = jac
        w0 = np.concatenate([y0, np.eye(n, m).ravel()])
        states = np.reshape(_solve_at(self.solver, augmented, s, w0, taus, options), (len(taus), w0.size))
        total = np.einsum("ki,kij->j", G, states[:, n:].reshape(len(taus), n, m))
        return total[:n], total[n:]


def _dot(a, f):
    """``⟨a, F⟩`` as the replay runs it fastest: one step (a 100-state product 5.7 us, the sum of products 9.3)."""
    return np.dot(a, f if getattr(f, "ndim", None) == 1 else np.ravel(f))


def _multiply_sum(a, f):
    """``⟨a, F⟩`` in the operations the loops' scalar code writes."""
    return np.sum(a * np.ravel(f))


def scalar_code(recorded, replay, example):
    """``recorded`` (the gradient of a function of one flat array) as Python scalar code (`ScalarGradient`, which
    falls back on ``replay``, the same gradient), or None where the scalar code is not written (a value too large,
    an operation it does not write) or disagrees with ``replay`` on ``example``."""
    programs = [variants[0] for variants in recorded.variants.values()]
    try:
        scalar = ScalarProgram(programs[0], None) if len(programs) == 1 else None
        source, names = scalar.source(False) if scalar is not None and scalar.dtype == np.float64 else (None, None)
    except Unsupported:
        return None
    if source is None:
        return None
    exec(compile(source, "<dualbroadcast.scipy.integrate product>", "exec"), names)  # noqa: S102 - code loops wrote
    gradient = ScalarGradient(names["loop_program"], scalar, replay)
    expected = replay(example)
    agrees = np.allclose(gradient(example), expected, rtol=1e-12, atol=1e-12 * max(1.0, np.max(np.abs(expected))))
    return gradient if agrees else None


def _fastest(functions, x):
    """``(function, seconds)``: the one of ``functions`` whose fastest of three calls on ``x`` took the least time."""
    def seconds(function):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            function(x)
            times.append(time.perf_counter() - start)
        return min(times), function

    fastest, function = min(map(seconds, functions), key=lambda pair: pair[0])
    return function, fastest


class ScalarGradient:
    """A prepared gradient run as Python scalar code (`loops.ScalarProgram` without a loop): 1.4 us a Lotka-Volterra
    product, its replay (``prepared``) 13.  A call Python raises on (where NumPy would give a NaN or an infinity) is
    replayed."""

    def __init__(self, function, scalar, prepared):
        self.function, self.prepared = function, prepared
        self.rows, self.live = scalar.rows_array().tolist(), scalar.live_array().tolist()

    def __call__(self, z):
        try:
            return np.array(self.function(z.tolist(), self.rows, self.live)[1])
        except (ArithmeticError, ValueError):
            return self.prepared(z)

    def gradients(self, points):
        """The gradients at ``points`` (lists of floats) as the rows of a matrix; None where Python raised."""
        function, rows, live = self.function, self.rows, self.live
        try:
            return np.array([function(z, rows, live)[1] for z in points])
        except (ArithmeticError, ValueError):
            return None


class RightHandSide:
    """``F(t, y, p)`` of a call: its ``(fun, args)`` leaves with the parameters' places empty, so that a program
    kept across solves holds no tracked value (nor the tape behind it)."""

    def __init__(self, interface, options, treedef, leaves, active, shapes):
        self.treedef, self.active, self.shapes = treedef, active, shapes
        self.leaves = [None if k in active else leaf for k, leaf in enumerate(leaves)]
        self.sizes = np.cumsum([0] + [int(np.prod(shape)) for shape in shapes])  # offsets in the flat p
        self.flipped = interface == "odeint" and not options["tfirst"]
        self.vectorized = bool(options.get("vectorized"))

    def rhs(self, params):
        """``F(t, y)`` with the parameters ``params`` (values or tracked, one per active leaf)."""
        leaves = list(self.leaves)
        for k, value in zip(self.active, params):
            leaves[k] = value
        fun, args = pytree.unflatten(self.treedef, leaves)
        if self.flipped:
            return lambda t, y: fun(y, t, *args)
        if self.vectorized:
            return lambda t, y: fun(t, y[:, None], *args)[:, 0] if np.ndim(y) == 1 else fun(t, y, *args)
        return lambda t, y: fun(t, y, *args)

    def plain(self, p):
        """The parameters, one array per tracked leaf, from the flat vector ``p``."""
        sizes = self.sizes
        return [p[sizes[i]:sizes[i + 1]].reshape(shape) for i, shape in enumerate(self.shapes)]


class Quadrature:
    """``q = ∫ ∂F/∂pᵀ a dt`` over the steps of the adjoint's backward solve: Gauss-Legendre nodes in each step,
    exact for polynomials of the solver's order, ``y`` and ``a`` from the step's dense output, all nodes in one
    vector-Jacobian product (``products(points=...)``).  The parameters are not states of the solve: its steps
    and their arithmetic do not grow with their number."""

    def __init__(self, products, order, n, size):
        self.n = n
        self.nodes, self.weights = np.polynomial.legendre.leggauss(order // 2 + 1)
        self.vjp = products(points=len(self.nodes))
        self.total = np.zeros(size)

    def add(self, run):
        """The part of the integral over the step ``run`` just took: ``q' = -∂F/∂pᵀ a`` from ``t_old`` to ``t``
        (either direction: a solve backward in time has its adjoint run forward)."""
        half = (run.t - run.t_old) / 2
        times = run.t_old + (self.nodes + 1) * half
        states = run.dense_output()(times)  # a column per node
        self.total += self.vjp(times, states[:self.n].T, (-half * self.weights * states[self.n:]).T)[2]


def _refuse_forward_mode(values):
    """A dual value of `db.jvp` reaching a solver: an error naming the reverse-mode calls that work."""
    if any(type(v) is FORWARD[0] for v in values):
        raise UnsupportedFunctionError(
            "db.jvp (forward mode: also db.jacfwd, db.jacobian's default for fewer inputs than outputs, db.jvp of a "
            "gradient) does not reach through dualbroadcast.scipy.integrate's solvers; use reverse mode: db.gradient, "
            "db.pullback, db.jacrev or db.jacobian(f, x, mode='reverse') (sensitivity='forward' still solves the "
            "forward sensitivities inside)")


def _refuse_nested(*values):
    """A second derivative through a solver: its gradient is computed on plain values, so an error."""
    if any(isinstance(v, Guarded) for v in values):
        raise UnsupportedFunctionError(
            "the gradient of dualbroadcast.scipy.integrate's solvers is computed by SciPy's solvers on plain values "
            "and is not differentiable again (a nested gradient, db.hvp or db.hessian through odeint/solve_ivp); "
            "for a least-squares fit use the Gauss-Newton Hessian JᵀJ of the solution's Jacobian "
            "J = db.jacobian(solve, p, mode='reverse') (scipy.optimize.least_squares with jac=), else central "
            "differences of db.gradient")


def _block_jacobian(jy, jp, sparse):
    """The Jacobian of ``(a, q)' = (jy a, jp a)``: dense for small systems (and for LSODA), sparse beyond."""
    n, P = jy.shape[0], jp.shape[0]
    if n + P <= 200 or not sparse:
        out = np.zeros((n + P, n + P))
        out[:n, :n], out[n:, :n] = jy, jp
        return out
    return scipy.sparse.bmat([[jy, None], [jp, scipy.sparse.csc_matrix((P, P))]], format="csc")


def _solve(solver, fun, t0, y0, t_bound, options):
    """The state at ``t_bound``, stepping SciPy's ``solver`` class (no trajectory kept)."""
    run, message = solver(fun, t0, y0, t_bound, **options), None
    while run.status == "running":
        message = run.step()
    if run.status == "failed":
        raise RuntimeError(f"the gradient's solve failed between t={t0} and t={t_bound} (at t={run.t}): {message}")
    return run.y


def _trajectory(solver, fun, t0, y0, t_bound, options):
    """``y(t)`` on ``[t0, t_bound]``: the solver's dense output of each step of the interval."""
    run = solver(fun, t0, y0, t_bound, **options)
    ends, pieces = [], []
    while run.status == "running":
        run.step()
        ends.append(run.t)
        pieces.append(run.dense_output())
    if run.status == "failed":
        raise RuntimeError(f"the gradient's re-solve failed between t={t0} and t={t_bound} (at t={run.t})")
    ends = np.array(ends)
    forward = t_bound > t0

    def y_of(t):
        k = np.searchsorted(ends, t) if forward else np.searchsorted(-ends, -t)
        return pieces[min(k, len(pieces) - 1)](t)

    return y_of


def _solve_at(solver, fun, t0, y0, times, options):
    """The state at each of ``times`` (ordered from ``t0``), stepping ``solver`` and interpolating."""
    out, k = [], 0
    while k < len(times) and times[k] == t0:
        out.append(y0)
        k += 1
    if k == len(times):
        return out
    run = solver(fun, t0, y0, times[-1], **options)
    ordered = times if times[-1] > t0 else -times  # increasing either way
    while k < len(times):
        run.step()
        if run.status == "failed":
            raise RuntimeError(f"the gradient's solve failed at t={run.t}")
        end = np.searchsorted(ordered, run.t if times[-1] > t0 else -run.t, side="right")
        if end > k:  # the times this step passed, interpolated in one call
            out.extend(run.dense_output()(times[k:end]).T)
            k = end
    return out


# --- the primitives -------------------------------------------------------------------------------------------
@primitive
def odeint_of(problem, y0, t, *params):
    return problem.odeint(y0, t, params)


@primitive
def solve_ivp_of(problem, y0, t0, t1, t_eval, *params):
    return problem.solve_ivp(y0, t0, t1, t_eval, params)


@primitive
def dense_of(problem, y0, t0, t, *params):
    return problem.sol(t)


def odeint_cotangent(i, ans, problem, y0, t, *params):
    """Argument ``i`` of ``odeint_of``: y0 (1), t (2), a parameter (3...)."""
    def back(g):
        taus = np.asarray(_plain_value(t), dtype=float)
        y_bar, s_bar, tau_bar, p_bar = problem.cotangents(g, g, y0, taus[0], taus, ans, params)
        if i == 1:
            return y_bar.reshape(np.shape(y0))
        if i == 2:
            tau_bar = tau_bar()
            tau_bar[0] += s_bar
            return tau_bar.reshape(np.shape(t))
        return p_bar[i - 3]
    return back


def solve_ivp_cotangent(i, ans, problem, y0, t0, t1, t_eval, *params):
    """Argument ``i`` of ``solve_ivp_of``: y0 (1), t0 (2), t1 (3), t_eval (4), a parameter (5...)."""
    def back(g):
        taus = problem.result.t
        Y = np.transpose(ans)
        y_bar, s_bar, tau_bar, p_bar = problem.cotangents(g, np.transpose(g), y0, t0, taus, Y, params)
        if i == 1:
            return y_bar.reshape(np.shape(y0))
        if i == 2:
            return s_bar + (tau_bar()[0] if t_eval is None else 0.0)
        if i == 3:
            return tau_bar()[-1] if t_eval is None else 0.0
        if i == 4:
            return tau_bar().reshape(np.shape(t_eval))
        return p_bar[i - 5]
    return back


def dense_cotangent(i, ans, problem, y0, t0, t, *params):
    """Argument ``i`` of ``dense_of``: y0 (1), t0 (2), t (3), a parameter (4...): the adjoint at the sorted times."""
    def back(g):
        times = np.atleast_1d(np.asarray(_plain_value(t), dtype=float))
        order = np.argsort(times) if problem.result.t[-1] >= problem.result.t[0] else np.argsort(-times)
        Y = np.reshape(ans, (np.shape(ans)[0], -1)).T[order]
        G = np.reshape(g, (np.shape(ans)[0], -1)).T[order]
        y_bar, s_bar, tau_bar, p_bar = problem.cotangents(g, G, y0, t0, times[order], Y, params)
        if i == 1:
            return y_bar.reshape(np.shape(y0))
        if i == 2:
            return s_bar
        if i == 3:
            out = np.empty_like(times)
            out[order] = tau_bar()
            return out.reshape(np.shape(t))
        return p_bar[i - 4]
    return back


def _plain_value(x):
    return x.value if isinstance(x, Guarded) else x


for _primitive, _maker in ((odeint_of, odeint_cotangent), (solve_ivp_of, solve_ivp_cotangent),
                           (dense_of, dense_cotangent)):
    defvjp_argnum(_primitive, _maker)

MIRRORS = {scipy.integrate.odeint: odeint, scipy.integrate.solve_ivp: solve_ivp}
