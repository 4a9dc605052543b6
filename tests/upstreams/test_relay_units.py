"""The pieces of the OpenAI upstream path that need no server: SSE framing, usage reports, the body sent up, the
events relayed back and merged, backend URLs, upstream errors, the upstream's key kept out of reprs and logs."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from trtkit.config.upstream_url import parse_upstream_url
from trtkit.errors import ConfigError
from trtkit.gateway.error_responses import http_error
from trtkit.gateway.relay_events import AnswerMerger, EventRelay
from trtkit.gateway.upstreams import backend_of, upstream_settings
from trtkit.governance.governor import PreparedRequest, open_governor
from trtkit.governance.tokens import RawPrompt, TokenIdsPrompt
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, Usage
from trtkit.transport.openai.errors import UpstreamBrokenError, UpstreamUnavailableError, status_error
from trtkit.transport.openai.events import SseSplitter, UsageReports, parse_event
from trtkit.transport.openai.upstream import UpstreamSettings, request_body


def chunk(content: str | None = None, finish: str | None = None, index: int = 0, **extra: object) -> dict:
    delta = {} if content is None else {"content": content}
    return {"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "upstream-name",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}], **extra}


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> dict:
    usage: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": usage}


def result(finish: str = "stop") -> GenerationResult:
    return GenerationResult("rid", "", Usage.of(5, 3), finish, False, 0.01, 0.02, 0.0)


def test_sse_events_split_across_pieces_and_line_endings() -> None:
    splitter = SseSplitter()
    assert splitter.feed(b'data: {"a"') == []
    assert splitter.feed(b': 1}\n\n: a comment\n\ndata:{"b": 2}\r\n\r\ndata: [DO') == [b'{"a": 1}', b'{"b": 2}']
    assert splitter.feed(b"NE]\n\n") == [b"[DONE]"]
    assert splitter.feed(b"event: x\ndata: one\ndata: two") == [] and splitter.rest() == [b"one\ntwo"]


def test_an_event_that_is_not_json_or_an_error_event_breaks_the_stream() -> None:
    with pytest.raises(UpstreamBrokenError, match="not JSON"):
        parse_event(b"{oops")
    with pytest.raises(UpstreamBrokenError, match="overloaded"):
        parse_event(b'{"error": {"message": "overloaded"}}')


def test_usage_reports_zero_is_zero_and_final_reports_add_up() -> None:
    reports = UsageReports()
    text = reports.delta_of(chunk("Hi"))
    assert (text.text, text.num_output_tokens, text.usage_reported) == ("Hi", None, False)
    zero = UsageReports().delta_of(usage_chunk(7, 0, 0))  # an explicit zero is billed as zero, not "missing"
    assert (zero.num_input_tokens, zero.num_output_tokens, zero.num_cached_tokens) == (7, 0, 0)
    reports = UsageReports(choices=2)  # llama-server: one final report per choice, which add up
    first, second = reports.delta_of(usage_chunk(31, 5, 0)), reports.delta_of(usage_chunk(31, 5, 30))
    assert (first.num_input_tokens, first.num_output_tokens) == (31, 5)
    assert (second.num_input_tokens, second.num_output_tokens, second.num_cached_tokens) == (62, 10, 30)
    assert not second.usage_doubtful
    third = reports.delta_of(usage_chunk(31, 5, 0))  # more final reports than choices: not summed, not believed
    assert (third.num_input_tokens, third.num_output_tokens, third.usage_doubtful) == (62, 10, True)
    assert UsageReports().delta_of(usage_chunk(7, 2**63)).usage_doubtful  # no server counts that
    running = UsageReports()  # vLLM's continuous usage: running totals in chunks with choices, the latest stands
    running.delta_of(chunk("a", usage={"prompt_tokens": 4, "completion_tokens": 1}))
    assert running.delta_of(chunk("b", usage={"prompt_tokens": 4, "completion_tokens": 2})).num_output_tokens == 2


def test_text_of_tool_calls_reasoning_and_completions() -> None:
    reports = UsageReports()
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    event = {"choices": [{"index": 0, "delta": {"reasoning_content": "hm ", "tool_calls": [call]}}]}
    assert reports.delta_of(event).text == 'hm f{"a"'
    assert reports.delta_of({"choices": [{"index": 0, "text": "plain", "finish_reason": "length"}]}).finish_reason \
        == "length"


def prepared(params: SamplingParams, prompt: str = "hi", payload: dict | None = None) -> PreparedRequest:
    return PreparedRequest("rid", prompt, 3, params, Caller(), None, None, payload=payload)


def test_the_body_goes_up_as_given_with_the_governed_fields() -> None:
    body = {"model": "gw-name", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5000,
            "stream_options": {"continuous_usage_stats": True}, "tools": [{"type": "function"}],
            "tool_choice": "auto", "ignore_eos": True, "top_logprobs": 2, "logprobs": True}
    route, raw = request_body(prepared(SamplingParams(max_tokens=100), payload=body), "up-name")
    sent = json.loads(raw)
    assert route == "chat/completions"
    assert sent == body | {"model": "up-name", "stream": True, "max_completion_tokens": 100,
                           "stream_options": {"continuous_usage_stats": True, "include_usage": True}}
    assert "max_tokens" not in sent and body["max_completion_tokens"] == 5000  # the caller's body is not changed
    route, raw = request_body(prepared(SamplingParams(max_tokens=7), payload={"prompt": [1, 2]}), "m")
    assert route == "completions" and json.loads(raw)["max_tokens"] == 7


def test_a_library_request_becomes_a_body() -> None:
    params = SamplingParams(max_tokens=4, temperature=0.0, stop_words=("\n",), logit_bias=((17, 5.0),), n=2)
    _, raw = request_body(prepared(params, TokenIdsPrompt("x", [5, 6])), "m")
    assert json.loads(raw) | {"stream_options": None} == {
        "prompt": [5, 6], "model": "m", "stream": True, "max_tokens": 4, "temperature": 0.0, "stop": ["\n"],
        "logit_bias": {"17": 5.0}, "n": 2, "stream_options": None}
    _, raw = request_body(prepared(params, "plain"), "m", chat_wrapped=True)
    assert json.loads(raw)["messages"] == [{"role": "user", "content": "plain"}]
    _, raw = request_body(prepared(params, RawPrompt("raw")), "m", chat_wrapped=True)
    assert json.loads(raw)["prompt"] == "raw"


def test_the_reservation_is_n_times_and_the_body_keys_the_cache(tiny_config, tiny_counter) -> None:  # type: ignore[no-untyped-def]
    one, two = SamplingParams(max_tokens=4), SamplingParams(max_tokens=4, n=2)
    assert "n" not in one.identity() and two.identity()["n"] == 2 and "cacheable" not in one.identity()
    governor = open_governor(tiny_config, ledger=False, counter=tiny_counter)
    greedy = SamplingParams(max_tokens=4, temperature=0.0)
    keys = [governor.prepare("hi", greedy, Caller(), payload=payload).cache_key  # type: ignore[union-attr]
            for payload in (None, {"ignore_eos": True}, {"ignore_eos": False}, {"ignore_eos": True})]
    assert None not in keys and len(set(keys)) == 3 and keys[1] == keys[3]  # every field of the body keys it


def test_streamed_events_are_restamped_held_and_finished() -> None:
    relay = EventRelay("chatcmpl-ours", "gw-model", chat=True, include_usage=True)
    first = relay.pass_on(chunk("Hel"))
    assert json.loads(first[6:])["id"] == "chatcmpl-ours" and json.loads(first[6:])["model"] == "gw-model"
    assert relay.pass_on(chunk(None, "stop")) == b""  # held for the trtkit extension
    assert relay.pass_on(usage_chunk(5, 3)) == b""  # passed on only when asked
    events = [json.loads(e[6:]) for e in relay.finish(result()).split(b"\n\n") if e]
    assert events[0]["choices"][0]["finish_reason"] == "stop" and events[0]["trtkit"]["request_id"] == "rid"
    assert events[1]["usage"]["prompt_tokens"] == 5 and events[1]["id"] == "chatcmpl-ours"
    quiet = EventRelay("chatcmpl-ours", "gw-model", chat=True)
    quiet.pass_on(usage_chunk(5, 3))
    last = quiet.pass_on(chunk("x", usage={"prompt_tokens": 5, "completion_tokens": 1}))
    assert b'"usage": null' in last and b"prompt_tokens" not in quiet.finish(result())


def test_a_stream_the_gateway_ended_gets_finish_events_of_its_own() -> None:
    relay = EventRelay("cmpl-1", "m", chat=False)
    relay.pass_on({"choices": [{"index": 0, "text": "!!"}, {"index": 1, "text": "??"}]})
    relay.pass_on({"choices": [{"index": 1, "text": "", "finish_reason": "length"}]})
    events = [json.loads(e[6:]) for e in relay.finish(result("guard_punctuation")).split(b"\n\n") if e]
    assert [c["index"] for c in events[-1]["choices"]] == [0] and events[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["trtkit"]["finish_reason"] == "guard_punctuation"


def test_an_answer_merged_from_its_stream() -> None:
    merger = AnswerMerger(chat=True)
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"city"'}}
    merger.add({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]},
                             "logprobs": {"content": [{"token": "a"}]}}], "system_fingerprint": "fp"})
    merger.add({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ': "x"}'}}]},
                             "logprobs": {"content": [{"token": "b"}]}, "finish_reason": "tool_calls"}]})
    merger.add({"choices": [{"index": 1, "delta": {"content": "plain"}, "finish_reason": None}]})
    merger.add(usage_chunk(5, 3))
    body = merger.body("chatcmpl-x", "gw", result("length"))
    first, second = body["choices"]
    assert first["message"]["tool_calls"][0]["function"] == {"name": "get", "arguments": '{"city": "x"}'}
    assert first["logprobs"] == {"content": [{"token": "a"}, {"token": "b"}]} and first["finish_reason"] == "tool_calls"
    assert second["message"]["content"] == "plain" and second["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == 5 and body["system_fingerprint"] == "fp" and body["id"] == "chatcmpl-x"


def test_backend_urls() -> None:
    def backend(text: str):  # type: ignore[no-untyped-def]
        return parse_upstream_url(text, "--backend", ("grpc", "http"))

    assert backend("127.0.0.1:8001").scheme == "grpc"
    assert backend("grpc://h:8001").address == "h:8001"
    assert backend("http://h:8080/v1/").address == "http://h:8080/v1"
    for bad, words in (("http://h:8080", "names no /v1 API path"), ("ftp://h/v1", "expected HOST:PORT"),
                       ("h", "expected HOST:PORT"), ("http://u:secret@h/v1", "credentials")):
        with pytest.raises(ConfigError, match=words):
            backend(bad)


def test_the_config_names_the_upstream_and_its_key_stays_secret(smollm2_config, caplog) -> None:  # type: ignore[no-untyped-def]
    upstream = replace(smollm2_config.gateway.upstream, url="http://h:9/v1", model="served", api_key_env="UP_KEY")
    config = replace(smollm2_config, gateway=replace(smollm2_config.gateway, upstream=upstream))
    assert backend_of(config, None).address == "http://h:9/v1" and backend_of(config, "h:1").scheme == "grpc"
    with pytest.raises(ConfigError, match=r"\$UP_KEY, which is not set"):
        upstream_settings(config, "http://h:9/v1", environ={})
    settings = upstream_settings(config, "http://h:9/v1", environ={"UP_KEY": "sk-very-secret"})
    assert settings.api_key == "sk-very-secret" and settings.model == "served"
    assert "sk-very-secret" not in repr(settings)
    from trtkit.transport.openai.upstream import OpenAIUpstream

    with caplog.at_level(logging.DEBUG):
        OpenAIUpstream(settings).close()
    assert "sk-very-secret" not in caplog.text


def test_upstream_errors_as_openai_bodies() -> None:
    refused = http_error(status_error(400, b'{"error": {"code": 400, "message": "bad format", '
                                           b'"type": "invalid_request_error"}}'))
    assert (refused.status, refused.message, refused.type, refused.code) == (400, "bad format",
                                                                            "invalid_request_error", None)
    limited = http_error(status_error(429, b'{"error": "slow down"}', retry_after="3"))
    assert limited.status == 429 and limited.headers == {"retry-after": "3"} and limited.message == "slow down"
    assert http_error(status_error(500, b"<html>boom</html>")).status == 502
    assert http_error(status_error(401, b'{"error": {"message": "bad key"}}')).status == 502  # the gateway's own key
    assert http_error(UpstreamBrokenError("reset")).code == "upstream_error"
    unavailable = http_error(UpstreamUnavailableError("http://10.0.0.5:8000/v1 refused"))
    assert (unavailable.status, unavailable.code) == (503, "upstream_unavailable")
    assert "10.0.0.5" not in unavailable.message  # the upstream's address stays in the log


def test_settings_defaults_are_the_config_defaults(smollm2_config) -> None:  # type: ignore[no-untyped-def]
    settings = upstream_settings(smollm2_config, "http://h/v1", environ={})
    assert settings == UpstreamSettings("http://h/v1", "smollm2-135m", None, 5.0, 60.0, 256, 3, 262144)


def test_the_gateway_command_names_a_bad_backend_and_a_missing_one(capsys, smollm2_config) -> None:  # type: ignore[no-untyped-def]
    from tests.upstreams.conftest import SMOLLM2_CONFIG
    from trtkit.cli.main import main

    assert main(["gateway", str(SMOLLM2_CONFIG), "--backend", "http://127.0.0.1:8080"]) == 2  # a usage error
    assert "names no /v1 API path (an OpenAI-compatible server's base is usually http://127.0.0.1:8080/v1)" in \
        capsys.readouterr().err
    assert main(["gateway", str(SMOLLM2_CONFIG)]) == 1
    assert "no backend: give --backend grpc://HOST:PORT" in capsys.readouterr().err
