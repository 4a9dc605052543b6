"""Client-side Prometheus counters, in their own registry, optionally served on a port."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, start_http_server

log = logging.getLogger(__name__)


class ClientMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.prompt_tokens = Counter("trtkit_client_prompt_tokens", "Prompt tokens sent", ["model"], registry=r)
        self.completion_tokens = Counter("trtkit_client_completion_tokens", "Completion tokens received", ["model"],
                                         registry=r)
        self.cached_tokens = Counter("trtkit_client_cached_prompt_tokens", "Prompt tokens served from the KV cache",
                                     ["model"], registry=r)
        self.requests = Counter("trtkit_client_requests", "Finished requests", ["model", "finish_reason"], registry=r)
        self.cache_hits = Counter("trtkit_client_cache_hits", "Requests answered from the response cache", ["model"],
                                  registry=r)
        self.budget_rejections = Counter("trtkit_client_budget_rejections", "Requests refused by a budget", ["model"],
                                         registry=r)
        self.input_rejections = Counter("trtkit_client_input_rejections", "Prompts refused as too long", ["model"],
                                        registry=r)
        self.guard_stops = Counter("trtkit_client_guard_stops", "Streams cancelled by the runaway guard",
                                   ["model", "reason"], registry=r)
        # how requests that ended early (cancel, deadline, guard) were stopped on the server: "stop" (the engine's
        # stop input, then the stream ends by itself); when the stop did not end it in time, "call_cancel" (the sync
        # client cancels the request's own call) or "let_go" (the asyncio client drops it from the shared call)
        self.early_ends = Counter("trtkit_client_early_ends", "Requests ended early, by how the server was told",
                                  ["model", "how"], registry=r)
        # an upstream's usage report against the governor's own count (Delta.usage_reported): the bill is the
        # upstream's; these count the requests where the two differed, and by how many tokens, per kind
        self.usage_mismatches = Counter("trtkit_client_usage_mismatches", "Requests whose upstream usage differed "
                                        "from the gateway's own count", ["model", "kind"], registry=r)
        self.usage_mismatch_tokens = Counter("trtkit_client_usage_mismatch_tokens", "Tokens by which an upstream's "
                                             "usage differed from the gateway's own count", ["model", "kind"],
                                             registry=r)
        self.counted_locally = Counter("trtkit_client_counted_locally", "Requests billed on the text received, "
                                       "counted locally: the upstream sent no count", ["model"], registry=r)
        # bills the governor corrected (governance/billing.py): flag overrun (more output than the reservation),
        # usage_doubtful (the upstream's report not believed), usage_clamped (cut down to the reservation)
        self.usage_flags = Counter("trtkit_client_usage_flags", "Requests whose bill the governor corrected, by how",
                                   ["model", "flag"], registry=r)
        self.overrun_tokens = Counter("trtkit_client_overrun_tokens", "Output tokens an upstream sent past the "
                                      "reservation (cut, never billed)", ["model"], registry=r)
        self.retries = Counter("trtkit_client_retries", "Retries after UNAVAILABLE before the first token", ["model"],
                               registry=r)

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Expose the counters at http://addr:port/metrics (port 0 picks one); returns the port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        bound = int(server.server_port)
        log.info("client metrics on http://%s:%d/metrics", addr, bound)
        return bound

    def value(self, name: str, **labels: str) -> float:
        found = self.registry.get_sample_value(name, labels)
        return float(found or 0.0)


@dataclass(slots=True, frozen=True)
class UpstreamMetrics:
    """What an upstream counts itself, in its client's metrics, labelled with the model: retries of a request that
    failed before its first token, and how a request that ended early was stopped on the server."""

    metrics: ClientMetrics
    model: str

    def retried(self) -> None:
        self.metrics.retries.labels(self.model).inc()

    def ended_early(self, how: str) -> None:
        self.metrics.early_ends.labels(self.model, how).inc()
