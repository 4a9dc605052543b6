"""Conversations API conversations shared by two gateway replicas (separate OS processes) on one PostgreSQL database:
created on one, extended and read on the other, turns on either appending in order, concurrent turns from both
replicas each keeping its input and output together; another key finds nothing on either replica (404, never 403);
an agent's tool round trip through Anthropic's Messages API on either replica, its dialect in the shared ledger."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import anthropic
import openai
import pytest

from tests.helpers.replicas import sdks
from tests.helpers.stores import add_key, query

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"


def texts(items) -> list[str]:  # type: ignore[no-untyped-def]
    return [i.content[0].text for i in items]


def test_a_conversation_lives_on_both_replicas_and_only_for_its_key(two_replicas) -> None:
    replicas, store_url = two_replicas
    one, two = sdks(replicas, add_key(store_url)[1])
    thieves = sdks(replicas, add_key(store_url)[1])
    conversation = one.conversations.create(items=[{"role": "user", "content": "Bonjour"}], metadata={"on": "one"})
    assert two.conversations.retrieve(conversation.id).metadata == {"on": "one"}
    two.conversations.items.create(conversation.id, items=[{"role": "assistant", "content": "Salut"}])
    first = one.responses.create(model=MODEL, conversation=conversation.id, input="Ça va ?", max_output_tokens=3,
                                 temperature=0)
    second = two.responses.create(model=MODEL, conversation=conversation.id, input="Et toi ?", max_output_tokens=3,
                                  temperature=0)
    expected = ["Bonjour", "Salut", "Ça va ?", first.output_text, "Et toi ?", second.output_text]
    for client in (one, two):
        assert texts(client.conversations.items.list(conversation.id, order="asc")) == expected
    assert second.usage.input_tokens > first.usage.input_tokens
    item = two.conversations.items.list(conversation.id).data[0]
    for thief in thieves:
        for call in (lambda t=thief: t.conversations.retrieve(conversation.id),
                     lambda t=thief: t.conversations.items.list(conversation.id),
                     lambda t=thief: t.conversations.items.retrieve(item.id, conversation_id=conversation.id),
                     lambda t=thief: t.conversations.items.delete(item.id, conversation_id=conversation.id),
                     lambda t=thief: t.conversations.delete(conversation.id),
                     lambda t=thief: t.responses.input_items.list(second.id),
                     lambda t=thief: t.responses.create(model=MODEL, conversation=conversation.id, input="x",
                                                        max_output_tokens=2)):
            with pytest.raises(openai.NotFoundError):
                call()
    two.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        one.conversations.retrieve(conversation.id)


def test_concurrent_turns_from_both_replicas_keep_each_turn_together(two_replicas) -> None:
    replicas, store_url = two_replicas
    clients = sdks(replicas, add_key(store_url)[1])
    conversation = clients[0].conversations.create()

    def turn(n: int) -> str:
        return clients[n % 2].responses.create(model=MODEL, conversation=conversation.id, input=f"question {n}",
                                               max_output_tokens=2, temperature=0).output_text

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(turn, range(8)))
    listed = texts(clients[1].conversations.items.list(conversation.id, order="asc", limit=100))
    assert len(listed) == 16
    pairs = {(listed[i], listed[i + 1]) for i in range(0, 16, 2)}
    assert pairs == {(f"question {n}", answers[n]) for n in range(8)}  # each input followed by its own answer


def test_a_tool_round_trip_over_anthropics_api_on_either_replica(two_replicas) -> None:
    replicas, store_url = two_replicas
    key, secret = add_key(store_url)
    one, two = (anthropic.Anthropic(base_url=r.url, api_key=secret, max_retries=0) for r in replicas)
    weather = {"name": "get_weather", "input_schema": {"type": "object", "required": ["city"],
                                                       "properties": {"city": {"enum": ["Paris", "Oslo"]}}}}
    asked = [{"role": "user", "content": "Weather in Oslo?"}]
    called = one.messages.create(model=MODEL, max_tokens=60, messages=asked, tools=[weather],  # type: ignore[arg-type]
                                 tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    use = called.content[0]
    answered = two.messages.create(model=MODEL, max_tokens=3, tools=[weather], extra_body={"temperature": 0},  # type: ignore[arg-type]
                                   messages=[*asked, {"role": "assistant", "content": [use.model_dump()]},
                                             {"role": "user", "content": [{"type": "tool_result",
                                                                           "tool_use_id": use.id,  # type: ignore[union-attr]
                                                                           "content": "Snow"}]}])
    assert called.stop_reason == "tool_use" and answered.content[0].type == "text"
    rows = query(store_url, "SELECT completion_tokens, dialect FROM requests WHERE dialect = ? AND key_id = ? "
                            "ORDER BY id", ("anthropic", key.name))
    assert rows == [(called.usage.output_tokens, "anthropic"), (answered.usage.output_tokens, "anthropic")]
