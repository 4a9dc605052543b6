"""How a generating endpoint finishes, the same for chat, completions, the relay, the Responses API and the
Messages API: a stream of events that a disconnect cancels (and a caller that reads nothing for
``gateway.limits.send_timeout_seconds`` loses), or the result awaited (499 if the client left first: the request is
stopped and billed for what the engine did), with the metrics of what finished (``observe``).

An endpoint hands these its events or what to await, and gets back a response or the result to answer; nothing here
calls back into the endpoint but the ``piece`` / ``last`` formatters of its stream's chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from trtkit.gateway.error_responses import http_error
from trtkit.gateway.generation import CallInfo, Generation, ServingParts
from trtkit.gateway.openai_objects import LastEvent
from trtkit.governance.vocabulary import GenerationResult, SamplingParams, StreamChunk

log = logging.getLogger(__name__)
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left before its answer


async def stream_or_wait(ctx: ServingParts, generation: Generation, call: CallInfo, *,
                         events: AsyncIterator[bytes] | None, wait: Awaitable[GenerationResult] | None = None,
                         operation: str = "chat") -> Response | GenerationResult:
    """``events`` (a stream's bytes, not yet started; None: not streamed): the streamed response. Otherwise the result
    of ``wait`` (default: the generation's own), for the endpoint to answer, or a 499 response if the client left
    first. ``operation``: gen_ai.operation.name of the metrics and span (``observe``)."""
    if events is not None:
        return CancellingStreamResponse(events, generation.headers,
                                        lambda: ctx.metrics.disconnects.labels("true").inc(), ctx.send_timeout_s)
    finished, result = await run_or_cancel(wait if wait is not None else generation.result(), call.receive)
    if not finished:
        ctx.metrics.disconnects.labels("false").inc()
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    observe(ctx, result, operation=operation, streamed=False, params=generation.params)
    return result


async def stream_chunks(ctx: ServingParts, generation: Generation, *, piece: Callable[[StreamChunk], bytes],
                        last: Callable[[StreamChunk], Awaitable[bytes]], first: bytes = b"",
                        failed: Callable[[Exception], bytes] | None = None,
                        operation: str = "chat") -> AsyncIterator[bytes]:
    """A stream's bytes: ``first``, ``piece(chunk)`` per chunk, then ``last(chunk)`` of the final chunk (its ``result``
    set) with the body's end in one write; an upstream's failure mid-stream is the stream's last event (``failed``,
    default OpenAI's error body), never a traceback. Closed at any point, it stops the request (the client left)."""
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
                yield LastEvent(await last(chunk))
                return
    except Exception as exc:
        yield (failed or sse_error)(exc)
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
        await generation.aclose()


def observe(ctx: ServingParts, result: GenerationResult, *, operation: str, streamed: bool,
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
    error = http_error(exc)
    body = {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}
    return b"data: " + json.dumps(body).encode("utf-8") + b"\n\n"
