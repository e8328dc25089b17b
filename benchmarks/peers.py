"""Other automatic-differentiation libraries, each optional: JAX, PyTorch, autograd.

Every peer gets the benchmark models written once against a NumPy-like namespace
``xp`` (``jax.numpy``, a thin shim over ``torch``, ``autograd.numpy``), so every
library computes the same thing.  Inputs are converted to the peer's own array
type *before* timing (a user of that library holds their data in it) and each
timed call returns the peer's own gradient, finished (JAX: ``block_until_ready``).

`available()` imports what is installed; a peer whose import fails is absent and
its columns show "-".
"""

import numpy as np

from .models import COEFFICIENTS


# --- the models, once, over a namespace -------------------------------------------------------
def eam(xp, x):
    p = xp.sum(xp.exp(-3 * (x + 1)))
    return p**2 + p**3 + 0.25 * p**4


def exp_poly(xp, c, xs):
    """sum(exp(c0 + c1 x + ... + c9 x^9)) by Horner's rule (any namespace)."""
    inner = c[9]
    for k in range(8, -1, -1):
        inner = c[k] + xs * inner
    return xp.sum(xp.exp(inner))


def poly9(xp, c, xs):
    return xp.sum(sum(c[k] * xs**k for k in range(len(COEFFICIENTS))))


def sum_of_squares(xp, x):
    return xp.sum(x**2)


def sum_arctan2(xp, x):
    return xp.sum(xp.arctan2(x, 2))


def constant_index(xp, p, c):
    return c[0] * p


def constant_projection(xp, p, c, proj):
    return (c @ proj) * p


def _dense_layer(W, b, xs):
    return [W @ x + b[:, None] for x in xs]


def slices_diag(xp, Wb, xs):
    W, b = Wb
    ys = _dense_layer(W, b, xs)
    total = 0.0
    for y in ys:
        total = total + xp.sum(xp.diag(ys[0].T @ y))
    return total


def slices_columns(xp, Wb, xs):
    W, b = Wb
    ys = _dense_layer(W, b, xs)
    total = 0.0
    for y in ys:
        for j in range(y.shape[1]):
            total = total + xp.dot(ys[0][:, j], y[:, j])
    return total


def slices_einsum(xp, Wb, xs):
    W, b = Wb
    ys = xp.einsum("oi,tib->tob", W, xs) + b[None, :, None]
    return xp.einsum("ob,tob->", ys[0], ys)


def qux(xp, a, b, x):
    y = xp.sin(x) if a else xp.cos(x)
    return 1 / xp.cosh(y) if b else xp.tanh(y)


def foldminus(xp, xs):
    total = xs[0]
    for v in xs[1:]:
        total = total - v
    return total


# --- the peers ------------------------------------------------------------------------------
class Peer:
    """One library: ``columns`` it fills, and ``make(column, f, diff, consts)``.

    ``f(xp, diff, *consts)`` is one of the models above; the gradient is taken with
    respect to ``diff`` (an array, a float, or a tuple of them) and ``consts`` are
    NumPy arrays (or lists of them) held constant.  ``make`` returns a zero-argument
    callable computing the gradient, which `to_numpy` turns into NumPy leaves.
    """

    name = ""
    columns = ()
    version = ""


class Jax(Peer):
    name = "jax"
    columns = ("jax", "jax.jit")

    def __init__(self):
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)  # the float64 workloads stay float64
        self.jax, self.xp, self.version = jax, jnp, jax.__version__

    def convert(self, value):
        if isinstance(value, np.ndarray):
            return self.jax.device_put(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.convert(v) for v in value)
        return value

    def make(self, column, f, diff, consts):
        jax, xp = self.jax, self.xp
        diff, consts = self.convert(diff), self.convert(consts)
        g = jax.grad(lambda d, *c: f(xp, d, *c))
        if column == "jax.jit":
            g = jax.jit(g)
        return lambda: jax.block_until_ready(g(diff, *consts))

    def to_numpy(self, out):
        return out


class _TorchNamespace:
    """The few NumPy names the models use, on torch tensors."""

    def __init__(self, torch):
        self.torch = torch
        for name in ("sum", "exp", "diag", "dot", "einsum", "sin", "cos", "tanh", "cosh", "log", "sqrt", "mean",
                     "stack"):
            setattr(self, name, getattr(torch, name))
        self.max = torch.amax  # np.max(a, axis=k, keepdims=True): torch.max along an axis also returns indices

    def arctan2(self, y, x):
        return self.torch.atan2(y, self.torch.as_tensor(x, dtype=y.dtype))

    def logaddexp(self, x, y):
        return self.torch.logaddexp(self.torch.as_tensor(x, dtype=y.dtype), y)


class Torch(Peer):
    name = "torch"
    columns = ("torch",)

    def __init__(self):
        import torch

        self.torch, self.xp, self.version = torch, _TorchNamespace(torch), torch.__version__

    def convert(self, value, leaf=False):
        torch = self.torch
        if isinstance(value, np.ndarray):
            t = torch.from_numpy(value)
        elif isinstance(value, float):
            t = torch.tensor(value, dtype=torch.float64)
        elif isinstance(value, (list, tuple)):
            return type(value)(self.convert(v, leaf) for v in value)
        else:
            return value
        return t.detach().requires_grad_(True) if leaf else t

    def make(self, column, f, diff, consts):
        torch, xp = self.torch, self.xp
        diff = self.convert(diff, leaf=True)
        consts = self.convert(consts)
        leaves = list(diff) if isinstance(diff, tuple) else [diff]

        def grad():
            return torch.autograd.grad(f(xp, diff, *consts), leaves)

        return grad

    def to_numpy(self, out):
        return [t.detach().numpy() for t in out]


class Autograd(Peer):
    name = "autograd"
    columns = ("autograd",)

    def __init__(self):
        import autograd
        import autograd.numpy as anp

        self.autograd, self.xp = autograd, anp
        try:
            from importlib.metadata import version

            self.version = version("autograd")
        except Exception:  # pragma: no cover - metadata missing
            self.version = "?"

    def make(self, column, f, diff, consts):
        g = self.autograd.grad(lambda d, *c: f(self.xp, d, *c))
        return lambda: g(diff, *consts)

    def to_numpy(self, out):
        return out


def available(names=("jax", "torch", "autograd")):
    """The installed peers among ``names``, and {name: reason} for the others."""
    found, missing = [], {}
    for cls in (Jax, Torch, Autograd):
        if cls.name not in names:
            continue
        try:
            found.append(cls())
        except Exception as e:  # ImportError, or a broken install
            missing[cls.name] = f"{type(e).__name__}: {e}"
    return found, missing
