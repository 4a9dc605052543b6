"""Function tools in the Responses API through the official openai SDK, against the real tritonserver: a named
function or "required" holds the answer to the tools' grammar (the tiny engine has random weights, so the tests name
the call they need; an argument's enum keeps it short), the call comes back as a function_call item, streamed in
OpenAI's event order, and its output goes back with previous_response_id: the chain grows, its prefix is served from
the KV cache, and every token is billed as the engine counted it."""

from __future__ import annotations

import json

import openai
import pytest

from trtkit.gateway.tool_format import FunctionSpec
from trtkit.gateway.tool_prompt import render

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
CITIES = ["Paris", "Oslo", "Lima"]
PARAMETERS = {"type": "object", "additionalProperties": False, "required": ["city"],
              "properties": {"city": {"type": "string", "enum": CITIES}}}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city", "strict": True,
           "parameters": PARAMETERS}
TIME = {"type": "function", "name": "get_time", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["utc"], "properties": {"utc": {"type": "boolean"}}}}
NAMED = {"type": "function", "name": "get_weather"}
QUESTION = "What is the weather in Paris?"


def sdk(gateway, secret: str) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def engine_count(gateway, messages: list[dict], tools: list[dict]) -> int:  # type: ignore[no-untyped-def]
    """What the engine gets for these messages with these tools: rendered as the gateway renders them, counted."""
    counter = gateway.gateway.client.governor.counter
    functions = tuple(FunctionSpec(t["name"], t["parameters"], t.get("description")) for t in tools)
    return counter.count_prompt(render(counter, messages, functions))


def test_a_named_call_then_its_output_continues_the_chain(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    first = client.responses.create(model=MODEL, input=QUESTION, tools=[WEATHER], tool_choice=NAMED,
                                    max_output_tokens=30, temperature=0)
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.id.startswith("fc_") and json.loads(call.arguments)["city"] in CITIES
    assert first.status == "completed" and first.tool_choice.name == "get_weather" and first.tools[0].name == "get_weather"
    asked = [{"role": "user", "content": QUESTION}]
    assert first.usage.input_tokens == engine_count(gateway, asked, [WEATHER])  # the tools are in the prompt
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=[WEATHER], tool_choice="none",
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "Sunny, 21 C"}], max_output_tokens=6, temperature=0)
    assert second.output[0].type == "message" and second.output_text == second.output[0].content[0].text
    chain = [*asked, {"role": "assistant", "content": "", "tool_calls": [
        {"id": call.call_id, "name": "get_weather", "arguments": call.arguments}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"}]
    assert second.usage.input_tokens == engine_count(gateway, chain, [WEATHER]) > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0  # the first turn's prefix, reused
    rows = gateway.rows(key, "prompt_tokens, completion_tokens, cached_tokens")
    assert rows == [(r.usage.input_tokens, r.usage.output_tokens, r.usage.input_tokens_details.cached_tokens)
                    for r in (first, second)]  # a call's tokens are billed as the engine counted them


def test_a_streamed_required_call_follows_openais_event_order(gateway) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    ask = dict(model=MODEL, input=QUESTION, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False,
               max_output_tokens=120, temperature=0)
    kinds, deltas = [], []
    with client.responses.stream(**ask) as stream:  # type: ignore[arg-type]
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.function_call_arguments.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call" and call.name in ("get_weather", "get_time")
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert "".join(deltas) == call.arguments and set(json.loads(call.arguments)) in ({"city"}, {"utc"})
    plain = client.responses.create(**ask)  # type: ignore[arg-type]
    assert (plain.output[0].name, plain.output[0].arguments) == (call.name, call.arguments)  # greedy: the same call
    assert plain.usage.output_tokens == final.usage.output_tokens
    assert [row[1] for row in gateway.rows(key)] == [final.usage.output_tokens] * 2


def test_auto_answers_text_or_calls_that_fit_their_schemas(gateway) -> None:
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    kinds = set()
    for question in (QUESTION, "Hello!", "What time is it?", "Tell me a joke."):
        answer = client.responses.create(model=MODEL, input=question, tools=[WEATHER, TIME], max_output_tokens=60,
                                         temperature=1.0)
        for item in answer.output:
            kinds.add(item.type)
            if item.type == "function_call" and item.status == "completed":
                assert json.loads(item.arguments).keys() == ({"city"} if item.name == "get_weather" else {"utc"})
            elif item.type == "message":
                assert not item.content[0].text.startswith("<tool_call>")  # the grammar keeps text and calls apart
        assert answer.tool_choice == "auto" and answer.parallel_tool_calls
    assert kinds <= {"message", "function_call"} and kinds


def test_text_format_holds_the_answer_beside_tools(gateway) -> None:
    _, secret = gateway.key()
    winds = ["north", "south", "east", "west"]
    schema = {"type": "json_schema", "name": "wind", "schema": {"type": "string", "enum": winds}}
    answer = sdk(gateway, secret).responses.create(model=MODEL, input="Which way does the wind blow?", tools=[WEATHER],
                                                   tool_choice="none", text={"format": schema}, max_output_tokens=20,
                                                   temperature=0)
    assert answer.status == "completed" and json.loads(answer.output_text) in winds
    auto = sdk(gateway, secret).responses.create(model=MODEL, input="Which way does the wind blow?", tools=[WEATHER],
                                                 text={"format": schema}, max_output_tokens=30, temperature=0)
    item = auto.output[0]
    assert json.loads(item.content[0].text) in winds if item.type == "message" else \
        json.loads(item.arguments)["city"] in CITIES


def test_input_items_list_the_chain_newest_first_in_pages(gateway) -> None:
    _, secret = gateway.key()
    _, other = gateway.key()
    client = sdk(gateway, secret)
    first = client.responses.create(model=MODEL, input=QUESTION, tools=[WEATHER], tool_choice=NAMED,
                                    max_output_tokens=30, temperature=0)
    call = first.output[0]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tool_choice="none", tools=[WEATHER],
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Rain"},
                                            {"role": "user", "content": "Thanks!"}], max_output_tokens=3)
    items = list(client.responses.input_items.list(second.id))
    assert [i.type for i in items] == ["message", "function_call_output", "function_call", "message"]
    assert items[2].id == call.id and items[1].output == "Rain" and items[0].content[0].text == "Thanks!"
    pages = client.responses.input_items.list(second.id, order="asc", limit=1)
    assert [i.id for i in pages] == [i.id for i in reversed(items)]  # the SDK follows after= page by page
    assert [i.type for i in client.responses.input_items.list(first.id)] == ["message"]
    with pytest.raises(openai.NotFoundError):
        list(sdk(gateway, other).responses.input_items.list(second.id))
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.input_items.list(second.id, limit=500)
    assert refused.value.body["param"] == "limit"  # type: ignore[index]
