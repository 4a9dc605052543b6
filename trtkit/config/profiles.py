"""Serving profiles: what `serve.profile` implies for every serve setting left unset.

``latency``: small batches, no queue delay, guaranteed_no_evict.
``throughput``: full batches, a 50 ms queue-delay window, max_utilization, chunked context.
The queue delay is a trade-off: on the CPU engine it gathers fuller batches, at the cost of up to
50 ms more time-to-first-token for a lone request. The GPU backend batches in flight, so there the
delay would only cost latency: deploy sets it to 0 for GPU engines unless the YAML sets it.
On GPU the latency profile's batch cap is built into the engine (``--max_batch_size``), because the
C++ backend's in-flight concurrency follows the engine, not Triton's max_batch_size.
Explicit values in the YAML always win. ``resolve`` runs once, in ``load_config`` (which takes the profile
that overrides the YAML's, as `trtkit deploy --profile` does), and records in ``ModelConfig.implied`` which
values came from where; every stage reads the resolved config and never applies a profile again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trtkit.config.build_backend import backend_of
from trtkit.config.schema import ImpliedSetting, ModelConfig, Profile, ServeSection

LATENCY_MAX_BATCH = 4
THROUGHPUT_QUEUE_DELAY_US = 50_000
SET_IN_CONFIG = "set in the config"


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


def _apply_profile(config: ModelConfig, profile: Profile | None) -> tuple[ModelConfig, list[ImpliedSetting]]:
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
            implied.append(ImpliedSetting(f"serve.{name}", current, SET_IN_CONFIG))
    return replace(config, serve=replace(serve, **updates)), implied


def resolve(config: ModelConfig, profile: Profile | None = None) -> ModelConfig:
    """Every derived field of a config as loaded filled in: the profile's serve settings (``profile`` overrides
    the YAML's), the client's input limit, reduce fusion, the server's start timeout; ``implied`` says where each
    came from."""
    resolved, implied = _apply_profile(config, profile)
    client = resolved.client
    if client.max_input_tokens is None:
        client = replace(client, max_input_tokens=resolved.build.max_input_len)
        implied.append(ImpliedSetting("client.max_input_tokens", client.max_input_tokens, "from build.max_input_len"))
    if resolved.serve.server_start_timeout_s is None:
        backend = backend_of(resolved)
        timeout = backend.server_start_timeout_s
        resolved = replace(resolved, serve=replace(resolved.serve, server_start_timeout_s=timeout))
        implied.append(ImpliedSetting("serve.server_start_timeout_s", timeout,
                                      f"build.backend {backend.name} (config/build_backend.py says why)"))
    if resolved.build.reduce_fusion is None:
        fusion = resolved.convert.tp_size > 1
        resolved = replace(resolved, build=replace(resolved.build, reduce_fusion=fusion))
        implied.append(ImpliedSetting("build.reduce_fusion", fusion, "on only when tp_size > 1"))
    return replace(resolved, client=client, implied=tuple(implied))


def from_profile(config: ModelConfig, field: str) -> bool:
    """True when ``field`` (``serve.max_queue_delay_microseconds``) still holds the value the config's profile
    gave it: not set in the YAML, nor changed on the loaded config since (a value or the profile replaced)."""
    value = _value(config, field)
    return any(i.field == field and i.value == value and i.reason.startswith(f"{config.serve.profile}:")
               for i in config.implied)


def serve_provenance(config: ModelConfig) -> list[ImpliedSetting]:
    """Where each profile-derived serve setting of ``config`` came from, as it stands now: a value changed after
    loading counts as set in the config."""
    return [i if from_profile(config, i.field) else ImpliedSetting(i.field, _value(config, i.field), SET_IN_CONFIG)
            for i in config.implied if i.field.startswith("serve.")]


def _value(config: ModelConfig, field: str) -> object:
    section, _, name = field.partition(".")
    return getattr(getattr(config, section), name)


def in_flight_queue_delay(config: ModelConfig, delay_us: int, implied: list[ImpliedSetting]) -> int:
    """The deploy-time rule of the profiles, for an engine that batches in flight (the C++ backend, the LLM API on a
    GPU): the throughput profile's queue delay helps the CPU engine gather batches, but there it would only add up to
    that much to every time-to-first-token, so a delay the profile gave becomes 0 (``implied`` says why). A delay
    set in the YAML stays."""
    field = "serve.max_queue_delay_microseconds"
    if not delay_us or not from_profile(config, field):
        return delay_us
    reason = f"gpu: the C++ backend batches in flight; a Triton queue delay ({delay_us} us) would only add to " \
             "time-to-first-token"
    implied[:] = [ImpliedSetting(field, 0, reason) if i.field == field else i for i in implied]
    return 0
