"""``python -m benchmarks.higher_order``: second derivatives (issue 16's rows), ratios to the NumPy primal
measured side by side in one run, JAX beside when installed (``jax.jit`` of its hvp and hessian).

- EAM hvp: ``db.hvp`` of the EAM energy, its density a ``db.sum`` (a second-order kernel: value, partial and
  second partial in one fused pass), at N=100 and N=1e6, and ``db.prepare_hvp`` of it (recorded once, replayed
  with ``out=``);
- exp-poly Hessian: the 10x10 Hessian of E(c) = sum(exp(c0 + c1 x + ... + c9 x^9)) over N points with respect
  to the ten coefficients through ``db.sum`` (dual width 10, 55 second partials), at N=1e3 and N=1e6.

Each result is checked against the hand-written (EAM) or directly summed (exp-poly) second derivatives.
"""

import numpy as np

import dualbroadcast as db

from .models import eam_dualbroadcast, eam_numpy
from .timing import ratio_table


def eam_hvp_hand(x, v):
    """H·v of E = P² + P³ + P⁴/4, P = Σr(x), r = exp(-3(x+1)): H = E''(P) ∇P ∇Pᵀ + E'(P) diag(9r)."""
    r = np.exp(-3 * (x + 1))
    p = np.sum(r)
    return (2 + 6 * p + 3 * p**2) * (-3 * r) * np.dot(-3 * r, v) + (2 * p + 3 * p**2 + p**3) * 9 * r * v


def exp_poly(c, xs):
    """The primal: plain NumPy."""
    return np.sum(np.exp(np.polyval(c[::-1], xs)))


def exp_poly_db(c, xs):
    """The same with db.sum over the points, the ten coefficients its variables (Horner's rule)."""
    def term(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
        inner = c5 + x * (c6 + x * (c7 + x * (c8 + x * c9)))
        return np.exp(c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * inner)))))

    return db.sum(term, db.cut(xs), *[c[k] for k in range(10)])


def exp_poly_hessian_direct(c, xs):
    e = np.exp(np.polyval(c[::-1], xs))
    powers = xs[None, :] ** np.arange(10)[:, None]
    return (powers * e) @ powers.T


def jax_columns():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def eam(x):
        p = jnp.sum(jnp.exp(-3 * (x + 1)))
        return p**2 + p**3 + 0.25 * p**4

    def poly(c, xs):
        return jnp.sum(jnp.exp(jnp.polyval(c[::-1], xs)))

    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(eam), (x,), (v,))[1])
    hessian = jax.jit(jax.hessian(poly))
    return {"hvp": lambda x, v: hvp(x, v).block_until_ready(),
            "hessian": lambda c, xs: hessian(c, xs).block_until_ready(), "jnp": jnp}


def main():
    jax = jax_columns()
    rows = {}
    for n in (100, 10**6):
        x = np.random.default_rng(0).random(n)
        v = np.random.default_rng(1).standard_normal(n)
        prepared, out = db.prepare_hvp(eam_dualbroadcast, x), np.empty(n)
        want = eam_hvp_hand(x, v)
        for got in (db.hvp(eam_dualbroadcast, x, v), prepared(x, v, out=out)):
            assert np.allclose(got, want, rtol=1e-10, atol=1e-12 * np.max(np.abs(want))), "EAM hvp disagrees"
        row = {"NumPy primal": lambda x=x: eam_numpy(x), "db.hvp": lambda x=x, v=v: db.hvp(eam_dualbroadcast, x, v),
               "db.prepare_hvp": lambda x=x, v=v, prepared=prepared, out=out: prepared(x, v, out=out)}
        if jax:
            xj, vj = jax["jnp"].asarray(x), jax["jnp"].asarray(v)
            row["jax.jit hvp"] = lambda xj=xj, vj=vj: jax["hvp"](xj, vj)
        rows[f"EAM hvp N={n:.0e}"] = row
    c = np.full(10, 0.01)
    for n in (10**3, 10**6):
        xs = np.random.default_rng(2).uniform(-1, 1, n)
        got = db.hessian(lambda c, xs=xs: exp_poly_db(c, xs), c)
        want = exp_poly_hessian_direct(c, xs)
        assert np.allclose(got, want, rtol=1e-10), "exp-poly Hessian disagrees"
        row = {"NumPy primal": lambda xs=xs: exp_poly(c, xs),
               "db.hessian": lambda xs=xs: db.hessian(lambda c: exp_poly_db(c, xs), c)}
        if jax:
            cj, xj = jax["jnp"].asarray(c), jax["jnp"].asarray(xs)
            row["jax.jit hessian"] = lambda cj=cj, xj=xj: jax["hessian"](cj, xj)
        rows[f"exp-poly H N={n:.0e}"] = row
    columns = ["NumPy primal", "db.hvp", "db.prepare_hvp", "db.hessian", "jax.jit hvp", "jax.jit hessian"]
    for label, row in rows.items():
        ratio_table(label, {"": row}, [c for c in columns if c in row])


if __name__ == "__main__":
    main()
