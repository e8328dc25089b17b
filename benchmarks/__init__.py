"""Benchmarks: every figure is a ratio to the NumPy primal measured in the same run."""
