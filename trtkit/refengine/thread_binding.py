"""Torch's intra-op threads bound one per core on the thread that steps a serving engine, as vLLM binds its own
(``native/threads.c`` says why: unbound, a core taken by another process can stall every parallel region).

Only a thread that does nothing but step the engine is bound (EngineLoop's), never a caller's own thread: a bound
thread's children inherit its single core. Only where the engine's threads take every core this process may use
(``serve.cpu_threads: 0``, or the count of the cores): a smaller count is a partition the user chose, and two
engines on a shared machine would otherwise pile onto the same first cores. ``TRTKIT_CPU_BIND=0`` turns it off.
"""

from __future__ import annotations

import logging
import os

import torch

from trtkit.refengine.cpu_features import usable_cores
from trtkit.refengine.paged_attention import AttentionKernels

log = logging.getLogger(__name__)
DISABLE_ENV = "TRTKIT_CPU_BIND"


def binding_cores(threads: int) -> list[int] | None:
    """The cores to bind ``threads`` intra-op threads to (thread t to the t-th), or None when binding does not
    apply here."""
    if os.environ.get(DISABLE_ENV, "1") == "0" or threads < 2 or not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return cores if len(cores) == threads == usable_cores() else None


def bind_compute_threads(kernels: AttentionKernels | None) -> list[int] | None:
    """Binds the calling thread's intra-op team (torch.get_num_threads() threads) where binding applies; the cores
    bound, or None."""
    cores = binding_cores(torch.get_num_threads())
    if kernels is None or cores is None:
        return None
    bound = kernels.bind_team(cores)
    if bound != len(cores):
        log.warning("bound %d of %d CPU engine threads to cores %s", bound, len(cores), cores)
    else:
        log.info("CPU engine threads bound one per core to cores %s (set %s=0 to leave them unbound)", cores,
                 DISABLE_ENV)
    return cores
