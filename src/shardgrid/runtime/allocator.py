"""glibc's malloc told to keep the memory a process frees, up to a bound, for its next buffers.

A member builds and drops buffers of 0.1 to a few MB all the time (frames read, scan pages, backup
batches), several in flight at once. glibc gives a block over its mmap threshold (128 KB at first,
then the largest block freed so far) a mapping of its own, and gives the top of its heap back to the
kernel once more than the trim threshold (twice the mmap threshold) of it is free. Dropping a few
pages in flight frees more than that, so the next ones are fresh memory, every page of it faulted
in and zeroed by the kernel. Measured on this machine (3 members, 2 tasks of 500,000 rows, outside
Spark): page faults, zeroing and unmapping were about a fifth of a member's CPU while it served an
export's scans. With the heap kept (no mapping per block below ``MMAP_THRESHOLD_BYTES``, up to
``retain_bytes`` of free heap kept), a member's CPU for those scans fell from 0.15-0.19 s to
0.07-0.10 s (its kernel time from 0.06-0.11 s to 0.01-0.03 s), and for a load of the same rows
from 0.70-0.78 s to 0.62-0.68 s.

The cost is memory. Up to ``retain_bytes`` of free heap at its top stays with the process; and
glibc gives back only the top, so a block still live above freed ones keeps them too (an outside
tester: 300 blocks of 1 MB freed under one live block of 200 KB left 298 MB). glibc's defaults do
the same once they have moved their threshold past a block's size, which they do at the first
free of a block that size (the same test after one 1.1 MB block was freed: 298 MB as well); here
the threshold starts where they would move it at most. Elsewhere than glibc (musl, macOS)
nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

# mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest mmap threshold on 64-bit machines (DEFAULT_MMAP_THRESHOLD_MAX); blocks larger
# than this (over any frame's bound) still get a mapping of their own.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
DEFAULT_RETAIN_BYTES = 64 * 1024 * 1024
C_INT_MAX = 2**31 - 1


def keep_freed_memory(retain_bytes: int = DEFAULT_RETAIN_BYTES) -> bool:
    """Tell glibc's malloc to keep up to ``retain_bytes`` of freed heap; False where the C library
    is not glibc (nothing changed). Setting both thresholds also ends glibc's own moving of them."""
    if not 0 <= retain_bytes <= C_INT_MAX:  # mallopt takes a C int: a larger one would wrap
        raise ValueError(f"retain_bytes is 0 to {C_INT_MAX}, not {retain_bytes}")
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, retain_bytes))


@functools.cache
def _glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's mallopt, or None. Looked up once a process: finding the C library runs ldconfig
    (about 1.4 ms), and a Spark worker calls ``keep_freed_memory`` in every task it runs."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        libc = ctypes.CDLL(library)
    except OSError:
        return None
    # glibc only: another C library's mallopt (if any) numbers its parameters its own way.
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt
