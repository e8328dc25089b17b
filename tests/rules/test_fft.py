"""The np.fft pullbacks: each the transpose of its transform, checked three ways.

Every transform f is linear, so its pullback must satisfy the adjoint identity
``Re Σ back(ḡ) · t = Re Σ ḡ · f(t)`` for every tangent t of the argument's kind (the pairing of
JAX's convention: no conjugation), which pins the pullback entirely.  The vjp makers are called
on plain arrays here, over drawn shapes, axes, lengths ``n``/``s`` (cutting and padding) and all
three norms; and compared with ``jax.vjp`` of ``jnp.fft`` in float64/complex128.  End to end,
``db.gradient`` of real losses through transforms (real and complex arguments) is checked against
finite differences and ``jax.grad``; ``tests/cases/fft.py`` sweeps every rule in float64, float32
and complex128.
"""

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dualbroadcast as db
from dualbroadcast.registry import RULES
from dualbroadcast.rules import fft  # noqa: F401  (registers the rules)

from ..cases import stable_id

ONE_D = [np.fft.fft, np.fft.ifft, np.fft.rfft, np.fft.irfft, np.fft.hfft, np.fft.ihfft]
N_D = [np.fft.fftn, np.fft.ifftn, np.fft.rfftn, np.fft.irfftn]
TWO_D = [np.fft.fft2, np.fft.ifft2, np.fft.rfft2, np.fft.irfft2]
REAL_ONLY = {np.fft.rfft, np.fft.ihfft, np.fft.rfftn, np.fft.rfft2}  # NumPy rejects a complex argument
NORMS = [None, "backward", "ortho", "forward"]


def name(func):
    return f"np.fft.{func.__name__}"


def maker_of(func):
    """The vjp maker registered for ``func``."""
    return RULES[func].makers[0]


def random(rng, shape, complex_):
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if complex_ else x


def pair(a, b):
    """The real pairing of cotangents with tangents: Re Σ a b (no conjugation)."""
    return np.real(np.sum(a * b))


def check_adjoint(func, x, kwargs, rng):
    """back(ḡ) has x's shape and dtype and satisfies the adjoint identity against a random tangent."""
    y = func(x, **kwargs)
    back = maker_of(func)(y, x, **kwargs)
    g = random(rng, y.shape, y.dtype.kind == "c")
    t = random(rng, x.shape, x.dtype.kind == "c")
    xbar = back(g)
    assert xbar.shape == x.shape and xbar.dtype == x.dtype
    expected = pair(g, func(t, **kwargs))
    assert pair(xbar, t) == pytest.approx(expected, rel=1e-9, abs=1e-9 * (1 + np.abs(g).sum() * np.abs(t).sum()))
    return y, g, xbar


def draw_1d(data, func):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="shape")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    kwargs = {"axis": axis, "norm": data.draw(st.sampled_from(NORMS), label="norm")}
    n = data.draw(st.one_of(st.none(), st.integers(1, 8)), label="n")
    if n is not None:
        kwargs["n"] = n
    complex_ = func not in REAL_ONLY and data.draw(st.booleans(), label="complex")
    return tuple(shape), kwargs, complex_


