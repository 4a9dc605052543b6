"""Runs a sweep: for each load point, issue the workload through a backend under a profile, with the
engine's metrics sampled on the same clock. Produces records and samples; never draws or writes reports.

Warm-up: the first ``warmup_requests`` of every point run under the same load but are marked and left out
of the figures (connection set-up, first-use costs).

Each point sends its own equal slice of the workload (the session builds one slice per point).
Replaying the same prompts at every point would measure caches, not the engine: a gateway's response
cache answers a repeated greedy request without reaching Triton (no engine work, 0 tokens billed), and
the KV prefix cache would serve a repeated prompt's blocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from trtkit.bench.backends.base import Backend
from trtkit.bench.engine_metrics import EngineSample, MetricsSampler
from trtkit.bench.profiles import Budget, run_profile
from trtkit.bench.records import RequestRecord, make_record
from trtkit.bench.spec import BenchSpec, LoadPoint
from trtkit.bench.workloads import BenchRequest

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PointRun:
    point: LoadPoint
    started_s: float
    ended_s: float
    records: list[RequestRecord]
    last_issued_s: float | None = None  # when the budget last said yes (the run's clock)


@dataclass(slots=True)
class SweepRun:
    spec: BenchSpec
    origin: float = 0.0  # time.perf_counter() at the run's start: the zero of every *_s time
    points: list[PointRun] = field(default_factory=list)
    samples: list[EngineSample] = field(default_factory=list)
    metrics_error: str | None = None


Progress = Callable[[str, RequestRecord | None, int | None], None]
"""(point name, a finished record or None at a point's start, the point's planned request count or None)."""


async def run_point(point: LoadPoint, spec: BenchSpec, backend: Backend, workload: list[BenchRequest],
                    origin: float, progress: Progress | None = None, slots: range | None = None) -> PointRun:
    """Run one load point over the workload entries ``slots`` (all of it by default), cycling if it runs longer."""
    warmup = spec.warmup_requests
    slots = slots or range(len(workload))
    total = None if spec.requests_per_point is None else spec.requests_per_point + warmup
    started = time.perf_counter()
    deadline = None if spec.duration_s is None else started + spec.duration_s
    budget = Budget(total, deadline)
    records: list[RequestRecord] = []
    if progress:
        progress(point.name, None, total)

    async def issue(index: int) -> None:
        slot = slots[index % len(slots)] % len(workload)
        request = workload[slot]
        result = await backend.send(request)
        record = make_record(point.name, index, slot, index < warmup, request, result, origin)
        records.append(record)
        if progress:
            progress(point.name, record, total)

    await run_profile(point, budget, issue, max_in_flight=spec.max_in_flight, seed=spec.seed)
    records.sort(key=lambda r: r.index)
    last = None if budget.last_issued_at is None else budget.last_issued_at - origin
    return PointRun(point, started - origin, time.perf_counter() - origin, records, last)


async def run_sweep(spec: BenchSpec, backend: Backend, workload: list[BenchRequest], *,
                    metrics_url: str | None, progress: Progress | None = None,
                    sample_interval_s: float = 0.25) -> SweepRun:
    origin = time.perf_counter()
    sweep = SweepRun(spec, origin)
    sampler = MetricsSampler(metrics_url, origin, sample_interval_s) if metrics_url else None
    await backend.open()
    try:
        if sampler is not None:
            await sampler.start()
        slots_per_point = max(1, len(workload) // len(spec.points))
        for number, point in enumerate(spec.points):
            sweep.points.append(await run_point(point, spec, backend, workload, origin, progress,
                                                range(number * slots_per_point, (number + 1) * slots_per_point)))
            if sampler is not None:
                await sampler.checkpoint()
            log.info("point %s: %d requests", point.name, len(sweep.points[-1].records))
    finally:
        if sampler is not None:
            await sampler.stop()
            sweep.samples, sweep.metrics_error = sampler.samples, sampler.error
        await backend.close()
    return sweep


def run_sweep_blocking(spec: BenchSpec, backend: Backend, workload: list[BenchRequest], *,
                       metrics_url: str | None, progress: Progress | None = None) -> SweepRun:
    return asyncio.run(run_sweep(spec, backend, workload, metrics_url=metrics_url, progress=progress))
