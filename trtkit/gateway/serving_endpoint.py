"""What the two generating endpoints share: one request in, a JSON body or a stream of SSE chunks out.

``ServingChat`` and ``ServingCompletions`` differ only in how the prompt is made from the request and
which ``openai`` types carry the answer; the flow (model check, sampling validation, admission) is written once
here, and the finish (stream or wait, disconnect handling, metrics) is every endpoint's (``finish.py``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, TypeVar

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from trtkit.gateway import openai_objects
from trtkit.gateway.finish import stream_chunks, stream_or_wait
from trtkit.gateway.generation import (
    CallInfo,
    Generation,
    ServingParts,
    check_model,
    created_now,
    start_generation,
)
from trtkit.gateway.guide_limits import check_guide
from trtkit.gateway.log_probs import LogProbReader, TokenLogProb
from trtkit.gateway.protocol import ChatCompletionRequest, CompletionRequest
from trtkit.gateway.sampling import sampling_params
from trtkit.gateway.tool_calls import ToolPlan
from trtkit.governance.vocabulary import GenerationResult, StreamChunk

RequestT = TypeVar("RequestT", ChatCompletionRequest, CompletionRequest)


class ServingEndpoint(Generic[RequestT]):
    id_prefix = ""  # "chatcmpl" / "cmpl", as OpenAI names its response ids
    operation = "chat"  # gen_ai.operation.name: "chat" or "text_completion"

    def __init__(self, ctx: ServingParts) -> None:
        self.ctx = ctx
        self._text_template: BaseModel | None = None  # the text chunk, validated on first use, then restamped

    def text_chunks(self, response_id: str, created: int) -> openai_objects.TextChunks:
        if self._text_template is None:
            self._text_template = self.chunk("", 0, text=openai_objects.TEXT_MARK)
        return openai_objects.TextChunks(openai_objects.restamped(self._text_template, response_id, created))

    # What an endpoint defines -------------------------------------------------------------------------
    def prompt_of(self, request: RequestT) -> str:
        raise NotImplementedError

    def body(self, response_id: str, result: GenerationResult, log_probs: list[TokenLogProb] | None = None,
             plan: ToolPlan | None = None) -> BaseModel:
        """The non-streamed response object (with the answer's log-probabilities when asked; as tool calls
        with a plan)."""
        raise NotImplementedError

    def tool_plan(self, request: RequestT) -> ToolPlan | None:
        """The tool calls the request asks for (chat only)."""
        return None

    def tool_stream(self, plan: ToolPlan, response_id: str, created: int) -> Any:
        """A stream's tool-call events: ``piece(text) -> bytes`` as text comes, ``finish(result) -> bytes``."""
        raise NotImplementedError

    def chunk(self, response_id: str, created: int, **fields: Any) -> BaseModel:
        """One stream chunk: ``text=``, or ``finish_reason=`` + ``result=``, or ``usage=`` (the include_usage
        chunk, no choice); ``log_probs=`` with the first two when asked."""
        raise NotImplementedError

    def opening_chunks(self, response_id: str, created: int) -> Iterator[BaseModel]:
        """Chunks sent before the first text (chat sends the assistant role)."""
        return iter(())

    # The shared flow -----------------------------------------------------------------------------------
    async def create(self, request: RequestT, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        plan = self.tool_plan(request)
        make = functools.partial(sampling_params, request,
                                 guided_decoding=self.ctx.config.serve.guided_decoding == "xgrammar",
                                 vocab_size=self.ctx.counter.model_vocab_size,
                                 tool_guide=None if plan is None else plan.guide)
        limits = self.ctx.config.gateway.limits
        if plan is not None:  # the tools' schema as the caller sent it, checked before it becomes a grammar
            check_guide("json_schema", plan.guide, limits, "tools")
        # a tool call's grammar is converted from its schema (tool_format): off the event loop
        params = await asyncio.to_thread(make) if plan is not None else make()
        if plan is None:
            check_guide(params.guided_decoding_guide_type, params.guided_decoding_guide, limits, "response_format")
        prompt = self.prompt_of(request)
        # A stream's headers go out at admission, but a guided one's wait for the engine's first answer: only the
        # engine compiles a schema or grammar, and its refusal is then a 400, not the stream's error event
        at_admission = request.stream and params.guided_decoding_guide_type is None
        generation = await start_generation(self.ctx, call, prompt, params, request.user, at_admission=at_admission)
        response_id = f"{self.id_prefix}-{generation.request_id}"
        log_probs = self._log_prob_reader() if params.return_log_probs else None
        include_usage = bool(request.stream and request.stream_options and request.stream_options.include_usage)
        events = self._events(generation, response_id, include_usage, log_probs, plan) if request.stream else None
        result = await stream_or_wait(self.ctx, generation, call, events=events, operation=self.operation)
        if isinstance(result, Response):
            return result
        entries = None if log_probs is None else log_probs.read(result.log_probs or ())
        return JSONResponse(self.body(response_id, result, entries, plan).model_dump(exclude_none=False),
                            headers=generation.headers)

    def _log_prob_reader(self) -> LogProbReader:
        return LogProbReader(self.ctx.counter.token_bytes)

    def _events(self, generation: Generation, response_id: str, include_usage: bool,
                log_probs: LogProbReader | None = None, plan: ToolPlan | None = None) -> AsyncIterator[bytes]:
        created = created_now()
        texts = self.text_chunks(response_id, created)
        tools = None if plan is None else self.tool_stream(plan, response_id, created)

        def piece(chunk: StreamChunk) -> bytes:
            if not chunk.text:
                return b""
            if tools is not None:  # the answer is tool calls, not text
                return tools.piece(chunk.text)
            if log_probs is not None:  # with its tokens' log-probabilities: built whole
                return openai_objects.sse(self.chunk(response_id, created, text=chunk.text,
                                                     log_probs=log_probs.read(chunk.log_probs)))
            return texts.sse(chunk.text)

        async def last(chunk: StreamChunk) -> bytes:
            """The last chunk's events, sent with [DONE] in one write."""
            result = chunk.result
            assert result is not None, "the last chunk carries the result"
            # log-probs of tokens whose text never came (a character the length limit cut) go here
            rest = None if log_probs is None else log_probs.read(chunk.log_probs) or None
            tail = tools.finish(result) if tools is not None else openai_objects.sse(self.chunk(
                response_id, created, finish_reason=result.finish_reason, result=result, log_probs=rest))
            if include_usage:
                tail += openai_objects.sse(self.chunk(response_id, created, usage=result.usage))
            return tail + openai_objects.SSE_DONE

        opening = b"".join(openai_objects.sse(chunk) for chunk in self.opening_chunks(response_id, created))
        return stream_chunks(self.ctx, generation, piece=piece, last=last, first=opening, operation=self.operation)
