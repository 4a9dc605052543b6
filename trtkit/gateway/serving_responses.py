"""POST /v1/responses (OpenAI's Responses API) with stored conversations; GET and DELETE /v1/responses/{id};
POST /v1/responses/{id}/heartbeat (a trtkit extension).

A turn: the chain of ``previous_response_id`` is read from the store (its conversation touched: a turn is a
heartbeat), the context module fits it and the new input to the input limit (``responses_context``), and the prompt
goes through the one governed flow the chat endpoint uses (``generation.start_generation``: count, limits, cache,
budgets, the upstream, the ledger row naming the conversation). The conversation's own budget, if it has one, is
held in the same admission as the key's. The answer is stored with what it added to the chain before the client
sees it complete, so the next turn may go to any replica at once.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from openai.types.responses import Response as OpenAIResponse

from trtkit.errors import ClientError
from trtkit.gateway import responses_objects as objects
from trtkit.gateway.admission import conversation_budget
from trtkit.gateway.errors import NotFoundError, PermissionDeniedError, RequestValidationError
from trtkit.gateway.generation import (
    CallInfo,
    CancellingStreamResponse,
    Generation,
    ServingContext,
    check_model,
    observe,
    run_or_cancel,
    sse_error,
    start_generation,
)
from trtkit.gateway.guide_limits import check_guide
from trtkit.gateway.keys import ApiKey
from trtkit.gateway.response_format import ENGINE_GUIDE_INPUT
from trtkit.gateway.responses import LastEvent, extension
from trtkit.gateway.responses_context import TurnPrompt, chain_history, turn_prompt
from trtkit.gateway.responses_protocol import (
    BUDGET_METADATA,
    ResponseRequest,
    requested_budget,
    response_params,
)
from trtkit.governance.vocabulary import GenerationResult, SamplingParams
from trtkit.store.conversations import Chain, ConversationExpired, ResponseNotFound, StoredResponse

log = logging.getLogger(__name__)
T = TypeVar("T")
UNSTORED_FINISHES = ("cancelled", "error")  # a turn the client left or that failed is not part of the chain


@dataclass(slots=True)
class Turn:
    """One turn in flight: what finishing it needs."""

    request: ResponseRequest
    owner: str  # the key's name ('' with keys off): every stored row names it
    conversation: str  # '' when nothing is stored (store: false, no previous response)
    chain: Chain | None
    budget: int | None  # a budget set by this request's metadata
    new: list[dict[str, str]]
    context: TurnPrompt
    response_id: str = ""
    created_at: float = 0.0


class ServingResponses:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx
        self.store = ctx.rulebook.store.conversations
        self.ttl_seconds = ctx.config.gateway.conversations.ttl_seconds

    # -- POST /v1/responses ------------------------------------------------------------------------------
    async def create(self, request: ResponseRequest, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        params = response_params(request, guided_decoding=self.ctx.config.serve.guided_decoding == "xgrammar")
        check_guide(params.guided_decoding_guide_type, params.guided_decoding_guide, self.ctx.config.gateway.limits,
                    "text.format")
        self._check_echo(request)
        turn, generation = await self._start(request, call, params)
        if request.stream:
            return CancellingStreamResponse(self._events(turn, generation), generation.headers,
                                            lambda: self.ctx.metrics.disconnects.labels("true").inc(),
                                            self.ctx.send_timeout_s)
        finished, result = await run_or_cancel(generation.result(), call.receive)
        if not finished:
            self.ctx.metrics.disconnects.labels("false").inc()
            return Response(status_code=499)
        observe(self.ctx, result, operation="chat", streamed=False, params=generation.params)
        body = await self._finish(turn, result)
        return JSONResponse(body.model_dump(), headers=generation.headers)

    async def _start(self, request: ResponseRequest, call: CallInfo, params: SamplingParams
                     ) -> tuple[Turn, Generation]:
        new, owner = request.messages(), _owner(call.key)
        budget = self._budget(request, call.key)
        chain = None
        if request.previous_response_id is not None:
            chain = await self._call(self._continue, request.previous_response_id, owner, op="read")
            self.ctx.metrics.conversation_rows.labels("read").inc(chain.responses + 1)  # its responses, itself
        conversation = chain.conversation_id if chain else (f"conv_{secrets.token_hex(12)}" if request.store else "")
        if budget is not None and not conversation:
            raise RequestValidationError(f"metadata.{BUDGET_METADATA} budgets a stored conversation; send store: true "
                                         f"or a previous_response_id", param=f"metadata.{BUDGET_METADATA}")
        if chain is not None and budget is not None:
            await self._call(self.store.set_budget, conversation, budget)
        own_budget = budget if budget is not None else chain.budget_tokens if chain else None
        held = conversation_budget.set(None if own_budget is None else (conversation, own_budget))
        try:
            history = chain_history(chain.messages, chain.summary, chain.summarized_turns) if chain else \
                chain_history([], "", 0)
            context = await turn_prompt(
                self.ctx.client.governor.counter, self.ctx.config, self.ctx.client.governor.max_input_tokens,
                truncation=request.truncation or "disabled", instructions=request.instructions, chain=history, new=new,
                summarize=functools.partial(self._summarize, call, request.user, conversation))
            generation = await self._generate(call, request, context.prompt.text, params, conversation)
        finally:
            conversation_budget.reset(held)
        turn = Turn(request, owner, conversation, chain, budget, new, context, f"resp_{generation.request_id}",
                    time.time())
        return turn, generation

    async def _generate(self, call: CallInfo, request: ResponseRequest, prompt: str, params: SamplingParams,
                        conversation: str) -> Generation:
        # as the chat endpoint: a stream's headers go out at admission, a guided one's with the engine's first answer
        at_admission = request.stream and params.guided_decoding_guide_type is None
        try:
            return await start_generation(self.ctx, call, prompt, params, request.user, at_admission=at_admission,
                                          session=conversation)
        except ClientError as exc:
            if ENGINE_GUIDE_INPUT in str(exc):  # a schema the engine cannot compile: the request's fault
                raise RequestValidationError(f"text.format: the engine refused it: {exc}", param="text.format") from exc
            raise

    async def _summarize(self, call: CallInfo, user: str | None, conversation: str, prompt: str,
                         max_tokens: int) -> GenerationResult:
        """The summary strategy's fold: a governed request of the same key and conversation (its own ledger row,
        held against the same budgets in the same store)."""
        generation = await start_generation(self.ctx, call, prompt, SamplingParams(max_tokens=max_tokens,
                                                                                   temperature=0.0),
                                            user, session=conversation)
        return await generation.result()

    def _check_echo(self, request: ResponseRequest) -> None:
        """The answer echoes the request's ``text`` (its format's schema): it must serialize before admission, so
        that no answer fails after it was generated and billed (a schema nested past pydantic's serialization depth
        did, with a 500)."""
        if not request.text or (request.text.get("format") or {}).get("type", "text") == "text":
            return
        try:
            objects.response("resp_check", self.ctx.model, request, 0).model_dump_json()
        except Exception as exc:
            raise RequestValidationError(f"text cannot be echoed back in the answer ({type(exc).__name__}); send a "
                                         f"flatter text.format", param="text.format") from None

    def _continue(self, response_id: str, owner: str) -> Chain:
        try:
            return self.store.continue_chain(response_id, owner)
        except (ResponseNotFound, ConversationExpired) as exc:
            raise _not_found(exc, "previous_response_id") from None

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
    async def _events(self, turn: Turn, generation: Generation) -> AsyncIterator[bytes]:
        events = objects.ResponseEvents(turn.response_id, _message_id(turn))
        yield events.opening(objects.response(turn.response_id, self.ctx.model, turn.request, turn.created_at))
        chunks = generation.chunks()
        try:
            async for chunk in chunks:
                if chunk.text:
                    yield events.delta(chunk.text)
                if chunk.result is not None:
                    observe(self.ctx, chunk.result, operation="chat", streamed=True, params=generation.params)
                    yield LastEvent(events.closing(await self._finish(turn, chunk.result)))
                    return
        except Exception as exc:  # the backend failed mid-stream: say so in the stream, never a traceback
            yield sse_error(exc)
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
            await generation.aclose()

    async def _finish(self, turn: Turn, result: GenerationResult) -> OpenAIResponse:
        """The response object; stored (with what it adds to the chain) before the client sees it complete."""
        stored = bool(turn.request.store and turn.conversation and result.finish_reason not in UNSTORED_FINISHES)
        trtkit = extension(result) | {"conversation": turn.conversation or None, "stored": stored,
                                      "expires_at": None, "context": turn.context.report}
        body = objects.response(turn.response_id, self.ctx.model, turn.request, turn.created_at, result=result,
                                message_id=_message_id(turn), extension=trtkit)
        if stored:
            expires_at = await self._call(self._save, turn, result, body.model_dump_json(), op="write")
            self.ctx.metrics.conversation_rows.labels("write").inc(2)  # the response, its conversation
            trtkit.update(stored=expires_at is not None, expires_at=expires_at)
            body = body.model_copy(update={"trtkit": trtkit})
        return body

    def _save(self, turn: Turn, result: GenerationResult, body: str) -> float | None:
        history = turn.context.history
        previous = turn.request.previous_response_id
        response = StoredResponse(turn.response_id, turn.conversation, previous,
                                  [*turn.new, {"role": "assistant", "content": result.text}], history.summary,
                                  history.summarized_turns, body)
        starts = turn.chain is None
        expires_at = self.store.save(response, turn.owner, start_ttl_seconds=self.ttl_seconds if starts else None,
                                     budget_tokens=turn.budget if starts else None)
        if expires_at is None:
            log.warning("conversation %s expired or was deleted while %s ran; the response was not stored",
                        turn.conversation, turn.response_id)
        return expires_at

    # -- GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/heartbeat -----------------------------------
    async def retrieve(self, response_id: str, key: ApiKey | None) -> Response:
        body = await self._call(self._reach, self.store.body, response_id, key)
        return JSONResponse(json.loads(body))

    async def delete(self, response_id: str, key: ApiKey | None) -> Response:
        conversation = await self._call(self._reach, self.store.delete, response_id, key)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True,
                             "trtkit": {"conversation": conversation}})

    async def heartbeat(self, response_id: str, key: ApiKey | None) -> Response:
        conversation, expires_at = await self._call(self._reach, self.store.heartbeat, response_id, key)
        return JSONResponse({"id": response_id, "object": "response.heartbeat", "conversation": conversation,
                             "expires_at": expires_at, "ttl_seconds": self.ttl_seconds})

    def _reach(self, action: Callable[[str, str], T], response_id: str, key: ApiKey | None) -> T:
        try:
            return action(response_id, _owner(key))
        except (ResponseNotFound, ConversationExpired) as exc:
            raise _not_found(exc, "response_id") from None

    async def _call(self, fn: Callable[..., T], *args: Any, op: str = "") -> T:
        """A store call: in a worker thread when the store is across the network (gateway.store_calls); a turn's
        read and write are timed (trtkit_gateway_conversation_store_seconds)."""
        started = time.perf_counter()
        try:
            if self.ctx.rulebook.waits_on_network:
                return await asyncio.to_thread(fn, *args)
            return fn(*args)
        finally:
            if op:
                self.ctx.metrics.conversation_store.labels(op).observe(time.perf_counter() - started)


def _owner(key: ApiKey | None) -> str:
    return key.name if key is not None else ""


def _message_id(turn: Turn) -> str:
    return "msg_" + turn.response_id.removeprefix("resp_")


def _not_found(exc: Exception, param: str) -> NotFoundError:
    code = "conversation_expired" if isinstance(exc, ConversationExpired) else "response_not_found"
    return NotFoundError(str(exc), param, code)


Generate = Callable[..., Any]  # app.generate(request, endpoint, model, serve): the door, then serve(payload, call)
Keyed = Callable[..., Any]  # app.keyed(request, endpoint, action): the door for a body-less call of a key


def add_response_routes(app: Any, serving: ServingResponses, generate: Generate, keyed: Keyed) -> None:
    """The Responses API's routes on ``app``, through the same door as the other endpoints."""
    async def create(request: Request) -> Response:
        return await generate(request, "responses", ResponseRequest, serving.create)  # type: ignore[no-any-return]

    async def retrieve(request: Request) -> Response:
        return await keyed(request, "responses_get", serving.retrieve)  # type: ignore[no-any-return]

    async def delete(request: Request) -> Response:
        return await keyed(request, "responses_delete", serving.delete)  # type: ignore[no-any-return]

    async def heartbeat(request: Request) -> Response:
        return await keyed(request, "responses_heartbeat", serving.heartbeat)  # type: ignore[no-any-return]

    app.add_route("/v1/responses", create, methods=["POST"])
    app.add_route("/v1/responses/{response_id}", retrieve, methods=["GET"])
    app.add_route("/v1/responses/{response_id}", delete, methods=["DELETE"])
    app.add_route("/v1/responses/{response_id}/heartbeat", heartbeat, methods=["POST"])
