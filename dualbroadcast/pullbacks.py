"""Pullbacks as the backward sweep applies them, and the two builders of forward-mode partials' pullbacks.

A tape record keeps one pullback per tracked argument, in one of these kinds,
which the sweep (`sweeps.backward`) applies without asking any rule:

- ``None``: the identity, the cotangent passes as it is (``x + y`` of scalars);
- a *factor* (a type in `FACTORS`: a number or an array ``d``): ``g * d``, no Python call per edge;
- an `IndexPullback`: ``g`` added at an index of the argument's one gradient buffer (slices in loops);
- a pair ``(index, pullback)``: the argument is a view (an unrecorded slice, see `tracked.Tracked`),
  the pullback's cotangent goes at ``index`` of its base's buffer;
- any other callable: ``g -> cotangent`` (a rule's closure, a bound C method, `Unbroadcast`, `RealPart`).

The sweep of a Hessian's rows at once (`sweeps.backward_rows`), whose cotangents have a leading axis of rows,
takes the kinds above and the callables `multiply_by`, `Unbroadcast`, `Contracted` and `Gather` in one
NumPy call each; it calls any other pullback on each row.

A partial derivative computed in forward mode becomes a pullback in exactly two places:
`table_pullback` for a partial of the derivative table (``derivatives.DERIVATIVES``: the reverse
rules of elementwise functions and the operators' fast path), and `kernel_pullback` for a partial
computed by a `db.sum`/`db.broadcast` kernel.  Beside each, its ``*_source`` twin writes the same
cotangent as source text for prepared replay's code generator, which asks it instead of knowing
the formula; ``tests/tape/test_pullbacks.py`` checks each pair computes the same.
"""

import functools
import math
import operator
import warnings

import numpy as np

from .derivatives import chain_product, is_finite
from .guards import Guarded, NotReplayableError

# Partials a record holds as they are: the sweep multiplies the cotangent by them itself
# (no pullback object per operation, no call per edge).
FACTORS = frozenset((np.float64, np.float32, float, int, np.ndarray))


def multiply_by(d):
    """The pullback ``g -> g * d`` of a partial ``d`` the sweep does not take as a factor, as a C call (no frame)."""
    return functools.partial(operator.mul, d)


def scalar_pullback(d):
    """The pullback of a scalar result's partial ``d`` as a record holds it: ``d`` itself if it is a factor."""
    return d if type(d) in FACTORS else d if type(d) is Strong else multiply_by(d)


def strong_scalar_pullback(func, d, inf=math.inf):
    """`scalar_pullback` for a selection or a singular function ``func``: ``d`` itself where the product by it
    is IEEE's (a finite nonzero number), else its `Strong` pullback (0 · ∞ is 0 there, not NaN)."""
    return d if type(d) in FACTORS and d != 0 and abs(d) < inf else Strong(func, d, (), ())


def as_array(x, dtype=None):
    """``np.asarray(x, dtype)`` for a rule's argument or cotangent, except that a value tracked by an outer
    gradient (a pullback differentiated again) stays tracked, so that its operations are recorded."""
    if isinstance(x, Guarded):
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)
    return np.asarray(x, dtype)


def zero_padded(g, axis, before, after):
    """``g`` with ``before`` and ``after`` zeros along ``axis``: np.pad's constant mode written as np.concatenate,
    whose rule holds for complex values (a pullback's cotangent may be complex; np.pad's rule is for real ones)."""
    value = plain(g)
    shape = list(np.shape(value))
    zeros = []
    for width in (before, after):
        shape[axis] = width
        zeros.append(np.zeros(shape, np.result_type(value)))
    return np.concatenate([zeros[0], g, zeros[1]], axis=axis)


def plain(x):
    """``x``'s value untracked by any gradient: for what a rule computes only to choose elements (positions,
    masks, orders), through which no derivative flows.  A value a prepared program is recording (a pullback
    run inside the recorded function: `db.prepare_hvp`) cannot be read so: the choice would be baked into the
    replay, so that recording is left to `db.gradient` (`NotReplayableError`)."""
    while isinstance(x, Guarded):
        tape = getattr(x, "tape", None)  # a dual value (forward mode) has none
        if tape is not None and tape.recorder is not None:
            raise NotReplayableError("a pullback chose elements by a value a prepared program records")
        x = x.value
    return x


