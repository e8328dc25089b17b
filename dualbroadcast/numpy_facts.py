"""Facts about NumPy that several layers read, written once: a leaf module (it imports only NumPy).

Which ufuncs Python writes as operators (and the operator function that computes
the same on NumPy scalars without ufunc dispatch), which ufuncs are predicates,
which scalar types are real floats, and how a user writes a function's name.
The tape, the kernels (``expr``, ``kernels``), prepared replay and the rules all
read these tables instead of keeping their own.
"""

import operator
import sys

import numpy as np

# Arithmetic Python writes as infix operators: on Python floats alone they stay (weakly typed)
# Python floats, exactly as in the user's own NumPy code.
INFIX = {np.add: "+", np.subtract: "-", np.multiply: "*", np.divide: "/", np.power: "**"}
COMPARISONS = {
    np.less: "<", np.less_equal: "<=", np.greater: ">", np.greater_equal: ">=", np.equal: "==", np.not_equal: "!=",
}
# Truth-valued ufuncs: no derivative, and a kernel multiplies them into a number before adding them.
PREDICATES = frozenset((*COMPARISONS, np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
                        np.isnan, np.isfinite, np.isinf))

# The operator computing the same as the ufunc without keywords, without ufunc dispatch on NumPy scalars.
OPERATOR_FUNCTIONS = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul, np.divide: operator.truediv,
    np.power: operator.pow, np.negative: operator.neg, np.positive: operator.pos, np.absolute: operator.abs,
}

FLOAT_SCALARS = frozenset((np.float64, np.float32, np.float16, np.longdouble))  # NumPy's real float scalar types
REAL_FLOATS = FLOAT_SCALARS | {float}
# The leaf types the fast paths take whole, without walking a tree: arrays and the usual float scalars.
FLOAT_LEAVES = frozenset((np.ndarray, float, np.float64, np.float32))


def source_of(op, args):
    """Python source of ``op(*args)`` (args given as source text) where NumPy code writes an operator; else None."""
    if op in INFIX:
        return f"({args[0]} {INFIX[op]} {args[1]})"
    if op in COMPARISONS:
        return f"({args[0]} {COMPARISONS[op]} {args[1]})"
    if op is np.negative:
        return f"(-{args[0]})"
    return None


def as_dtype(values, dtype):
    """``values`` with their Python numbers as scalars of ``dtype``: a formula fed them keeps a float32
    result float32 (``np.where(c, 0, x)`` of a Python 0 and a 0-d array would not)."""
    for v in values:
        if type(v) is float or type(v) is int:
            return [dtype.type(v) if type(v) in (float, int) else v for v in values]
    return values


def getitem(x, index):
    """``x[index]``: the function the indexing rule is registered on."""
    return x[index]


def astype(x, dtype, order="K", casting="unsafe", subok=True, copy=True):
    """``x.astype(dtype, ...)``: the function the cast rule is registered on."""
    return x.astype(dtype, order=order, casting=casting, subok=subok, copy=copy)


def qualified_name(func):
    """How a user writes ``func``, for messages: ``np.linalg.det``, ``scipy.special.erf``, ``x.astype``."""
    if func is getitem:
        return "x[index]"
    if func is astype:
        return "x.astype"
    if isinstance(func, np.ufunc):
        return _ufunc_name(func)
    if isinstance(getattr(func, "__self__", None), np.ufunc):  # a ufunc's method: np.add.reduce
        return f"{_ufunc_name(func.__self__)}.{func.__name__}"
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    module = getattr(func, "__module__", None) or ""
    public = [part for part in module.split(".") if part and not part.startswith("_")]
    if public[:1] == ["numpy"]:
        public[0] = "np"
    return ".".join([*public, name])


def _ufunc_name(ufunc):
    """A ufunc's name with the module a user imports it from (ufuncs carry no ``__module__``)."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return f"np.{name}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, name, None) is ufunc:
        return f"scipy.special.{name}"
    return name


# The ndarray methods a tracked or dual value has, each the NumPy function of the same name (x.sum(...) is
# np.sum(x, ...)); those whose arguments differ from the function's (x.clip(0)) are `guards.Guarded`'s.
ARRAY_METHODS = [
    ("sum", np.sum), ("mean", np.mean), ("prod", np.prod), ("max", np.max), ("min", np.min),
    ("std", np.std), ("var", np.var), ("cumsum", np.cumsum), ("cumprod", np.cumprod),
    ("ravel", np.ravel), ("squeeze", np.squeeze), ("swapaxes", np.swapaxes),
    ("repeat", np.repeat), ("take", np.take), ("diagonal", np.diagonal), ("trace", np.trace),
    ("dot", np.dot), ("round", np.round), ("copy", np.copy),
    ("argmax", np.argmax), ("argmin", np.argmin), ("argsort", np.argsort), ("argpartition", np.argpartition),
    ("searchsorted", np.searchsorted),
    ("nonzero", np.nonzero), ("any", np.any), ("all", np.all),
]
