"""Relay mode under attack (issue 44, items 1, 2, 3, 6 and 10's upstream part): a gateway in front of an upstream that
misbehaves on purpose (trtkit.testing.hostile_upstream), and callers who send the length fields engines read.

Every promise holds whatever the upstream does: the output is cut at the reservation and the upstream's request
closed; nothing is billed beyond the reservation; a usage report that cannot be true is not believed; no event, no
stream and no finish_reason can make the gateway buffer, rescan or label without bound; every request gets its
ledger row and leaves no hold."""

from __future__ import annotations

import concurrent.futures
import json
import urllib.request

import pytest

from tests.helpers.gateways import RunningGateway
from tests.helpers.waits import wait_for
from tests.upstreams.hostile import ROW, chat, holds, hostile_pair, post, sse_events
from trtkit.testing.hostile_upstream import Behaviour

upstream, relay = hostile_pair("hostile")


@pytest.fixture(autouse=True)
def honest(upstream):  # type: ignore[no-untyped-def]
    upstream.behaviour = Behaviour()
    yield
    upstream.behaviour = Behaviour()


def used(gateway: RunningGateway, key) -> int:  # type: ignore[no-untyped-def]
    from trtkit.governance.budgets import period_start

    state = gateway.store.account(f"key:{key.name}", period_start(key.period, __import__("time").time()))
    return 0 if state is None else state[0]


@pytest.mark.parametrize("field", ["n_predict", "max_new_tokens", "num_predict", "max_length", "options.num_predict"])
def test_a_vendor_length_field_is_refused_by_name(relay, upstream, field: str) -> None:
    _, secret = relay.key()
    upstream.behaviour = Behaviour(honour_n_predict=True)
    outer, _, inner = field.rpartition(".")
    extra = {outer: {inner: 2000}} if outer else {inner: 2000}
    status, body = post(relay, secret, chat(1, **extra))
    assert status == 400 and json.loads(body)["error"]["param"] == field
    status, body = post(relay, secret, chat(3, min_tokens=50))
    assert status == 400 and json.loads(body)["error"]["param"] == "min_tokens"


def test_twenty_requests_asking_n_predict_cannot_overshoot_a_budget(relay, upstream) -> None:
    """The attack of the issue: max_tokens 1 and n_predict 2000 against a 1,000-token budget, 20 at once."""
    key, secret = relay.key(budget_tokens=1000)
    upstream.behaviour = Behaviour(honour_n_predict=True)
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: post(relay, secret, chat(1, n_predict=2000)), range(20)))
    assert {status for status, _ in answers} == {400}
    assert used(relay, key) <= 1000 and holds(relay) == 0


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_an_upstream_that_ignores_max_tokens_is_cut_at_the_reservation(relay, upstream, stream: bool) -> None:
    key, secret = relay.key(budget_tokens=1000)
    upstream.behaviour = Behaviour(forever=True)
    closed_before = upstream.stats.closed_early
    status, body = post(relay, secret, chat(5, stream=stream))
    assert status == 200
    if stream:
        events = sse_events(body)
        text = "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices", []))
        finish = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
        assert finish == ["length"] and events[-1]["trtkit"]["finish_reason"] == "upstream_overrun"
    else:
        answer = json.loads(body)
        text = answer["choices"][0]["message"]["content"]
        assert answer["choices"][0]["finish_reason"] == "length" and answer["usage"]["completion_tokens"] <= 5
    assert text.count("the") <= 5  # nothing past the reservation reached the caller
    wait_for(lambda: upstream.stats.closed_early > closed_before, 30, "the upstream's request to be closed")
    prompt, completion, _, reason, flags, _ = relay.rows(key, ROW)[-1]
    assert completion <= 5 and reason == "upstream_overrun" and "overrun" in flags
    assert used(relay, key) <= prompt + 5 and holds(relay) == 0
    assert relay.local_metric("trtkit_client_usage_flags_total", model="tiny-llama", flag="overrun") >= 1


