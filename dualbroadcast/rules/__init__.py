"""Reverse rules, one module per family; importing this package registers them all."""

from ..registry import RULES, users_rules_from_now
from . import elementwise, linalg, nondifferentiable, reductions, scipy_special, shape  # noqa: F401

# The rules the library itself declares (tests check each has test inputs).
BUILTIN_RULES = frozenset(RULES)
users_rules_from_now()
