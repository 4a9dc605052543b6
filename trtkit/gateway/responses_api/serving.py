"""POST /v1/responses (OpenAI's Responses API) with stored conversations and function tools.

A turn: its context is read from the store (the chain of ``previous_response_id``, or every item of the
``conversation``; either touched: a turn is a heartbeat), the context module fits it and the new input to the input
limit (``turn_prompt``), and the prompt goes through the one governed flow the chat endpoint uses
(``generation.start_generation``: count, limits, cache, budgets, the upstream, the ledger row naming the
conversation). Tools are offered in the chat template's own format and the answer is held to their grammar
(``tool_format``), so it comes back as a message or as function calls whose arguments fit their schemas. The
conversation's own budget, if it has one, is held in the same admission as the key's. The answer is stored with
its input and output items before the client sees it complete, so the next turn may go to any replica at once.
The stored responses' other routes: ``responses_routes``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse, Response
from openai.types.responses import Response as OpenAIResponse

from trtkit.errors import ClientError
from trtkit.gateway.admission import conversation_budget
from trtkit.gateway.errors import PermissionDeniedError, RequestValidationError
from trtkit.gateway.finish import stream_chunks, stream_or_wait
from trtkit.gateway.generation import CallInfo, Generation, ServingParts, check_model, start_generation
from trtkit.gateway.guide_limits import check_guide, check_tool_schemas
from trtkit.gateway.keys import ApiKey
from trtkit.gateway.openai_objects import extension
from trtkit.gateway.response_format import ENGINE_GUIDE_INPUT
from trtkit.gateway.responses_api.items import chat_messages, resolve, stored_items
from trtkit.gateway.responses_api.objects import response, status_of
from trtkit.gateway.responses_api.output import OutputItems, TurnEvents
from trtkit.gateway.responses_api.protocol import (
    BUDGET_METADATA,
    ResponseRequest,
    requested_budget,
    response_params,
    text_guide,
)
from trtkit.gateway.responses_api.store import StoreCalls, owner_of
from trtkit.gateway.responses_api.turn_prompt import TurnPrompt, chain_history, turn_prompt
from trtkit.gateway.tool_format import ToolSpec
from trtkit.governance.vocabulary import GenerationResult, SamplingParams, StreamChunk
from trtkit.store.conversations import Chain, StoredResponse

log = logging.getLogger(__name__)
UNSTORED_FINISHES = ("cancelled", "error")  # a turn the client left or that failed is not part of the chain


@dataclass(slots=True)
class Turn:
    """One turn in flight: what finishing it needs."""

    request: ResponseRequest
    owner: str  # the key's name ('' with keys off): every stored row names it
    conversation: str  # '' when nothing is stored (store: false, no previous response)
    chain: Chain | None
    appends: bool  # a turn of a Conversations API conversation: its items are appended to it
    budget: int | None  # a budget set by this request's metadata
    new: list[dict[str, Any]]  # the input items
    tools: ToolSpec | None
    context: TurnPrompt
    output: OutputItems
    response_id: str = ""
    created_at: float = 0.0


class ServingResponses:
    def __init__(self, ctx: ServingParts) -> None:
        self.ctx = ctx
        self.store = StoreCalls(ctx)

    async def create(self, request: ResponseRequest, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        tools = request.tool_spec()
        if tools is not None and self.ctx.relays:
            raise RequestValidationError("function tools need the Triton backend's guided decoding; in front of an "
                                         "OpenAI-compatible upstream send them to /v1/chat/completions or "
                                         "/v1/messages", param="tools")
        limits = self.ctx.config.gateway.limits  # the guides as the caller sent them, before they become a grammar
        check_guide(*text_guide(request.text, self.ctx.config.serve.guided_decoding == "xgrammar"), limits,
                    "text.format")
        check_tool_schemas([f.parameters for f in tools.functions] if tools else [], limits, "tools[{}].parameters")
        self._check_echo(request, tools)
        make = functools.partial(response_params, request, tools=tools,
                                 guided_decoding=self.ctx.config.serve.guided_decoding == "xgrammar")
        # a grammar is converted from JSON schemas (tool_format): off the event loop, as it may take a while
        params = await asyncio.to_thread(make) if tools is not None or request.text else make()
        turn, generation = await self._start(request, call, params, tools)
        result = await stream_or_wait(self.ctx, generation, call,
                                      events=self._events(turn, generation) if request.stream else None)
        if isinstance(result, Response):
            return result
        return await self._answer(turn, generation, result)

    async def _answer(self, turn: Turn, generation: Generation, result: GenerationResult) -> Response:
        turn.output.feed(result.text)
        turn.output.finish()
        body = await self._finish(turn, result)
        return JSONResponse(body.model_dump(by_alias=True), headers=generation.headers)

    async def _start(self, request: ResponseRequest, call: CallInfo, params: SamplingParams,
                     tools: ToolSpec | None) -> tuple[Turn, Generation]:
        items, owner = request.items(), owner_of(call.key)
        budget = self._budget(request, call.key)
        chain, appends = await self._context(request, owner)
        conversation = chain.conversation_id if chain else (f"conv_{secrets.token_hex(12)}" if request.store else "")
        if budget is not None and not conversation:
            raise RequestValidationError(f"metadata.{BUDGET_METADATA} budgets a stored conversation; send store: true "
                                         f"or a previous_response_id", param=f"metadata.{BUDGET_METADATA}")
        if chain is not None and budget is not None:
            await self.store.call(self.store.chains.set_budget, conversation, budget)
        earlier = stored_items(chain.items) if chain else []
        new = resolve(items, earlier)
        own_budget = budget if budget is not None else chain.budget_tokens if chain else None
        held = conversation_budget.set(None if own_budget is None else (conversation, own_budget))
        try:
            history = chain_history(earlier, chain.summary if chain else "", chain.summarized_turns if chain else 0)
            context = await turn_prompt(
                self.ctx.counter, self.ctx.config, self.ctx.governor.max_input_tokens,
                truncation=request.truncation or "disabled", instructions=request.instructions, chain=history,
                new=chat_messages(new), functions=tools.functions if tools else (),
                summarize=functools.partial(self._summarize, call, request.user, conversation))
            generation = await self._generate(call, request, context.prompt.text, params, conversation)
        finally:
            conversation_budget.reset(held)
        response_id = f"resp_{generation.request_id}"
        output = OutputItems(tools, "msg_" + generation.request_id)
        return Turn(request, owner, conversation, chain, appends, budget, new, tools, context, output, response_id,
                    time.time()), generation

    async def _context(self, request: ResponseRequest, owner: str) -> tuple[Chain | None, bool]:
        """The stored context the turn continues: a conversation's items (appended to), a chain, or nothing."""
        conversation = request.conversation_id()
        if conversation is not None:
            chain = await self.store.call(self.store.objects.turn_context, conversation, owner, op="read",
                                          param="conversation")
        elif request.previous_response_id is not None:
            chain = await self.store.call(self.store.chains.continue_chain, request.previous_response_id, owner,
                                          op="read", param="previous_response_id")
        else:
            return None, False
        self.ctx.metrics.conversation_rows.labels("read").inc(chain.responses + 1)  # its rows, itself
        return chain, conversation is not None

    async def _generate(self, call: CallInfo, request: ResponseRequest, prompt: str, params: SamplingParams,
                        conversation: str) -> Generation:
        # as the chat endpoint: a stream's headers go out at admission, a guided one's with the engine's first answer
        at_admission = request.stream and params.guided_decoding_guide_type is None
        try:
            return await start_generation(self.ctx, call, prompt, params, request.user, at_admission=at_admission,
                                          session=conversation)
        except ClientError as exc:
            if ENGINE_GUIDE_INPUT in str(exc):  # a schema the engine cannot compile: the request's fault
                param = "tools" if request.tools and request.tool_choice != "none" else "text.format"
                raise RequestValidationError(f"{param}: the engine refused it: {exc}", param=param) from exc
            raise

    async def _summarize(self, call: CallInfo, user: str | None, conversation: str, prompt: str,
                         max_tokens: int) -> GenerationResult:
        """The summary strategy's fold: a governed request of the same key and conversation (its own ledger row,
        held against the same budgets in the same store)."""
        generation = await start_generation(self.ctx, call, prompt, SamplingParams(max_tokens=max_tokens,
                                                                                   temperature=0.0),
                                            user, session=conversation)
        return await generation.result()

    def _check_echo(self, request: ResponseRequest, tools: ToolSpec | None) -> None:
        """The answer echoes the request's ``text`` (its format's schema) and its tools: they must serialize before
        admission, so that no answer fails after it was generated and billed (a schema nested past pydantic's
        serialization depth did, with a 500)."""
        if tools is None and (not request.text or (request.text.get("format") or {}).get("type", "text") == "text"):
            return
        try:
            response("resp_check", self.ctx.model, request, 0, tools=tools).model_dump_json()
        except Exception as exc:
            raise RequestValidationError(f"text.format or tools cannot be echoed back in the answer "
                                         f"({type(exc).__name__}); send a flatter schema",
                                         param="text.format" if tools is None else "tools") from None

    def _budget(self, request: ResponseRequest, key: ApiKey | None) -> int | None:
        """Whether the key may set a budget first, then its value: a key without the right learns nothing else."""
        asked = (request.metadata or {}).get(BUDGET_METADATA) is not None
        if asked and key is not None and not key.can_budget_conversations:
            raise PermissionDeniedError(f"the API key '{key.name}' may not set a conversation's budget "
                                        f"(metadata.{BUDGET_METADATA}); leave it out, or use a key created with "
                                        f"`trtkit keys create --conversation-budgets`",
                                        param=f"metadata.{BUDGET_METADATA}")
        return requested_budget(request.metadata)

    # -- the answer --------------------------------------------------------------------------------------
    def _events(self, turn: Turn, generation: Generation) -> AsyncIterator[bytes]:
        events = TurnEvents(turn.output)
        opening = events.opening(response(turn.response_id, self.ctx.model, turn.request, turn.created_at,
                                          tools=turn.tools, conversation=turn.conversation if turn.appends else None))

        def piece(chunk: StreamChunk) -> bytes:
            return events.delta(chunk.text) if chunk.text else b""

        async def last(chunk: StreamChunk) -> bytes:
            assert chunk.result is not None, "the last chunk carries the result"
            held = events.flush()
            return held + events.closing(await self._finish(turn, chunk.result))

        return stream_chunks(self.ctx, generation, first=opening, piece=piece, last=last)

    async def _finish(self, turn: Turn, result: GenerationResult) -> OpenAIResponse:
        """The response object; stored (with its input and output items) before the client sees it complete."""
        stored = bool(turn.request.store and turn.conversation and result.finish_reason not in UNSTORED_FINISHES)
        trtkit = extension(result) | {"conversation": turn.conversation or None, "stored": stored,
                                      "expires_at": None, "context": turn.context.report}
        output = turn.output.items(status_of(result))
        body = response(turn.response_id, self.ctx.model, turn.request, turn.created_at, tools=turn.tools,
                        result=result, output=output, conversation=turn.conversation if turn.appends else None,
                        extension=trtkit)
        if stored:
            expires_at = await self.store.call(self._save, turn, output, body.model_dump_json(by_alias=True), op="write")
            self.ctx.metrics.conversation_rows.labels("write").inc(2)  # the response, its conversation
            trtkit.update(stored=expires_at is not None, expires_at=expires_at)
            body = body.model_copy(update={"trtkit": trtkit})
        return body

    def _save(self, turn: Turn, output: list[dict[str, Any]], body: str) -> float | None:
        history = turn.context.history
        previous = None if turn.appends else turn.request.previous_response_id
        stored = StoredResponse(turn.response_id, turn.conversation, previous, turn.new, output, history.summary,
                                history.summarized_turns, body, appends=turn.appends)
        starts = turn.chain is None
        expires_at = self.store.chains.save(stored, turn.owner,
                                            start_ttl_seconds=self.store.ttl_seconds if starts else None,
                                            budget_tokens=turn.budget if starts else None)
        if expires_at is None:
            log.warning("conversation %s expired or was deleted while %s ran; the response was not stored",
                        turn.conversation, turn.response_id)
        return expires_at

