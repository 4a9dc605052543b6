"""What the CPU under the engine offers: usable cores and native bf16 arithmetic (from /proc/cpuinfo)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

# AVX512-BF16 has bf16 dot-product instructions; AMX has bf16 tile matmuls. Without either, bf16 GEMMs
# convert to fp32 in software and run slower than fp32.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def native_bf16_flags() -> list[str]:
    """The native bf16 features of this CPU (empty when bf16 would be emulated)."""
    return [flag for flag in NATIVE_BF16_FLAGS if flag in cpu_flags()]