def test_a_stream_without_end_never_overshoots_a_budget(relay, upstream) -> None:
    key, secret = relay.key(budget_tokens=1000)
    upstream.behaviour = Behaviour(forever=True)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(relay, secret, chat(30, stream=True)), range(12)))
    assert all(status in (200, 429) for status, _ in answers)
    assert used(relay, key) <= 1000 and holds(relay) == 0


@pytest.mark.parametrize("usage, reports", [
    ({"prompt_tokens": 10, "completion_tokens": 10**12, "total_tokens": 10**12}, 1),
    ({"prompt_tokens": 10, "completion_tokens": 2**63, "total_tokens": 2**63}, 1),
    ({"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}, 1000),
    ({"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
      "prompt_tokens_details": {"cached_tokens": 10**9}}, 1),
], ids=["10**12", "2**63", "1000-reports", "cached-past-prompt"])
def test_usage_that_lies_is_bounded_and_every_request_keeps_its_row(relay, upstream, usage, reports) -> None:
    key, secret = relay.key(budget_tokens=10_000)
    upstream.behaviour = Behaviour(tokens=4, usage=usage, usage_reports=reports)
    status, body = post(relay, secret, chat(8, stream=True, stream_options={"include_usage": True}))
    assert status == 200
    shown = [e["usage"] for e in sse_events(body) if e.get("usage")]
    assert len(shown) == 1 and shown[0]["completion_tokens"] <= 8
    assert 0 <= shown[0]["prompt_tokens_details"]["cached_tokens"] <= shown[0]["prompt_tokens"]
    rows = relay.rows(key, ROW)
    assert len(rows) == 1
    prompt, completion, cached, _, flags, cost = rows[0]
    assert completion <= 8 and 0 <= cached <= prompt and cost >= 0 and flags
    assert used(relay, key) == prompt + completion and holds(relay) == 0


def test_a_huge_event_breaks_only_its_own_answer(relay, upstream) -> None:
    key, secret = relay.key()
    upstream.behaviour = Behaviour(tokens=1, event_bytes=10 << 20)
    status, body = post(relay, secret, chat(5, stream=True))  # a 502 before the stream began
    assert status == 502 and b"max_event_bytes" in body and b"upstream_error" in body
    assert upstream.stats.bytes_sent < 10 << 20  # the gateway closed it: the rest was never even sent
    upstream.behaviour = Behaviour()
    assert post(relay, secret, chat(3))[0] == 200 and holds(relay) == 0


def test_a_stream_without_event_boundaries_is_cut_at_the_event_limit(relay, upstream) -> None:
    _, secret = relay.key()
    before = upstream.stats.bytes_sent
    upstream.behaviour = Behaviour(unframed_bytes=100 << 20)
    status, body = post(relay, secret, chat(5))
    assert status == 502 and b"max_event_bytes" in body
    wait_for(lambda: upstream.wait_idle(0), 30, "the upstream's stream to be closed")
    assert upstream.stats.bytes_sent - before < 20 << 20  # read up to the limit, then closed
    assert holds(relay) == 0


def test_a_giant_finish_reason_reaches_no_label_no_row_and_no_answer(relay, upstream) -> None:
    key, secret = relay.key()
    for i in range(3):
        upstream.behaviour = Behaviour(tokens=2, finish_reason=f"{i}" + "z" * 50_000)
        status, body = post(relay, secret, chat(5, stream=i % 2 == 0))
        assert status == 200 and b"zzzz" not in body
    with urllib.request.urlopen(f"{relay.url}/metrics", timeout=10) as r:
        metrics = r.read()
    assert b"zzzz" not in metrics and len(metrics) < 200_000
    assert {row[3] for row in relay.rows(key, ROW)} == {"unknown"}


def test_an_upstream_refusal_over_a_megabyte_is_a_502(relay, upstream) -> None:
    _, secret = relay.key()
    upstream.behaviour = Behaviour(status=400, error_body_bytes=2 << 20)
    status, body = post(relay, secret, chat(5))
    assert status == 502 and json.loads(body)["error"]["code"] == "upstream_error"
    assert holds(relay) == 0
