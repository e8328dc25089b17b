"""A blocked kernel called outside a prepared program recycles its buffers (`kernels._owned_or_recycled`):
only those whose results nobody holds any more, so no result a caller keeps is ever overwritten."""

import concurrent.futures
import tracemalloc

import numpy as np

import dualbroadcast as db

N = 200_000  # blocked is eligible (three blocks of 65,536) and splits into chunks (a block each at least)


def rho(x):
    return np.exp(-3.0 * (x + 1.0))


def loss(x):
    return db.sum(rho, x, backend="blocked")


def expected(x):
    return -3.0 * rho(x)


def inputs(k):
    return np.random.default_rng(k).random(N)


def test_held_results_and_their_views_are_never_overwritten():
    xs = [inputs(k) for k in range(6)]
    held = db.gradient(loss, xs[0])
    view = db.gradient(loss, xs[1])[::3]  # only a view keeps the buffer
    broadcast = db.broadcast(rho, xs[2], backend="blocked")  # db.broadcast's value is a buffer too
    for x in xs[3:]:
        np.testing.assert_allclose(db.gradient(loss, x), expected(x), rtol=1e-13)
        db.broadcast(rho, x, backend="blocked")
    np.testing.assert_allclose(held, expected(xs[0]), rtol=1e-13)
    np.testing.assert_allclose(view, expected(xs[1])[::3], rtol=1e-13)
    np.testing.assert_allclose(broadcast, rho(xs[2]), rtol=1e-13)


def test_dropped_results_are_recycled():
    """A loop that keeps its last gradient while computing the next reuses the one before: after the first
    calls, no buffer of N elements is allocated."""
    x = inputs(0)
    g = db.gradient(loss, x)
    g = db.gradient(loss, x)
    tracemalloc.start()
    try:
        for _ in range(4):
            g = db.gradient(loss, x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes, f"{peak} bytes allocated by four calls (a gradient is {x.nbytes})"
    np.testing.assert_allclose(g, expected(x), rtol=1e-13)


def test_concurrent_calls_never_share_buffers():
    xs = [inputs(k) for k in range(8)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            grads = list(pool.map(lambda x: db.gradient(loss, x), xs))
            for x, g in zip(xs, grads):
                np.testing.assert_allclose(g, expected(x), rtol=1e-13)


def test_a_kernel_bound_for_one_thread_does_not_serve_calls_on_several(chunk_counts):
    """Buffers bound inside a Dask task (`KERNEL_THREADS` 1: one chunk) are not recycled for a call outside, which
    splits the work for every core (it ran on one thread so), nor the reverse."""
    from dualbroadcast import kernels

    db.clear_cache()
    x = inputs(7)
    for threads in (1, None, 1, None):
        token = kernels.KERNEL_THREADS.set(threads)
        try:
            for _ in range(2):
                np.testing.assert_allclose(db.gradient(loss, x), expected(x), rtol=1e-13)
        finally:
            kernels.KERNEL_THREADS.reset(token)
    assert chunk_counts == [1, 1, 2, 2, 1, 1, 2, 2]
