"""The asyncio client of an OpenAI-compatible server, with the same governance as the Triton clients: the one
governed flow (``governance.flow.arun_governed``) over an ``OpenAIUpstream``.

    async with AsyncOpenAIUpstreamClient(UpstreamSettings("http://127.0.0.1:8080/v1", "smollm2"),
                                         config=load_config("model_configs/smollm2-135m.yaml")) as client:
        result = await client.generate("Hello", SamplingParams(max_tokens=16))

``trtkit gateway CONFIG --backend http://HOST:PORT/v1`` serves through one of these; so can a library user.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from trtkit.config.schema import ModelConfig
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.flow import arun_governed
from trtkit.governance.governor import LedgerChoice
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk
from trtkit.transport.openai.upstream import OpenAIUpstream, UpstreamSettings
from trtkit.transport.triton.retry import make_setup


class AsyncOpenAIUpstreamClient:
    def __init__(self, settings: UpstreamSettings, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                 metrics: ClientMetrics | None = None, budgets: BudgetGuard | None = None) -> None:
        self.url = settings.url
        self.setup = make_setup(config, caller=caller, ledger=ledger, counter=counter, metrics=metrics,
                                model_name=settings.model, budgets=budgets)
        self.governor = self.setup.governor
        m = self.governor.metrics
        self.upstream = OpenAIUpstream(settings, chat_wrapped=self.governor.counter.wraps_in_chat_template,
                                       on_retry=lambda: m.retries.labels(self.governor.model).inc())
        self._streams: weakref.WeakSet[AsyncGenerator[StreamChunk, None]] = weakref.WeakSet()

    async def generate(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
                       deadline_s: float | None = None) -> GenerationResult:
        final = None
        async for chunk in self._chunks(prompt, params, caller, deadline_s, server_stream=False):
            final = chunk.result or final
        assert final is not None, "a stream always ends with a final chunk"
        return final

    def stream(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
               deadline_s: float | None = None, request_id: str | None = None,
               on_admitted: Callable[[], None] | None = None) -> AsyncIterator[StreamChunk]:
        """Text deltas (each with the upstream's own event) and running usage; the last chunk carries the result.
        The arguments are ``AsyncTritonLLMClient.stream``'s."""
        chunks = self._chunks(prompt, params, caller, deadline_s, server_stream=True, request_id=request_id,
                              on_admitted=on_admitted)
        self._streams.add(chunks)
        return chunks

    async def is_ready(self) -> bool:
        return await self.upstream.is_ready()

    async def close(self) -> None:
        """Closes the streams left open (their requests stopped and recorded), the connections and the ledger."""
        for chunks in list(self._streams):
            if not getattr(chunks, "ag_running", False):
                await chunks.aclose()
        self.upstream.close()
        if self.governor.ledger is not None:
            self.governor.ledger.close()

    async def __aenter__(self) -> AsyncOpenAIUpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _chunks(self, prompt: str, params: SamplingParams | None, caller: Caller | None,
                deadline_s: float | None, *, server_stream: bool, request_id: str | None = None,
                on_admitted: Callable[[], None] | None = None) -> AsyncGenerator[StreamChunk, None]:
        return arun_governed(self.governor, self.upstream, prompt, params or SamplingParams(),
                             caller or self.setup.caller, deadline_s or self.setup.deadline_s,
                             server_stream=server_stream, request_id=request_id, on_admitted=on_admitted)
