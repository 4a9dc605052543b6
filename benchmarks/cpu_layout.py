"""Where a benchmark's processes run: the engine on cores of its own, the frontends on the others.

On a GPU host the engine computes on the GPU, so the CPU that Triton's frontend, a gateway and a load generator
take never slows the engine. On a small CPU machine the reference engine stands in for the GPU and, left
alone, its torch threads share every core with those frontends: each CPU-millisecond of a client is then taken
from the engine (and an OpenMP region stalls when one of its threads is preempted). Pinning the engine's
server to its own cores, and everything else to the rest, keeps the two apart as a GPU would.

On the frontends' cores the load generators (the openai SDK, the direct client) share a core with the gateway,
which in production has its cores to itself while its clients run elsewhere. ``yield_to_servers`` lowers a load
generator's scheduling priority (nice 10), so the core goes to the servers whenever they have work and the load
generator takes what they leave: its requests still cost it the CPU they cost, but they no longer delay the
gateway's. Both paths' load generators are the same process, so both get the same priority.

Affinity and priority are set on every thread of every process of a tree (``os.sched_setaffinity`` on a thread id sets that
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
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return pinned


LOAD_GENERATOR_NICE = 10


def yield_to_servers(pid: int, nice: int = LOAD_GENERATOR_NICE) -> int:
    """Every thread of one process at niceness ``nice`` (Linux keeps a niceness per thread; threads started
    later inherit it); returns how many threads were changed."""
    changed = 0
    for tid in _threads(pid):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            changed += 1
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return changed


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


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
