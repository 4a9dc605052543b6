"""Anthropic's Messages API in front of llama-server, by translation to chat completions: the anthropic SDK's text
answer (streamed equal to not, billed with llama-server's own counts, the dialect in the ledger), a tool-use round
trip (llama-server's own tool-call handling: ``--jinja``, "required" held by its grammar), count_tokens, and what
needs the Triton backend refused in Anthropic's shape."""

from __future__ import annotations

import anthropic
import pytest

from tests.upstreams.conftest import MODEL
from tests.upstreams.test_relay_usage import UpstreamCounts

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name one colour of the rainbow."}]
GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "The weather in a city", "input_schema": {
    "type": "object", "required": ["city"], "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}}}


def sdk(relay, secret: str) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=relay.url, api_key=secret, max_retries=0)


def test_a_message_streamed_and_not_is_billed_with_the_upstreams_counts(relay, llama) -> None:  # type: ignore[no-untyped-def]
    key, secret = relay.key()
    client = sdk(relay, secret)
    ask = dict(model=MODEL, max_tokens=8, system="Answer in one word.", messages=ASK, extra_body=GREEDY)
    counts = UpstreamCounts(llama)
    answer = client.messages.create(**ask)  # type: ignore[arg-type]
    _, predicted = counts.since()
    assert answer.usage.output_tokens == predicted and answer.content[0].type == "text"
    assert answer.stop_reason in ("end_turn", "max_tokens")
    with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
        streamed = stream.get_final_message()
    assert streamed.content[0].text == answer.content[0].text  # type: ignore[union-attr]
    assert streamed.usage.output_tokens == answer.usage.output_tokens
    total = [m.usage.input_tokens + m.usage.cache_read_input_tokens for m in (answer, streamed)]
    rows = relay.rows(key, "prompt_tokens, completion_tokens, dialect")
    assert rows == [(t, m.usage.output_tokens, "anthropic") for t, m in zip(total, (answer, streamed), strict=True)]
    counted = client.messages.count_tokens(model=MODEL, system="Answer in one word.", messages=ASK)  # type: ignore[arg-type]
    assert counted.input_tokens > 0


def test_tool_history_goes_up_as_chat_tool_messages(relay, llama) -> None:  # type: ignore[no-untyped-def]
    """llama-server answers SmolLM2 with text even under tool_choice "required" (its template has no tools); the
    tool_use / tool_result history still goes up as an assistant's tool_calls and a tool message, which its chat
    template renders: the prompt grows by them, and the answer comes back as a Message."""
    _, secret = relay.key()
    client = sdk(relay, secret)
    asked = [{"role": "user", "content": "What is the weather in Paris?"}]
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"}
    plain = client.messages.create(model=MODEL, max_tokens=4, messages=asked, extra_body=GREEDY)  # type: ignore[arg-type]
    counts = UpstreamCounts(llama)
    answered = client.messages.create(model=MODEL, max_tokens=4, tools=[WEATHER], extra_body=GREEDY,  # type: ignore[arg-type]
                                      messages=[*asked, {"role": "assistant", "content": [use]},
                                                {"role": "user", "content": [result]}])
    processed, predicted = counts.since()
    assert answered.content[0].type == "text" and answered.usage.output_tokens == predicted
    total = answered.usage.input_tokens + answered.usage.cache_read_input_tokens
    assert total > plain.usage.input_tokens + plain.usage.cache_read_input_tokens  # the call and its result went up
    assert processed == answered.usage.input_tokens  # what llama-server computed, the rest its cache served


def test_what_needs_the_triton_backend_is_refused_by_name(relay) -> None:  # type: ignore[no-untyped-def]
    _, secret = relay.key()
    client = sdk(relay, secret)
    for body, field in (({"messages": [*ASK, {"role": "assistant", "content": "Red"}]}, "messages"),
                        ({"messages": ASK, "output_config": {"format": {"type": "json_schema",
                                                                         "schema": {"type": "object"}}}},
                         "output_config")):
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model=MODEL, max_tokens=4, **body)  # type: ignore[arg-type]
        assert field in refused.value.body["error"]["message"]  # type: ignore[index]
