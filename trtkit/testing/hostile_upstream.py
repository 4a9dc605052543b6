"""An OpenAI-compatible upstream that misbehaves on purpose, for tests and benchmarks of a relaying gateway.

    with HostileUpstream() as upstream:                      # http://127.0.0.1:PORT/v1, in a thread of its own
        upstream.behaviour = Behaviour(forever=True)         # ignore max_tokens and stream until the client leaves
        ...point `trtkit gateway --backend upstream.url` at it...
        assert upstream.stats.closed_early == 1

What it can do (``Behaviour``): answer honestly; read ``n_predict`` over ``max_tokens`` as llama.cpp does; ignore
``max_tokens`` and stream until the client closes; send one huge event, or bytes with no event boundary; report
usage that lies (any counts, as many final reports as asked); end with any ``finish_reason``; refuse with any
status and a body of any size. It binds 127.0.0.1 only and keeps counts of what it sent and of clients that left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Behaviour:
    tokens: int | None = None  # text events to send; None: max_tokens (n_predict where honour_n_predict)
    forever: bool = False  # stream text events until the client closes the connection
    honour_n_predict: bool = False  # llama.cpp: n_predict wins over max_tokens
    token_text: str = " the"  # one token of SmolLM2's tokenizer (the test models'), as an engine streams them
    event_bytes: int = 0  # first, one event whose text is this many bytes
    unframed_bytes: int = 0  # send this many bytes that hold no event boundary, then close
    usage: dict[str, Any] | None = None  # the usage report as sent (None: the honest one)
    usage_reports: int = 1  # final usage chunks sent
    finish_reason: Any = "length"
    status: int = 200
    error_body_bytes: int = 0  # with a status other than 200: a body of this many bytes
    pace_s: float = 0.0  # a pause between two text events
    padding_bytes: int = 0  # a field of this many bytes in every text event (no text: the output meter sees none)


@dataclass(slots=True)
class Stats:
    requests: list[dict[str, Any]] = field(default_factory=list)  # bodies received
    events_sent: int = 0
    bytes_sent: int = 0
    closed_early: int = 0  # answers the client closed before their end
    open_streams: int = 0


class HostileUpstream:
    """``capacity``: answers streamed at once at most, the others wait their turn (as an engine's batch does)."""

    def __init__(self, behaviour: Behaviour | None = None, *, capacity: int | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.by_user: dict[str, Behaviour] = {}  # a request whose "user" is here gets that behaviour instead
        self.stats = Stats()
        self.capacity = capacity
        self._slots: asyncio.Semaphore | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> HostileUpstream:
        self._thread = threading.Thread(target=self._run, name="hostile-upstream", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile upstream did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._server is not None:
            loop.call_soon_threadsafe(self._server.close)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> HostileUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Until no answer is being written (every client gone or served); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.stats.open_streams and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.stats.open_streams == 0

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *headers = head.decode("latin-1").split("\r\n")
                size = next((int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(size) if size else b""
                if line.startswith("GET"):
                    await _send_json(writer, 200, {"object": "list", "data": [{"id": "hostile", "object": "model"}]})
                    continue
                request = json.loads(body or b"{}")
                self.stats.requests.append(request)
                user = request.get("user")
                await self._answer(writer, request, self.by_user.get(user, self.behaviour) if isinstance(user, str)
                                   else self.behaviour)
                return  # a streamed answer ends with the connection
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, request: dict[str, Any], b: Behaviour) -> None:
        if b.status != 200:
            await _send_raw(writer, b.status, b"x" * b.error_body_bytes if b.error_body_bytes else
                            json.dumps({"error": {"message": "refused", "type": "invalid_request_error"}}).encode())
            return
        if self.capacity is not None and self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        async with self._slots if self._slots is not None else _nothing():
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            self.stats.open_streams += 1
            try:
                await self._events(writer, request, b)
            except ConnectionError:
                self.stats.closed_early += 1
            finally:
                self.stats.open_streams -= 1

    async def _events(self, writer: asyncio.StreamWriter, request: dict[str, Any], b: Behaviour) -> None:
        chat = "messages" in request
        if b.unframed_bytes:
            await self._write_in_pieces(writer, b"data: " + b"x" * (b.unframed_bytes - 6))
            return
        if b.event_bytes:
            await self._write_in_pieces(writer, _event(chat, "y" * b.event_bytes))
        count = b.tokens if b.tokens is not None else _asked_length(request, b.honour_n_predict)
        sent = 0
        while b.forever or sent < count:
            await self._write(writer, _event(chat, b.token_text, padding=b.padding_bytes))
            sent += 1
            if b.pace_s:
                await asyncio.sleep(b.pace_s)
        await self._write(writer, _event(chat, None, b.finish_reason))
        usage = b.usage if b.usage is not None else {"prompt_tokens": 8, "completion_tokens": sent,
                                                     "total_tokens": 8 + sent}
        for _ in range(b.usage_reports):
            await self._write(writer, b"data: " + json.dumps({"id": "h", "object": "chat.completion.chunk",
                                                              "choices": [], "usage": usage}).encode() + b"\n\n")
        await self._write(writer, b"data: [DONE]\n\n")

    async def _write_in_pieces(self, writer: asyncio.StreamWriter, data: bytes, piece: int = 1 << 16) -> None:
        """As a server streams a large body: piece by piece, each waiting for the client to take the last."""
        view = memoryview(data)
        for start in range(0, len(data), piece):
            await self._write(writer, bytes(view[start:start + piece]))

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if writer.is_closing():
            raise ConnectionResetError("the client closed the connection")
        writer.write(data)
        self.stats.events_sent += 1
        self.stats.bytes_sent += len(data)
        await writer.drain()


def _asked_length(request: dict[str, Any], honour_n_predict: bool) -> int:
    for name in (("n_predict",) if honour_n_predict else ()) + ("max_tokens", "max_completion_tokens"):
        value = request.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return 16


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _event(chat: bool, text: str | None, finish_reason: Any = None, padding: int = 0) -> bytes:
    if chat:
        delta = {} if text is None else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish_reason}
    event = {"id": "h", "object": "chat.completion.chunk" if chat else "text_completion", "created": 1,
             "model": "hostile", "choices": [choice]}
    if padding:
        event["system_fingerprint"] = "p" * padding
    return b"data: " + json.dumps(event).encode() + b"\n\n"


async def _send_json(writer: asyncio.StreamWriter, status: int, body: dict[str, Any]) -> None:
    await _send_raw(writer, status, json.dumps(body).encode(), keep_alive=True)


async def _send_raw(writer: asyncio.StreamWriter, status: int, body: bytes, *, keep_alive: bool = False) -> None:
    connection = "keep-alive" if keep_alive else "close"
    writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                 f"connection: {connection}\r\n\r\n".encode() + body)
    await writer.drain()
