"""The Responses API's shapes without a server: the request's fields are OpenAI's own, input items and tools are
checked by name, the spliced text deltas are byte for byte the ``openai`` type's dump, and a streamed answer's
function calls come out in OpenAI's event order."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from openai.types.responses import ResponseTextDeltaEvent
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.responses_api.items import chat_messages, resolve
from trtkit.gateway.responses_api.objects import response, sse
from trtkit.gateway.responses_api.output import OutputItems, TurnEvents
from trtkit.gateway.responses_api.protocol import OPENAI_FIELDS, SUPPORTED, ResponseRequest, response_params
from trtkit.governance.vocabulary import GenerationResult, Usage


def test_the_fields_are_openais_and_every_supported_one_is_declared() -> None:
    assert OPENAI_FIELDS == set(ResponseCreateParamsBase.__annotations__) | {"stream"}
    assert SUPPORTED <= OPENAI_FIELDS and SUPPORTED == set(ResponseRequest.model_fields)


@pytest.mark.parametrize("body, param", [
    ({"model": "m", "input": "hi", "reasoning": {"effort": "high"}}, "reasoning"),
    ({"model": "m", "input": "hi", "temprature": 0.5}, "temprature"),
    ({"model": "m", "input": "hi", "background": True}, "background"),
])
def test_a_field_not_honoured_is_named(body: dict, param: str) -> None:
    with pytest.raises(RequestValidationError) as refused:
        ResponseRequest.model_validate(body)
    assert refused.value.param == param


def test_fields_that_ask_nothing_are_accepted() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": "hi", "tools": [], "tool_choice": "auto",
                                              "parallel_tool_calls": True, "background": False, "include": [],
                                              "prompt_cache_key": "k", "service_tier": "auto"})
    assert chat_messages(request.items()) == [{"role": "user", "content": "hi"}] and request.tool_spec() is None


@pytest.mark.parametrize("item, param", [
    ("plain text", "input[0]"),
    ({"type": "function_call_output", "call_id": "c", "output": "x"}, "input[0].call_id"),  # answers no call
    ({"type": "function_call", "call_id": "c", "name": "f"}, "input[0].arguments"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "extra": 1}, "input[0]"),
    ({"type": "item_reference", "id": "msg_nowhere"}, "input[0].id"),
    ({"type": "web_search_call", "id": "ws"}, "input[0]"),
    ({"role": "tool", "content": "x"}, "input[0].role"),
    ({"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}, "input[0].content.0"),
    ({"role": "user", "content": 3}, "input[0].content"),
])
def test_a_malformed_input_item_is_named(item: object, param: str) -> None:
    with pytest.raises(RequestValidationError) as refused:
        resolve(ResponseRequest.model_validate({"model": "m", "input": [item]}).items(), [])
    assert refused.value.param == param


def test_message_items_with_text_parts_and_the_developer_role() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": [
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "春天"}, {"type": "input_text", "text": "来了"}]}]})
    assert chat_messages(request.items()) == [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "春天来了"}]


def test_calls_and_their_outputs_become_the_templates_tool_messages() -> None:
    items = resolve(ResponseRequest.model_validate({"model": "m", "input": [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Rain"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "9:00"}]},
    ]}).items(), [])
    assert chat_messages(items) == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"id": "call_2", "name": "get_time", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Rain"},
        {"role": "tool", "tool_call_id": "call_2", "content": "9:00"}]
    assert len({item["id"] for item in items}) == 5  # each item its own id


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.mark.parametrize("change, param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"tools": [{**WEATHER, "name": "bad name!"}]}, "tools[0].name"),
    ({"tools": [{**WEATHER, "parameters": "x"}]}, "tools[0].parameters"),
    ({"tools": [{**WEATHER, "cache": True}]}, "tools[0]"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tool_choice": {"type": "function", "name": "get_news"}}, "tool_choice"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice"),
    ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ({"conversation": "conv_1", "previous_response_id": "resp_1"}, "conversation"),
])
def test_a_tool_request_it_cannot_honour_is_named(change: dict, param: str) -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": "hi", "tools": [WEATHER], **change})
    with pytest.raises(RequestValidationError) as refused:
        request.tool_spec()
        request.conversation_id()
    assert refused.value.param == param


def test_tools_and_choices_become_a_grammar_beside_text_format() -> None:
    base = {"model": "m", "input": "hi", "tools": [WEATHER]}
    spec = ResponseRequest.model_validate(base).tool_spec()
    assert spec is not None and spec.choice == "auto" and spec.parallel and spec.named is None
    named = ResponseRequest.model_validate({**base, "tool_choice": {"type": "function", "name": "get_weather"},
                                            "parallel_tool_calls": False}).tool_spec()
    assert named is not None and named.named == "get_weather" and not named.parallel
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    request = ResponseRequest.model_validate({**base, "text": {"format": {"type": "json_schema", "name": "n",
                                                                          "schema": schema}}})
    params = response_params(request, guided_decoding=True, tools=request.tool_spec())
    assert params.guided_decoding_guide_type == "ebnf_grammar" and "answer_root" in (params.guided_decoding_guide or "")
    none = ResponseRequest.model_validate({**base, "tool_choice": "none", "text": request.text})
    alone = response_params(none, guided_decoding=True, tools=none.tool_spec()).guided_decoding_guide or ""
    assert "answer_root" in alone and "tool_call" not in alone  # no call can come: text.format alone
    bad = ResponseRequest.model_validate({**base, "tools": [{**WEATHER, "parameters": {"type": "strnig"}}]})
    with pytest.raises(RequestValidationError) as refused:
        response_params(bad, guided_decoding=True, tools=bad.tool_spec())
    assert refused.value.param == "tools[0].parameters"
    with pytest.raises(RequestValidationError) as off:
        response_params(ResponseRequest.model_validate(base), guided_decoding=False,
                        tools=ResponseRequest.model_validate(base).tool_spec())
    assert off.value.param == "tool_choice"


def test_text_format_maps_onto_guided_decoding() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = ResponseRequest.model_validate({"model": "m", "input": "x", "max_output_tokens": 5, "text": {
        "format": {"type": "json_schema", "name": "n", "schema": schema}}})
    params = response_params(request, guided_decoding=True)
    grammar = xgr.Grammar.from_ebnf(params.guided_decoding_guide or "")
    assert params.guided_decoding_guide_type == "ebnf_grammar" and params.max_tokens == 5
    accepts = xgr.testing._is_grammar_accept_string
    assert accepts(grammar, '{"a": 1}') and not accepts(grammar, '{ "a" : 1 }')  # compact: no runaway blanks
    with pytest.raises(RequestValidationError) as off:
        response_params(request, guided_decoding=False)
    assert off.value.param == "text.format" and "serve.guided_decoding" in str(off.value)


def test_spliced_deltas_are_the_typed_events_byte_for_byte() -> None:
    events = TurnEvents(OutputItems(None, "msg_1"))
    request = ResponseRequest.model_validate({"model": "m", "input": "x"})
    events.opening(response("resp_1", "m", request, 1.0))  # sequence numbers 0..3
    for sequence, text in enumerate(["春", ' "quoted"\n', "\ud83c\udf38".encode("utf-16", "surrogatepass").decode("utf-16")],
                                    start=4):
        typed = ResponseTextDeltaEvent(type="response.output_text.delta", item_id="msg_1", output_index=0,
                                       content_index=0, delta=text, logprobs=[], sequence_number=sequence)
        assert events.delta(text) == sse(typed)


def test_a_finished_response_carries_usage_and_its_status() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": "x", "max_output_tokens": 3})
    result = GenerationResult("r", "abc", Usage.of(10, 3, 4), "length", False, 0.01, 0.02, 0.0)
    output = OutputItems(None, "msg_r")
    output.feed("abc")
    finished = response("resp_r", "m", request, 1.0, result=result, output=output.items("incomplete"),
                        extension={"a": 1})
    assert finished.status == "incomplete" and finished.incomplete_details.reason == "max_output_tokens"
    assert (finished.usage.input_tokens, finished.usage.input_tokens_details.cached_tokens,
            finished.usage.output_tokens, finished.usage.total_tokens) == (10, 4, 3, 13)
    assert finished.output_text == "abc" and finished.model_extra == {"trtkit": {"a": 1}}
    events = TurnEvents(output)
    events.opening(response("resp_r", "m", request, 1.0))
    closing = events.closing(finished).decode()
    assert [line.split(" ", 1)[1] for line in closing.splitlines() if line.startswith("event:")] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]


def event_types(data: bytes) -> list[str]:
    return [line.split(" ", 1)[1] for line in data.decode().splitlines() if line.startswith("event:")]


def test_streamed_calls_follow_openais_event_order_and_match_the_response() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": "x", "tools": [
        WEATHER, {**WEATHER, "name": "get_time"}], "tool_choice": "required"})
    spec = request.tool_spec()
    answer = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_time", "arguments": {"city": "Lima"}}\n</tool_call>')
    output = OutputItems(spec, "msg_1")
    events = TurnEvents(output)
    stream = events.opening(response("resp_1", "m", request, 1.0, tools=spec))
    for start in range(0, len(answer), 5):  # deltas cut anywhere
        stream += events.delta(answer[start:start + 5])
    stream += events.flush()
    result = GenerationResult("r", answer, Usage.of(10, 30), "end_id", False, 0.01, 0.02, 0.0)
    finished = response("resp_1", "m", request, 1.0, tools=spec, result=result, output=output.items("completed"))
    stream += events.closing(finished)
    kinds = event_types(stream)
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-5:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert kinds.count("response.output_item.added") == 2 and "response.output_text.delta" not in kinds
    calls = [(c.name, json.loads(c.arguments), c.call_id.startswith("call_")) for c in finished.output]  # type: ignore[union-attr]
    assert calls == [("get_weather", {"city": "Oslo"}, True), ("get_time", {"city": "Lima"}, True)]
    deltas = [json.loads(line[6:]) for line in stream.decode().splitlines() if line.startswith("data:")]
    streamed = "".join(d["delta"] for d in deltas if d["type"] == "response.function_call_arguments.delta"
                       and d["output_index"] == 0)
    assert streamed == finished.output[0].arguments  # type: ignore[union-attr]
    assert [d["sequence_number"] for d in deltas] == list(range(len(deltas)))


def test_an_auto_answer_that_is_text_streams_as_a_message() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": "x", "tools": [WEATHER]})
    output = OutputItems(request.tool_spec(), "msg_1")
    events = TurnEvents(output)
    stream = events.opening(response("resp_1", "m", request, 1.0, tools=request.tool_spec()))
    assert event_types(stream) == ["response.created", "response.in_progress"]  # no item until the text says which
    stream += events.delta("<to") + events.delta("day> is sunny")
    stream += events.flush()
    assert output.items("completed")[0]["content"][0]["text"] == "<today> is sunny"
    assert event_types(stream)[2:] == ["response.output_item.added", "response.content_part.added",
                                       "response.output_text.delta"]
