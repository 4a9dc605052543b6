"""What every generating endpoint shares: admission through the client's Governor, one run per request,
and cancellation when the HTTP client goes away.

The request flow (count, limits, cache, budgets, transport, guard, ledger) is the asyncio client's;
this module only adds who is asking (the key, via ``admission.current_key``), the parent request's
budget for nested calls, and the link between the HTTP connection and the Triton call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from trtkit.config.schema import ModelConfig
from trtkit.errors import BudgetExceededError, InputTooLongError
from trtkit.gateway.admission import StoreRuleBook, current_key
from trtkit.gateway.errors import (
    ConcurrencyLimitedError,
    ModelNotFoundError,
    RateLimitedError,
    RequestValidationError,
)
from trtkit.gateway.keys import ApiKey
from trtkit.gateway.metrics import GatewayMetrics
from trtkit.gateway.openai_objects import LastEvent
from trtkit.gateway.telemetry import Telemetry
from trtkit.gateway.upstreams import GatewayClient
from trtkit.governance.budgets import draw_on
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk
from trtkit.transport.openai_client import AsyncOpenAIUpstreamClient

log = logging.getLogger(__name__)
PARENT_HEADER = "x-trtkit-parent-request-id"
_REFUSALS: tuple[type[Exception], ...] = (BudgetExceededError, RateLimitedError, InputTooLongError)


@dataclass(slots=True)
class ServingContext:
    config: ModelConfig
    client: GatewayClient
    rulebook: StoreRuleBook
    metrics: GatewayMetrics
    telemetry: Telemetry | None = None  # OpenTelemetry GenAI metrics and spans (gateway.telemetry)

    @property
    def model(self) -> str:
        return self.config.name

    @property
    def send_timeout_s(self) -> float:
        return self.config.gateway.limits.send_timeout_seconds

    @property
    def relays(self) -> bool:
        """The upstream is an OpenAI-compatible server: requests go to it as given, answers come back as it sent
        them (``gateway.relay``), instead of the Triton contract's endpoints."""
        return isinstance(self.client, AsyncOpenAIUpstreamClient)


@dataclass(slots=True)
class CallInfo:
    """What the HTTP layer knows about a call."""

    key: ApiKey | None
    receive: Receive
    parent_id: str | None = None


@dataclass(slots=True)
class Generation:
    """An admitted request (refusals became HTTP errors before any byte): its first chunk in hand, or, for a
    stream, still coming (``first`` a task: the headers go out while the engine works on the first token)."""

    request_id: str
    first: StreamChunk | asyncio.Future[StreamChunk]
    rest: AsyncIterator[StreamChunk]
    headers: dict[str, str] = field(default_factory=dict)
    params: SamplingParams | None = None  # as admitted (the span's request attributes)

    async def chunks(self) -> AsyncIterator[StreamChunk]:
        # shielded: a client gone meanwhile must not cancel the request's first step (see aclose)
        first = self.first if isinstance(self.first, StreamChunk) else await asyncio.shield(self.first)
        yield first
        if first.result is None:
            async for chunk in self.rest:
                yield chunk

    async def aclose(self) -> None:
        """Stops the request if it still runs. A client gone before the first token: the request runs to it
        first (its prefill is done by then), so it is billed and recorded like any request cancelled mid-stream
        (the flow bills a request with no output as never having reached the engine)."""
        if isinstance(self.first, asyncio.Future):
            with contextlib.suppress(Exception):
                await self.first
        await self.rest.aclose()  # type: ignore[attr-defined]

    async def result(self) -> GenerationResult:
        final = None
        async for chunk in self.chunks():
            final = chunk.result or final
        assert final is not None, "a stream always ends with a final chunk"
        return final


def check_model(ctx: ServingContext, model: str, key: ApiKey | None) -> None:
    if model != ctx.model:
        raise ModelNotFoundError(f"model '{model}' is not served here; GET /v1/models lists what is "
                                 f"(this gateway serves '{ctx.model}')")
    refused_by = None if key is None else key.refuses_model(model)
    if refused_by is not None:
        raise ModelNotFoundError(f"model '{model}' is not allowed for {refused_by} (its allowed models); ask for "
                                 f"it to be added there")


def caller_of(key: ApiKey | None, user: str | None, model: str, session: str = "", dialect: str = "openai") -> Caller:
    """Who asks: the key (its name is the tenant), its user, the levels it hangs under and its organisation's
    price for the model, if the organisation sets one; ``dialect``: the API asked (the ledger row's)."""
    if key is None:
        return Caller(user=user or "", session=session, dialect=dialect)
    levels = key.level_names()
    org = next((scope for scope in key.chain if scope.level == "org"), None)
    return Caller(user=key.user or user or "", key_id=key.name, session=session, org=levels.get("org", ""),
                  team=levels.get("team", ""), project=levels.get("project", ""),
                  prices=None if org is None else org.prices.get(model), dialect=dialect)


