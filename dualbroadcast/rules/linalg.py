"""Reverse rules of linear algebra: dot, matmul, inner, outer, vdot, tensordot, einsum, trace, inv, solve, det, slogdet."""
