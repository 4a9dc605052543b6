"""POST /v1/responses through the openai SDK (``client.responses.create(previous_response_id=...)``), against the
real tritonserver, a real store and a real ledger: conversations, their TTL through the store's clock (never
slept), keys, DELETE, bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import openai
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config
from trtkit.gateway.responses_api.items import chat_messages

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
QUESTIONS = ["Where does the ferry leave from?", "春天的花园里有什么花？", "And on Sundays?",
             "東京の天気はどうですか。", "How long is the crossing?", "谢谢，再见！"]


class StoreClock:
    """The store's time (``ConversationStore.clock``): a test moves it instead of sleeping."""

    def __init__(self) -> None:
        import time

        self.offset = 0.0
        self._time = time.time

    def __call__(self) -> float:
        return self._time() + self.offset


@pytest.fixture(scope="module")
def responses_gateway(live_server, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    """No response cache (every turn reaches the engine), the default tail strategy, a clock tests may move."""
    config = replace(gateway_config(tiny_config, cache=False),
                     gateway=replace(tiny_config.gateway, conversations=replace(tiny_config.gateway.conversations,
                                                                                ttl_seconds=600.0)))
    running = RunningGateway(config, live_server.grpc_url, tmp_path_factory.mktemp("gw-responses"))
    running.store.conversations.clock = StoreClock()
    yield running
    running.stop()


def sdk(gateway: RunningGateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def expected_input_tokens(gateway: RunningGateway, messages: list[dict[str, str]]) -> int:
    """What the engine gets for a chain: every message so far, rendered by the chat template, counted exactly."""
    counter = gateway.gateway.client.governor.counter
    return counter.count_prompt(counter.chat_prompt(messages))


def streamed_turn(client: openai.OpenAI, **kwargs):  # type: ignore[no-untyped-def]
    """One streamed turn: (the response of its last event, the deltas' text, the event types in order)."""
    types, deltas, last = [], [], None
    with client.responses.create(model=MODEL, stream=True, **kwargs) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type in ("response.completed", "response.incomplete"):
                last = event.response
    return last, "".join(deltas), types


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_six_turn_conversation_bills_what_the_engine_got_and_reuses_its_kv(responses_gateway, stream) -> None:
    gateway = responses_gateway
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    messages: list[dict[str, str]] = []
    previous, cached, ids = None, [], []
    for question in QUESTIONS:
        kwargs = dict(input=question, previous_response_id=previous, max_output_tokens=6, temperature=0)
        if stream:
            response, text, types = streamed_turn(client, **kwargs)
            assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                                 "response.content_part.added"]
            assert types[-4:-1] == ["response.output_text.done", "response.content_part.done",
                                    "response.output_item.done"] and types[-1] == f"response.{response.status}"
            assert text == response.output_text
        else:
            response = client.responses.create(model=MODEL, **kwargs)
        messages += [{"role": "user", "content": question}]
        assert response.usage.input_tokens == expected_input_tokens(gateway, messages)  # the whole chain, exactly
        assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
        messages += [{"role": "assistant", "content": response.output_text}]
        cached.append(response.usage.input_tokens_details.cached_tokens)
        previous = response.id
        ids.append(response.id)
    assert all(later > earlier for earlier, later in zip(cached, cached[1:], strict=False)), cached  # KV kept warm
    extension = response.model_extra["trtkit"]
    conversation = extension["conversation"]
    assert extension["stored"] and extension["context"]["kept_messages"] == 10
    rows = gateway.rows(key, "session, prompt_tokens, cached_tokens")
    assert rows == [(conversation, r.usage.input_tokens, c) for r, c in
                    zip([client.responses.retrieve(i) for i in ids], cached, strict=True)]
    stored = gateway.store.db.read(lambda s: s.execute(
        "SELECT messages FROM stored_responses WHERE conversation_id = ? ORDER BY created_at", (conversation,)).fetchall())
    items = [item for row in stored for part in ("input", "output") for item in json.loads(row[0])[part]]
    assert chat_messages(items) == messages  # CJK in and out, exactly


def test_json_schema_turn_completes_with_usage_in_the_completed_event(responses_gateway) -> None:
    _, secret = responses_gateway.key()
    winds = ["north", "south", "east", "west"]
    schema = {"type": "json_schema", "name": "wind", "schema": {"type": "string", "enum": winds}}
    response, text, types = streamed_turn(sdk(responses_gateway, secret), input="Which way does the wind blow?",
                                          temperature=0, max_output_tokens=20, text={"format": schema})
    assert types[-1] == "response.completed" and response.status == "completed"  # the grammar ended it
    assert 0 < response.usage.output_tokens < 20 and json.loads(text) in winds


def test_get_delete_and_another_keys_id(responses_gateway) -> None:
    _, secret = responses_gateway.key()
    _, other_secret = responses_gateway.key()
    client, other = sdk(responses_gateway, secret), sdk(responses_gateway, other_secret)
    first = client.responses.create(model=MODEL, input="Hello there", max_output_tokens=3, temperature=0)
    second = client.responses.create(model=MODEL, input="Again", previous_response_id=first.id, max_output_tokens=3)
    assert client.responses.retrieve(second.id).output_text == second.output_text
    for call in (lambda: other.responses.retrieve(first.id), lambda: other.responses.delete(first.id),
                 lambda: other.responses.create(model=MODEL, input="steal", previous_response_id=first.id)):
        with pytest.raises(openai.NotFoundError, match="no stored response"):  # as if it did not exist
            call()
    client.responses.delete(second.id)  # removes the whole chain
    for response_id in (first.id, second.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response_id)
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.create(model=MODEL, input="more", previous_response_id=first.id)
    assert gone.value.body["param"] == "previous_response_id"


def test_an_idle_chain_expires_and_a_heartbeat_keeps_it_alive(responses_gateway) -> None:
    gateway = responses_gateway
    clock, ttl = gateway.store.conversations.clock, gateway.config.gateway.conversations.ttl_seconds
    _, secret = gateway.key()
    client = sdk(gateway, secret)
    alive = client.responses.create(model=MODEL, input="Keep me", max_output_tokens=2)
    idle = client.responses.create(model=MODEL, input="Forget me", max_output_tokens=2)
    idle_conversation = idle.model_extra["trtkit"]["conversation"]
    beats = []
    for _ in range(3):  # three times most of a TTL: alive only thanks to the heartbeats
        clock.offset += ttl * 0.6
        beats.append(client.post(f"/responses/{alive.id}/heartbeat", cast_to=object, body={}))
    assert beats[-1]["expires_at"] > beats[0]["expires_at"]
    assert client.responses.create(model=MODEL, input="Still here?", previous_response_id=alive.id,
                                   max_output_tokens=2).status in ("completed", "incomplete")
    with pytest.raises(openai.NotFoundError, match=r"expired \(idle") as expired:
        client.responses.create(model=MODEL, input="Hello?", previous_response_id=idle.id)
    assert expired.value.body["code"] == "conversation_expired"
    assert gateway.store.db.read(lambda s: s.execute(
        "SELECT COUNT(*) FROM stored_responses WHERE conversation_id = ?", (idle_conversation,)).fetchone()[0]) == 0
    with pytest.raises(openai.NotFoundError):
        client.post(f"/responses/{idle.id}/heartbeat", cast_to=object, body={})


def test_truncation_disabled_refuses_a_chain_over_max_input_len(responses_gateway) -> None:
    _, secret = responses_gateway.key()
    client = sdk(responses_gateway, secret)
    previous = None
    with pytest.raises(openai.BadRequestError) as refused:
        for _ in range(12):
            previous = client.responses.create(model=MODEL, input="Tell me a long story about the sea. " * 2,
                                               previous_response_id=previous, max_output_tokens=8,
                                               temperature=0).id
    body = refused.value.body
    assert body["code"] == "context_length_exceeded" and body["param"] == "input"
    assert "over the input limit of 256 tokens" in body["message"] and 'truncation: "auto"' in body["message"]


def test_bad_input_gets_a_clear_4xx_and_the_server_keeps_serving(responses_gateway) -> None:
    _, secret = responses_gateway.key()
    client = sdk(responses_gateway, secret)
    cases = [
        (dict(input="hi", previous_response_id="resp_unknown"), openai.NotFoundError, "previous_response_id"),
        (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
         openai.BadRequestError, "input[0].content.0"),
        (dict(input=[{"type": "function_call_output", "call_id": "c", "output": "x"}]), openai.BadRequestError,
         "input[0].call_id"),
        (dict(input=[]), openai.BadRequestError, "input"),
        (dict(input="hi", tools=[{"type": "web_search"}]), openai.BadRequestError, "tools[0]"),
        (dict(input="hi", temperature=9), openai.BadRequestError, "temperature"),
        (dict(input="hi", text={"format": {"type": "json_schema", "schema": {}}}), openai.BadRequestError,
         "text.format"),
        (dict(input="hi", text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "strnig"}}}),
         openai.BadRequestError, "text.format"),  # the engine refuses to compile it
        (dict(input="hi", metadata={"trtkit_budget_tokens": "100"}), openai.PermissionDeniedError,
         "metadata.trtkit_budget_tokens"),
    ]
    for kwargs, error, param in cases:
        with pytest.raises(error) as refused:
            client.responses.create(model=MODEL, max_output_tokens=2, **kwargs)
        assert refused.value.body["param"] == param, refused.value.body
    with pytest.raises(openai.BadRequestError, match="'bogus' is not a field"):
        client.post("/responses", cast_to=object, body={"model": MODEL, "input": "hi", "bogus": 1})
    deleted = client.responses.create(model=MODEL, input="short-lived", max_output_tokens=2)
    client.responses.delete(deleted.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="more", previous_response_id=deleted.id)
    assert client.responses.create(model=MODEL, input="Still serving?", max_output_tokens=2).usage.output_tokens == 2


