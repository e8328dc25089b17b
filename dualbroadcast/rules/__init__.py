"""Reverse rules, one module per family; importing this package registers them all."""

from ..registry import NONDIFFERENTIABLE, RULES, users_rules_from_now
from . import (  # noqa: F401  (each module registers its family's rules on import)
    complex,
    decompositions,
    elementwise,
    fft,
    linalg,
    nondifferentiable,
    polynomial,
    reductions,
    scipy_special,
    shape,
    signal,
)

# The rules the library itself declares (tests check each has test inputs).
BUILTIN_RULES = frozenset(RULES)
BUILTIN_NONDIFFERENTIABLE = frozenset(NONDIFFERENTIABLE)
users_rules_from_now()
