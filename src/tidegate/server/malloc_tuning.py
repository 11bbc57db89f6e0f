"""glibc malloc settings for the broker process: keep request-sized buffers on the heap.

A produce request of a megabyte passes through a few buffers of its size (the frame the
listener reads it into, kio's copy of its records). glibc serves an allocation above its
mmap threshold (128 KiB at first, raised as such blocks are freed) with a fresh mapping,
and gives free memory at the heap's top back to the kernel beyond its trim threshold, so
each request's buffers came from pages the kernel had to fault in and zero again: a
quarter of the broker's CPU per produced record at 1 MiB requests (measured with
bench/produce_consume.py; docs/benchmarks.md "Durable produce"). With the mmap threshold
at 32 MiB (the most glibc's own adaptation would reach) and 16 MiB of free heap kept,
the same pages serve request after request.

`tune()` is called once by `run_broker`; it does nothing off glibc, or when
TIDEGATE_MALLOC_TUNING=0 (to measure without it). These are the settings the
GLIBC_TUNABLES variable would make (glibc.malloc.mmap_threshold, .trim_threshold).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD = 16 << 20


def tune() -> bool:
    """Set the thresholds; True if they were set."""
    if os.environ.get("TIDEGATE_MALLOC_TUNING", "1") == "0":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; setting either turns glibc's adaptation off
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
    ok = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1) and ok
    if not ok:
        log.info("malloc thresholds not set (mallopt refused them)")
    return ok
