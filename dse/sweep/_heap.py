"""The C heap of a process that enumerates a space: chunk arrays freed back to it are kept.

An exact enumeration allocates and frees the same few hundred ~1 MB arrays chunk after chunk
(131,072 configurations x 8 bytes a column). With glibc's defaults a freed block at the top of
the heap is returned to the kernel once more than the trim threshold (twice the dynamic mmap
threshold, a few MB) is free there, and the next chunk's arrays fault the same pages in again,
zeroed by the kernel: 0.8 s of system time in a 4.5 s enumeration of 1,032,192 configurations
(benchmarks/exact_speed.py's space, 330,000 page faults; docs/performance.md). `keep_freed`
raises the trim threshold so the heap keeps what it grew to (the peak RSS is unchanged: the
same arrays are live at the peak) and pins the mmap threshold at glibc's largest dynamic value
(32 MB), since setting one threshold turns the dynamic adjustment of the other off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_BYTES = 1 << 30  # free heap kept at its top, bytes: above any sweep's working set
MMAP_BYTES = 32 << 20  # blocks above this are mmapped: glibc's DEFAULT_MMAP_THRESHOLD_MAX

_done = False


def keep_freed() -> bool:
    """Set the heap to keep freed memory for reuse (once per process; glibc only, elsewhere a
    no-op). True when the setting is in force."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mmap threshold first: were the trim threshold set alone, the mmap threshold would stay at
    # its 128 kB start and every chunk array would be mmapped (4.5 s of system time measured)
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_BYTES)
    )
    return _done
