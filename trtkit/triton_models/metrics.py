"""The engine's statistics under the metric names and labels of TensorRT-LLM's Triton backend.

The families, their category label and its values come from the contract file
(``trtkit/contracts/tensorrtllm_backend_1.2.json``), taken from the backend's custom metrics
reporter, so a dashboard built for a GPU deployment reads a CPU one unchanged. The adapter supplies
a ``FamilyFactory`` (``pb_utils.MetricFamily`` in Triton); here are only names and arithmetic.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Metric(Protocol):
    def set(self, value: float) -> None: ...


FamilyFactory = Callable[[str, str, str], Callable[[dict[str, str]], Any]]
"""(name, description, kind) -> a function making one labelled metric of that family."""


def contract() -> dict:
    text = resources.files("trtkit.contracts").joinpath("tensorrtllm_backend_1.2.json").read_text(encoding="utf-8")
    return json.loads(text)


def stat_values(stats: Any, max_batch_size: int) -> dict[str, dict[str, float]]:
    """Family -> {label value -> number}, from an ``EngineStats``."""
    g = lambda name: float(getattr(stats, name, 0) or 0)  # noqa: E731 - field names may grow
    max_blocks = g("max_kv_blocks")
    return {
        "nv_trt_llm_request_metrics": {
            "active": g("active_requests"), "max": float(max_batch_size), "scheduled": g("scheduled_requests"),
            "context": g("context_requests"), "waiting": g("waiting_requests")},
        "nv_trt_llm_runtime_memory_metrics": {
            "cpu": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), "gpu": 0.0, "pinned": 0.0},
        "nv_trt_llm_kv_cache_block_metrics": {
            "max": max_blocks, "free": g("free_kv_blocks"), "used": g("used_kv_blocks"),
            "tokens_per": g("tokens_per_block"), "reused": g("reused_kv_blocks"),
            "fraction": g("used_kv_blocks") / max_blocks if max_blocks else 0.0},
        "nv_trt_llm_inflight_batcher_metrics": {
            "total_context_tokens": g("total_context_tokens"), "generation_requests": g("generation_requests"),
            "micro_batch_id": 0.0, "paused_requests": g("paused_requests")},
        "nv_trt_llm_general_metrics": {
            "timestamp": float(time.time_ns() // 1000), "iteration_counter": g("iteration")},
    }


@dataclass(slots=True)
class EngineMetrics:
    """Creates the metric families once; ``publish(stats)`` sets every gauge."""

    factory: FamilyFactory
    model: str
    version: str
    max_batch_size: int
    gauges: dict[tuple[str, str], Any] = field(default_factory=dict)
    histograms: dict[str, Any] = field(default_factory=dict)
    families: list[Any] = field(default_factory=list)  # Triton deletes a family's metrics with it: keep them

    def __post_init__(self) -> None:
        for name, spec in contract()["metrics"]["families"].items():
            kind = spec["kind"]
            try:
                make = self.factory(name, f"TRT LLM {name} (trtkit CPU reference engine)", kind)
            except Exception as exc:  # histograms need a newer Python backend: leave that family out
                log.warning("metric family %s (%s) not available: %s", name, kind, exc)
                continue
            self.families.append(make)
            for value in spec["values"]:
                labels = {"model": self.model, "version": self.version, spec["category"]: value}
                metric = make(labels)
                if kind == "histogram":
                    self.histograms[name] = metric
                else:
                    self.gauges[(name, value)] = metric

    def publish(self, stats: Any) -> None:
        for family, values in stat_values(stats, self.max_batch_size).items():
            for label, number in values.items():
                if (metric := self.gauges.get((family, label))) is not None:
                    metric.set(number)

    def observe_request(self, num_input: int, num_output: int) -> None:
        for name, value in (("nv_llm_input_token_len", num_input), ("nv_llm_output_token_len", num_output)):
            if (metric := self.histograms.get(name)) is not None:
                metric.observe(float(value))