async def start_generation(ctx: ServingContext, call: CallInfo, prompt: str, params: SamplingParams,
                           user: str | None, *, at_admission: bool = False, session: str = "",
                           dialect: str = "openai") -> Generation:
    """Admit and send one request; raises the refusal (budget, rate, context) before anything is sent. With
    ``at_admission`` (a stream) it returns once admitted, its first chunk still coming; otherwise with the first
    chunk in hand (and an engine's refusal raised). ``session``: the conversation it belongs to (its ledger row
    names it; ``client.budgets`` rules of scope session hold it); ``dialect``: the API asked (the ledger row's)."""
    key = call.key
    caller = caller_of(key, user, ctx.model, session, dialect)
    request_id = uuid.uuid4().hex
    governor = ctx.client.governor
    scope = None
    if call.parent_id:
        scope = governor.budgets.scope_of(_bare_id(call.parent_id), caller.tenant)
        if scope is None:  # another key's request reads as no request: its existence is not told
            raise RequestValidationError(f"{PARENT_HEADER} '{call.parent_id[:100]}' names no running request of "
                                         f"this API key; send it only while the parent runs, with the parent's key",
                                         param=PARENT_HEADER)
    token = current_key.set(key)
    admitted = asyncio.Event()
    try:
        with draw_on(scope) if scope is not None else contextlib.nullcontext():
            chunks = ctx.client.stream(prompt, params, caller=caller, request_id=request_id,
                                       on_admitted=admitted.set if at_admission else None)
            first: StreamChunk | asyncio.Future[StreamChunk]
            try:
                if at_admission:  # whichever comes first: admission, or the first chunk (a refusal, a cache hit)
                    pending: asyncio.Future[StreamChunk] = asyncio.ensure_future(_next(chunks))
                    try:
                        await _first_of(pending, admitted)
                    except asyncio.CancelledError:  # this handler was cancelled (shutdown): so is the request
                        pending.cancel()
                        raise
                    first = await pending if pending.done() else pending
                else:
                    first = await _next(chunks)
            except _REFUSALS as exc:
                await governor.arecord_refusal(caller, request_id, _reason(exc))
                raise
    finally:
        current_key.reset(token)
        headers = ctx.rulebook.rate_headers.pop(request_id, {})  # also when the backend failed: no leak
    return Generation(request_id, first, chunks, headers, params)


async def refuse_at_cap(ctx: ServingContext, key: ApiKey | None, dialect: str = "openai") -> None:
    """A key that holds its concurrency cap on this replica already is refused at the door, before its body is
    parsed or its prompt counted, with its refusal row as at admission."""
    try:
        ctx.rulebook.refuse_at_cap(key)
    except ConcurrencyLimitedError as exc:
        caller = caller_of(key, None, ctx.model, dialect=dialect)  # its levels named in the row, as at admission
        await ctx.client.governor.arecord_refusal(caller, uuid.uuid4().hex, _reason(exc))
        raise


async def _next(chunks: AsyncIterator[StreamChunk]) -> StreamChunk:
    return await chunks.__anext__()


async def _first_of(first: asyncio.Future[StreamChunk], admitted: asyncio.Event) -> None:
    waiter: asyncio.Future[Any] = asyncio.ensure_future(admitted.wait())
    watched: list[asyncio.Future[Any]] = [first, waiter]
    try:
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _bare_id(response_id: str) -> str:
    return response_id.split("-", 1)[1] if response_id.startswith(("chatcmpl-", "cmpl-")) else response_id


def _reason(exc: Exception) -> str:
    if isinstance(exc, ConcurrencyLimitedError):
        return "concurrency"
    if isinstance(exc, RateLimitedError):
        return "rate_limit"
    return "budget" if isinstance(exc, BudgetExceededError) else "context_length"


async def stream_or_wait(ctx: ServingContext, generation: Generation, call: CallInfo, *, stream: bool,
                         events: Callable[[], AsyncIterator[bytes]],
                         answer: Callable[[GenerationResult], Awaitable[Response]],
                         wait: Callable[[], Awaitable[GenerationResult]] | None = None,
                         operation: str = "chat") -> Response:
    """How a generating endpoint finishes: a stream of ``events()`` that a disconnect cancels (and a caller that reads
    nothing for ``gateway.limits.send_timeout_seconds`` loses), or the result awaited (``wait()``, default the
    generation's result; 499 if the client left first: the request is cancelled and billed for what the engine did)
    and ``answer``-ed. ``operation``: gen_ai.operation.name of the metrics and span (``observe``)."""
    if stream:
        return CancellingStreamResponse(events(), generation.headers,
                                        lambda: ctx.metrics.disconnects.labels("true").inc(), ctx.send_timeout_s)
    finished, result = await run_or_cancel(wait() if wait is not None else generation.result(), call.receive)
    if not finished:
        ctx.metrics.disconnects.labels("false").inc()
        return Response(status_code=499)
    observe(ctx, result, operation=operation, streamed=False, params=generation.params)
    return await answer(result)


