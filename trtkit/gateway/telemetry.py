"""OpenTelemetry's GenAI semantic conventions, as an option (``gateway.telemetry.enabled``; the ``otel`` extra).

Off (the default), this module imports no OpenTelemetry package, makes no provider and no exporter, and sends
nothing. On, every finished generation records, beside the Prometheus metrics (which stay as they are):

- ``gen_ai.client.token.usage`` (histogram, ``{token}``), one point per ``gen_ai.token.type``: ``input`` (the whole
  prompt, cached tokens included), ``output``, and ``cached_input`` (the prompt tokens served from the KV cache: a
  custom value, which the convention allows where none of its own applies; the span carries the same count as
  ``gen_ai.usage.cache_read.input_tokens``);
- ``gen_ai.server.request.duration``, ``gen_ai.server.time_to_first_token`` and
  ``gen_ai.server.time_per_output_token`` (histograms, seconds; the last is (duration - TTFT) / (output - 1));
- one span per request, named ``{gen_ai.operation.name} {gen_ai.request.model}``, kind CLIENT (the gateway's call of
  the model), with the request's model, parameters and usage.

Names, units, bucket boundaries and attributes follow open-telemetry/semantic-conventions
``docs/gen-ai/gen-ai-metrics.md`` (commit 01d94504d2ec9a5653a5bde13908bc933d96ff29) and
``docs/registry/attributes/gen-ai.md`` (commit 02f1d35df5d8e2662a27124251a73e3b9f497deb); the span's name and kind
follow ``docs/gen-ai/gen-ai-spans.md`` (inference spans). ``gen_ai.provider.name`` is ``trtkit`` (a custom value:
the upstream is a trtkit deployment or an OpenAI-compatible server trtkit governs).
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlsplit

from trtkit.config.schema import TelemetrySection
from trtkit.config.upstream_url import UpstreamUrl
from trtkit.governance.vocabulary import GenerationResult, SamplingParams

log = logging.getLogger(__name__)

PROVIDER = "trtkit"
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]


class Telemetry:
    """Records the GenAI metrics and spans on the providers it is given (OTLP exporters in a gateway; in-memory
    readers in tests)."""

    def __init__(self, meter_provider: Any, tracer_provider: Any, server: UpstreamUrl | None = None) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._kind, self._status, self._error = SpanKind.CLIENT, Status, StatusCode.ERROR
        self.meter_provider, self.tracer_provider = meter_provider, tracer_provider
        meter = meter_provider.get_meter("trtkit.gateway")
        self.tracer = tracer_provider.get_tracer("trtkit.gateway")
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}", description=(
            "Number of input and output tokens used."), explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.duration = meter.create_histogram("gen_ai.server.request.duration", unit="s", description=(
            "Generative AI server request duration such as time-to-last byte or last output token."),
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.ttft = meter.create_histogram("gen_ai.server.time_to_first_token", unit="s", description=(
            "Time to generate first token for successful responses."), explicit_bucket_boundaries_advisory=TTFT_BUCKETS)
        self.tpot = meter.create_histogram("gen_ai.server.time_per_output_token", unit="s", description=(
            "Time per output token generated after the first token for successful responses."),
            explicit_bucket_boundaries_advisory=TPOT_BUCKETS)
        self.server = _server_attributes(server)

    def record(self, result: GenerationResult, *, operation: str, model: str, streamed: bool,
               params: SamplingParams | None = None) -> None:
        """One finished request: its metrics and its span (started at its start, ended now)."""
        base = {"gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": model,
                "gen_ai.response.model": model, **self.server}
        usage = result.usage
        for token_type, count in (("input", usage.prompt_tokens), ("output", usage.completion_tokens),
                                  ("cached_input", usage.cached_tokens)):
            self.tokens.record(count, base | {"gen_ai.token.type": token_type})
        self.duration.record(result.latency_s, base)
        if result.ttft_s is not None and not result.cache_hit:
            self.ttft.record(result.ttft_s, base)
            if usage.completion_tokens > 1:
                self.tpot.record((result.latency_s - result.ttft_s) / (usage.completion_tokens - 1), base)
        self._span(result, base, streamed, params)

    def _span(self, result: GenerationResult, base: dict[str, Any], streamed: bool,
              params: SamplingParams | None) -> None:
        end = time.time_ns()
        attributes = base | {
            "gen_ai.request.stream": streamed, "gen_ai.response.id": result.request_id,
            "gen_ai.response.finish_reasons": [result.finish_reason],
            "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": result.usage.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": result.usage.cached_tokens}
        if params is not None:
            attributes |= {k: v for k, v in (("gen_ai.request.max_tokens", params.max_tokens),
                                             ("gen_ai.request.temperature", params.temperature),
                                             ("gen_ai.request.top_p", params.top_p),
                                             ("gen_ai.request.seed", params.seed)) if v is not None}
        span = self.tracer.start_span(f"{base['gen_ai.operation.name']} {base['gen_ai.request.model']}",
                                      kind=self._kind, start_time=end - int(result.latency_s * 1e9),
                                      attributes=attributes)
        if result.finish_reason in ("error", "cancelled", "deadline"):
            span.set_attribute("error.type", result.finish_reason)
            span.set_status(self._status(self._error))
        span.end(end_time=end)

    def shutdown(self) -> None:
        """Flush and stop the exporters (the gateway's last act)."""
        for provider in (self.tracer_provider, self.meter_provider):
            try:
                provider.shutdown()
            except Exception as exc:  # a collector gone at exit must not fail the shutdown
                log.warning("telemetry shutdown: %s", exc)


def _server_attributes(server: UpstreamUrl | None) -> dict[str, Any]:
    """server.address / server.port of the upstream the gateway calls."""
    if server is None:
        return {}
    netloc = urlsplit(server.address).netloc if server.scheme == "http" else server.address
    port = netloc.rsplit(":", 1)[1] if ":" in netloc else ""
    return {"server.address": server.host} | ({"server.port": int(port)} if port.isdigit() else {})


def open_telemetry(settings: TelemetrySection, upstream: UpstreamUrl | None = None) -> Telemetry:
    """Providers exporting over OTLP/HTTP to ``settings.endpoint`` (else $OTEL_EXPORTER_OTLP_ENDPOINT). Raises
    ConfigError naming the extra when opentelemetry-sdk is not installed."""
    from trtkit.errors import ConfigError

    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(f"gateway.telemetry.enabled needs OpenTelemetry's SDK and OTLP exporter ({exc.name} is "
                          f"missing): pip install 'trtkit[otel]'") from None
    endpoint = settings.endpoint.rstrip("/") if settings.endpoint else None
    resource = Resource.create({"service.name": settings.service_name})
    metric_exporter = OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics") if endpoint else OTLPMetricExporter()
    span_exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces") if endpoint else OTLPSpanExporter()
    reader = PeriodicExportingMetricReader(metric_exporter,
                                           export_interval_millis=settings.export_interval_seconds * 1000)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    log.info("OpenTelemetry GenAI metrics and spans to %s", endpoint or "the OTLP default endpoint")
    return Telemetry(MeterProvider(resource=resource, metric_readers=[reader]), tracer_provider, upstream)