def unbroadcast(g, shape):
    """Sum ``g`` over the axes that broadcasting added or stretched, back to ``shape``."""
    gshape = np.shape(g)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1
    )
    return np.sum(g, axis=axes).reshape(shape)


class RealPart:
    """``g -> Re(pullback(g))``: the cotangent of a real argument of an operation where complex values take
    part (``x * c`` of a real ``x``).  As in JAX: a real input's cotangent is the real part of the complex one,
    so a real value's cotangent stays real.  ``pullback`` is of any kind above but an `IndexPullback`."""

    __slots__ = ("pullback",)

    def __init__(self, pullback):
        self.pullback = pullback

    def __call__(self, g):
        with warnings.catch_warnings():  # a pullback casting g to its real argument's dtype (concatenate's
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # parts, astype) takes the real part
            ct = apply(self.pullback, g)  # itself: the same
        return np.real(ct)


# --- the pullback of a derivative-table partial --------------------------------------------
def table_pullback(d, shape, out_shape):
    """The pullback ``g -> g · d`` for a table partial ``d`` of an argument of ``shape`` whose result has
    ``out_shape``, summed back to ``shape`` where broadcasting stretched the argument."""
    if shape != out_shape:
        return Unbroadcast(None if _is(d, 1) else d, shape)
    kind = type(d)
    if kind is int or kind is float:  # a constant partial (tested inline: a record costs 0.2 us less)
        return None if d == 1 else operator.neg if d == -1 else d
    return d if kind in FACTORS else multiply_by(d)


def one_number(g):
    """The NumPy scalar a cotangent holds everywhere when it is 0-d or a broadcast of one number (a sum's
    cotangent, `np.broadcast_to`), else None."""
    if type(g) is np.ndarray:
        return g[(0,) * g.ndim] if g.size and not any(g.strides) else None
    return g if isinstance(g, np.generic) else None


def table_pullback_source(g, d, shape, out_shape):
    """The cotangent `table_pullback` gives, as source: ``g`` the cotangent's source, ``d`` the partial's
    source or a number."""
    term = g if _is(d, 1) else f"(-{g})" if _is(d, -1) else f"({g} * {d})"
    if shape == out_shape:
        return term
    return f"np.add.reduce({term}, None)" if shape == () else f"unbroadcast({term}, {shape!r})"  # the same sum


def _is(d, number):
    """Whether the partial ``d`` is the Python number ``number`` (not an array or a symbol equal to it)."""
    return type(d) in (int, float) and d == number


class Unbroadcast:
    """``g -> unbroadcast(g · factor, shape)`` (``factor`` None: 1): a broadcast argument's cotangent."""

    __slots__ = ("factor", "shape")

    def __init__(self, factor, shape):
        self.factor = factor
        self.shape = shape

    def __call__(self, g):
        return unbroadcast(g if self.factor is None else g * self.factor, self.shape)


class Strong:
    """``g -> chain_product(func, g, d)``, summed back to ``shape``: a table partial's pullback at a selection or
    a singular point, where ``g · d`` would make 0 · ∞ a NaN (`derivatives.chain_product`)."""

    __slots__ = ("func", "partial", "shape", "stretched")

    def __init__(self, func, partial, shape, out_shape):
        self.func = func
        self.partial = partial
        self.shape = shape
        self.stretched = shape != out_shape

    def __call__(self, g):
        ct = chain_product(self.func, g, self.partial)
        return unbroadcast(ct, self.shape) if self.stretched else ct


# --- the pullback of a kernel's partial --------------------------------------------------
def kernel_pullback(partial, shape, out_shape, in_place, scale=1, singular=False):
    """The pullback ``g -> g · ∂f/∂a`` of a kernel argument ``a`` of ``shape`` (``out_shape``: the kernel's
    result, ``()`` for a sum, whose partial is already reduced to ``shape``); ``∂f/∂a`` is ``scale · partial``
    (a sum's partial kept without its literal factor, `broadcast_pullbacks.unscaled_kernel`).

    ``in_place``: the partial is the kernel's own buffer and the tape is swept once, so it becomes
    the cotangent in place instead of allocating another array of its size.  ``singular``: the kernel holds a
    singular function, so the product is strong (`_strong_kernel_pullback`).
    """
    if _kernel_partial_fits(getattr(partial, "shape", ()), shape, out_shape):
        return fitting_kernel_pullback(partial, in_place, scale, singular)
    if scale != 1:
        back = lambda g: unbroadcast(np.broadcast_to(g * scale * partial, out_shape), shape)  # noqa: E731
    else:
        back = lambda g: unbroadcast(np.broadcast_to(g * partial, out_shape), shape)  # noqa: E731
    return _strong_kernel_pullback(back, partial, scale, shape, out_shape) if singular else back


