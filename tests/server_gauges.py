"""Reading the CPU engine's gauges from a live tritonserver's metrics endpoint, without timing races.

The ``tensorrt_llm`` model publishes its stats every ``stats_check_period_ms`` (100 ms), so a single
scrape may be stale. ``settled_engine`` polls (under a generous deadline) until the engine is idle
and two scrapes a publish period apart agree: the figures it returns are final, on any machine.
"""

from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass

PUBLISH_PERIOD_S = 0.1


@dataclass(frozen=True)
class EngineGauges:
    iteration: float
    active: float
    used_blocks: float
    # every token the engine generated for a finished request (its nv_llm_output_token_len histogram's sum,
    # observed once per request as it ends): the engine's own count, to hold a bill to
    output_tokens: float


def scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return response.read().decode()


def gauge(text: str, family: str, label: str, value: str) -> float:
    pattern = rf'^{family}{{[^}}]*{label}="{value}"[^}}]*}} ([0-9.e+-]+)$'
    found = re.findall(pattern, text, flags=re.M)
    assert found, f"{family}{{{label}={value}}} not on the metrics endpoint"
    return float(found[0])


def engine_gauges(metrics_url: str) -> EngineGauges:
    text = scrape(metrics_url)
    return EngineGauges(gauge(text, "nv_trt_llm_general_metrics", "general_type", "iteration_counter"),
                        gauge(text, "nv_trt_llm_request_metrics", "request_type", "active"),
                        gauge(text, "nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "used"),
                        engine_output_tokens(text))


def engine_output_tokens(text: str) -> float:
    found = re.findall(r'^nv_llm_output_token_len_sum{[^}]*model="tensorrt_llm"[^}]*} ([0-9.e+-]+)$', text, flags=re.M)
    assert found, "nv_llm_output_token_len_sum of tensorrt_llm not on the metrics endpoint"
    return float(found[0])


def settled_engine(metrics_url: str, *, after_iteration: float, timeout_s: float = 60.0) -> EngineGauges:
    """The gauges once the engine has stepped past ``after_iteration``, has no active request, and two
    scrapes a few publish periods apart read the same iteration counter (an idle engine does not step)."""
    deadline = time.monotonic() + timeout_s
    previous = None
    while time.monotonic() < deadline:
        now = engine_gauges(metrics_url)
        if now.active == 0 and now.iteration > after_iteration and previous == now:
            return now
        previous = now
        time.sleep(3 * PUBLISH_PERIOD_S)
    raise AssertionError(f"the engine did not settle within {timeout_s} s (last: {previous})")


def model_requests_released(metrics_url: str, model: str) -> float:
    """``nv_inference_count`` of ``model``: for an ensemble, Triton adds a request to it only when it
    releases the request (its request tracker's last reference). A request kept in flight (tritonserver 2.51
    did, for every cancelled ensemble stream) is never added; its failure counter moves all the same."""
    text = scrape(metrics_url)
    pattern = rf'^nv_inference_count{{[^}}]*model="{model}"[^}}]*}} ([0-9.e+-]+)$'
    return sum(float(v) for v in re.findall(pattern, text, flags=re.M))


def wait_for_released(metrics_url: str, model: str, at_least: float, timeout_s: float = 60.0) -> float:
    """Poll (under a generous deadline) until ``model`` has released at least ``at_least`` requests."""
    deadline = time.monotonic() + timeout_s
    released = model_requests_released(metrics_url, model)
    while released < at_least and time.monotonic() < deadline:
        time.sleep(3 * PUBLISH_PERIOD_S)
        released = model_requests_released(metrics_url, model)
    return released
