"""One tenant cannot starve another (issue 44, item 12): a key's requests in flight are capped in the store
(gateway.limits.max_concurrent_per_key, or the key's own max_concurrent), and a caller that stops reading its
stream loses the request after gateway.limits.send_timeout_seconds. The upstream here serves 12 answers at once,
the others wait their turn, as an engine's batch does."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.helpers.gateways import RunningGateway
from tests.helpers.waits import wait_for
from tests.upstreams.hostile import chat, holds, hostile_config, post
from trtkit.testing.hostile_upstream import Behaviour, HostileUpstream


@pytest.fixture(scope="module")
def upstream():  # type: ignore[no-untyped-def]
    with HostileUpstream(capacity=12) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    config = hostile_config(tiny_config, max_concurrent_per_key=8, send_timeout_seconds=2.0)
    running = RunningGateway(config, upstream.url, tmp_path_factory.mktemp("fair"))
    yield running
    running.stop()


def unread_stream(gateway: RunningGateway, secret: str, body: dict, receive_buffer: int = 0) -> socket.socket:
    """A streamed request whose answer is never read."""
    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", gateway.port))
    raw = json.dumps(body).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + secret.encode() +
                 b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(raw) + raw)
    return sock


def in_flight(gateway: RunningGateway, key) -> int:  # type: ignore[no-untyped-def]
    row = gateway.store.db.read(lambda s: s.execute("SELECT in_flight FROM key_slots WHERE key_id = ?",
                                                    (key.key_id,)).fetchone())
    return 0 if row is None else int(row[0])


def test_150_unread_streams_of_one_key_leave_room_for_another(gateway, upstream) -> None:
    greedy, greedy_secret = gateway.key()
    _, innocent = gateway.key()
    upstream.behaviour = Behaviour(pace_s=0.05)  # max_tokens events: 100 of them take 5 s
    socks = [unread_stream(gateway, greedy_secret, chat(100, stream=True)) for _ in range(150)]
    wait_for(lambda: in_flight(gateway, greedy) == 8, 60, "the greedy key's 8 slots to be taken")
    started = time.monotonic()
    status, body = post(gateway, innocent, chat(2), timeout=30)  # queued behind 150 x 5 s / 12 it would time out
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2
    assert time.monotonic() - started < 30
    assert in_flight(gateway, greedy) <= 8
    refused = 0
    for sock in socks:
        sock.settimeout(60)
        refused += sock.recv(64).startswith(b"HTTP/1.1 429")
        sock.close()
    assert refused >= 150 - 8 * 3  # each admitted stream lasts 5 s: only a few rounds of 8 could start meanwhile
    wait_for(lambda: holds(gateway) == 0 and in_flight(gateway, greedy) == 0, 60, "every slot to be given back")


def test_a_caller_that_stops_reading_loses_its_request(gateway, upstream) -> None:
    key, secret = gateway.key(max_concurrent=1)
    upstream.behaviour = Behaviour(padding_bytes=200_000, pace_s=0.001)  # 200 kB events: the buffers fill
    sock = unread_stream(gateway, secret, chat(400, stream=True), receive_buffer=4096)
    wait_for(lambda: gateway.rows(key), 60, "the stopped request's ledger row")
    assert gateway.rows(key)[0][3] == "cancelled"  # stopped, billed for what was generated
    assert in_flight(gateway, key) == 0 and holds(gateway) == 0
    sock.close()
    upstream.behaviour = Behaviour()
    assert post(gateway, secret, chat(2))[0] == 200  # its slot is free again
