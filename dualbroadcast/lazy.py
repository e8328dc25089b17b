"""A Dask array as the layers below the Dask layer see it, and the hook through which they reach that layer.

`tape`, `broadcast` and `reverse` must recognise a Dask array (`is_chunked`, without importing Dask) and carry a
differentiated one on the tape (`Lazy`, whose NumPy protocols raise `not_chunkwise`); what is done with it
belongs to the Dask layer, `chunked`, which sits above the API and plugs its entry points into `DASK_LAYER`
when it is imported (`import dualbroadcast` imports it).
"""

import sys
from typing import Any

import numpy as np

from .errors import UnsupportedFunctionError
from .numpy_facts import getitem, qualified_name


class _DaskLayer:
    """The Dask layer's entry points that the layers below it call; `chunked` sets them when imported."""

    run_over_chunks = None  # run_over_chunks(f, args, reduce, backend): db.sum / db.broadcast with a Dask argument
    leaf_value = None  # leaf_value(x): the tape's value of a differentiated Dask array argument
    leaf_gradient = None  # leaf_gradient(g, original): its gradient, a lazy Dask array
    pullback = None  # pullback(tape, out_leaves, out_def, arguments): db.pullback of a Dask-array result


DASK_LAYER = _DaskLayer()


_NOT_CHUNKWISE = (
    "{what} a Dask array inside a differentiated program: it cannot run chunk by chunk, and computing the "
    "whole array here could exhaust memory. Sum over the data with db.sum(f, ...) (an elementwise f) or "
    "db.sum_blocks(f, data, *params) (any program per block of rows), or call .compute() on the array first "
    "if it fits in memory."
)


def is_chunked(x: Any) -> bool:
    """Whether ``x`` is a Dask array (without importing Dask: if it is not imported, nothing is one)."""
    module = sys.modules.get("dask.array")
    return module is not None and isinstance(x, module.Array)


def not_chunkwise(func) -> UnsupportedFunctionError:
    """The error for ``func`` (a NumPy function) meeting a Dask array on the tape."""
    return UnsupportedFunctionError(_NOT_CHUNKWISE.format(what=f"{qualified_name(func)} got"))


class Lazy:
    """The tape's value of a differentiated Dask array: NumPy on it is an error (`_NOT_CHUNKWISE`); `sum`,
    `broadcast` and `sum_blocks` read its ``array``."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)
    ndim = property(lambda self: self.array.ndim)
    size = property(lambda self: self.array.size)

    def __array_function__(self, func, types, args, kwargs):
        if func is np.shape or func is np.ndim or func is np.size:
            return func(np.broadcast_to(np.empty((), self.dtype), self.shape))
        if func is np.result_type:
            return np.result_type(*[a.dtype if type(a) is Lazy else a for a in args])
        raise not_chunkwise(func)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise not_chunkwise(ufunc if method == "__call__" else getattr(ufunc, method))

    def __array__(self, dtype=None, copy=None):
        raise UnsupportedFunctionError(_NOT_CHUNKWISE.format(what="np.asarray (or a function calling it) got"))

    def __repr__(self):
        return f"Lazy({self.array!r})"


def _refused(func):
    def operator_method(self, *args):
        raise not_chunkwise(func)
    return operator_method


for _name, _func in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.divide),
                     ("pow", np.power), ("floordiv", np.floor_divide), ("mod", np.remainder), ("matmul", np.matmul)]:
    setattr(Lazy, f"__{_name}__", _refused(_func))
    setattr(Lazy, f"__r{_name}__", _refused(_func))
for _name, _func in [("neg", np.negative), ("pos", np.positive), ("abs", np.absolute), ("lt", np.less),
                     ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal), ("getitem", getitem)]:
    setattr(Lazy, f"__{_name}__", _refused(_func))
