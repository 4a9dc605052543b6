"""Serving profiles: what `serve.profile` implies for every serve setting left unset.

``latency``: small batches, no queue delay, guaranteed_no_evict.
``throughput``: full batches, a 50 ms queue-delay window, max_utilization, chunked context.
The queue delay is a trade-off: on the CPU engine it gathers fuller batches, at the cost of up to
50 ms more time-to-first-token for a lone request. The GPU backend batches in flight, so there the
delay would only cost latency: deploy sets it to 0 for GPU engines unless the YAML sets it.
On GPU the latency profile's batch cap is built into the engine (``--max_batch_size``), because the
C++ backend's in-flight concurrency follows the engine, not Triton's max_batch_size.
Explicit values in the YAML always win; ``implied_settings`` says which values came from where.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trtkit.config.schema import ModelConfig, Profile, ServeSection

LATENCY_MAX_BATCH = 4
THROUGHPUT_QUEUE_DELAY_US = 50_000


@dataclass(slots=True, frozen=True)
class ImpliedSetting:
    field: str
    value: object
    reason: str


def _profile_defaults(profile: Profile, build_max_batch: int) -> dict[str, tuple[object, str]]:
    if profile == "latency":
        return {
            "max_batch_size": (min(build_max_batch, LATENCY_MAX_BATCH), "latency: small batches"),
            "max_queue_delay_microseconds": (0, "latency: no queue delay"),
            "batch_scheduler_policy": ("guaranteed_no_evict", "latency: never evict a running request"),
            "enable_chunked_context": (False, "latency: whole prompts in one step"),
        }
    return {
        "max_batch_size": (build_max_batch, "throughput: batches as large as the engine allows"),
        "max_queue_delay_microseconds": (THROUGHPUT_QUEUE_DELAY_US, "throughput: 50 ms window to gather a batch "
                                                                   "(up to 50 ms more time-to-first-token; GPU: 0)"),
        "batch_scheduler_policy": ("max_utilization", "throughput: admit greedily, preempt under pressure"),
        "enable_chunked_context": (True, "throughput: chunked prefill keeps decode steps flowing"),
    }


def apply_profile(config: ModelConfig, profile: Profile | None = None) -> tuple[ModelConfig, list[ImpliedSetting]]:
    """Fill the serve fields left as None from the profile (``profile`` overrides the YAML's)."""
    serve: ServeSection = config.serve
    chosen = profile or serve.profile
    implied: list[ImpliedSetting] = []
    updates: dict[str, Any] = {"profile": chosen}
    for name, (value, reason) in _profile_defaults(chosen, config.build.max_batch_size).items():
        current = getattr(serve, name)
        if current is None:
            updates[name] = value
            implied.append(ImpliedSetting(f"serve.{name}", value, reason))
        else:
            implied.append(ImpliedSetting(f"serve.{name}", current, "set in the config"))
    return replace(config, serve=replace(serve, **updates)), implied


def resolve(config: ModelConfig, profile: Profile | None = None) -> tuple[ModelConfig, list[ImpliedSetting]]:
    """Every derived field filled in: the profile's serve settings and the client's input limit."""
    resolved, implied = apply_profile(config, profile)
    client = resolved.client
    if client.max_input_tokens is None:
        client = replace(client, max_input_tokens=resolved.build.max_input_len)
        implied.append(ImpliedSetting("client.max_input_tokens", client.max_input_tokens, "from build.max_input_len"))
    if resolved.build.reduce_fusion is None:
        fusion = resolved.convert.tp_size > 1
        resolved = replace(resolved, build=replace(resolved.build, reduce_fusion=fusion))
        implied.append(ImpliedSetting("build.reduce_fusion", fusion, "on only when tp_size > 1"))
    return replace(resolved, client=client), implied
