"""Reverse rules, one module per family; importing this package registers them all (SciPy's on first
need, see `scipy_special.register`)."""

from ..registry import NONDIFFERENTIABLE, RULES, register_lazy_rules, users_rules_from_now
from . import (  # noqa: F401  (each module registers its family's rules on import)
    complex,
    decompositions,
    elementwise,
    fft,
    linalg,
    nondifferentiable,
    order_statistics,
    polynomial,
    reductions,
    scipy_special,
    shape,
    signal,
)

_AT_IMPORT = frozenset(RULES), frozenset(NONDIFFERENTIABLE)
users_rules_from_now()


def __getattr__(name):
    """``BUILTIN_RULES`` and ``BUILTIN_NONDIFFERENTIABLE``: the rules the library itself declares, SciPy's
    included (registered now if they were not), and its functions without a gradient (tests check each
    has test inputs, or a reason)."""
    if name not in ("BUILTIN_RULES", "BUILTIN_NONDIFFERENTIABLE"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register_lazy_rules()
    rules, constants = _AT_IMPORT
    if name == "BUILTIN_RULES":
        return rules | scipy_special.REGISTERED.intersection(RULES)
    return constants | scipy_special.REGISTERED.intersection(NONDIFFERENTIABLE)
