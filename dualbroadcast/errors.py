"""Exceptions raised by dualbroadcast; every message says what is wrong and what to do."""


class DifferentiationError(Exception):
    """Base class for every error this library raises about a gradient."""


class UnsupportedFunctionError(DifferentiationError, TypeError):
    """A NumPy function without a derivative rule was applied to a tracked value."""


class InPlaceMutationError(DifferentiationError, TypeError):
    """User code tried to mutate a tracked array (its gradient would be lost)."""


class ValueConversionError(DifferentiationError, TypeError):
    """User code tried to turn a tracked value into a plain Python or NumPy value."""


class NonScalarOutputError(DifferentiationError, ValueError):
    """`gradient` was asked for the gradient of a function whose result is not a scalar."""


class GradientMismatchError(DifferentiationError, AssertionError):
    """`check_gradient` found a gradient that disagrees with finite differences."""


class KernelError(DifferentiationError, TypeError):
    """The function given to `broadcast`/`sum` does something a kernel cannot do."""


class ArgumentTypeError(DifferentiationError, TypeError):
    """An argument to differentiate is not a real floating-point value (an integer, complex, object)."""


class StaleValueError(DifferentiationError, ValueError):
    """A tracked value was used outside the evaluation that made it, or met another evaluation's values."""


class ShapeMismatchError(DifferentiationError, ValueError):
    """A cotangent, given to a pullback or returned by a rule, does not have its value's shape."""
