"""What a NumPy call on tracked or dual values accepts and returns, shared by the tape and forward mode: float
and complex operands, a constant result (an integer or boolean one, which carries no derivative), the ufunc
keywords refused, and the messages that say so."""

import inspect

import numpy as np

from .context import FORWARD
from .errors import (
    InPlaceMutationError,
    KernelError,
    UnsupportedFunctionError,
)
from .lazy import is_chunked
from .numpy_facts import INFIX, REAL_FLOATS, qualified_name


def complex_message(func):
    name = qualified_name(func)
    return (
        f"{name} has no derivative rule for complex values (its rule is for real numbers: {name} is not "
        "holomorphic, or has no meaning for complex numbers, as an order or a maximum). Differentiate a real "
        "function of the complex values (np.real, np.imag, np.abs), or apply it to db.cut(z) if you do not "
        "need its gradient."
    )


def sequence_by_position(func, kwargs):
    """``func(arrays=[...], ...)`` as ``func([...], ...)``: a sequence rule reads its sequence first."""
    kwargs = dict(kwargs)  # NumPy's dispatcher has checked that the sequence is among them
    return (kwargs.pop(next(iter(inspect.signature(func).parameters))),), kwargs


def float_valued(ans):
    """Whether ``ans`` is a real float array or NumPy scalar the tape carries (not a `db.jvp` dual: a tracked value
    met one, reverse over forward, and forward mode computes the result, see `_not_float`; not a Dask array:
    `_not_float` refuses it)."""
    dtype = getattr(ans, "dtype", None)
    return dtype is not None and dtype.kind == "f" and (type(ans) is np.ndarray or (
        type(ans) is not FORWARD[0] and not is_chunked(ans)))


def complex_valued(ans):
    """Whether ``ans`` is complex: a NumPy complex array or scalar, or a Python complex (``1j * s`` of a
    NumPy float scalar ``s`` is one: Python's complex multiplies it)."""
    if type(ans) is complex:
        return True
    dtype = getattr(ans, "dtype", None)
    return dtype is not None and dtype.kind == "c"


_CONSTANT_KINDS = frozenset("biu")  # booleans and integers: piecewise constant, no gradient to lose
_CONSTANT_TYPES = frozenset((bool, int, tuple, type(None)))  # counts, flags, shapes


def constant_result(func, ans):
    """``ans``, a result of ``func`` on tracked values that carries no gradient (booleans, integers,
    shapes); an error for anything else (object, text), whose gradient would be lost."""
    dtype = getattr(ans, "dtype", None)
    if dtype.kind in _CONSTANT_KINDS if dtype is not None else type(ans) in _CONSTANT_TYPES:
        if isinstance(ans, tuple) and any(_holds_float(a) for a in ans):
            raise UnsupportedFunctionError(
                f"{qualified_name(func)} returned several results from tracked values, but its rule is for one "
                "result, so their gradients would be lost; register it with db.defvjp_outputs (one pullback "
                "per result), or apply it to db.cut(x) if you do not need its gradient"
            )
        return ans
    if getattr(ans, "kernel_symbol", False):
        raise KernelError(
            f"{qualified_name(func)} met a tracked value inside a db.sum/db.broadcast kernel, which reached it "
            "by a way the kernel does not see as its argument (an object it reads, a global); pass the value "
            "as an argument of db.sum/db.broadcast, or db.cut it if it is a constant of the kernel"
        )
    what = f"dtype {dtype}" if dtype is not None else f"type {type(ans).__name__}"
    raise UnsupportedFunctionError(
        f"{qualified_name(func)} of a tracked value gave a result of {what}, which the tape cannot carry "
        "(it carries real and complex floating point): its gradient would be lost. Keep the computation "
        "in floating point, or apply it to db.cut(x) if you do not need its gradient."
    )


def _holds_float(a):
    """Whether ``a`` is, or a tuple or list of it holds, a real or complex floating-point value."""
    if type(a) in (tuple, list):
        return any(map(_holds_float, a))
    return isinstance(a, (float, complex)) or getattr(getattr(a, "dtype", None), "kind", None) in ("f", "c")


def unsupported_message(func):
    name = qualified_name(func)
    if isinstance(func, np.ufunc) and all("O" in types for types in func.types):
        return (
            f"{name} is a Python function applied per element (np.frompyfunc or np.vectorize), which "
            "cannot be differentiated; write it with NumPy operations (db.broadcast runs a scalar-style "
            "function elementwise), or apply it to db.cut(x) if you do not need its gradient."
        )
    return (
        f"{name} has no derivative rule in dualbroadcast, so a gradient through it cannot be "
        f"computed. Register one: db.defvjp({name}, lambda ans, x: lambda g: <cotangent of x>) "
        f"(see db.defvjp), or apply {name} to db.cut(x) if you do not need its gradient."
    )


OUT_MESSAGE = (
    "{name} with out= or an in-place operator (+=, *=, ...) involving a tracked value would mutate "
    "an array and drop its gradient; write y = {example} instead of an in-place update."
)


_UFUNC_KEYWORDS = frozenset(("casting", "order", "subok"))  # they do not change a float result's values


def check_ufunc_keywords(ufunc, kwargs):
    """A clear error for the keywords of a ufunc call whose effect a rule cannot honour."""
    name = f"np.{ufunc.__name__}"
    if kwargs.get("out") is not None:
        example = f"x {INFIX[ufunc]} y" if ufunc in INFIX else f"{name}(...)"
        raise InPlaceMutationError(OUT_MESSAGE.format(name=name, example=example))
    unsupported = sorted(kwargs.keys() - _UFUNC_KEYWORDS - {"out"})
    if "where" in unsupported:
        raise UnsupportedFunctionError(
            f"{name}(..., where=mask) on a tracked value leaves the masked-out elements uninitialised, so "
            f"their gradient is undefined; write np.where(mask, {name}(x), fill) instead"
        )
    if unsupported:
        raise UnsupportedFunctionError(
            f"{name} with the keyword(s) {unsupported} on a tracked value has no derivative rule; "
            f"call {name} without them and convert the result with .astype(...) if you need another dtype"
        )


PLAIN_NUMBERS = REAL_FLOATS | {int}  # a plain number beside a tracked value: `Tracked.__array_ufunc__`
# what `tracked.record_binary` takes beside a tracked value (``array * x`` as ``x * array``)
CONSTANT_OPERANDS = PLAIN_NUMBERS | {np.ndarray}
