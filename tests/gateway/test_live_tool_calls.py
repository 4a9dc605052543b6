"""Tool calls through the gateway with the official openai SDK, against the real tritonserver: a named function or
"required" holds the answer to the tools' schemas (guided decoding) and comes back as OpenAI's tool_calls, streamed
and not. The tiny engine has random weights, which under a JSON grammar would pad with whitespace until
max_tokens; the tests ban the whitespace-only tokens (logit_bias, at most 300 entries), so every answer is compact
and ends, whatever this CPU's arithmetic picks among the grammar's choices."""

from __future__ import annotations

import json

import openai
import pytest

pytestmark = pytest.mark.slow

CITIES = ["Paris", "Oslo", "Lima"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "additionalProperties": False,
                                                           "required": ["city"],
                                                           "properties": {"city": {"type": "string", "enum": CITIES}}}}}
TIME = {"type": "function", "function": {"name": "get_time",
                                         "parameters": {"type": "object", "additionalProperties": False,
                                                        "required": ["utc"], "properties": {"utc": {"type": "boolean"}}}}}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def sdk(gateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def no_whitespace(gateway) -> dict[str, int]:  # type: ignore[no-untyped-def]
    counter = gateway.gateway.client.governor.counter
    banned = {str(i): -100 for i in range(counter.vocab_size) if (t := counter.decode([i])) and not t.strip()}
    assert 0 < len(banned) <= 300
    return banned


def test_a_named_function_is_called_with_arguments_that_fit_its_schema(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    ask = {"model": "tiny-llama", "messages": MESSAGES, "tools": [WEATHER, TIME], "max_tokens": 40, "temperature": 0,
           "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
           "logit_bias": no_whitespace(gateway)}
    answer = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    message = answer.choices[0].message
    (call,) = message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments)["city"] in CITIES and message.content is None
    assert answer.choices[0].finish_reason == "stop"  # as OpenAI answers a forced function
    chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function.name == "get_weather" and len(deltas) > 1  # arguments as they come
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == answer.usage.completion_tokens < 40
    assert [r[1] for r in gateway.rows(key)] == [answer.usage.completion_tokens] * 2  # billed like any answer


def test_required_calls_one_of_the_tools(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    ask = {"model": "tiny-llama", "messages": MESSAGES, "tools": [WEATHER, TIME], "max_tokens": 60, "temperature": 0,
           "tool_choice": "required", "parallel_tool_calls": False, "logit_bias": no_whitespace(gateway)}
    answer = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    (call,) = answer.choices[0].message.tool_calls
    arguments = json.loads(call.function.arguments)
    assert (call.function.name, set(arguments)) in (("get_weather", {"city"}), ("get_time", {"utc"}))
    assert answer.choices[0].finish_reason == "tool_calls"
    chunks = list(client.chat.completions.create(**ask, stream=True))
    (delta,) = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert (delta.function.name, delta.function.arguments) == (call.function.name, call.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_conversation_with_earlier_calls_and_their_results(gateway) -> None:
    _, secret = gateway.key()
    earlier = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]
    answer = sdk(gateway, secret).chat.completions.create(model="tiny-llama", messages=earlier, tools=[WEATHER],
                                                          tool_choice="none", max_tokens=5, temperature=0)
    counter = gateway.gateway.client.governor.counter
    rendered = counter.chat_prompt([{"role": m["role"], "content": m["content"] or "",
                                     **{k: m[k] for k in ("tool_calls", "tool_call_id") if k in m}}
                                    for m in earlier], tools=[WEATHER])
    assert answer.usage.prompt_tokens == counter.count_prompt(rendered) and "Sunny, 21 C" in rendered
    assert answer.choices[0].message.tool_calls is None and answer.usage.completion_tokens == 5


@pytest.mark.parametrize(("change", "param"), [
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tool_choice": None}, "tool_choice"),  # auto, OpenAI's default with tools
    ({"tool_choice": {"type": "function", "function": {"name": "get_news"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}], "tool_choice": "required"}, "tools"),
    ({"tools": [WEATHER, WEATHER], "tool_choice": "required"}, "tools"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": "required", "logprobs": True}, "logprobs"),
])
def test_tool_requests_it_cannot_honour_are_400s_naming_the_field(gateway, change: dict, param: str) -> None:
    _, secret = gateway.key()
    ask = {"model": "tiny-llama", "messages": MESSAGES, "tools": [WEATHER], "max_tokens": 4, **change}
    with pytest.raises(openai.BadRequestError) as refused:
        sdk(gateway, secret).chat.completions.create(**{k: v for k, v in ask.items() if v is not None})  # type: ignore[call-overload]
    assert refused.value.body["param"] == param  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="'tools' is not a field"):
        sdk(gateway, secret).completions.create(model="tiny-llama", prompt="x", max_tokens=2,
                                                extra_body={"tools": [WEATHER]})
