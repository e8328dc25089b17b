"""`kernel_source.block_dot`, the per-block ``Σ a·b`` of blocked kernels (EAM's hvp tangent ``Σ r·v``): whole
pieces as the rows of one ``np.vecdot`` call, the rest one dot product."""

import numpy as np
import pytest

from dualbroadcast.kernel_source import DOT_PIECE, block_dot


@pytest.mark.parametrize("size", [1, 7, DOT_PIECE - 1, DOT_PIECE, DOT_PIECE + 1, 3 * DOT_PIECE, 8 * DOT_PIECE + 5])
def test_block_dot_is_the_dot_product(size):
    rng = np.random.default_rng(size)
    a, b = rng.standard_normal(size), rng.standard_normal(size)
    exact = float(np.sum(a.astype(np.longdouble) * b))
    total = block_dot(a, b)
    assert type(total) is np.float64
    assert abs(total - exact) <= 1e-13 * np.sum(np.abs(a * b))


def test_block_dot_of_blocks_of_a_call_shape():
    """A single-block kernel's blocks have the call's shape (2-d here), a view's strides included."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 2 * DOT_PIECE + 3)), rng.standard_normal((6, 2 * DOT_PIECE + 3))[::2]
    np.testing.assert_allclose(block_dot(a, b), np.sum(a * b), rtol=1e-13)
