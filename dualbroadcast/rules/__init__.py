"""Reverse rules, one module per family; importing this package registers them all."""

from . import elementwise  # noqa: F401
