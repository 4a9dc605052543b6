"""Anthropic's Messages API in front of an OpenAI-compatible upstream that calls tools: a trtkit gateway (``relayed``)
whose upstream is another trtkit gateway's chat completions over the real tritonserver (``gateway``), which holds a
tool call to its schema. The Messages request goes up as chat completions and the tool calls come back as tool_use
blocks, streamed and not; each gateway writes its own ledger row, with the same counts, the front one recording the
Anthropic dialect. (llama-server, the other upstream of the suite, ignores tool_choice for SmolLM2's template:
tests/upstreams/test_relay_messages.py covers the text and the tool history going up.)"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import anthropic
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
KEY_ENV = "TRTKIT_TEST_UPSTREAM_GATEWAY_KEY"
CITIES = ["Paris", "Oslo", "Lima"]
WEATHER = {"name": "get_weather", "description": "The weather in a city", "input_schema": {
    "type": "object", "additionalProperties": False, "required": ["city"],
    "properties": {"city": {"type": "string", "enum": CITIES}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def relayed(gateway, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    back_key, back_secret = gateway.key(name="front-gateway")
    os.environ[KEY_ENV] = back_secret
    base = gateway_config(tiny_config, cache=False)
    upstream = replace(base.gateway.upstream, model=MODEL, api_key_env=KEY_ENV, read_timeout_seconds=120.0)
    running = RunningGateway(replace(base, gateway=replace(base.gateway, upstream=upstream)), f"{gateway.url}/v1",
                             tmp_path_factory.mktemp("gw-front"))
    yield running, back_key
    running.stop()
    os.environ.pop(KEY_ENV, None)


def test_tool_use_comes_back_translated_streamed_and_not(relayed, gateway) -> None:  # type: ignore[no-untyped-def]
    front, back_key = relayed
    key, secret = front.key()
    client = anthropic.Anthropic(base_url=front.url, api_key=secret, max_retries=0)
    ask = dict(model=MODEL, max_tokens=40, messages=ASK, tools=[WEATHER], extra_body={"temperature": 0},
               tool_choice={"type": "tool", "name": "get_weather"})
    called = client.messages.create(**ask)  # type: ignore[arg-type]
    (use,) = called.content
    assert use.type == "tool_use" and use.name == "get_weather" and use.input["city"] in CITIES  # type: ignore[union-attr]
    assert called.stop_reason == "tool_use"
    with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert streamed.content[0].input == use.input and "input_json" in kinds  # type: ignore[union-attr]
    assert streamed.usage.output_tokens == called.usage.output_tokens
    fronts = front.rows(key, "prompt_tokens, completion_tokens, dialect")
    backs = gateway.rows(back_key, "prompt_tokens, completion_tokens, dialect")
    assert [r[:2] for r in fronts] == [r[:2] for r in backs] and len(fronts) == 2  # the upstream's counts are the bill
    assert {r[2] for r in fronts} == {"anthropic"} and {r[2] for r in backs} == {"openai"}
    answered = client.messages.create(model=MODEL, max_tokens=4, tools=[WEATHER], extra_body={"temperature": 0},  # type: ignore[arg-type]
                                      tool_choice={"type": "none"},
                                      messages=[*ASK, {"role": "assistant", "content": [use.model_dump()]},
                                                {"role": "user", "content": [{"type": "tool_result",
                                                                              "tool_use_id": use.id,
                                                                              "content": "Sunny"}]}])
    assert answered.content[0].type == "text" and answered.usage.output_tokens == 4
    sent = json.loads(json.dumps(use.input))
    assert sent["city"] in CITIES
