"""OpenAI's Conversations API through the official openai SDK, against the real tritonserver and a real store: the
whole CRUD of conversations and their items, turns of POST /v1/responses on a conversation (its items are the
context, each turn's input and output are appended), tools on a conversation, another key (404, never 403), a budget
held like a chain's, and the TTL through the store's clock (never slept)."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.test_live_responses import StoreClock
from trtkit.gateway.tool_format import FunctionSpec
from trtkit.gateway.tool_prompt import render

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
WEATHER = {"type": "function", "name": "get_weather", "strict": True, "parameters": {
    "type": "object", "additionalProperties": False, "required": ["city"],
    "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}}}


@pytest.fixture(scope="module")
def clocked(gateway):  # type: ignore[no-untyped-def]
    """The shared gateway, its store's clock movable by the tests of this module (restored after)."""
    store = gateway.store.conversations
    previous, store.clock = store.clock, StoreClock()
    yield gateway
    store.clock = previous


def sdk(gateway, secret: str) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def texts(items) -> list[str]:  # type: ignore[no-untyped-def]
    return [i.content[0].text if i.type == "message" else i.type for i in items]


def test_the_whole_crud_of_a_conversation_and_its_items(clocked) -> None:
    _, secret = clocked.key()
    client = sdk(clocked, secret)
    conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "Hello"}],
                                               metadata={"topic": "ferries"})
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "ferries"}
    assert client.conversations.retrieve(conversation.id).created_at == conversation.created_at
    assert client.conversations.update(conversation.id, metadata={"topic": "boats"}).metadata == {"topic": "boats"}
    added = client.conversations.items.create(conversation.id, items=[
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi!"}]},
        {"type": "message", "role": "user", "content": "When does it leave?"}])
    assert texts(added.data) == ["Hi!", "When does it leave?"]
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == [
        "Hello", "Hi!", "When does it leave?"]
    newest = client.conversations.items.list(conversation.id, limit=2)
    assert texts(newest.data) == ["When does it leave?", "Hi!"] and newest.has_more
    hi = added.data[0]
    assert client.conversations.items.retrieve(hi.id, conversation_id=conversation.id).content[0].text == "Hi!"
    after = client.conversations.items.delete(hi.id, conversation_id=conversation.id)
    assert after.id == conversation.id
    assert texts(client.conversations.items.list(conversation.id, order="asc")) == ["Hello", "When does it leave?"]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(hi.id, conversation_id=conversation.id)
    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted and deleted.object == "conversation.deleted"
    with pytest.raises(openai.NotFoundError) as gone:
        client.conversations.retrieve(conversation.id)
    assert gone.value.body["param"] == "conversation_id"  # type: ignore[index]


