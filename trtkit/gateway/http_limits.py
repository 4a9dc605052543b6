"""Limits on a connection before its request reaches the app: the size of a request's head, and how long a
connection may take to send one (``gateway.limits.max_header_bytes``, ``header_timeout_seconds``).

uvicorn serves the gateway with httptools, which has no cap of its own on a head: it gathers a header's value
however long it grows (two connections sending a 150 MB header took the gateway from 187 to 487 MB), and uvicorn
starts no timer before a connection's first request (190 connections that sent nothing stayed open), nor while a
head arrives a byte at a time. ``h11_max_incomplete_event_size`` is h11's, not httptools'. So the gateway serves with
``HttpToolsProtocol`` under these limits: the parser is fed no more than ``max_header_bytes`` of a head (past it, a
431 and the connection closed, before the rest is read), and a connection that has not sent a complete head
``header_timeout_seconds`` after it opened, or after its request's first byte, is closed (a 408 if it sent part of
one). Between requests, uvicorn's keep-alive timeout stands. Envoy's and nginx's defaults are the model (60 KiB and
4 x 8 KiB of headers; nginx's client_header_timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from trtkit.config.gateway_limits import GatewayLimitsSection

Refused = Callable[[str], None]  # called with "header_size" or "header_timeout"


def guarded_protocol(limits: GatewayLimitsSection, on_refused: Refused | None = None) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol under ``limits`` (pass it as ``uvicorn.Config(http=...)``)."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {
        "max_header_bytes": limits.max_header_bytes, "header_timeout_s": limits.header_timeout_seconds,
        "on_refused": staticmethod(on_refused or (lambda _reason: None))})


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    max_header_bytes = 65536
    header_timeout_s = 15.0
    on_refused: Refused = staticmethod(lambda _reason: None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = True  # between a request's end (or the connection's start) and the next head's end
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()  # a connection that never sends a request is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._head_open:
            super().data_received(data)
            return
        if self._head_timer is None:
            self._start_head_timer()
        room = self.max_header_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        self._head_bytes += room
        super().data_received(data[:room])  # the head may end inside it: the callbacks then reopen the count
        if self.transport.is_closing():
            return
        if self._head_open:
            self._refuse(431, "Request Header Fields Too Large",
                         f"the request line and headers pass {self.max_header_bytes} bytes "
                         f"(gateway.limits.max_header_bytes)", "header_size")
            return
        self.data_received(data[room:])  # the body, or a pipelined request's head (counted afresh)

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._head_bytes = 0
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_open = True  # the next request's head is counted and timed from its first byte

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._head_open or self.transport is None or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # an answer is still being written: its request's head came in time
        if self._head_bytes:
            self._refuse(408, "Request Timeout", f"no complete request head within {self.header_timeout_s:g} s "
                         f"(gateway.limits.header_timeout_seconds)", "header_timeout")
        else:  # nothing sent at all: nothing to answer
            self.on_refused("header_timeout")
            self.transport.close()

    def _refuse(self, status: int, phrase: str, message: str, reason: str) -> None:
        self.on_refused(reason)
        body = message.encode("ascii")
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, phrase.encode(), len(body), body))
        self.transport.close()
