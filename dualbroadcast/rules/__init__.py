"""Reverse rules, one module per family; importing this package registers them all."""

from ..registry import RULES, users_rules_from_now
from . import (  # noqa: F401
    complex,
    elementwise,
    fft,
    linalg,
    nondifferentiable,
    reductions,
    shape,
)

# The rules the library itself declares (tests check each has test inputs).
BUILTIN_RULES = frozenset(RULES)
users_rules_from_now()
