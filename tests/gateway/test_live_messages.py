"""Anthropic's Messages API through the official anthropic SDK, against the real tritonserver: a system prompt, the
stream equal to the answer in text and usage, a tool-use round trip (the tiny engine has random weights, so the test
names the tool it needs; an input's enum keeps it short), stop sequences, count_tokens, both ways of sending the key,
errors in Anthropic's shape naming the field, and one ledger row per request with the engine's counts and the
dialect."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from trtkit.gateway.tool_format import FunctionSpec
from trtkit.gateway.tool_prompt import render

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
GREEDY = {"temperature": 0}  # the sampling fields older API versions take (this SDK version no longer sends them)
SYSTEM = "You are a terse assistant."
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CITIES = ["Paris", "Oslo", "Lima"]
WEATHER = {"name": "get_weather", "description": "The weather in a city", "input_schema": {
    "type": "object", "additionalProperties": False, "required": ["city"],
    "properties": {"city": {"type": "string", "enum": CITIES}}}}


def sdk(gateway, secret: str, **kwargs) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0, **kwargs)


def engine_count(gateway, messages: list[dict], tools: tuple = ()) -> int:  # type: ignore[no-untyped-def]
    counter = gateway.gateway.client.governor.counter
    return counter.count_prompt(render(counter, messages, tools))


def total_input(usage) -> int:  # type: ignore[no-untyped-def]
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_a_system_prompt_and_the_stream_equal_to_the_answer(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    ask = dict(model=MODEL, max_tokens=10, system=SYSTEM, messages=ASK, extra_body=GREEDY)
    answer = client.messages.create(**ask)  # type: ignore[arg-type]
    assert answer.type == "message" and answer.role == "assistant" and answer.stop_reason == "max_tokens"
    assert total_input(answer.usage) == engine_count(gateway, [{"role": "system", "content": SYSTEM}, *ASK])
    kinds = []
    with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
        for event in stream:
            kinds.append(event.type)
        streamed = stream.get_final_message()
    assert streamed.content[0].text == answer.content[0].text  # type: ignore[union-attr]
    assert (streamed.usage.output_tokens, total_input(streamed.usage)) == (10, total_input(answer.usage))
    assert streamed.usage.cache_read_input_tokens > 0  # the repeated prompt's KV blocks, reused
    raw = [k for k in kinds if k in ("message_start", "content_block_start", "content_block_stop", "message_delta",
                                     "message_stop")]
    assert raw == ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]
    rows = gateway.rows(key, "prompt_tokens, completion_tokens, cached_tokens, dialect")
    assert rows == [(total_input(m.usage), m.usage.output_tokens, m.usage.cache_read_input_tokens, "anthropic")
                    for m in (answer, streamed)]


def test_a_tool_use_round_trip_streamed_and_not(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    ask = dict(model=MODEL, max_tokens=60, system=SYSTEM, messages=ASK, tools=[WEATHER],
               tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    called = client.messages.create(**ask)  # type: ignore[arg-type]
    (use,) = called.content
    assert use.type == "tool_use" and use.name == "get_weather" and use.input["city"] in CITIES  # type: ignore[union-attr]
    assert use.id.startswith("toolu_") and called.stop_reason == "tool_use"  # type: ignore[union-attr]
    with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
        pieces = [e.partial_json for e in stream if e.type == "input_json"]
        streamed = stream.get_final_message()
    assert streamed.content[0].input == use.input and streamed.stop_reason == "tool_use"  # type: ignore[union-attr]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == use.input  # type: ignore[union-attr]
    followed = [*ASK, {"role": "assistant", "content": [use.model_dump()]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny"}]}]
    answered = client.messages.create(model=MODEL, max_tokens=5, system=SYSTEM, messages=followed, tools=[WEATHER],
                                      tool_choice={"type": "none"}, extra_body=GREEDY)  # type: ignore[arg-type]
    assert answered.content[0].type == "text"
    chain = [{"role": "system", "content": SYSTEM}, *ASK,
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": use.id, "name": "get_weather", "arguments": json.dumps(use.input)}]},  # type: ignore[union-attr]
             {"role": "tool", "tool_call_id": use.id, "content": "Sunny"}]
    tools = (FunctionSpec("get_weather", WEATHER["input_schema"], WEATHER["description"]),)  # type: ignore[arg-type]
    assert total_input(answered.usage) == engine_count(gateway, chain, tools)
    counted = client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=followed, tools=[WEATHER])  # type: ignore[arg-type]
    assert counted.input_tokens == total_input(answered.usage)


def test_a_stop_sequence_ends_the_answer_and_is_named(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    free = client.messages.create(model=MODEL, max_tokens=16, messages=ASK, extra_body=GREEDY)
    text = free.content[0].text  # type: ignore[union-attr]
    stop = next(text[i:i + 2] for i in range(len(text) // 2, len(text) - 1) if text[i:i + 2].strip())
    stopped = client.messages.create(model=MODEL, max_tokens=16, messages=ASK, extra_body=GREEDY, stop_sequences=[stop])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    assert stopped.content[0].text == text[:text.index(stop)]  # type: ignore[union-attr]
    assert stopped.usage.output_tokens < free.usage.output_tokens
    several = client.messages.create(model=MODEL, max_tokens=16, messages=ASK, extra_body=GREEDY,
                                     stop_sequences=[stop, "never-said-zq"])
    assert (several.stop_reason, several.stop_sequence) == ("stop_sequence", stop)
    assert several.content[0].text == stopped.content[0].text  # type: ignore[union-attr]


def test_a_bearer_key_works_and_errors_come_in_anthropics_shape(gateway) -> None:
    _, secret = gateway.key()
    bearer = anthropic.Anthropic(base_url=gateway.url, auth_token=secret, api_key=None, max_retries=0)
    assert bearer.messages.create(model=MODEL, max_tokens=2, messages=ASK).usage.output_tokens == 2
    client = sdk(gateway, secret)
    cases = [({"max_tokens": 2, "messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web"}]},
              "tools[0]"),
             ({"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
              "messages[0].content[0]"),
             ({"max_tokens": 2, "messages": ASK, "tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]},
              "tool_choice.name"),
             ({"max_tokens": 0, "messages": ASK}, "max_tokens"),
             ({"max_tokens": 2, "messages": []}, "messages"),
             ({"max_tokens": 2, "messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking")]
    for body, field in cases:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model=MODEL, **body)  # type: ignore[arg-type]
        error = refused.value.body
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert field in error["error"]["message"], error  # type: ignore[index]
    raw = httpx.post(f"{gateway.url}/v1/messages", json={"model": MODEL, "messages": ASK},
                     headers={"x-api-key": secret}, timeout=30)
    assert raw.status_code == 400 and raw.json()["error"]["message"] == "'max_tokens' is required"
    with pytest.raises(anthropic.AuthenticationError) as unknown:
        sdk(gateway, "tk-nope-nope").messages.create(model=MODEL, max_tokens=2, messages=ASK)
    assert unknown.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-sonnet-4-5", max_tokens=2, messages=ASK)
