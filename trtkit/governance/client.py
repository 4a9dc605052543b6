"""The governed client: a governor and an upstream, and the one flow between them (``flow.py``).

The client is the house and the upstream its plug. The client holds the governor (counts, limits, the response
cache, budgets, the runaway guard, the ledger) and runs every request through it; the upstream (``upstream.py``:
Triton gRPC, an OpenAI-compatible server, or a plug of one's own) only starts a request, streams its deltas and
counts back, and stops it. :class:`Client` runs over a blocking upstream, :class:`AsyncClient` over an asyncio one;
``trtkit.connect`` and ``trtkit.connect_async`` (``trtkit/upstreams/``) make both from an address and a config.

    with trtkit.connect("127.0.0.1:8001", config="model_configs/tiny-llama.yaml") as client:
        result = client.generate("Hello", SamplingParams(max_tokens=16))
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trtkit.governance.flow import arun_governed, run_governed
from trtkit.governance.governor import Governor
from trtkit.governance.upstream import AsyncUpstream, Upstream
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk


class Client:
    """Governed requests over a blocking upstream. ``caller``: who asks when a call names no one (its user and key
    scope budgets, the cache and the ledger row); ``deadline_s``: a call's deadline when it names none (default
    ``client.deadline_seconds``)."""

    def __init__(self, governor: Governor, upstream: Upstream, *, caller: Caller | None = None,
                 deadline_s: float | None = None) -> None:
        self.governor = governor
        self.upstream = upstream
        self.caller = caller or Caller()
        self.deadline_s = deadline_s or governor.config.client.deadline_seconds

    def generate(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
                 deadline_s: float | None = None) -> GenerationResult:
        final = None
        for chunk in self._chunks(prompt, params, caller, deadline_s, server_stream=None):
            final = chunk.result or final
        assert final is not None, "a stream always ends with a final chunk"
        return final

    def stream(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
               deadline_s: float | None = None, payload: Any = None) -> Generator[StreamChunk, None, None]:
        """Text deltas with running usage; the last chunk carries the final GenerationResult. Closing the generator
        early stops the request (recorded with finish reason 'cancelled'). ``payload``: what an upstream that relays
        bodies (``Capabilities.relays_body``) sends as given."""
        return self._chunks(prompt, params, caller, deadline_s, server_stream=True, payload=payload)

    def generate_batch(self, prompts: list[str], params: SamplingParams | None = None, *,
                       caller: Caller | None = None, max_concurrency: int = 8,
                       deadline_s: float | None = None) -> list[GenerationResult]:
        """Results in the order of ``prompts``; requests run concurrently (the engine batches them), each under the
        budgets in force here (the ``budget_scope`` s are copied into the worker threads)."""
        with ThreadPoolExecutor(max_workers=max(1, min(max_concurrency, len(prompts)))) as pool:
            futures = [pool.submit(contextvars.copy_context().run, self.generate, p, params, caller=caller,
                                   deadline_s=deadline_s) for p in prompts]
            return [f.result() for f in futures]

    def cancel(self, request_id: str) -> bool:
        """Stop a running request (its result gets finish_reason 'cancelled'); False if it is not running."""
        return self.upstream.cancel(request_id)

    def is_ready(self) -> bool:
        """True when the upstream answers and serves the model."""
        return self.upstream.is_ready()

    def close(self) -> None:
        """Closes the upstream's connections, then the ledger."""
        try:
            self.upstream.close()
        finally:
            if self.governor.ledger is not None:
                self.governor.ledger.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _chunks(self, prompt: str, params: SamplingParams | None, caller: Caller | None, deadline_s: float | None,
                *, server_stream: bool | None, payload: Any = None) -> Generator[StreamChunk, None, None]:
        return run_governed(self.governor, self.upstream, prompt, params or SamplingParams(), caller or self.caller,
                            deadline_s or self.deadline_s, server_stream=server_stream, payload=payload)


class AsyncClient:
    """Governed requests over an asyncio upstream; the arguments are :class:`Client`'s. Cancelling the task that
    awaits a call stops its request on the server."""

    def __init__(self, governor: Governor, upstream: AsyncUpstream, *, caller: Caller | None = None,
                 deadline_s: float | None = None) -> None:
        self.governor = governor
        self.upstream = upstream
        self.caller = caller or Caller()
        self.deadline_s = deadline_s or governor.config.client.deadline_seconds
        self._streams: weakref.WeakSet[AsyncGenerator[StreamChunk, None]] = weakref.WeakSet()

    async def generate(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
                       deadline_s: float | None = None) -> GenerationResult:
        final = None
        async for chunk in self._chunks(prompt, params, caller, deadline_s, server_stream=None):
            final = chunk.result or final
        assert final is not None, "a stream always ends with a final chunk"
        return final

    def stream(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
               deadline_s: float | None = None, request_id: str | None = None,
               on_admitted: Callable[[], None] | None = None, payload: Any = None) -> AsyncIterator[StreamChunk]:
        """Text deltas with running usage; the last chunk carries the result. ``request_id`` names the request (the
        gateway passes its own, so nested calls can find its budget). ``on_admitted`` is called once the request
        passed every limit and budget and goes upstream (before its first token: the gateway then answers its HTTP
        headers while the engine works). ``payload``: what an upstream that relays bodies sends as given.
        ``close()`` closes every stream still open: its request is stopped and its ledger row written before the
        ledger closes."""
        chunks = self._chunks(prompt, params, caller, deadline_s, server_stream=True, request_id=request_id,
                              on_admitted=on_admitted, payload=payload)
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
        """True when the upstream answers and serves the model."""
        return await self.upstream.is_ready()

    async def close(self) -> None:
        """Closes the streams left open (a consumer that left its ``async for`` by an exception: each request is
        stopped and recorded), then the upstream's connections and the ledger. A stream another task is reading
        right now is left to that task."""
        for chunks in list(self._streams):
            if not getattr(chunks, "ag_running", False):
                await chunks.aclose()
        try:
            await self.upstream.aclose()
        finally:
            if self.governor.ledger is not None:
                self.governor.ledger.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _chunks(self, prompt: str, params: SamplingParams | None, caller: Caller | None, deadline_s: float | None,
                *, server_stream: bool | None, request_id: str | None = None,
                on_admitted: Callable[[], None] | None = None,
                payload: Any = None) -> AsyncGenerator[StreamChunk, None]:
        return arun_governed(self.governor, self.upstream, prompt, params or SamplingParams(), caller or self.caller,
                             deadline_s or self.deadline_s, server_stream=server_stream, request_id=request_id,
                             on_admitted=on_admitted, payload=payload)
