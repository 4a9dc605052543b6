"""Keep freed memory in the C heap for the next engine step instead of handing it back to the kernel.

A step allocates and frees the same large temporaries every time: each layer's K/V gathers (12 MB per
tensor for 16 sequences at context 2,048 in bf16), prefill activations, attention outputs. glibc serves
blocks above its mmap threshold (128 KB at first, moving up to 32 MB) with a fresh ``mmap`` and returns
them with ``munmap``, and trims the top of the heap beyond its trim threshold, so the next step touches
new pages again: one page fault per 4 KB. Measured here (2 cores, Zen 4, fp32, batch 16): the decode-growth
probe took 6.9 million page faults and its all-at-2,048 step 926 ms; with the thresholds below, 0.9 million
and 373 ms (``benchmarks/engine_checks.py``).

So the engine sets, once per process: the mmap threshold to glibc's largest value (blocks up to 32 MB come
from the heap and stay there when freed) and the trim threshold to 1 GiB (the heap keeps up to that much free
memory at its top). The process's memory then stays at its high-water mark instead of going up and down
every step; it does not grow past it. Other C libraries (musl) or other systems are left as they are.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's maximum on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 1024 * 1024 * 1024

_applied = False


def keep_freed_memory() -> bool:
    """Set the thresholds (once per process); False where the C library has no glibc ``mallopt``."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) != 1:
        log.info("mallopt refused the engine's heap thresholds; freed step memory goes back to the kernel")
        return False
    _applied = True
    return True
