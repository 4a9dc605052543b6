"""Gateway Prometheus metrics, in the same registry as the Governor's token counters (one /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = self.registry = registry
        self.requests = Counter("trtkit_gateway_requests", "HTTP requests answered", ["endpoint", "status"],
                                registry=r)
        self.refusals = Counter("trtkit_gateway_refusals", "Requests refused before generation", ["reason"],
                                registry=r)
        self.ttft = Histogram("trtkit_gateway_ttft_seconds", "Time to first token", buckets=_LATENCY_BUCKETS,
                              registry=r)
        self.latency = Histogram("trtkit_gateway_latency_seconds", "Request latency", buckets=_LATENCY_BUCKETS,
                                 registry=r)
        self.in_flight = Gauge("trtkit_gateway_in_flight_requests", "Generations in progress", registry=r)
        self.disconnects = Counter("trtkit_gateway_client_disconnects", "Clients gone before the end (cancelled)",
                                   ["stream"], registry=r)
        # stored conversations (Responses API): a turn reads its chain and writes its response
        self.conversation_store = Histogram("trtkit_gateway_conversation_store_seconds", "Stored-conversation calls",
                                            ["op"], buckets=_STORE_BUCKETS, registry=r)
        # spend alerts (gateway.alerts): sent, failed attempts (each retried), and how many wait in the store
        self.spend_alerts_sent = Counter("trtkit_gateway_spend_alerts_sent", "Spend alerts the webhook took",
                                         registry=r)
        self.spend_alert_failures = Counter("trtkit_gateway_spend_alert_failures", "Failed spend-alert webhook "
                                            "attempts (each is retried with backoff)", registry=r)
        self.conversation_rows = Counter("trtkit_gateway_conversation_rows", "Stored-conversation rows read or "
                                         "written", ["op"], registry=r)
