"""asyncio client over ``tritonclient.grpc.aio``: the same governance as the sync client.

Every request of one aio client travels on one kept bidirectional call, its responses sorted to it by request
id (trtkit/transport/triton/stream_mux.py: a call per request cost ~0.8 ms of CPU to open and close). Cancelling the
awaiting task, a deadline, or the runaway guard stops the request with the engine's ``stop`` input (on a call
of its own) and reads its stream to the end; a request the stop does not end in time is let go, and the shared
call is never cancelled for it (trtkit/wire/stop_request.py says why). A task of its own reads each call: grpc.aio
cancels the RPC when a read is cancelled (grpc/aio/_call.py ``_read``), so no deadline or cancelled task may
wait on a read directly."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import tritonclient.grpc.aio as aiogrpc

from trtkit.config.schema import ModelConfig
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.flow import arun_governed
from trtkit.governance.governor import LedgerChoice, PreparedRequest
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Delta
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk
from trtkit.transport.triton.exchange import END as EXCHANGE_END
from trtkit.transport.triton.exchange import adrive, exchange
from trtkit.transport.triton.protocol import stop_inputs, stop_outcome
from trtkit.transport.triton.request_path import TextReader, TokenReader, Wire, wire_for
from trtkit.transport.triton.retry import is_server_failure, make_setup
from trtkit.transport.triton.stream_mux import END, RequestInbox, ResponseQueue, StreamMux
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


class AsyncTritonLLMClient:
    # an upstream of the governed flow whose engine stops at max_tokens and counts every token it sends (the
    # Triton contract): governance reads its counts instead of metering the output (governance/output_cap.py)
    honours_max_tokens = True

    def __init__(self, grpc_url: str, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                 metrics: ClientMetrics | None = None, model_name: str | None = None,
                 budgets: BudgetGuard | None = None) -> None:
        self.url = grpc_url
        self.setup = make_setup(config, caller=caller, ledger=ledger, counter=counter, metrics=metrics,
                                model_name=model_name, budgets=budgets)
        self.governor = self.setup.governor
        self._client: aiogrpc.InferenceServerClient | None = None
        self._wire: Wire | None = None
        self._tokens_per_block = config.build.tokens_per_block
        self._metadata_lock: asyncio.Lock | None = None  # made in the running loop, on first use
        self._streams: weakref.WeakSet[AsyncGenerator[StreamChunk, None]] = weakref.WeakSet()
        self._mux: StreamMux | None = None  # every request on one kept call (made in the running loop)

    async def generate(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
                       deadline_s: float | None = None) -> GenerationResult:
        final = None
        async for chunk in self._chunks(prompt, params, caller, deadline_s, server_stream=None):
            final = chunk.result or final
        assert final is not None, "a stream always ends with a final chunk"
        return final

    def stream(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
               deadline_s: float | None = None, request_id: str | None = None,
               on_admitted: Callable[[], None] | None = None) -> AsyncIterator[StreamChunk]:
        """Text deltas with running usage; the last chunk carries the result. ``request_id`` names the
        request (the gateway passes its own, so nested calls can find its budget). ``on_admitted`` is called
        once the request passed every limit and budget and goes to the server (before its first token: the
        gateway then answers its HTTP headers while the engine works). ``close()`` closes every stream still
        open: its request is cancelled and its ledger row written before the ledger closes."""
        chunks = self._chunks(prompt, params, caller, deadline_s, server_stream=True, request_id=request_id,
                              on_admitted=on_admitted)
        self._streams.add(chunks)
        return chunks

    async def generate_batch(self, prompts: list[str], params: SamplingParams | None = None, *,
                             caller: Caller | None = None, max_concurrency: int = 8,
                             deadline_s: float | None = None) -> list[GenerationResult]:
        """Results in the order of ``prompts``; at most ``max_concurrency`` in flight."""
        gate = asyncio.Semaphore(max(1, max_concurrency))

        async def one(prompt: str) -> GenerationResult:
            async with gate:
                return await self.generate(prompt, params, caller=caller, deadline_s=deadline_s)

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    async def is_ready(self) -> bool:
        """True when the server is up and the served model is ready."""
        try:
            client = self._connect()
            return bool(await client.is_server_ready()) and bool(await client.is_model_ready(self.setup.model_name))
        except Exception:  # any failure to ask means "not ready"
            return False

    def _connect(self) -> aiogrpc.InferenceServerClient:
        if self._client is None:
            self._client = aiogrpc.InferenceServerClient(self.url)
        return self._client

    async def close(self) -> None:
        """Closes the streams left open (a consumer that left its ``async for`` by an exception), then the
        connection and the ledger. A stream another task is reading right now is left to that task."""
        for chunks in list(self._streams):
            if not getattr(chunks, "ag_running", False):
                await chunks.aclose()
        if self._mux is not None:
            await self._mux.close()
            self._mux = None
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self.governor.ledger is not None:
            self.governor.ledger.close()

    async def __aenter__(self) -> AsyncTritonLLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _chunks(self, prompt: str, params: SamplingParams | None, caller: Caller | None,
                deadline_s: float | None, *, server_stream: bool | None, request_id: str | None = None,
                on_admitted: Callable[[], None] | None = None) -> AsyncGenerator[StreamChunk, None]:
        return arun_governed(self.governor, self, prompt, params or SamplingParams(), caller or self.setup.caller,
                             deadline_s or self.setup.deadline_s, server_stream=server_stream,
                             request_id=request_id, on_admitted=on_admitted)

    # -- the upstream of the governed flow: every request on the kept call ---------------------------------------
    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float,
               has_output: Callable[[], bool]) -> AsyncGenerator[Delta | str, None]:
        """The request's responses (exchange.py decides; _MuxCall carries). Closing it early (or cancelling the
        task reading it) stops the request with the engine's ``stop`` and waits for its stream to end; a request
        the stop does not end in time is let go: the shared call is never cancelled for one request."""
        return adrive(exchange(self.setup, self.url, request.request_id, deadline, has_output, "let_go"),
                      _MuxCall(self, request, stream))

    def is_server_failure(self, error: BaseException) -> bool:
        return is_server_failure(error)

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
        wire = self._wire or await self._fetch_wire(client)
        inputs, outputs = wire.request(request, stream=stream)
        if self._mux is None or not self._mux.usable:
            self._mux = StreamMux(client)
        return self._mux.open(self.setup.model_name, inputs, outputs, request.request_id), wire.reader(request)

    async def _fetch_wire(self, client: aiogrpc.InferenceServerClient) -> Wire:
        """The model's inputs and outputs, asked once: the first requests of a burst wait for one answer instead
        of each asking (a metadata reply costs ~7 ms of CPU to turn into JSON; 64 at once stalled the loop)."""
        if self._metadata_lock is None:
            self._metadata_lock = asyncio.Lock()
        async with self._metadata_lock:
            if self._wire is None:
                metadata = await client.get_model_metadata(self.setup.model_name, as_json=True)
                self._wire = wire_for(metadata, self.governor.counter, self._tokens_per_block)
            return self._wire


class _MuxCall:
    """One request's call as the asyncio client carries it (exchange.AsyncCallIO): its inbox on the kept call."""

    def __init__(self, owner: AsyncTritonLLMClient, request: PreparedRequest, stream: bool) -> None:
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
