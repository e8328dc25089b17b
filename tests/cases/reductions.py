"""Cases for the reductions rules."""

CASES = []
