"""A trtkit worker's engine state in Prometheus' text format, appended to the worker's own ``/metrics`` (Dynamo's
system server, ``DYN_SYSTEM_PORT``): its KV pool and its requests, so that an operator, and the tests, see what the
worker holds (a request a client left has given its blocks back: ``trtkit_worker_kv_blocks{state="used"}`` is 0)."""

from __future__ import annotations

from trtkit.refengine.outputs import EngineStats

HELP = {
    "trtkit_worker_kv_blocks": ("gauge", "KV cache blocks of the CPU reference engine, by state"),
    "trtkit_worker_requests": ("gauge", "requests in the engine, by state"),
    "trtkit_worker_requests_total": ("counter", "requests the engine finished, by how"),
    "trtkit_worker_tokens_total": ("counter", "tokens the engine processed, by kind"),
    "trtkit_worker_kv_events_total": ("counter", "KV block events published to Dynamo's router, by kind"),
}


def exposition(stats: EngineStats, *, kv_stored: int, kv_removed: int) -> str:
    samples = {
        "trtkit_worker_kv_blocks": {"max": stats.max_kv_blocks, "free": stats.free_kv_blocks,
                                    "used": stats.used_kv_blocks},
        "trtkit_worker_requests": {"active": stats.active_requests, "waiting": stats.waiting_requests},
        "trtkit_worker_requests_total": {"completed": stats.completed_requests,
                                         "cancelled": stats.cancelled_requests},
        "trtkit_worker_tokens_total": {"prompt": stats.prompt_tokens, "generated": stats.generated_tokens,
                                       "reused": stats.reused_tokens},
        "trtkit_worker_kv_events_total": {"stored": kv_stored, "removed": kv_removed},
    }
    label = {"trtkit_worker_kv_blocks": "state", "trtkit_worker_requests": "state",
             "trtkit_worker_requests_total": "outcome", "trtkit_worker_tokens_total": "kind",
             "trtkit_worker_kv_events_total": "kind"}
    lines = []
    for name, values in samples.items():
        kind, text = HELP[name]
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        lines += [f'{name}{{{label[name]}="{key}"}} {value}' for key, value in values.items()]
    return "\n".join(lines) + "\n"


def parse_samples(text: str, name: str) -> dict[str, float]:
    """``{label value: sample}`` of one family in an exposition (for readers of a worker's /metrics)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            label_part, _, value = line.rpartition(" ")
            found[label_part.split('"')[1]] = float(value)
    return found
