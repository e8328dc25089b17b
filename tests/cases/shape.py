"""Cases for the shape rules."""

CASES = []
