"""glibc's allocator held in one state for a whole benchmark run, and page faults counted per call.

By default glibc serves a block of 128 KiB or more with ``mmap`` (the threshold rises with the blocks freed, up
to 32 MiB) and unmaps it on ``free``, and it gives the heap's top back to the kernel beyond twice that
threshold: a model whose call allocates 8 MB temporaries (EAM at N=1e6) may fault every page of them in again
on the next call (~2000 minor faults per array; how often depends on what the process allocated before), and
then half its time is the kernel's.  Pinned, no block comes from ``mmap`` (a threshold cannot exceed 32 MiB,
and the all-pairs model's temporaries are 54 MB), the heap is never trimmed, and it grows 64 MiB at a time:
freed memory stays mapped and the next call reuses it, so the primal and every gradient are timed on their
arithmetic.  The settings hold for every thread; the peers' own allocators (XLA's, PyTorch's) keep theirs.
"""

import ctypes
import resource

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4  # glibc's malloc.h
PINNED = {M_MMAP_MAX: 0, M_TRIM_THRESHOLD: -1, M_TOP_PAD: 64 << 20}  # no mmap; a threshold of -1: never trim


def pin():
    """Pin glibc's allocator as the module says; True if it took every setting, False where the C library has
    no ``mallopt`` (not glibc: the run goes on with its allocator's defaults)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    taken = [mallopt(parameter, value) for parameter, value in PINNED.items()]  # every one, even after a refusal
    return taken == [1] * len(PINNED)


def minor_faults():
    """Minor page faults of this process so far, all its threads together."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_per_call(fn, calls=5):
    """Minor page faults per call of ``fn`` over ``calls`` calls back to back."""
    before = minor_faults()
    for _ in range(calls):
        fn()
    return (minor_faults() - before) / calls
