"""The one request validator: ranges, unsupported fields by name, stop strings, max_tokens aliases."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from trtkit.gateway.error_responses import validation_error
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.protocol import ChatCompletionRequest, CompletionRequest
from trtkit.gateway.sampling import UNSUPPORTED, sampling_params

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_fields_become_sampling_params() -> None:
    params = sampling_params(ChatCompletionRequest.model_validate(
        CHAT | {"max_completion_tokens": 9, "temperature": 0, "top_p": 0.5, "seed": 7, "stop": "END",
                "presence_penalty": 0.1, "frequency_penalty": -0.2}))
    assert (params.max_tokens, params.temperature, params.top_p, params.seed) == (9, 0, 0.5, 7)
    assert params.stop_words == ("END",) and params.presence_penalty == 0.1 and params.frequency_penalty == -0.2
    assert sampling_params(CompletionRequest(model="m", prompt="x")).max_tokens is None  # the room left, later


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_fields_are_refused_by_name(name: str) -> None:
    used = {"n": 2, "best_of": 3, "logit_bias": {"1": 5}, "logprobs": True, "top_logprobs": 2, "echo": True,
            "suffix": "x", "tools": [{"type": "function"}], "tool_choice": "auto", "functions": [{}],
            "function_call": "auto", "parallel_tool_calls": True, "response_format": {"type": "json_object"}}
    with pytest.raises(RequestValidationError) as refused:
        sampling_params(ChatCompletionRequest.model_validate(CHAT | {name: used[name]}))
    assert refused.value.param == name and f"'{name}'" in str(refused.value)
    sampling_params(ChatCompletionRequest.model_validate(CHAT | {name: UNSUPPORTED[name][0]}))  # the default is fine


@pytest.mark.parametrize(("field", "value"), [("temperature", 2.5), ("top_p", -0.1), ("max_tokens", 0),
                                              ("presence_penalty", 3.0), ("seed", -1)])
def test_out_of_range_names_the_field(field: str, value: float) -> None:
    with pytest.raises(RequestValidationError) as refused:
        sampling_params(CompletionRequest.model_validate({"model": "m", "prompt": "x", field: value}))
    assert refused.value.param == field


@pytest.mark.parametrize(("field", "value", "reads"), [("top_p", 6.524033501883177e-65, "0.0"),
                                                       ("temperature", 1e39, "inf")])
def test_a_value_the_engine_reads_out_of_range_is_refused_at_the_door(field: str, value: float, reads: str) -> None:
    """Found by the schemathesis hunt (a 502 from the engine before): in range as sent, out of range as the 32-bit
    float the engine reads."""
    with pytest.raises(RequestValidationError, match=f"reaches the engine as {reads}") as refused:
        sampling_params(CompletionRequest.model_validate({"model": "m", "prompt": "x", field: value}))
    assert refused.value.param == field


@pytest.mark.parametrize(("prompt", "param"), [("", "prompt"), ([""], "prompt.0")])
def test_an_empty_prompt_is_refused_naming_the_field(prompt: object, param: str) -> None:
    with pytest.raises(ValidationError) as empty:
        CompletionRequest.model_validate({"model": "m", "prompt": prompt})
    error = validation_error(empty.value)
    assert (error.status, error.param) == (400, param) and "at least 1 character" in error.message


def test_stop_and_token_aliases() -> None:
    with pytest.raises(RequestValidationError, match="at most 4"):
        sampling_params(CompletionRequest(model="m", prompt="x", stop=["a", "b", "c", "d", "e"]))
    with pytest.raises(RequestValidationError, match="empty"):
        sampling_params(CompletionRequest(model="m", prompt="x", stop=[""]))
    with pytest.raises(RequestValidationError, match="differ"):
        sampling_params(ChatCompletionRequest.model_validate(CHAT | {"max_tokens": 3, "max_completion_tokens": 4}))


def test_type_errors_and_unknown_fields_name_the_field() -> None:
    with pytest.raises(ValidationError) as bad_type:
        CompletionRequest.model_validate({"model": "m", "prompt": "x", "max_tokens": "many"})
    assert validation_error(bad_type.value).param == "max_tokens"
    with pytest.raises(ValidationError) as unknown:
        ChatCompletionRequest.model_validate(CHAT | {"temprature": 1})
    error = validation_error(unknown.value)
    assert error.status == 400 and "temprature" in error.message
    with pytest.raises(ValidationError) as missing:
        ChatCompletionRequest.model_validate({"model": "m"})
    assert validation_error(missing.value).param == "messages"


def test_governor_rejects_max_tokens_beyond_the_context_when_configured(tiny_config, tiny_counter) -> None:
    from trtkit.errors import InputTooLongError
    from trtkit.governance import Caller, SamplingParams
    from trtkit.governance.governor import Governor

    governor = Governor(tiny_config, tiny_counter, None)
    clamped = governor.prepare("Hello", SamplingParams(max_tokens=100_000), Caller())
    room = tiny_config.build.max_seq_len - tiny_counter.count_prompt("Hello")
    assert clamped.params.max_tokens == room  # type: ignore[union-attr]
    governor.max_tokens_overflow = "reject"
    with pytest.raises(InputTooLongError, match=f"at most {room}"):
        governor.prepare("Hello", SamplingParams(max_tokens=100_000), Caller())
    governor.default_max_tokens = None
    assert governor.prepare("Hello", SamplingParams(), Caller()).params.max_tokens == room  # type: ignore[union-attr]


def test_a_backend_failure_mid_stream_ends_the_stream_with_an_error_event(tiny_config) -> None:
    import asyncio
    import json

    from prometheus_client import CollectorRegistry

    from trtkit.errors import ClientError
    from trtkit.gateway.generation import Generation, ServingParts
    from trtkit.gateway.metrics import GatewayMetrics
    from trtkit.gateway.serving_completions import ServingCompletions
    from trtkit.governance.vocabulary import StreamChunk, Usage

    async def failing():  # what the asyncio client raises when Triton fails after the first token
        raise ClientError("request r1 failed: engine gone")
        yield  # pragma: no cover - makes this an async generator

    async def collect() -> list[bytes]:
        ctx = ServingParts(tiny_config, None, None, None, GatewayMetrics(CollectorRegistry()))  # type: ignore[arg-type]
        generation = Generation("r1", StreamChunk("Hel", Usage(), "r1"), failing())
        return [e async for e in ServingCompletions(ctx)._events(generation, "cmpl-r1", True)]

    events = asyncio.run(collect())
    assert json.loads(events[0][6:])["choices"][0]["text"] == "Hel"
    error = json.loads(events[-1][6:])["error"]
    assert error["code"] == "backend_error" and "engine gone" in error["message"]


def test_ranges_are_the_ones_the_engine_model_and_bls_enforce() -> None:
    """One table (trtkit.wire.sampling_ranges) for the gateway, the engine model and the BLS: a top_p of 0 that the
    engine would refuse is refused at the door with the same message; OpenAI's narrower temperature bound on top."""
    from trtkit.errors import InvalidInputError
    from trtkit.wire.sampling_ranges import check_sampling_value

    with pytest.raises(InvalidInputError) as engine_says:
        check_sampling_value("top_p", 0.0)
    with pytest.raises(RequestValidationError) as gateway_says:
        sampling_params(CompletionRequest.model_validate({"model": "m", "prompt": "x", "top_p": 0.0}))
    assert str(gateway_says.value) == str(engine_says.value) and gateway_says.value.param == "top_p"
    check_sampling_value("temperature", 5.0)  # the model takes it; OpenAI's API does not
    with pytest.raises(RequestValidationError, match=r"^temperature: 5.0 is out of range; OpenAI's API allows at most 2"):
        sampling_params(CompletionRequest.model_validate({"model": "m", "prompt": "x", "temperature": 5.0}))


