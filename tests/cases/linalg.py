"""Cases for the linalg rules."""

CASES = []