async def stream_chunks(ctx: ServingContext, generation: Generation, *, piece: Callable[[StreamChunk], bytes],
                        last: Callable[[GenerationResult], Awaitable[bytes]], first: bytes = b"",
                        failed: Callable[[Exception], bytes] | None = None,
                        operation: str = "chat") -> AsyncIterator[bytes]:
    """A stream's bytes: ``first``, ``piece(chunk)`` per chunk, ``last(result)`` with the body's end in one write; a
    backend failure mid-stream is the stream's last event (``failed``, default OpenAI's error body), never a
    traceback. Closed at any point, it stops the request (the client left)."""
    chunks = generation.chunks()
    try:
        if first:
            yield first
        async for chunk in chunks:
            out = piece(chunk)
            if out:
                yield out
            if chunk.result is not None:
                observe(ctx, chunk.result, operation=operation, streamed=True, params=generation.params)
                yield LastEvent(await last(chunk.result))
                return
    except Exception as exc:
        yield (failed or sse_error)(exc)
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
        await generation.aclose()


def observe(ctx: ServingContext, result: GenerationResult, *, operation: str, streamed: bool,
            params: SamplingParams | None = None) -> None:
    """A finished generation's metrics: Prometheus always; OpenTelemetry's GenAI metrics and span when on.
    ``operation``: ``chat`` or ``text_completion`` (gen_ai.operation.name)."""
    if result.ttft_s is not None:
        ctx.metrics.ttft.observe(result.ttft_s)
    ctx.metrics.latency.observe(result.latency_s)
    if ctx.telemetry is not None:
        ctx.telemetry.record(result, operation=operation, model=ctx.model, streamed=streamed, params=params)


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client goes away (the request body has been read, so only that can arrive)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def run_or_cancel(work: Awaitable[Any], receive: Receive) -> tuple[bool, Any]:
    """(finished, value): the work's value, or (False, None) after cancelling it because the client left.
    Cancelling the task cancels the Triton request; the client bills what was generated."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task.done():
        return True, task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False, None


class CancellingStreamResponse(Response):
    """Server-sent events that stop the generation as soon as the client disconnects (whatever the ASGI
    server's spec version: we watch ``receive`` ourselves instead of waiting for a failed send)."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], headers: dict[str, str],
                 on_disconnect: Callable[[], None], send_timeout_s: float | None = None) -> None:
        # No super().__init__: it would declare a Content-Length for an empty body.
        self.send_timeout_s = send_timeout_s  # a caller that takes no byte this long loses its request
        self.status_code = 200
        self.background = None
        all_headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", **headers}
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in all_headers.items()]
        self.events = events
        self.on_disconnect = on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded_send(message: dict[str, Any]) -> None:
            # uvicorn's send waits while the connection's write buffer is full: a caller that never reads would
            # hold its request (and its key's concurrency slot, and the engine's work) for ever
            async with asyncio.timeout(self.send_timeout_s):
                await send(message)  # type: ignore[arg-type]

        async def pump() -> None:
            await bounded_send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for event in self.events:
                if isinstance(event, LastEvent):  # with the end of the body, in one write
                    await bounded_send({"type": "http.response.body", "body": bytes(event), "more_body": False})
                    return
                await bounded_send({"type": "http.response.body", "body": event, "more_body": True})
            await bounded_send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            finished, _ = await run_or_cancel(pump(), receive)
        except OSError:  # the send itself found the connection gone
            finished = False
        except TimeoutError:  # the caller stopped reading (gateway.limits.send_timeout_seconds): as if gone
            log.warning("a caller read nothing of its stream for %.0f s (gateway.limits.send_timeout_seconds); "
                        "its request is stopped", self.send_timeout_s)
            finished = False
        if not finished:
            self.on_disconnect()
        aclose = getattr(self.events, "aclose", None)
        if aclose is not None:
            await aclose()


def sse_error(exc: Exception) -> bytes:
    """An error after the stream began (headers sent): OpenAI's error body as the last event."""
    import json

    from trtkit.gateway.error_responses import http_error

    error = http_error(exc)
    body = {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}
    return b"data: " + json.dumps(body).encode("utf-8") + b"\n\n"


def created_now() -> int:
    return int(time.time())
