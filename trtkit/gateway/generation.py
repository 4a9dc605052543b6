"""What every generating endpoint shares before its answer: the parts it serves with (``ServingParts``: the governor
and the upstream, and the governed client over them), who asks, and admission: one governed run per request.

The request flow (count, limits, cache, budgets, the upstream, guard, ledger) is governance's
(``trtkit.governance.client``); this module only adds who is asking (the key, via ``admission.current_key``), the
parent request's budget for nested calls, and the refusal rows. How an endpoint finishes (streamed or awaited, the
client gone, metrics) is ``finish.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive

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
from trtkit.gateway.telemetry import Telemetry
from trtkit.governance.budgets import draw_on
from trtkit.governance.client import AsyncClient
from trtkit.governance.governor import Governor
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import AsyncUpstream
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk

PARENT_HEADER = "x-trtkit-parent-request-id"
_REFUSALS: tuple[type[Exception], ...] = (BudgetExceededError, RateLimitedError, InputTooLongError)


@dataclass(slots=True)
class ServingParts:
    """What every endpoint serves with: the governor (counts, limits, cache, budgets, guard, ledger) and the upstream
    it governs, the governed client over the two (made here), the store's rule book and the gateway's metrics."""

    config: ModelConfig
    governor: Governor
    upstream: AsyncUpstream
    rulebook: StoreRuleBook
    metrics: GatewayMetrics
    telemetry: Telemetry | None = None  # OpenTelemetry GenAI metrics and spans (gateway.telemetry)
    _client: AsyncClient | None = field(default=None, init=False, repr=False)

    @property
    def client(self) -> AsyncClient:
        """The governed client over the governor and the upstream: the one flow every endpoint runs through."""
        if self._client is None:
            self._client = AsyncClient(self.governor, self.upstream)
        return self._client

    @property
    def model(self) -> str:
        return self.config.name

    @property
    def counter(self) -> TokenCounter:
        """The model's tokenizer and chat template, as the governor counts every prompt."""
        return self.governor.counter

    @property
    def send_timeout_s(self) -> float:
        return self.config.gateway.limits.send_timeout_seconds

    @property
    def relays(self) -> bool:
        """The upstream takes the caller's OpenAI body (``Capabilities.relays_body``): requests go to it as given,
        answers come back as it sent them (``gateway.relay``), instead of the Triton contract's endpoints."""
        return self.upstream.capabilities.relays_body


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


def check_model(ctx: ServingParts, model: str, key: ApiKey | None) -> None:
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


async def start_generation(ctx: ServingParts, call: CallInfo, prompt: str, params: SamplingParams,
                           user: str | None, *, at_admission: bool = False, session: str = "",
                           dialect: str = "openai", payload: Any = None) -> Generation:
    """Admit and send one request; raises the refusal (budget, rate, context) before anything is sent. With
    ``at_admission`` (a stream) it returns once admitted, its first chunk still coming; otherwise with the first
    chunk in hand (and an engine's refusal raised). ``session``: the conversation it belongs to (its ledger row
    names it; ``client.budgets`` rules of scope session hold it); ``dialect``: the API asked (the ledger row's);
    ``payload``: the body a relaying upstream sends as the caller sent it (``governor.PreparedRequest.payload``)."""
    key = call.key
    caller = caller_of(key, user, ctx.model, session, dialect)
    request_id = uuid.uuid4().hex
    governor = ctx.governor
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
                                       on_admitted=admitted.set if at_admission else None, payload=payload)
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


async def refuse_at_cap(ctx: ServingParts, key: ApiKey | None, dialect: str = "openai") -> None:
    """A key that holds its concurrency cap on this replica already is refused at the door, before its body is
    parsed or its prompt counted, with its refusal row as at admission."""
    try:
        ctx.rulebook.refuse_at_cap(key)
    except ConcurrencyLimitedError as exc:
        caller = caller_of(key, None, ctx.model, dialect=dialect)  # its levels named in the row, as at admission
        await ctx.governor.arecord_refusal(caller, uuid.uuid4().hex, _reason(exc))
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


def created_now() -> int:
    return int(time.time())
