"""A request stopped by the gateway stops in llama-server too (its slot frees before max_tokens: /slots and
/metrics say so), is billed for what arrived, counted locally, and its holds are released: a client that leaves, the
runaway guard, a deadline, the upstream killed mid-stream, an upstream that is not there. The gateway keeps serving.

Every generation here could run 1,500 tokens (``ignore_eos``); each stop is proven by llama-server predicting no
more than the gateway received plus a small slack (what was in flight when the gateway let go), whatever the
machine's speed, and every wait is a polled condition."""

from __future__ import annotations

import time

import openai
import pytest

from tests.helpers.gateways import RunningGateway
from tests.helpers.llama import LlamaServer
from tests.helpers.waits import wait_for
from tests.upstreams.conftest import MODEL, relay_config, sdk
from trtkit.gateway.server import free_port

pytestmark = pytest.mark.slow

LONG = {"max_tokens": 1500, "temperature": 0, "extra_body": {"ignore_eos": True}}
MESSAGES = [{"role": "user", "content": "Tell me a long story about the sea."}]
ROW = "completion_tokens, finish_reason, counted_locally, local_completion_tokens"
# tokens llama-server may predict past what the gateway received: those in flight (its socket, the gateway's
# buffer) when the gateway closes, and the one it writes before it sees the close; far below the 1,500 it would run
SLACK = 32


def read_some(stream, pieces: int) -> str:  # type: ignore[no-untyped-def]
    text = ""
    for chunk in stream:
        text += "".join(c.delta.content or "" for c in chunk.choices)
        if text and (pieces := pieces - 1) <= 0:
            break
    return text


def stopped_early(llama: LlamaServer, predicted_before: float, received: int) -> int:
    """Waits until no slot works, then returns the tokens predicted since; the gateway's stop reached llama-server
    if it predicted no more than the ``received`` tokens the gateway billed, plus SLACK."""
    wait_for(lambda: llama.busy_slots() == 0, 120, "llama-server's slots to free")
    predicted = int(llama.metric("tokens_predicted_total") - predicted_before)
    assert predicted <= received + SLACK, (predicted, received)
    return predicted


def holds_released(gateway: RunningGateway) -> bool:
    return gateway.store.db.read(lambda s: s.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]) == 0


def test_a_client_that_leaves_mid_stream_frees_the_upstream_slot(relay, llama) -> None:
    key, secret = relay.key(budget_tokens=100_000)
    before = llama.metric("tokens_predicted_total")
    stream = sdk(relay, secret).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **LONG)
    text = read_some(stream, 3)
    stream.close()  # the connection goes: the gateway closes llama-server's request at once
    wait_for(lambda: relay.rows(key, ROW), 60, "the cancelled request's ledger row")
    completion, reason, counted_locally, _ = relay.rows(key, ROW)[0]
    stopped_early(llama, before, completion)
    assert reason == "cancelled" and counted_locally == 1
    counter = relay.gateway.client.governor.counter
    assert completion >= len(counter.text_ids(text))  # what the gateway received, counted with the tokenizer
    assert completion < 1500
    wait_for(lambda: holds_released(relay), 30, "the hold's release")


@pytest.fixture(scope="module")
def guarded(llama, smollm2_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The runaway guard on: 8 punctuation characters in a row stop a stream."""
    running = RunningGateway(relay_config(smollm2_config, guard=True), llama.api, tmp_path_factory.mktemp("guarded"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def hurried(llama, smollm2_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Every request's deadline (client.deadline_seconds) at 3 s."""
    running = RunningGateway(relay_config(smollm2_config, deadline_s=3.0), llama.api, tmp_path_factory.mktemp("hurried"))
    yield running
    running.stop()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_the_runaway_guard_stops_the_upstream(guarded, llama, stream: bool) -> None:
    key, secret = guarded.key()
    bang = guarded.gateway.client.governor.counter.text_ids("!")[0]
    before = llama.metric("tokens_predicted_total")
    request = {**LONG, "extra_body": {"ignore_eos": True, "logit_bias": {str(bang): 100}}}
    answer = sdk(guarded, secret).completions.create(model=MODEL, prompt="Shout:", stream=stream, **request)
    if stream:
        answer = list(answer)[-1]  # type: ignore[assignment]
    assert answer.trtkit["finish_reason"] == "guard_punctuation"  # type: ignore[union-attr]
    completion, reason, counted_locally, _ = guarded.rows(key, ROW)[0]
    stopped_early(llama, before, completion)
    assert reason == "guard_punctuation" and counted_locally == 1 and 8 <= completion < 1500


def test_a_deadline_stops_the_upstream(hurried, llama) -> None:
    key, secret = hurried.key()
    before, started = llama.metric("tokens_predicted_total"), time.monotonic()
    answer = sdk(hurried, secret).chat.completions.create(model=MODEL, messages=MESSAGES, **LONG)
    assert time.monotonic() - started >= 3.0 and answer.trtkit["finish_reason"] == "deadline"  # type: ignore[attr-defined]
    row = hurried.rows(key, ROW)[0]
    stopped_early(llama, before, row[0])
    assert row[1] == "deadline" and row[2] == (1 if row[0] else 0)  # counted locally: what arrived, if anything


def test_the_upstream_killed_mid_stream(relay, llama) -> None:
    key, secret = relay.key(budget_tokens=100_000)
    stream = sdk(relay, secret).chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **LONG)
    text = read_some(stream, 3)
    llama.kill()
    try:
        with pytest.raises(openai.APIError, match="upstream model server failed"):
            text += read_some(stream, 10_000)  # the stream's last event is the error
        wait_for(lambda: relay.rows(key, ROW), 60, "the broken request's ledger row")
        completion, reason, counted_locally, _ = relay.rows(key, ROW)[0]
        assert reason == "error" and counted_locally == 1 and completion >= 1
        wait_for(lambda: holds_released(relay), 30, "the hold's release")
        with pytest.raises(openai.APIStatusError) as refused:  # the gateway keeps serving: with a clear 503
            sdk(relay, secret).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        assert refused.value.status_code == 503 and refused.value.code == "upstream_unavailable"
    finally:
        llama.start()
    answer = sdk(relay, secret).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    assert answer.usage.completion_tokens <= 2  # served again once the upstream is back


def test_an_upstream_that_is_not_there(smollm2_config, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    nowhere = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"
    running = RunningGateway(relay_config(smollm2_config), nowhere, tmp_path_factory.mktemp("nowhere"))
    try:
        key, secret = running.key(budget_tokens=10_000)
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as refused:
                answer = sdk(running, secret).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4,
                                                                      stream=stream)
                list(answer)  # type: ignore[call-overload]
            assert refused.value.status_code == 503 and refused.value.code == "upstream_unavailable"
            assert refused.value.response.headers["retry-after"] == "1"
        assert running.rows(key) == [] and holds_released(running)  # nothing billed, every hold released
        spent = running.store.db.read(lambda s: s.execute(
            "SELECT COALESCE(SUM(used_tokens + reserved_tokens), 0) FROM budget_accounts").fetchone()[0])
        assert spent == 0
        import httpx

        assert httpx.get(f"{running.url}/health/ready").status_code == 503
        assert httpx.get(f"{running.url}/health/live").status_code == 200
    finally:
        running.stop()
