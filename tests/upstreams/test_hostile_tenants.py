"""One tenant against another, and an anonymous prober against the gateway (issue 44, items 8, 9 and 11), with a
relaying gateway in front of the hostile upstream: a parent request id belongs to its own key, a cache hit counts
against RPM like any request, and the readiness probe tells nothing of the upstream."""

from __future__ import annotations

import http.client
import json
from dataclasses import replace

from tests.helpers.gateways import RunningGateway
from tests.upstreams.hostile import chat, hostile_config, hostile_pair, post
from trtkit.gateway.server import free_port
from trtkit.testing.hostile_upstream import Behaviour

upstream, relay = hostile_pair("tenants")


def test_a_parent_request_of_another_key_is_refused_and_not_told(relay, upstream) -> None:
    _, owner = relay.key()
    _, other = relay.key()
    upstream.behaviour = Behaviour(tokens=2000, pace_s=0.01)  # the parent runs until its stream is closed
    connection = http.client.HTTPConnection("127.0.0.1", relay.port, timeout=60)
    connection.request("POST", "/v1/chat/completions", json.dumps(chat(2000, stream=True)),
                       {"authorization": f"Bearer {owner}", "content-type": "application/json"})
    parent = connection.getresponse()
    first = json.loads(parent.readline()[6:])  # the first event: the parent runs
    upstream.behaviour = Behaviour(tokens=2)
    header = {"x-trtkit-parent-request-id": first["id"]}
    status, body = post(relay, other, chat(2), headers=header)
    assert status == 400 and json.loads(body)["error"]["param"] == "x-trtkit-parent-request-id"
    unknown_status, unknown = post(relay, other, chat(2), headers={"x-trtkit-parent-request-id": "chatcmpl-none"})
    told = json.loads(body)["error"]["message"].replace(first["id"], "ID")
    assert unknown_status == 400 and json.loads(unknown)["error"]["message"].replace("chatcmpl-none", "ID") == told
    assert post(relay, owner, chat(2), headers=header)[0] == 200  # its own key draws on it
    connection.close()


def test_cache_hits_count_against_rpm(upstream, tiny_config, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    config = hostile_config(tiny_config)
    config = replace(config, client=replace(config.client, cache=replace(config.client.cache, enabled=True)))
    cached = RunningGateway(config, upstream.url, tmp_path_factory.mktemp("cached"))
    try:
        upstream.behaviour = Behaviour(tokens=3, finish_reason="stop")
        key, secret = cached.key(rpm=3)
        answers = [post(cached, secret, chat(3, temperature=0)) for _ in range(30)]
        assert [status for status, _ in answers] == [200] * 3 + [429] * 27
        assert [json.loads(body)["trtkit"]["cache_hit"] for _, body in answers[:3]] == [False, True, True]
        assert len([r for r in cached.rows(key) if not str(r[3]).startswith("refused")]) == 3
    finally:
        cached.stop()


def test_the_readiness_probe_tells_nothing_of_the_upstream(tiny_config, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port("127.0.0.1")  # nothing listens there
    gone = RunningGateway(hostile_config(tiny_config), f"http://127.0.0.1:{port}/v1", tmp_path_factory.mktemp("gone"))
    try:
        connection = http.client.HTTPConnection("127.0.0.1", gone.port, timeout=60)
        connection.request("GET", "/health/ready")
        answer = connection.getresponse()
        body = answer.read()
        assert answer.status == 503 and str(port).encode() not in body and b"127.0.0.1" not in body
    finally:
        gone.stop()
