"""Load profiles: *when* requests are issued. They know nothing of backends, metrics or reports.

- concurrency: N workers, each sends its next request as soon as its last one finished;
- rate: arrivals drawn from a gamma process (shape = burstiness; 1.0 = Poisson), bounded in flight.

A profile calls ``issue(index)`` for every request and stops when ``Budget`` says so.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from trtkit.bench.spec import LoadPoint

Issue = Callable[[int], Awaitable[None]]


@dataclass(slots=True)
class Budget:
    """How many requests a point issues: a count (``total``), or until a deadline on perf_counter."""

    total: int | None
    deadline: float | None
    issued: int = 0
    last_issued_at: float | None = None  # perf_counter of the last yes: a duration point ends on the deadline

    def take(self) -> int | None:
        """The next request index, or None when the point is done issuing."""
        if self.total is not None and self.issued >= self.total:
            return None
        now = time.perf_counter()
        if self.deadline is not None and now >= self.deadline:
            return None
        self.issued += 1
        self.last_issued_at = now
        return self.issued - 1


def arrival_gaps(rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Gaps between arrivals: gamma(shape=burstiness, mean=1/rate). burstiness 1 is a Poisson process;
    below 1 arrivals bunch up, above 1 they become more regular (vLLM's and GuideLLM's convention)."""
    scale = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, scale)


async def run_concurrency(workers: int, budget: Budget, issue: Issue) -> None:
    async def worker() -> None:
        while (index := budget.take()) is not None:
            await issue(index)

    await asyncio.gather(*(worker() for _ in range(workers)))


async def run_rate(rate: float, burstiness: float, budget: Budget, issue: Issue, *, max_in_flight: int,
                   seed: int) -> None:
    """Issue on a precomputed schedule; when ``max_in_flight`` are pending the schedule waits (the report's
    achieved rate then falls below the target: that is the server saturating, shown, not hidden)."""
    gate = asyncio.Semaphore(max_in_flight)
    tasks: set[asyncio.Task] = set()
    gaps = arrival_gaps(rate, burstiness, random.Random(seed))
    next_at = time.perf_counter()

    async def bounded(index: int) -> None:
        try:
            await issue(index)
        finally:
            gate.release()

    while True:
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await gate.acquire()
        index = budget.take()
        if index is None:
            gate.release()
            break
        task = asyncio.create_task(bounded(index))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        next_at += next(gaps)
    if tasks:
        await asyncio.gather(*tasks)


async def run_profile(point: LoadPoint, budget: Budget, issue: Issue, *, max_in_flight: int, seed: int) -> None:
    if point.mode == "concurrency":
        await run_concurrency(int(point.value), budget, issue)
    else:
        await run_rate(point.value, point.burstiness, budget, issue, max_in_flight=max_in_flight, seed=seed)
