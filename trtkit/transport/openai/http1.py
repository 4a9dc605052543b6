"""A small HTTP/1.1 client for one upstream: kept-alive connections in a bounded pool, responses parsed by
httptools (the C parser uvicorn serves with), each body read piece by piece as it arrives.

Why not httpx (a dependency already): its pure-Python connection layer cost the gateway more CPU per streamed
request than all of its governance together (docs/gateway-upstreams.md has the measurement), and the
gateway's targets are counted in CPU per request. The gateway needs one thing from HTTP: POST a JSON body,
read a status and a streamed body, and close the connection at once when the request must stop (the upstream
then aborts the generation). This module does that and nothing else: no redirects, no cookies, no proxies.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from dataclasses import dataclass

import httptools


class ConnectFailed(ConnectionError):
    """No connection could be made (refused, unreachable, timed out): the request never left."""


class ConnectionBroken(ConnectionError):
    """The connection failed after the request was sent (closed, reset, or not HTTP)."""


# Body bytes read from the socket and not yet taken by the reader: past this the socket is not read until the reader
# catches up, so an upstream that streams faster than the caller reads waits in its own buffers, not in ours
MAX_BUFFERED_BYTES = 1 << 20
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _Connection(asyncio.Protocol):
    """One connection and the response being read on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.paused = False
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.pieces: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.closed:
            self.transport.resume_reading()
        self.paused = False
        self.head_done = False
        self.keep_alive = False
        self.complete = False
        self.got_bytes = False
        self.failure: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol ------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _ack_at_once(self) -> None:
        """Acknowledge what arrives at once (Linux ``TCP_QUICKACK``, which the kernel clears again: so set before each
        request and after each read). An upstream that writes its response head and first event in two small
        writes without ``TCP_NODELAY`` (Dynamo 1.6.1's frontend does) otherwise waits for this side's delayed ACK,
        up to 40 ms, on a kept-alive connection: measured in front of Dynamo, the first token came 41 ms late one
        request at a time, 4.4 ms with this (benchmarks/dynamo_gateway.py)."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is not None and _QUICKACK is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:  # not TCP (a Unix socket in a test), or closed meanwhile
                pass

    def data_received(self, data: bytes) -> None:
        self._ack_at_once()
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.failure = ConnectionBroken(f"the upstream's answer is not HTTP/1.1 ({exc})")
            self.abort()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.failure is None:
            if self.head_done and b"content-length" not in self.headers and \
                    b"chunked" not in self.headers.get(b"transfer-encoding", b""):
                self.complete = True  # a body delimited by the connection's end
            else:
                self.failure = ConnectionBroken(f"the upstream closed the connection mid-answer ({exc or 'EOF'})")
        self._wake()

    # httptools callbacks ---------------------------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()  # asked now: after the message, llhttp answers False
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)
        self.buffered += len(body)
        if self.buffered > MAX_BUFFERED_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def take_piece(self) -> bytes:
        piece = self.pieces.popleft()
        self.buffered -= len(piece)
        if self.paused and self.buffered <= MAX_BUFFERED_BYTES // 2 and not self.closed:
            self.paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        return piece

    def on_message_complete(self) -> None:
        self.complete = True

    # -----------------------------------------------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until something arrives (a piece, the head, the end, a failure)."""
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def send(self, request: bytes) -> None:
        self._reset()
        assert self.transport is not None, "connected first"
        self._ack_at_once()
        self.transport.write(request)

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure
        if self.closed and not self.complete:
            raise ConnectionBroken("the upstream closed the connection")

    @property
    def reusable(self) -> bool:
        return self.complete and not self.closed and self.failure is None and self.keep_alive

    def abort(self) -> None:
        """Close at once (unread data dropped): the upstream sees its client gone on its next write."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


@dataclass(slots=True)
class Exchange:
    """One request's answer: its status and headers, then its body piece by piece; ``release`` hands the
    connection back (kept when the answer was read to its end, closed at once otherwise)."""

    connection: _Connection
    pool: Http1Pool

    @property
    def status(self) -> int:
        return self.connection.status

    def header(self, name: str) -> str | None:
        value = self.connection.headers.get(name.lower().encode("latin-1"))
        return None if value is None else value.decode("latin-1")

    def has_piece(self) -> bool:
        """True when ``read`` would return without waiting."""
        c = self.connection
        return bool(c.pieces) or c.complete or c.failure is not None or c.closed

    async def read(self) -> bytes | None:
        """The next piece of the body, None after its last."""
        c = self.connection
        while True:
            if c.pieces:
                return c.take_piece()
            if c.complete:
                return None
            c.raise_failure()
            await c.wait()

    async def read_all(self, limit: int = 1 << 20) -> bytes:
        pieces, size = [], 0
        while (piece := await self.read()) is not None:
            size += len(piece)
            if size > limit:
                raise ConnectionBroken(f"the upstream's answer is larger than {limit} bytes")
            pieces.append(piece)
        return b"".join(pieces)

    def release(self) -> None:
        self.pool.give_back(self.connection)


class Http1Pool:
    """Kept-alive connections to one host, at most ``size`` open; a request beyond waits for one."""

    def __init__(self, host: str, port: int, *, tls: bool = False, size: int = 64) -> None:
        self.host, self.port, self.size = host, port, size
        self.ssl = ssl.create_default_context() if tls else None
        self.host_header = host if port in (80, 443) else f"{host}:{port}"
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None  # made in the running loop

    async def send(self, head: bytes, body: bytes, *, connect_timeout: float) -> Exchange:
        """Send ``head`` (request line and headers, ending in a blank line) and ``body``; returns once the answer's
        status and headers are in (the caller bounds that wait). A kept connection that the upstream closed while
        it was idle fails before any byte of an answer: the request then goes once more, on a new connection (the
        upstream never read it)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        await self._slots.acquire()
        connection = None
        try:
            for attempt in (0, 1):
                connection = self._take_idle() if attempt == 0 else None
                fresh = connection is None
                connection = connection or await self._connect(connect_timeout)
                connection.send(head + body)
                try:
                    await _head(connection)
                    return Exchange(connection, self)
                except ConnectionBroken:
                    connection.abort()
                    if fresh or connection.got_bytes:
                        raise
            raise AssertionError("unreachable: the second attempt is on a fresh connection")
        except BaseException:
            if connection is not None:
                connection.abort()
            self._slots.release()
            raise

    def give_back(self, connection: _Connection) -> None:
        if connection.reusable:
            connection.reused = True
            self._idle.append(connection)
        else:
            connection.abort()
        if self._slots is not None:
            self._slots.release()

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _transport, connection = await loop.create_connection(
                    lambda: _Connection(loop), self.host, self.port, ssl=self.ssl)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {self.host_header}: {exc or type(exc).__name__}") from exc
        return connection

    def close(self) -> None:
        for connection in self._idle:
            connection.abort()
        self._idle.clear()


async def _head(connection: _Connection) -> None:
    while not connection.head_done:
        connection.raise_failure()
        await connection.wait()
