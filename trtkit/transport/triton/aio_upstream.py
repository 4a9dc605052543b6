"""Triton's gRPC server as an asyncio upstream of the governed client, over ``tritonclient.grpc.aio``.

Every request of one upstream travels on one kept bidirectional call, its responses sorted to it by request id
(``stream_mux.py``: a call per request cost ~0.8 ms of CPU to open and close). Closing a request's deltas, a
cancelled task, a deadline, or the runaway guard stops the request with the engine's ``stop`` input (on a call of
its own) and reads its stream to the end; a request the stop does not end in time is let go, and the shared call is
never cancelled for it (trtkit/wire/stop_request.py says why). A task of its own reads each call: grpc.aio cancels
the RPC when a read is cancelled (grpc/aio/_call.py ``_read``), so no deadline or cancelled task may wait on a read
directly. What to do when is decided by the exchange (``exchange.py``), which this module drives (:func:`adrive`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Generator
from typing import Any

import tritonclient.grpc.aio as aiogrpc

from trtkit.governance.governor import PreparedRequest
from trtkit.governance.metrics import UpstreamMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Delta
from trtkit.transport.triton.exchange import END as EXCHANGE_END
from trtkit.transport.triton.exchange import AsyncCallIO, Op, Step, TritonTarget, advance, exchange
from trtkit.transport.triton.protocol import stop_inputs, stop_outcome
from trtkit.transport.triton.request_path import RequestPath, TextReader, TokenReader
from trtkit.transport.triton.stream_mux import END, RequestInbox, ResponseQueue, StreamMux
from trtkit.transport.triton.upstream_base import TritonUpstreamBase
from trtkit.wire.stop_request import ENGINE_MODEL


class CallReader(ResponseQueue):
    """Reads one stream call of its own (a stop request) in a task into a queue, so that waiting for a response
    can time out or be cancelled without cancelling the call."""

    def __init__(self, call) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.call = call
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for item in self.call:
                self.items.put_nowait(item)
        except Exception as exc:  # the call failed (UNAVAILABLE, a broken stream): its consumer raises it
            self.items.put_nowait(exc)
        finally:
            self.items.put_nowait(END)


class AsyncTritonUpstream(TritonUpstreamBase):
    """The asyncio upstream of one served model (what both Triton upstreams share: upstream_base.py)."""

    def __init__(self, target: TritonTarget, counter: TokenCounter, metrics: UpstreamMetrics | None = None) -> None:
        super().__init__(target, counter, metrics)
        self._client: aiogrpc.InferenceServerClient | None = None
        self._metadata_lock: asyncio.Lock | None = None  # made in the running loop, on first use
        self._mux: StreamMux | None = None  # every request on one kept call (made in the running loop)

    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float) -> AsyncGenerator[Delta | str, None]:
        """The request's responses (exchange.py decides; _MuxCall carries). Closing it early (or cancelling the
        task reading it) stops the request with the engine's ``stop`` and waits for its stream to end; a request
        the stop does not end in time is let go: the shared call is never cancelled for one request."""
        return adrive(exchange(self.target, request.request_id, deadline, "let_go", self.metrics),
                      _MuxCall(self, request, stream))

    async def is_ready(self) -> bool:
        """True when the server is up and the served model is ready."""
        try:
            client = self._connect()
            return bool(await client.is_server_ready()) and bool(await client.is_model_ready(self.target.model_name))
        except Exception:  # any failure to ask means "not ready"
            return False

    async def aclose(self) -> None:
        """Closes the kept call and the connection."""
        if self._mux is not None:
            await self._mux.close()
            self._mux = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _connect(self) -> aiogrpc.InferenceServerClient:
        if self._client is None:
            self._client = aiogrpc.InferenceServerClient(self.target.url)
        return self._client

    async def _send_stop(self, request_id: str, until: float) -> str:
        """One stop request on its own call; "stopped", "not running" or "failed" (see protocol.stop_outcome)."""
        client = self._connect()

        async def requests():  # type: ignore[no-untyped-def]
            yield {"model_name": ENGINE_MODEL, "inputs": stop_inputs(), "request_id": request_id}

        reader = CallReader(client.stream_infer(requests(), stream_timeout=max(0.001, until - time.monotonic()) + 1.0))
        try:
            said = "stopped"
            while True:
                item = await reader.next(max(0.001, until - time.monotonic()))
                if item is END:
                    return said
                if isinstance(item, BaseException):
                    return "failed"
                said = stop_outcome(item[1]) if item[1] is not None else said
        except asyncio.TimeoutError:
            return "failed"
        finally:
            if not reader.task.done():
                reader.call.cancel()

    async def _open(self, request: PreparedRequest, stream: bool) -> tuple[RequestInbox, TextReader | TokenReader]:
        """Send the request on the kept call (a new one when the last broke). No gRPC deadline: the client's own
        deadline stops the request (trtkit/wire/stop_request.py says why a gRPC deadline, a cancel, must not)."""
        client = self._connect()
        path = self._path or await self._fetch_path(client)
        inputs, outputs = path.request(request, stream=stream)
        if self._mux is None or not self._mux.usable:
            self._mux = StreamMux(client)
        return self._mux.open(self.target.model_name, inputs, outputs, request.request_id), path.reader(request)

    async def _fetch_path(self, client: aiogrpc.InferenceServerClient) -> RequestPath:
        """The model's inputs and outputs, asked once: the first requests of a burst wait for one answer instead
        of each asking (a metadata reply costs ~7 ms of CPU to turn into JSON; 64 at once stalled the loop)."""
        if self._metadata_lock is None:
            self._metadata_lock = asyncio.Lock()
        async with self._metadata_lock:
            if self._path is None:
                self._path_from(await client.get_model_metadata(self.target.model_name, as_json=True))
            assert self._path is not None
            return self._path


class _MuxCall:
    """One request's call as the asyncio client carries it (exchange.AsyncCallIO): its inbox on the kept call."""

    def __init__(self, owner: AsyncTritonUpstream, request: PreparedRequest, stream: bool) -> None:
        self.owner, self.request, self.stream = owner, request, stream
        self.inbox: RequestInbox | None = None

    async def open(self) -> TextReader | TokenReader:
        self.inbox, reader = await self.owner._open(self.request, self.stream)
        return reader

    async def next(self, timeout: float) -> object:
        assert self.inbox is not None, "opened first"
        try:
            item = await self.inbox.next(timeout)
        except asyncio.TimeoutError:
            return None
        return EXCHANGE_END if item is END else item

    async def send_stop(self, until: float) -> str:
        return await self.owner._send_stop(self.request.request_id, until)

    async def wait_ended(self, until: float) -> bool:
        assert self.inbox is not None, "opened first"
        return self.inbox.done or await self.inbox.ended(until - time.monotonic())

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def release(self, ended: bool, broken: bool) -> None:
        """A request whose stream has not ended is let go: its later responses are dropped."""
        inbox, self.inbox = self.inbox, None
        if inbox is not None and not inbox.done:
            inbox.let_go()


async def adrive(core: Generator[Step, Any, None], io: AsyncCallIO) -> AsyncGenerator[Delta | str, None]:
    """Run the exchange over an asyncio call: its ops are awaited here, its deltas handed to the caller. A caller
    that closes the stream or a cancelled task is thrown into the exchange, which stops the request before it ends."""
    reply: Any = None
    error: BaseException | None = None
    while (step := advance(core, reply, error)) is not None:
        reply, error = None, None
        try:
            if isinstance(step, Op):
                reply = await getattr(io, step.name)(*step.args)
            else:
                yield step
        except BaseException as exc:  # the call's failure, or the caller leaving: the exchange decides
            error = exc
