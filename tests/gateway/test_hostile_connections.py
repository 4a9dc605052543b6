"""Connections that never send a proper request (issue 44, item 5), on real sockets against the gateway's own
server stack (uvicorn on httptools, as the CLI runs it): a head past gateway.limits.max_header_bytes is a 431 and
the connection closed before the rest is read; a connection that sends nothing, or its head a byte at a time, is
closed after gateway.limits.header_timeout_seconds, a body that never arrives whole is a 408 after
body_timeout_seconds. None of it needs a key, and the gateway keeps serving."""

from __future__ import annotations

import socket
import time

import pytest

from tests.helpers.gateways import RunningGateway
from tests.upstreams.hostile import chat, hostile_config, post
from trtkit.testing.hostile_upstream import HostileUpstream


@pytest.fixture(scope="module")
def gateway(tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    with HostileUpstream() as upstream:
        running = RunningGateway(hostile_config(tiny_config, header_timeout_seconds=1.0, max_header_bytes=16384,
                                                body_timeout_seconds=1.0),
                                 upstream.url, tmp_path_factory.mktemp("connections"))
        yield running
        running.stop()


def connect(gateway: RunningGateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=60)


def answer_and_close(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection (a timeout here fails the test: it never closed)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_huge_header_is_a_431_before_the_rest_is_read(gateway) -> None:
    sock = connect(gateway)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-junk: ")
    sent, piece = 0, b"a" * 65536
    try:
        while sent < 150 << 20:
            sock.sendall(piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = answer_and_close(sock) if sent < 150 << 20 else b""
    sock.close()
    assert sent < 32 << 20, f"the server read {sent} bytes of one header"  # socket buffers, not the whole header
    assert answer.startswith(b"HTTP/1.1 431") and b"gateway.limits.max_header_bytes" in answer


def test_headers_just_under_the_limit_are_served(gateway) -> None:
    _, secret = gateway.key()
    status, _ = post(gateway, secret, chat(2), headers={"x-padding": "p" * 12000})
    assert status == 200


def test_silent_and_slow_connections_are_closed(gateway) -> None:
    silent = [connect(gateway) for _ in range(50)]
    slow = connect(gateway)
    slow.sendall(b"GET /health/live HTTP/1.1\r\n")
    for _ in range(3):  # a header byte now and then: never a whole head
        slow.sendall(b"x")
        time.sleep(0.1)
    for sock in silent:
        assert answer_and_close(sock) == b""  # closed without a word
        sock.close()
    answer = answer_and_close(slow)
    slow.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"header_timeout_seconds" in answer
    assert gateway.metric('trtkit_gateway_refusals_total{reason="header_timeout"}') >= 51
    _, secret = gateway.key()
    assert post(gateway, secret, chat(2))[0] == 200  # and it keeps serving


def test_a_body_sent_a_byte_at_a_time_is_a_408(gateway) -> None:
    _, secret = gateway.key()
    sock = connect(gateway)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + secret.encode() +
                 b"\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
    answer = sock.recv(65536)  # the rest of the body never comes
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"gateway.limits.body_timeout_seconds" in answer


def test_a_kept_alive_connection_idle_between_requests_is_not_cut_by_the_head_timer(gateway) -> None:
    import http.client

    _, secret = gateway.key()
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    for _ in range(2):
        connection.request("GET", "/health/live")
        assert connection.getresponse().read() == b'{"status":"live"}'
        time.sleep(1.5)  # longer than the head timer: idle time between requests is keep-alive's to judge
    connection.close()
