"""OpenTelemetry's GenAI semantic conventions (issue 49), read back from in-memory readers of a live gateway: every
metric and the one span per request, with their attributes, for a streamed and a non-streamed request; with the
option off (the default) no exporter is made at all."""

from __future__ import annotations

from dataclasses import replace

import openai
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config
from trtkit.gateway.telemetry import Telemetry

pytestmark = pytest.mark.slow
sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics", reason="the otel extra (pip install 'trtkit[otel]')")

METRICS = {"gen_ai.client.token.usage", "gen_ai.server.request.duration", "gen_ai.server.time_to_first_token",
           "gen_ai.server.time_per_output_token"}


def points(reader) -> dict[str, list]:  # type: ignore[no-untyped-def]
    found: dict[str, list] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def test_genai_metrics_and_one_span_per_request(live_server, tiny_config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from trtkit.config.upstream_url import parse_upstream_url

    reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]), tracer_provider,
                          parse_upstream_url(live_server.grpc_url, "--backend", ("grpc", "http")))
    gateway = RunningGateway(gateway_config(tiny_config, cache=False), live_server.grpc_url, tmp_path / "gw",
                             telemetry=telemetry)
    try:
        _, secret = gateway.key()
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
        messages = [{"role": "user", "content": "Say three words about the sea."}]
        plain = client.chat.completions.create(model="tiny-llama", messages=messages, max_tokens=6, temperature=0.5,
                                               seed=7)
        streamed = list(client.completions.create(model="tiny-llama", prompt="The sea is", max_tokens=5,
                                                  stream=True, stream_options={"include_usage": True}))
    finally:
        gateway.stop()
    usage_streamed = streamed[-1].usage
    assert plain.usage is not None and usage_streamed is not None
    finished = {s.attributes["gen_ai.response.id"]: s for s in spans.get_finished_spans()}
    assert len(finished) == 2  # one span per request
    chat = finished[plain.id.split("-", 1)[1]]
    text = finished[streamed[0].id.split("-", 1)[1]]
    host, port = live_server.grpc_url.rsplit(":", 1)
    for span, operation, stream, usage in ((chat, "chat", False, plain.usage), (text, "text_completion", True,
                                                                                 usage_streamed)):
        assert span.name == f"{operation} tiny-llama" and span.kind == SpanKind.CLIENT
        a = span.attributes
        assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"], a["gen_ai.request.model"],
                a["gen_ai.response.model"], a["gen_ai.request.stream"]) == (operation, "trtkit", "tiny-llama",
                                                                            "tiny-llama", stream)
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"],
                a["gen_ai.usage.cache_read.input_tokens"]) == (usage.prompt_tokens, usage.completion_tokens,
                                                               usage.prompt_tokens_details.cached_tokens)
        assert a["gen_ai.response.finish_reasons"] == ("length",)
        assert (a["server.address"], a["server.port"]) == (host.removeprefix("grpc://"), int(port))
        assert span.end_time > span.start_time
    assert chat.attributes["gen_ai.request.max_tokens"] == 6 and chat.attributes["gen_ai.request.temperature"] == 0.5
    assert chat.attributes["gen_ai.request.seed"] == 7
    found = points(reader)
    assert METRICS <= set(found)
    tokens = {(p.attributes["gen_ai.operation.name"], p.attributes["gen_ai.token.type"]): p.sum
              for p in found["gen_ai.client.token.usage"]}
    assert tokens == {("chat", "input"): plain.usage.prompt_tokens, ("chat", "output"): 6,
                      ("chat", "cached_input"): plain.usage.prompt_tokens_details.cached_tokens,
                      ("text_completion", "input"): usage_streamed.prompt_tokens, ("text_completion", "output"): 5,
                      ("text_completion", "cached_input"): usage_streamed.prompt_tokens_details.cached_tokens}
    for name in METRICS - {"gen_ai.client.token.usage"}:
        by_operation = {p.attributes["gen_ai.operation.name"]: p for p in found[name]}
        assert set(by_operation) == {"chat", "text_completion"} and all(p.count == 1 for p in by_operation.values())
        assert all(p.attributes["gen_ai.provider.name"] == "trtkit" and p.attributes["gen_ai.request.model"] ==
                   "tiny-llama" for p in by_operation.values())
    duration = {p.attributes["gen_ai.operation.name"]: p.sum for p in found["gen_ai.server.request.duration"]}
    first = {p.attributes["gen_ai.operation.name"]: p.sum for p in found["gen_ai.server.time_to_first_token"]}
    assert all(0 < first[op] <= duration[op] for op in duration)
    bounds = found["gen_ai.client.token.usage"][0].explicit_bounds
    assert list(bounds[:3]) == [1, 4, 16]  # the convention's bucket boundaries


def test_with_the_option_off_no_exporter_is_made(live_server, tiny_config, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.http import metric_exporter, trace_exporter

    from trtkit.gateway import build_gateway
    from trtkit.store import open_gateway_store
    from trtkit.store.ledger import Ledger

    made: list[str] = []
    for module, name in ((metric_exporter, "OTLPMetricExporter"), (trace_exporter, "OTLPSpanExporter")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, type(name, (original,), {
            "__init__": lambda self, *a, _o=original, _n=name, **k: (made.append(_n), _o.__init__(self, *a, **k))[1]}))
    assert tiny_config.gateway.telemetry.enabled is False  # the default
    off = build_gateway(tiny_config, live_server.grpc_url, store=open_gateway_store(tmp_path / "g1.db"),
                        ledger=Ledger(tmp_path / "u1.db"))
    assert off.telemetry is None and made == []
    on_config = replace(tiny_config, gateway=replace(tiny_config.gateway, telemetry=replace(
        tiny_config.gateway.telemetry, enabled=True, endpoint="http://127.0.0.1:9", export_interval_seconds=3600)))
    on = build_gateway(on_config, live_server.grpc_url, store=open_gateway_store(tmp_path / "g2.db"),
                       ledger=Ledger(tmp_path / "u2.db"))
    assert on.telemetry is not None and sorted(made) == ["OTLPMetricExporter", "OTLPSpanExporter"]
    for gw in (off, on):
        gw.store.close()
        gw.client.governor.ledger.close()  # type: ignore[union-attr]
    on.telemetry.tracer_provider.shutdown()