def fitting_kernel_pullback(partial, in_place, scale=1, singular=False):
    """`kernel_pullback` of a partial known to have its argument's shape (a cached plan's, every call): with a
    ``scale``, ``g · scale`` (a sum's cotangent: one number) times the partial, one pass as without."""
    back = _fitting_product(partial, in_place, scale)
    shape = getattr(partial, "shape", ())
    return _strong_kernel_pullback(back, partial, scale, shape, shape) if singular else back


def _fitting_product(partial, in_place, scale):
    """`fitting_kernel_pullback`'s IEEE product."""
    owned = in_place and type(partial) is np.ndarray and partial.base is None and partial.ndim
    if scale != 1:
        if owned:
            return lambda g: partial.__imul__(g * scale)
        return lambda g: np.multiply(partial, g * scale)
    if owned:
        return partial.__imul__  # a C call: no frame, no allocation
    # Not ``partial.__mul__``: the bound method alone holding a large array, NumPy takes it for a
    # temporary and multiplies in place, so a pullback called twice would scale it twice.
    return functools.partial(np.multiply, partial)


def _strong_kernel_pullback(back, partial, scale, shape, out_shape):
    """``g -> g · scale · partial`` for a kernel that holds a singular function: IEEE's product ``back`` where it is
    the strong one (a finite nonzero float ``g``: a sum's cotangent, as EAM's, for 0.1 us; or a finite partial: one
    check), else the product by `strong_kernel_partial`: 0 where ``g`` is 0 and the partial infinite or NaN (a guard
    written after the kernel: ``where(x > 0, db.broadcast(np.sqrt, x), 0)``), as a reverse rule's
    (`derivatives.chain_product`).  A closure, so that `explain` counts the partial it keeps."""
    def strong(g, inf=math.inf, f64=np.float64):  # (defaults, not cells: `explain` counts what it keeps)
        kind = type(g)
        if ((kind is f64 or kind is float) and 0 < abs(g) < inf) or is_finite(partial):
            return back(g)
        ct = (g * scale if scale != 1 else g) * strong_kernel_partial(g, partial)
        return ct if _kernel_partial_fits(np.shape(ct), shape, out_shape) else \
            unbroadcast(np.broadcast_to(ct, out_shape), shape)

    return strong


def kernel_product(g, partial):
    """``g · partial`` for a partial of a kernel that holds a singular function: `_strong_kernel_pullback`'s."""
    return g * strong_kernel_partial(g, partial)


def strong_kernel_partial(g, partial):
    """``partial`` as it is where ``g ·`` it is IEEE's product (``g`` a finite nonzero number, or the partial finite),
    else with 0 where ``g`` is 0 and it is not finite, so that ``g ·`` it is the strong product (0 · ∞ = 0); also
    replay's (`replay_backward`: its product into ``out=`` as before)."""
    if finite_nonzero(g) or is_finite(partial):
        return partial
    return np.where((g == 0) & np.logical_not(np.isfinite(partial)), 0, partial)


def finite_nonzero(g, inf=math.inf):
    """Whether the cotangent ``g`` is one finite nonzero number (a sum's): its product with any partial is then the
    strong product."""
    kind = type(g)
    if kind is np.ndarray:
        if g.ndim:
            return False
        g = g[()]
    elif not (kind is float or isinstance(g, np.number)):
        return False
    return g != 0 and abs(g) < inf


def kernel_pullback_source(g, partial, shape, out_shape, scale=1):
    """The cotangent `kernel_pullback` gives for a partial of ``shape`` that replay owns (``partial``:
    its source; ``scale``: its literal factor, a Python number), as source."""
    if scale != 1:
        g = f"({g} * {scale!r})"
    if _kernel_partial_fits(shape, shape, out_shape):
        return f"np.multiply({partial}, {g}, out={partial})" if shape else f"({g} * {partial})"
    return f"unbroadcast(np.broadcast_to({g} * {partial}, {out_shape!r}), {shape!r})"