def forward_works(func, x, kwargs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            func(x, **kwargs)
    except (ValueError, DeprecationWarning):
        return False
    return True


@pytest.mark.parametrize("func", ONE_D, ids=name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_1d_pullback_is_the_transpose(func, data):
    shape, kwargs, complex_ = draw_1d(data, func)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = random(rng, shape, complex_)
    assume(forward_works(func, x, kwargs))  # irfft/hfft of one bin: n = 0
    check_adjoint(func, x, kwargs, rng)


def draw_nd(data, func, shape):
    """axes: None, or distinct axes in any order, negative ones included; s: None, or lengths (-1: whole)."""
    ndim = len(shape)
    two_d = func in TWO_D
    kwargs = {"norm": data.draw(st.sampled_from(NORMS), label="norm")}
    if two_d and ndim < 2:
        axes = data.draw(st.sampled_from([(0,), (-1,)]), label="axes")
    elif two_d and data.draw(st.booleans()):
        axes = None  # the default (-2, -1)
    else:
        k = data.draw(st.integers(1, ndim), label="k")
        axes = data.draw(st.permutations(range(ndim)), label="order")[:k]
        axes = tuple(a - ndim * data.draw(st.booleans()) for a in axes)
        if not two_d and data.draw(st.booleans()):
            axes = None if k == ndim else axes
    if axes is not None or two_d:
        kwargs["axes"] = axes if axes is not None else (-2, -1)
    count = len(kwargs.get("axes") or shape)
    if data.draw(st.booleans()) and "axes" in kwargs:
        kwargs["s"] = data.draw(st.lists(st.sampled_from([-1, 1, 2, 3, 4, 5, 6]), min_size=count, max_size=count))
    return kwargs


@pytest.mark.parametrize("func", N_D + TWO_D, ids=name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_nd_pullback_is_the_transpose(func, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="shape"))
    kwargs = draw_nd(data, func, shape)
    complex_ = func not in REAL_ONLY and data.draw(st.booleans(), label="complex")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = random(rng, shape, complex_)
    assume(forward_works(func, x, kwargs))
    check_adjoint(func, x, kwargs, rng)


@pytest.mark.parametrize("func, s, axes", [
    (np.fft.fftn, (2, 5), (0, 0)),
    (np.fft.ifftn, (3, 2, 4), (1, 0, 1)),
    (np.fft.rfftn, (4, 6), (1, 1)),
    (np.fft.irfftn, (5, 4), (0, 0)),
    (np.fft.irfftn, (3, 7), (1, 1)),
], ids=stable_id)
def test_repeated_axes_are_repeated_steps(func, s, axes):
    """NumPy transforms along a repeated axis twice (with each its own length): so does the pullback."""
    rng = np.random.default_rng(1)
    x = random(rng, (3, 4), func not in REAL_ONLY)
    check_adjoint(func, x, {"s": s, "axes": axes}, rng)


def test_deprecated_s_without_axes_and_none_in_s():
    """``s`` without ``axes`` means the last len(s) axes; a None in ``s``: that 1-d transform's default."""
    rng = np.random.default_rng(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check_adjoint(np.fft.fftn, random(rng, (2, 3, 4), True), {"s": (5, 2)}, rng)
        check_adjoint(np.fft.irfftn, random(rng, (3, 4), True), {"s": (2, None), "axes": (0, 1)}, rng)
        check_adjoint(np.fft.rfftn, random(rng, (3, 4), False), {"s": (None, 5), "axes": (1, 0)}, rng)


@pytest.mark.parametrize("func", [np.fft.fftshift, np.fft.ifftshift], ids=name)
@pytest.mark.parametrize("axes", [None, 0, -1, (0, 1), (1,)], ids=stable_id)
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_shift_pullback_is_the_inverse_shift(func, axes, complex_):
    rng = np.random.default_rng(3)
    x = random(rng, (3, 4), complex_)
    check_adjoint(func, x, {} if axes is None else {"axes": axes}, rng)


@pytest.mark.parametrize("func, dtype", [(f, d) for f in ONE_D for d in (np.float32, np.complex64)
                                         if not (f in REAL_ONLY and d is np.complex64)], ids=stable_id)
@pytest.mark.parametrize("n", [None, 3, 8])
def test_single_precision_in_single_precision_cotangent_out(func, dtype, n):
    x = random(np.random.default_rng(4), (2, 5), dtype is np.complex64).astype(dtype)
    y = func(x, n=n)
    assert maker_of(func)(y, x, n=n)(y).dtype == dtype


def test_an_irfft_cotangent_ignores_the_imaginary_parts_irfft_ignores():
    """irfft reads only the real parts of bin 0 and of the Nyquist bin: their imaginary cotangents are 0."""
    rng = np.random.default_rng(5)
    z = random(rng, 5, True)
    for n in (8, 9):
        zbar = maker_of(np.fft.irfft)(np.fft.irfft(z, n), z, n=n)(rng.standard_normal(n))
        assert zbar[0].imag == 0 and (n % 2 or zbar[n // 2].imag == 0)


# --- against jax.vjp of jnp.fft ----------------------------------------------------------------
def jax_vjp(func, x, g, kwargs):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jfunc = getattr(jax.numpy.fft, func.__name__)
    _, back = jax.vjp(lambda a: jfunc(a, **kwargs), jax.numpy.asarray(x))
    return np.asarray(back(jax.numpy.asarray(g))[0])


JAX_CASES = [
    *[(f, {"n": n, "axis": axis, "norm": norm}) for f in ONE_D for n in (None, 3, 6, 7) for axis in (0, -1)
      for norm in NORMS],
    *[(f, {"s": s, "axes": axes, "norm": norm}) for f in N_D + TWO_D
      for s, axes in [(None, None), ((3, 6), (0, 1)), ((5, 2), (1, 0)), (None, (0,)), ((5, 7), (-1, 0))]
      for norm in ("backward", "ortho", "forward") if not (f in TWO_D and len(axes or ()) == 1)],  # JAX: 2 axes
]


@pytest.mark.parametrize("func, kwargs, complex_", [(f, k, c) for f, k in JAX_CASES for c in (False, True)
                                                   if not (c and f in REAL_ONLY)],
                         ids=lambda v: name(v) if callable(v) else "complex" if v is True else "real" if v is False
                         else str(v))
def test_pullback_equals_jax_vjp(func, kwargs, complex_):
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if func in TWO_D and "axes" not in kwargs and "s" not in kwargs:
        kwargs = {"norm": kwargs["norm"]}
    rng = np.random.default_rng(6)
    x = random(rng, (4, 5), complex_)
    y = func(x, **kwargs)
    g = random(rng, y.shape, y.dtype.kind == "c")
    ours = maker_of(func)(y, x, **kwargs)(g)
    np.testing.assert_allclose(ours, jax_vjp(func, x, g, kwargs), rtol=1e-10, atol=1e-10)


# --- fftfreq and rfftfreq: arithmetic on d, which the tape records ------------------------------------
@pytest.mark.parametrize("freq, n", [(np.fft.fftfreq, 5), (np.fft.fftfreq, 6), (np.fft.rfftfreq, 7)], ids=stable_id)
def test_fftfreq_differentiates_in_d_and_is_a_constant_otherwise(freq, n):
    """freq(n, d) = k / (n d): ∂/∂d Σ w freq(n, d) = -Σ w freq(n, 1) / d²; a constant of x when d is not tracked."""
    w = np.random.default_rng(7).standard_normal(freq(n).shape)
    for d in (0.3, np.float32(0.3), np.float64(2.5)):
        g = db.gradient(lambda d: np.sum(w * freq(n, d)), d)
        assert type(g) is type(d)
        np.testing.assert_allclose(g, -np.sum(w * freq(n)) / np.float64(d) ** 2, rtol=1e-6)
    x = np.linspace(0.5, 1.5, freq(n).size)
    np.testing.assert_allclose(db.gradient(lambda x: np.sum(x * freq(n, 0.1)), x), freq(n, 0.1))


# --- end to end: gradients of real losses through transforms, against finite differences and jax.grad ------
RNG = np.random.default_rng(8)
W = {shape: RNG.standard_normal(shape) for shape in [(4, 6), (4, 7), (3, 6), (4, 5), (6, 4), (5, 3)]}

# loss(xp, *args) written once for NumPy (through the tape) and jax.numpy; the arguments' shapes and kinds
LOSSES = {
    "power spectrum": (lambda xp, x: xp.sum(xp.abs(xp.fft.rfft(x, n=12, norm="ortho")) ** 2), [(4, 6)], [False]),
    "filter": (lambda xp, x, h: xp.sum(W[4, 6] * xp.real(xp.fft.ifft(xp.fft.fft(x, axis=0) * h, axis=0))),
               [(4, 6), (4, 1)], [False, True]),
    "irfft": (lambda xp, z: xp.sum(W[4, 7] * xp.fft.irfft(z, n=7, norm="forward")), [(4, 5)], [True]),
    "hfft": (lambda xp, z: xp.sum(W[4, 6] * xp.fft.hfft(z, n=6)), [(4, 3)], [True]),
    "ihfft": (lambda xp, x: xp.sum(xp.abs(xp.fft.ihfft(x, n=5) - 0.3j) ** 2), [(4, 6)], [False]),
    "fft2 of complex": (lambda xp, z: xp.sum(W[3, 6] * xp.abs(xp.fft.fft2(z, s=(3, 6), norm="ortho"))),
                        [(4, 5)], [True]),
    "rfftn and irfftn": (lambda xp, x, v: xp.sum(W[6, 4] * xp.fft.irfftn(
        xp.fft.rfftn(x, s=(4, 6), axes=(1, 0)) * v, s=(4, 6), axes=(1, 0))), [(5, 3), (4, 4)], [False, True]),
    "ifftn and shifts": (lambda xp, z: xp.sum(W[4, 5] * xp.imag(xp.fft.fftshift(xp.fft.ifftn(
        xp.fft.ifftshift(z, axes=0), norm="forward"), axes=(0, 1)))), [(4, 5)], [True]),
}


def loss_arguments(shapes, kinds):
    rng = np.random.default_rng(9)
    return [random(rng, shape, complex_) for shape, complex_ in zip(shapes, kinds)]


@pytest.mark.parametrize("loss", LOSSES, ids=stable_id)
def test_gradient_of_a_real_loss_matches_finite_differences(loss):
    f, shapes, kinds = LOSSES[loss]
    args = loss_arguments(shapes, kinds)
    grads = db.gradient(lambda *a: f(np, *a), *args)
    for a, g in zip(args, grads if len(args) > 1 else (grads,)):
        assert g.shape == a.shape and g.dtype == a.dtype
    db.check_gradient(lambda *a: f(np, *a), *args)


@pytest.mark.parametrize("loss", LOSSES, ids=stable_id)
def test_gradient_of_a_real_loss_matches_jax_grad(loss):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    f, shapes, kinds = LOSSES[loss]
    args = loss_arguments(shapes, kinds)
    ours = db.gradient(lambda *a: f(np, *a), *args)
    theirs = jax.grad(lambda *a: f(jax.numpy, *a), argnums=tuple(range(len(args))))(*map(jax.numpy.asarray, args))
    for g, expected in zip(ours if len(args) > 1 else (ours,), theirs):
        np.testing.assert_allclose(g, np.asarray(expected), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("func, kwargs, complex_", [
    (np.fft.fft, {"n": 7, "norm": "ortho"}, False), (np.fft.ifft, {"axis": 0}, True),
    (np.fft.rfft, {"n": 4}, False), (np.fft.irfft, {"n": 9, "norm": "forward"}, True),
    (np.fft.hfft, {}, True), (np.fft.ihfft, {"axis": 0, "norm": "ortho"}, False),
    (np.fft.fft2, {"s": (3, 6)}, True), (np.fft.rfftn, {"axes": (0,)}, False),
    (np.fft.irfftn, {"s": (2, 5), "axes": (1, 0)}, True), (np.fft.fftshift, {"axes": 1}, True),
], ids=stable_id)
def test_db_pullback_through_the_tape_equals_jax_vjp(func, kwargs, complex_):
    """The tape hands a complex cotangent to the rule, and a real argument gets the real part."""
    rng = np.random.default_rng(10)
    x = random(rng, (4, 5), complex_)
    y, back = db.pullback(lambda x: func(x, **kwargs), x)
    g = random(rng, y.shape, y.dtype.kind == "c")
    xbar = back(g)
    assert xbar.dtype == x.dtype
    np.testing.assert_allclose(xbar, jax_vjp(func, x, g, kwargs), rtol=1e-10, atol=1e-10)
