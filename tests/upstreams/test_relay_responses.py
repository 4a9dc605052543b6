"""The Responses API in front of llama-server: a stored conversation of two turns through the openai SDK. The
chain is kept by the gateway (llama-server knows nothing of it), each turn is billed with llama-server's own
counts, and the second turn's prompt carries the first turn's answer."""

from __future__ import annotations

import pytest

from tests.upstreams.conftest import MODEL, sdk
from tests.upstreams.test_relay_usage import UpstreamCounts
from trtkit.gateway.responses_api.items import chat_messages, stored_items

pytestmark = pytest.mark.slow


def test_a_stored_conversation_runs_over_an_openai_upstream(relay, llama) -> None:  # type: ignore[no-untyped-def]
    key, secret = relay.key()
    client = sdk(relay, secret)
    counts = UpstreamCounts(llama)
    first = client.responses.create(model=MODEL, input="Name one colour of the rainbow.", max_output_tokens=6,
                                    temperature=0)
    _, predicted = counts.since()
    assert first.status in ("completed", "incomplete") and first.output_text
    assert first.usage.output_tokens == predicted  # llama-server's count is the bill
    counts = UpstreamCounts(llama)
    second = client.responses.create(model=MODEL, input="And another one?", previous_response_id=first.id,
                                     max_output_tokens=6, temperature=0, stream=True)
    events = list(second)
    done = [e for e in events if e.type in ("response.completed", "response.incomplete")]
    assert len(done) == 1, [e.type for e in events]
    answer = done[0].response
    _, predicted = counts.since()
    assert answer.usage.output_tokens == predicted
    assert answer.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the chain went up
    stored = client.responses.retrieve(answer.id)  # issue 51 item 4: the chain as stored, not only an id echoed
    assert stored.previous_response_id == first.id and stored.output_text == answer.output_text
    chain = chat_messages(stored_items(relay.store.conversations.continue_chain(answer.id, key.name).items))
    assert [(m["role"], m["content"]) for m in chain] == [
        ("user", "Name one colour of the rainbow."), ("assistant", first.output_text),
        ("user", "And another one?"), ("assistant", answer.output_text)]
    rows = relay.rows(key, "prompt_tokens, completion_tokens")
    assert rows == [(first.usage.input_tokens, first.usage.output_tokens),
                    (answer.usage.input_tokens, answer.usage.output_tokens)]