def _kernel_partial_fits(partial_shape, shape, out_shape):
    """Whether ``g · partial`` already has the argument's shape: no sum over broadcast axes."""
    return partial_shape == shape and (out_shape == () or out_shape == shape)


class Contracted:
    """``g -> g @ column``: the pullback into a scalar of a vector whose partials in it are ``column`` (a
    second-order kernel's partials of its scalar arguments, stacked, see `broadcast_pullbacks._scalar_partials`), or
    into a vector, ``column`` then a matrix (column k: the partials in its element k).  A cotangent with a
    leading axis of rows (`sweeps.backward_rows`) contracts row by row as it is."""

    __slots__ = ("column",)

    def __init__(self, column):
        self.column = column

    def __call__(self, g):
        return np.matmul(g, self.column)


# --- pullbacks into one gradient buffer ------------------------------------------------------
class IndexPullback:
    """The pullback of ``x[index]``: ``g`` added at ``index`` of x's one gradient buffer.

    The sweep applies it directly, so a slice in a loop never densifies its
    cotangent: the buffer is allocated once per backward pass, on first use.
    ``repeats``: integer-array indices may repeat (``np.add.at`` semantics).
    ``transform``: reshapes ``g`` first, when the index selects in another layout.
    """

    __slots__ = ("dtype", "index", "repeats", "shape", "transform")

    def __init__(self, index, shape, dtype, repeats=False, transform=None):
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self.repeats = repeats
        self.transform = transform

    def add_into(self, grads, owned, p, g):
        """The sweep's step: add ``g`` into ``grads[p]``, made our own buffer first."""
        self.add(own_buffer(grads, owned, p, self.shape, self.dtype), g)

    def scatter(self, g):
        """The cotangent as a new array: ``g`` added at the index into zeros (`scatter`).  The nested sweep's
        step, where ``g`` may be tracked on an outer tape, so no buffer is written in place."""
        return scatter(g if self.transform is None else self.transform(g), self.index, self.shape, self.dtype,
                       self.repeats)

    def add(self, buffer, g):
        """Add ``g`` at the index into ``buffer`` (x's gradient buffer) in place."""
        if self.transform is not None:
            g = self.transform(g)
        if self.repeats:
            np.add.at(buffer, self.index, g)
        else:
            add_at(buffer, self.index, g)


def scatter(g, index, shape, dtype, repeats=False):
    """Zeros of ``shape`` and ``dtype`` with ``g`` added at ``index`` (``repeats``: an integer index may repeat,
    `np.add.at`'s semantics): the pullback of ``x[index]``, as a function of ``g``.  On a tracked ``g``
    it is recorded (its rule is in rules/shape.py: the pullback of a scatter is the gather ``ḡ[index]``)."""
    if type(g) is not np.ndarray and not isinstance(g, (np.generic, float, int, complex)):
        return SCATTER_RECORDED(g, index, shape, dtype, repeats)
    buffer = np.zeros(shape, dtype)
    if repeats:
        np.add.at(buffer, index, g)
    else:
        add_at(buffer, index, g)
    return buffer


class Gather:
    """``h -> h[index]``: the pullback of `scatter` (a gradient of a gradient's step), the gather of what it
    scattered; a class, so that a sweep of several cotangents at once (`sweeps.backward_rows`) gathers them in
    one call."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __call__(self, h):
        return h[self.index]


SCATTER_RECORDED = None  # `scatter` as a tape primitive, set by rules/shape.py (the rules import this module)


def own_buffer(grads, owned, p, shape, dtype):
    """``grads[p]`` as a buffer of the sweep's own, safe to add into (zeros on first use)."""
    buffer = grads[p]
    if buffer is None:
        buffer = grads[p] = np.zeros(shape, dtype)
        owned[p] = True
    elif not owned[p]:
        buffer = grads[p] = np.array(buffer, dtype=dtype)
        owned[p] = True
    return buffer


def add_at(buffer, index, g):
    """``buffer[index] += g`` for an index without repeats; into the view itself for a basic index."""
    part = buffer[index]
    if type(part) is np.ndarray and part.base is buffer:
        part += g
    else:
        buffer[index] += g


def apply(back, g):
    """The cotangent a pullback ``back`` of the kinds a rule's maker returns (None, a factor, a callable)
    gives for ``g``: what the sweep does inline, for callers outside it (prepared replay)."""
    if back is None:
        return g
    if type(back) in FACTORS:
        return g * back
    return back(g)
