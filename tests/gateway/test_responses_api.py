"""The Responses API's shapes without a server: the request's fields are OpenAI's own, input items are checked by
name, and the spliced text deltas are byte for byte the ``openai`` type's dump."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import ResponseTextDeltaEvent
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.responses_objects import ResponseEvents, response, sse
from trtkit.gateway.responses_protocol import OPENAI_FIELDS, SUPPORTED, ResponseRequest, response_params
from trtkit.governance.vocabulary import GenerationResult, Usage


def test_the_fields_are_openais_and_every_supported_one_is_declared() -> None:
    assert OPENAI_FIELDS == set(ResponseCreateParamsBase.__annotations__) | {"stream"}
    assert SUPPORTED <= OPENAI_FIELDS and SUPPORTED == set(ResponseRequest.model_fields)


@pytest.mark.parametrize("body, param", [
    ({"model": "m", "input": "hi", "reasoning": {"effort": "high"}}, "reasoning"),
    ({"model": "m", "input": "hi", "temprature": 0.5}, "temprature"),
    ({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
])
def test_a_field_not_honoured_is_named(body: dict, param: str) -> None:
    with pytest.raises(RequestValidationError) as refused:
        ResponseRequest.model_validate(body)
    assert refused.value.param == param


def test_fields_that_ask_nothing_are_accepted() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": "hi", "tools": [], "tool_choice": "auto",
                                              "parallel_tool_calls": True, "background": False, "include": [],
                                              "prompt_cache_key": "k", "service_tier": "auto"})
    assert request.messages() == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("item, param", [
    ("plain text", "input[0]"),
    ({"type": "function_call_output", "call_id": "c", "output": "x"}, "input[0]"),
    ({"role": "tool", "content": "x"}, "input[0].role"),
    ({"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}, "input[0].content.0"),
    ({"role": "user", "content": 3}, "input[0].content"),
])
def test_a_malformed_input_item_is_named(item: object, param: str) -> None:
    with pytest.raises(RequestValidationError) as refused:
        ResponseRequest.model_validate({"model": "m", "input": [item]}).messages()
    assert refused.value.param == param


def test_message_items_with_text_parts_and_the_developer_role() -> None:
    request = ResponseRequest.model_validate({"model": "m", "input": [
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "春天"}, {"type": "input_text", "text": "来了"}]}]})
    assert request.messages() == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "春天来了"}]


def test_text_format_maps_onto_guided_decoding() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = ResponseRequest.model_validate({"model": "m", "input": "x", "max_output_tokens": 5, "text": {
        "format": {"type": "json_schema", "name": "n", "schema": schema}}})
    params = response_params(request, guided_decoding=True)
    assert (params.guided_decoding_guide_type, json.loads(params.guided_decoding_guide or "")) == ("json_schema", schema)
    assert params.max_tokens == 5
    with pytest.raises(RequestValidationError) as off:
        response_params(request, guided_decoding=False)
    assert off.value.param == "text.format" and "serve.guided_decoding" in str(off.value)


def test_spliced_deltas_are_the_typed_events_byte_for_byte() -> None:
    events = ResponseEvents("resp_1", "msg_1")
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
    finished = response("resp_r", "m", request, 1.0, result=result, message_id="msg_r", extension={"a": 1})
    assert finished.status == "incomplete" and finished.incomplete_details.reason == "max_output_tokens"
    assert (finished.usage.input_tokens, finished.usage.input_tokens_details.cached_tokens,
            finished.usage.output_tokens, finished.usage.total_tokens) == (10, 4, 3, 13)
    assert finished.output_text == "abc" and finished.model_extra == {"trtkit": {"a": 1}}
    closing = ResponseEvents("resp_r", "msg_r").closing(finished).decode()
    assert [line.split(" ", 1)[1] for line in closing.splitlines() if line.startswith("event:")] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]