def test_turns_on_a_conversation_append_their_input_and_output(clocked) -> None:
    key, secret = clocked.key()
    client = sdk(clocked, secret)
    conversation = client.conversations.create(items=[{"role": "system", "content": "Answer briefly."}])
    first = client.responses.create(model=MODEL, conversation=conversation.id, input="Where does the ferry leave?",
                                    max_output_tokens=4, temperature=0)
    assert first.conversation.id == conversation.id
    with client.responses.create(model=MODEL, conversation={"id": conversation.id}, input="And on Sundays?",
                                 max_output_tokens=4, temperature=0, stream=True) as events:
        last = list(events)[-1]
    assert last.type in ("response.completed", "response.incomplete")
    second = last.response  # type: ignore[union-attr]
    listed = texts(client.conversations.items.list(conversation.id, order="asc"))
    assert listed == ["Answer briefly.", "Where does the ferry leave?", first.output_text, "And on Sundays?",
                      second.output_text]
    counter = clocked.gateway.client.governor.counter
    messages = [{"role": r, "content": t} for r, t in zip(["system", "user", "assistant", "user"], listed, strict=False)]
    assert second.usage.input_tokens == counter.count_prompt(counter.chat_prompt(messages))
    assert second.usage.input_tokens_details.cached_tokens > 0
    assert texts(client.responses.input_items.list(second.id, order="asc")) == listed[:4]
    assert [r[0] for r in clocked.rows(key, "session")] == [conversation.id] * 2  # the ledger names it
    with pytest.raises(openai.BadRequestError) as chained:
        client.responses.create(model=MODEL, previous_response_id=first.id, input="x", max_output_tokens=2)
    assert chained.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_a_tool_round_trip_on_a_conversation(clocked) -> None:
    _, secret = clocked.key()
    client = sdk(clocked, secret)
    conversation = client.conversations.create()
    asked = client.responses.create(model=MODEL, conversation=conversation.id, input="Weather in Oslo?",
                                    tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                                    max_output_tokens=30, temperature=0)
    call = asked.output[0]
    answered = client.responses.create(model=MODEL, conversation=conversation.id, tools=[WEATHER], tool_choice="none",
                                       input=[{"type": "function_call_output", "call_id": call.call_id,
                                               "output": "Rain"}], max_output_tokens=3, temperature=0)
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [i.type for i in items] == ["message", "function_call", "function_call_output", "message"]
    assert items[1].call_id == call.call_id and items[2].output == "Rain"
    counter = clocked.gateway.client.governor.counter
    chain = [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": call.call_id, "name": "get_weather", "arguments": call.arguments}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "Rain"}]
    prompt = render(counter, chain, (FunctionSpec("get_weather", WEATHER["parameters"]),))  # type: ignore[arg-type]
    assert answered.usage.input_tokens == counter.count_prompt(prompt)


def test_another_key_finds_nothing_and_gets_404_never_403(clocked) -> None:
    _, secret = clocked.key()
    _, other_secret = clocked.key()
    client, other = sdk(clocked, secret), sdk(clocked, other_secret)
    conversation = client.conversations.create(items=[{"role": "user", "content": "mine"}])
    item = client.conversations.items.list(conversation.id).data[0]
    calls = [lambda: other.conversations.retrieve(conversation.id),
             lambda: other.conversations.update(conversation.id, metadata={"x": "y"}),
             lambda: other.conversations.delete(conversation.id),
             lambda: other.conversations.items.list(conversation.id),
             lambda: other.conversations.items.create(conversation.id, items=[{"role": "user", "content": "hi"}]),
             lambda: other.conversations.items.retrieve(item.id, conversation_id=conversation.id),
             lambda: other.conversations.items.delete(item.id, conversation_id=conversation.id),
             lambda: other.responses.create(model=MODEL, conversation=conversation.id, input="steal",
                                            max_output_tokens=2)]
    for call in calls:
        with pytest.raises(openai.NotFoundError, match="no conversation"):
            call()
    assert texts(client.conversations.items.list(conversation.id)) == ["mine"]  # untouched


def test_a_conversations_budget_is_held_like_a_chains(clocked) -> None:
    _, secret = clocked.key()
    _, allowed = clocked.key(can_budget_conversations=True)
    with pytest.raises(openai.PermissionDeniedError):
        sdk(clocked, secret).conversations.create(metadata={"trtkit_budget_tokens": "50"})
    client = sdk(clocked, allowed)
    conversation = client.conversations.create(metadata={"trtkit_budget_tokens": "60"})
    first = client.responses.create(model=MODEL, conversation=conversation.id, input="Hi", max_output_tokens=4,
                                    temperature=0)
    assert first.usage.total_tokens <= 60
    with pytest.raises(openai.RateLimitError) as refused:  # the chain so far + 40 more cannot fit in what is left
        client.responses.create(model=MODEL, conversation=conversation.id, input="More", max_output_tokens=40)
    assert refused.value.body["code"] == "insufficient_quota"  # type: ignore[index]


def test_an_idle_conversation_expires_and_a_heartbeat_keeps_it(clocked) -> None:
    clock, ttl = clocked.store.conversations.clock, clocked.config.gateway.conversations.ttl_seconds
    _, secret = clocked.key()
    client = sdk(clocked, secret)
    kept, idle = client.conversations.create(), client.conversations.create()
    for _ in range(3):
        clock.offset += ttl * 0.6
        beat = httpx.post(f"{clocked.url}/v1/conversations/{kept.id}/heartbeat",
                          headers={"authorization": f"Bearer {secret}"}, timeout=30).json()
    assert beat["object"] == "conversation.heartbeat" and client.conversations.retrieve(kept.id).id == kept.id
    with pytest.raises(openai.NotFoundError) as expired:
        client.conversations.retrieve(idle.id)
    assert expired.value.body["code"] == "conversation_expired"  # type: ignore[index]
