"""The C heap of a process that predicts batches: arrays freed back to it are kept.

Used by the exact sweep's enumeration (`dse.sweep._enumerate`) and by every bulk `predict`
(`dse.predict.request.predict`, batches of more than 64 rows): a 20,000-row all-distinct
batch allocates and frees ~30 MB of 0.1-5 MB arrays a call (features, MLP blocks, per-operator
prices); with glibc's defaults ~8,000 pages a call came back from the kernel, zeroed, 10-30 ms
of system time in a ~240 ms call (issue 37, docs/performance.md).

An exact enumeration allocates and frees the same few hundred ~1 MB arrays chunk after chunk
(131,072 configurations x 8 bytes a column). With glibc's defaults a freed block at the top of
the heap is returned to the kernel once more than the trim threshold (twice the dynamic mmap
threshold, a few MB) is free there, and the next chunk's arrays fault the same pages in again,
zeroed by the kernel: 0.8 s of system time in a 4.5 s enumeration of 1,032,192 configurations
(benchmarks/exact_speed.py's space, 330,000 page faults; docs/performance.md). `keep_freed`
raises the trim threshold so the heap keeps what it grew to (the peak RSS is unchanged: the
same arrays are live at the peak) and pins the mmap threshold at glibc's largest dynamic value
(32 MB), since setting one threshold turns the dynamic adjustment of the other off.

The setting is process-wide: after a bulk prediction the process keeps up to 1 GB of freed heap
instead of returning it. `DSE_KEEP_HEAP=0` in the environment turns it off.
"""

from __future__ import annotations

import os
import sys

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_BYTES = 1 << 30  # free heap kept at its top, bytes: above any sweep's working set
MMAP_BYTES = 32 << 20  # blocks above this are mmapped: glibc's DEFAULT_MMAP_THRESHOLD_MAX

_done: bool | None = None  # None: not tried yet in this process


def _glibc() -> bool:
    """Whether this process runs on glibc (`os.confstr`: no scan of the executable, which
    `platform.libc_ver` does, ~2 ms)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


def keep_freed() -> bool:
    """Set the heap to keep freed memory for reuse (tried once per process; glibc only,
    elsewhere a no-op). True when the setting is in force."""
    global _done
    if _done is not None:
        return _done
    _done = False
    # an embedding application that wants freed memory back (a long-lived service predicting
    # one large batch) sets DSE_KEEP_HEAP=0; the cost is the page faults above
    if os.environ.get("DSE_KEEP_HEAP", "1") == "0":
        return False
    if not sys.platform.startswith("linux") or not _glibc():
        return False
    import ctypes  # here: `dse.predict` imports this module, a one-row call never needs it

    try:
        # glibc's soname: `ctypes.util.find_library` would run ldconfig (~40 ms) to find it
        libc = ctypes.CDLL("libc.so.6")
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
