"""Reverse rules, one module per family; importing this package registers them all."""

from . import elementwise, linalg, nondifferentiable, reductions, shape  # noqa: F401

from ..registry import RULES

# The rules the library itself declares (tests check each has test inputs).
BUILTIN_RULES = frozenset(RULES)
