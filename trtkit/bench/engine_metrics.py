"""The engine's own view: Triton's Prometheus endpoint sampled during the run, on the bench's timeline.

TensorRT-LLM's backend (and trtkit's CPU engine, under the same names) publishes gauges of the KV
blocks, the request states and the iteration counter; Triton adds cumulative queue and compute times
per model. Sampling them every fraction of a second, on the clock the requests are timed with, lets
the report show *why* latency bent: the KV cache filled, or requests waited.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field

import httpx

log = logging.getLogger(__name__)

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# (family, label name, label value) -> series name in the bench's samples
_GAUGES = {
    ("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type"): "kv_",
    ("nv_trt_llm_request_metrics", "request_type"): "requests_",
    ("nv_trt_llm_inflight_batcher_metrics", "inflight_batcher_specific_metric"): "batcher_",
}
# cumulative per-model counters: series "<prefix>:<model>"
_PER_MODEL = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_infer_duration_us": "compute_us",
    "nv_inference_pending_request_count": "pending",
}
_TOKEN_SUMS = {"nv_llm_input_token_len_sum": "server_input_tokens", "nv_llm_output_token_len_sum": "server_output_tokens",
               "nv_llm_output_token_len_count": "server_finished_requests"}


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line of a Prometheus text exposition."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return samples


def select_series(text: str) -> dict[str, float]:
    """The series the bench keeps, summed over models where one family spans several engine models."""
    series: dict[str, float] = {}
    for name, labels, value in parse_prometheus(text):
        key = None
        for (family, label), prefix in _GAUGES.items():
            if name == family and label in labels:
                key = prefix + labels[label]
        if name == "nv_trt_llm_general_metrics" and labels.get("general_type") == "iteration_counter":
            key = "iteration"
        elif name in _PER_MODEL and "model" in labels:
            key = f"{_PER_MODEL[name]}:{labels['model']}"
        elif name in _TOKEN_SUMS:
            key = _TOKEN_SUMS[name]
        if key is not None:
            series[key] = series.get(key, 0.0) + value
    return series


@dataclass(slots=True)
class EngineSample:
    t: float  # seconds on the bench's clock (time.perf_counter() - run origin)
    values: dict[str, float]


@dataclass(slots=True)
class MetricsSampler:
    """Polls ``url`` every ``interval_s`` in the background while a run lasts; tolerates a missing endpoint."""

    url: str
    origin: float
    interval_s: float = 0.25
    samples: list[EngineSample] = field(default_factory=list)
    error: str | None = None
    _task: asyncio.Task | None = None
    _client: httpx.AsyncClient | None = None

    async def sample_once(self) -> EngineSample | None:
        assert self._client is not None
        try:
            response = await self._client.get(self.url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self.error = f"{self.url}: {exc}"
            return None
        sample = EngineSample(time.perf_counter() - self.origin, select_series(response.text))
        self.samples.append(sample)
        return sample

    async def start(self) -> bool:
        """Take a first sample; keep sampling in the background only if the endpoint answered."""
        self._client = httpx.AsyncClient(timeout=5.0)
        if await self.sample_once() is None:
            log.warning("no engine metrics (%s); the report will lack the engine's view. Pass --metrics-url",
                        self.error)
            return False
        self._task = asyncio.create_task(self._loop())
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.sample_once()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._client is not None:
            if self.samples:
                await self._settle()
            await self._client.aclose()
            self._client = None

    async def checkpoint(self) -> None:
        """A settled sample now: the boundary between two load points."""
        if self._client is not None and await self.sample_once() is not None:
            await self._settle()

    async def _settle(self, deadline_s: float = 3.0) -> None:
        """Sample until the server's counters stop moving: Triton bumps them just after the last response."""
        deadline = time.monotonic() + deadline_s
        previous = self.samples[-1].values
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            sample = await self.sample_once()
            if sample is None:
                return
            if _counters(sample.values) == _counters(previous):
                return
            previous = sample.values


def _counters(values: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in values.items() if k.startswith(("success:", "failure:", "server_"))}
