"""Where a benchmark's processes run: the engine on cores of its own, the frontends on the others.

On a GPU host the engine computes on the GPU, so the CPU that Triton's frontend, a gateway and a load generator
take never slows the engine. On a small CPU machine the reference engine stands in for the GPU and, left
alone, its torch threads share every core with those frontends: each CPU-millisecond of a client is then taken
from the engine (and an OpenMP region stalls when one of its threads is preempted). Pinning the engine's
server to its own cores, and everything else to the rest, keeps the two apart as a GPU would.

Affinity is set on every thread of every process of a tree (``os.sched_setaffinity`` on a thread id sets that
thread only); threads and processes started later inherit it from the thread that starts them.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Split:
    """The engine's cores and the frontends' cores (disjoint)."""

    engine: frozenset[int]
    frontends: frozenset[int]

    def describe(self) -> str:
        return f"engine on CPU {_cpus(self.engine)}, gateway and load generators on CPU {_cpus(self.frontends)}"


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def split_cores(engine_cores: int = 1) -> Split | None:
    """The first ``engine_cores`` usable cores for the engine, the rest for the frontends; None when fewer
    than ``engine_cores + 1`` cores are usable (nothing would be left for the frontends)."""
    cores = usable_cores()
    if engine_cores < 1 or len(cores) <= engine_cores:
        return None
    return Split(frozenset(cores[:engine_cores]), frozenset(cores[engine_cores:]))


def pin_process(pid: int, cpus: frozenset[int] | set[int]) -> int:
    """Every thread of one process on ``cpus``; returns how many threads were pinned."""
    pinned = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
            pinned += 1
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return pinned


def pin_tree(pid: int, cpus: frozenset[int] | set[int]) -> int:
    """Every thread of a process and of all its descendants (tritonserver and its Python stubs) on ``cpus``."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    return sum(pin_process(p, cpus) for p in (pid, *(c.pid for c in children)))


def thread_affinities(pid: int) -> set[frozenset[int]]:
    """The distinct affinity masks of a process's threads (for checks)."""
    masks = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            masks.add(frozenset(os.sched_getaffinity(int(tid))))
        except ProcessLookupError:
            pass
    return masks


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
