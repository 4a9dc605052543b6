"""POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages API over the one governance path.

In front of Triton: the messages (system prompt, ``tool_use`` / ``tool_result`` blocks) are rendered by the chat
template with the tools in its own format (``tool_prompt``), the answer is held to the tools' grammar
(``tool_format``: ``tool_choice`` auto, any, tool or none) or to ``output_config.format``, ``stop_sequences`` stop it,
and the request runs through ``generation.start_generation`` like every other: the same keys (``x-api-key`` or
Bearer), count, limits, cache, budgets, guard and ledger, whose row records the dialect. In front of an
OpenAI-compatible upstream the request is translated to chat completions and the answer back
(``anthropic_upstream``). ``count_tokens`` answers the exact count the engine would get.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi.responses import JSONResponse, Response

from trtkit.errors import ClientError
from trtkit.gateway.anthropic_objects import MessageContent, MessageEvents, message, sse_error
from trtkit.gateway.anthropic_protocol import (
    CountTokensRequest,
    MessagesRequest,
    conversation_of,
    tool_spec_of,
)
from trtkit.gateway.anthropic_upstream import RelayedMessages
from trtkit.gateway.error_responses import http_error
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.finish import stream_chunks, stream_or_wait
from trtkit.gateway.generation import CallInfo, Generation, ServingParts, check_model, start_generation
from trtkit.gateway.guide_limits import check_guide, check_tool_schemas
from trtkit.gateway.response_format import ENGINE_GUIDE_INPUT
from trtkit.gateway.sampling import check_range
from trtkit.gateway.tool_format import ToolSpec, answer_grammar, tool_grammar
from trtkit.gateway.tool_prompt import render
from trtkit.governance.tokens import RawPrompt
from trtkit.governance.vocabulary import SamplingParams, StreamChunk

DIALECT = "anthropic"
MAX_STOP_SEQUENCES = 16


class ServingMessages:
    def __init__(self, ctx: ServingParts) -> None:
        self.ctx = ctx
        self.counter = ctx.counter
        self.relayed = RelayedMessages(ctx) if ctx.relays else None

    async def create(self, request: MessagesRequest, call: CallInfo) -> Response:
        check_model(self.ctx, request.model, call.key)
        tools = request.tool_spec()
        limits = self.ctx.config.gateway.limits  # the schemas as sent, before a grammar or an upstream gets them
        check_guide(*request.answer_format(), limits, "output_config.format")
        check_tool_schemas([f.parameters for f in tools.functions] if tools else [], limits, "tools[{}].input_schema")
        if self.relayed is not None:
            return await self.relayed.create(request, call)
        messages, prefill = request.conversation()
        grammar = tools is not None or request.output_config is not None  # converted off the loop (tool_format)
        params = await asyncio.to_thread(self._params, request, tools) if grammar else self._params(request, tools)
        rendered = render(self.counter, messages, tools.functions if tools else ())
        prompt = RawPrompt(str(rendered) + prefill, special_tokens=rendered.special_tokens)
        generation = await self._generate(call, request, prompt, params)
        message_id = f"msg_{generation.request_id}"
        stops = request.stop_sequences or []

        events = self._events(generation, message_id, request.model, tools, stops) if request.stream else None
        result = await stream_or_wait(self.ctx, generation, call, events=events)
        if isinstance(result, Response):
            return result
        content = MessageContent(tools)
        content.feed(result.text)
        content.finish()
        body = message(message_id, request.model, content, result, stops)
        return JSONResponse(body.model_dump(by_alias=True), headers=generation.headers)

    async def count_tokens(self, request: CountTokensRequest, call: CallInfo) -> Response:
        """The exact count of the prompt the engine would get (the chat template and the tools included)."""
        check_model(self.ctx, request.model, call.key)
        messages, prefill = conversation_of(request.messages, request.system)
        tools = tool_spec_of(request.tools, request.tool_choice)
        rendered = render(self.counter, messages, tools.functions if tools else ())
        prompt = RawPrompt(str(rendered) + prefill, special_tokens=rendered.special_tokens)
        return JSONResponse({"input_tokens": self.counter.count_prompt(prompt)})

    def _params(self, request: MessagesRequest, tools: ToolSpec | None) -> SamplingParams:
        """The sampling asked, checked by the gateway's one validator; the guide: the tools' grammar, or
        ``output_config.format``'s. 400 naming the field."""
        if request.max_tokens < 1:
            raise RequestValidationError(f"max_tokens: {request.max_tokens} is out of range; send at least 1",
                                         param="max_tokens")
        for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
            check_range(name, value)
        if request.top_k is not None and request.top_k < 0:
            raise RequestValidationError(f"top_k: {request.top_k} must be 0 or more", param="top_k")
        stops = request.stop_sequences or []
        if len(stops) > MAX_STOP_SEQUENCES or not all(stops):
            raise RequestValidationError(f"stop_sequences holds 1 to {MAX_STOP_SEQUENCES} non-empty strings",
                                         param="stop_sequences")
        answer = request.answer_format()
        guide_type, guide = None, None
        if (tools is not None and tools.calls_tools) or answer[0] is not None:
            if self.ctx.config.serve.guided_decoding != "xgrammar":
                raise RequestValidationError("tools and output_config.format need guided decoding, which this "
                                             "deployment has off; set serve.guided_decoding: xgrammar and deploy "
                                             "again", param="tools" if tools is not None else "output_config")
            guide_type = "ebnf_grammar"
            guide = tool_grammar(tools, answer) if tools is not None and tools.calls_tools else \
                answer_grammar(str(answer[0]), answer[1])
        return SamplingParams(max_tokens=request.max_tokens,
                              temperature=1.0 if request.temperature is None else request.temperature,
                              top_p=request.top_p, top_k=request.top_k or None, stop_words=tuple(stops),
                              guided_decoding_guide_type=guide_type, guided_decoding_guide=guide)

    async def _generate(self, call: CallInfo, request: MessagesRequest, prompt: str,
                        params: SamplingParams) -> Generation:
        at_admission = request.stream and params.guided_decoding_guide_type is None
        try:
            return await start_generation(self.ctx, call, prompt, params, request.user(), at_admission=at_admission,
                                          dialect=DIALECT)
        except ClientError as exc:
            if ENGINE_GUIDE_INPUT in str(exc):  # a schema the engine cannot compile: the request's fault
                raise RequestValidationError(f"tools: the engine refused the grammar: {exc}", param="tools") from exc
            raise

    def _events(self, generation: Generation, message_id: str, model: str, tools: ToolSpec | None,
                stops: list[str]) -> AsyncIterator[bytes]:
        content = MessageContent(tools)
        events = MessageEvents(message_id, model, content)
        started = False

        def piece(chunk: StreamChunk) -> bytes:
            nonlocal started
            opening = b"" if started else events.start(chunk.usage)  # the first answer knows the cached tokens
            started = True
            return opening + (events.delta(chunk.text) if chunk.text else b"")

        async def last(chunk: StreamChunk) -> bytes:
            assert chunk.result is not None, "the last chunk carries the result"
            return events.closing(chunk.result, stops)

        return stream_chunks(self.ctx, generation, piece=piece, last=last,
                             failed=lambda exc: sse_error(http_error(exc)))