def test_log_probs_of_the_chosen_token_only() -> None:
    chat = sampling_params(ChatCompletionRequest.model_validate(CHAT | {"logprobs": True, "top_logprobs": 0}))
    text = sampling_params(CompletionRequest.model_validate({"model": "m", "prompt": "x", "logprobs": 0}))
    assert chat.return_log_probs and text.return_log_probs
    assert not sampling_params(ChatCompletionRequest.model_validate(CHAT | {"logprobs": False})).return_log_probs
    for request, field in ((ChatCompletionRequest.model_validate(CHAT | {"logprobs": True, "top_logprobs": 2}), "top_logprobs"),
                           (ChatCompletionRequest.model_validate(CHAT | {"logprobs": "yes"}), "logprobs"),
                           (CompletionRequest.model_validate({"model": "m", "prompt": "x", "logprobs": 2}), "logprobs"),
                           (CompletionRequest.model_validate({"model": "m", "prompt": "x", "logprobs": True}), "logprobs")):
        with pytest.raises(RequestValidationError) as refused:
            sampling_params(request)
        assert refused.value.param == field


def test_response_format_becomes_the_engines_guide() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    shapes = [({"type": "text"}, (None, None)), ({"type": "json_object"}, ("json", None)),
              ({"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}, ("json_schema", schema)),
              ({"type": "json", "schema": schema}, ("json_schema", schema)),  # trtllm-serve's shapes
              ({"type": "regex", "regex": "[0-9]+"}, ("regex", "[0-9]+")),
              ({"type": "ebnf", "ebnf": 'root ::= "a"'}, ("ebnf_grammar", 'root ::= "a"'))]
    for response_format, (guide_type, guide) in shapes:
        params = sampling_params(ChatCompletionRequest.model_validate(CHAT | {"response_format": response_format}),
                                 guided_decoding=True)
        sent = json.loads(params.guided_decoding_guide) if isinstance(guide, dict) else params.guided_decoding_guide
        assert (params.guided_decoding_guide_type, sent) == (guide_type, guide), response_format
    with pytest.raises(RequestValidationError, match="this deployment has off") as off:
        sampling_params(ChatCompletionRequest.model_validate(CHAT | {"response_format": {"type": "json_object"}}))
    assert off.value.param == "response_format"
    text = sampling_params(ChatCompletionRequest.model_validate(CHAT | {"response_format": {"type": "text"}}))
    assert text.guided_decoding_guide_type is None  # plain text needs no guided decoding, on or off
