"""dualbroadcast: fast automatic differentiation of plain NumPy code.

Reverse mode over array operations; elementwise broadcasts and sums in forward
mode with vectorised dual arrays.  The API contract and the architecture are in
``docs/design.md`` in the repository; the user guide beside it (``docs/guide/``) shows the API by example.

>>> db.gradient(lambda x: np.sum(x ** 2), np.array([1.0, 2.0]))
array([2., 4.])
"""

from . import rules  # noqa: F401  (registers every rule)
from .api import (
    check_gradient,
    cut,
    hessian,
    hvp,
    jacfwd,
    jacobian,
    jacrev,
    jvp,
    uncut,
)
from .broadcast import broadcast, clear_cache, elementwise, sum
from .chunked import sum_blocks
from .errors import (
    ArgumentTypeError,
    DifferentiationError,
    GradientMismatchError,
    InPlaceMutationError,
    KernelError,
    NonScalarOutputError,
    ShapeMismatchError,
    StaleValueError,
    UnsupportedFunctionError,
    ValueConversionError,
)
from .explain import explain
from .kernel_cache import KernelCall, kernel_log
from .kernels import set_backend
from .numeric_warnings import install as _attribute_numeric_warnings
from .prepared import PreparedGradient, PreparedHvp, prepare_gradient, prepare_hvp
from .registry import (
    defjvp,
    deflinear,
    defmultilinear,
    defvjp,
    defvjp_argnum,
    defvjp_outputs,
    defvjp_sequence,
    nondifferentiable,
)
from .reverse import gradient, pullback, value_and_gradient
from .rules.elementwise import defderivative
from .tracked import primitive

_attribute_numeric_warnings()  # NumPy's warnings in this package's code shown at the user's line

__all__ = [
    "gradient", "value_and_gradient", "broadcast", "sum", "sum_blocks", "elementwise", "kernel_log", "KernelCall",
    "set_backend", "clear_cache", "explain", "prepare_gradient", "PreparedGradient", "pullback", "jacobian", "jacfwd",
    "jacrev", "cut",
    "prepare_hvp", "PreparedHvp", "uncut", "check_gradient", "hessian", "hvp", "jvp",
    "defderivative", "defvjp", "defvjp_argnum", "defvjp_sequence", "defvjp_outputs", "nondifferentiable", "primitive",
    "defjvp", "deflinear", "defmultilinear",
    "DifferentiationError", "GradientMismatchError", "InPlaceMutationError", "KernelError",
    "NonScalarOutputError", "UnsupportedFunctionError", "ValueConversionError", "ArgumentTypeError",
    "StaleValueError", "ShapeMismatchError",
]