def test_the_sdks_stream_helper_accumulates_our_events(responses_gateway) -> None:
    """``client.responses.stream`` rebuilds the response from the events: their order and indices must be OpenAI's.
    (Its get_final_response wants response.completed; a turn cut by max_output_tokens ends response.incomplete, as
    OpenAI's do, and still accumulates.)"""
    _, secret = responses_gateway.key()
    client = sdk(responses_gateway, secret)
    first = client.responses.create(model=MODEL, input="Bonjour", max_output_tokens=4, temperature=0)
    enum = {"type": "json_schema", "name": "wind", "schema": {"type": "string", "enum": ["north", "south"]}}
    with client.responses.stream(model=MODEL, input="Which way?", previous_response_id=first.id, temperature=0,
                                 max_output_tokens=20, text={"format": enum}) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert final.output_text == deltas and final.previous_response_id == first.id and final.status == "completed"
    assert client.responses.retrieve(final.id).output_text == deltas
    with client.responses.stream(model=MODEL, input="More", previous_response_id=final.id, max_output_tokens=3,
                                 temperature=0) as stream:
        last = [e for e in stream][-1]
    assert last.type == "response.incomplete" and last.response.output[0].content[0].text == \
        client.responses.retrieve(last.response.id).output_text


def test_usage_by_session_reports_each_conversation(responses_gateway) -> None:
    from typer.testing import CliRunner

    from trtkit.cli.main import app

    _, secret = responses_gateway.key()
    client = sdk(responses_gateway, secret)
    conversations = []
    for turns in (2, 3):
        previous = None
        for _ in range(turns):
            previous = client.responses.create(model=MODEL, input="Count me", previous_response_id=previous,
                                               max_output_tokens=2, temperature=0).id
        conversations.append(client.responses.retrieve(previous).model_extra["trtkit"]["conversation"])
    report = CliRunner().invoke(app, ["usage", "--by", "session", "--json", "--store",
                                      str(responses_gateway.ledger_path)])
    assert report.exit_code == 0, report.output
    by_session = {row["session"]: row for row in json.loads(report.stdout)}
    assert [by_session[c]["requests"] for c in conversations] == [2, 3]
    assert all(by_session[c]["completion_tokens"] == 2 * by_session[c]["requests"] for c in conversations)


def test_a_turn_the_runaway_guard_stopped_is_stored_and_continues(cached_gateway) -> None:
    """The guard's stop is an answer the client got (status completed): the chain must go on from it."""
    _, secret = cached_gateway.key()
    client = sdk(cached_gateway, secret)
    stopped = client.responses.create(model=MODEL, input="Hello Hello Hello Hello", max_output_tokens=200,
                                      temperature=0)
    assert stopped.model_extra["trtkit"]["finish_reason"].startswith("guard_") and stopped.status == "completed"
    assert stopped.model_extra["trtkit"]["stored"] and 0 < stopped.usage.output_tokens < 200
    after = client.responses.create(model=MODEL, input="Go on", previous_response_id=stopped.id, max_output_tokens=3)
    assert after.model_extra["trtkit"]["conversation"] == stopped.model_extra["trtkit"]["conversation"]
