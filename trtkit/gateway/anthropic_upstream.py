"""POST /v1/messages in front of an OpenAI-compatible upstream, by translation: the Messages request becomes a chat
completions body (system prompt, ``tool_use`` as ``tool_calls``, ``tool_result`` as ``tool`` messages, tools as
functions, ``tool_choice`` auto / any / tool / none as auto / required / a named function / none,
``stop_sequences`` as ``stop``), and the upstream's answer comes back as a Message: its text and tool calls as content
blocks, streamed or not. The governed flow is the gateway's one (the prompt counted with the model's chat template
before admission, the upstream's usage the bill), and the ledger row records the dialect.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response

from trtkit.gateway.anthropic_objects import MessageContent, MessageEvents, message, sse_error
from trtkit.gateway.anthropic_protocol import MessagesRequest
from trtkit.gateway.error_responses import http_error
from trtkit.gateway.errors import RequestValidationError
from trtkit.gateway.finish import stream_chunks, stream_or_wait
from trtkit.gateway.generation import CallInfo, Generation, ServingParts, start_generation
from trtkit.gateway.tool_format import ToolSpec
from trtkit.gateway.tool_splitter import Piece
from trtkit.governance.vocabulary import GenerationResult, SamplingParams, StreamChunk

_FINISH = {"length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use"}


class RelayedMessages:
    def __init__(self, ctx: ServingParts) -> None:
        self.ctx = ctx

    async def create(self, request: MessagesRequest, call: CallInfo) -> Response:
        messages, prefill = request.conversation()
        if prefill:
            raise RequestValidationError("a last assistant message (a prefill) needs the Triton backend; in front of "
                                         "an OpenAI-compatible upstream end the messages with a user turn",
                                         param="messages")
        if request.answer_format()[0] is not None:
            raise RequestValidationError("output_config.format needs the Triton backend's guided decoding",
                                         param="output_config")
        tools = request.tool_spec()
        body = chat_body(request, messages, tools)
        try:
            prompt = self.ctx.counter.chat_prompt(_for_template(messages), tools=body.get("tools"))
        except Exception as exc:  # the template refused the conversation (a role it does not know, ...)
            raise RequestValidationError(f"the model's chat template cannot render these messages ({exc}); the "
                                         f"gateway counts every prompt before admission", param="messages") from None
        params = SamplingParams(max_tokens=request.max_tokens,
                                temperature=1.0 if request.temperature is None else request.temperature,
                                cacheable=tools is None)
        generation = await start_generation(self.ctx, call, prompt, params, request.user(), dialect="anthropic",
                                            payload=body)
        message_id, stops = f"msg_{generation.request_id}", request.stop_sequences or []
        reading = Translation(tools)

        events = self._events(generation, reading, message_id, request.model, stops) if request.stream else None
        result = await stream_or_wait(self.ctx, generation, call, events=events,
                                      wait=None if request.stream else _read(generation, reading))
        if isinstance(result, Response):
            return result
        answer = message(message_id, request.model, reading.content, result, stops, reading.stop(result, stops))
        return JSONResponse(answer.model_dump(by_alias=True), headers=generation.headers)

    def _events(self, generation: Generation, reading: Translation, message_id: str, model: str,
                stops: list[str]) -> AsyncIterator[bytes]:
        events = MessageEvents(message_id, model, reading.content)
        started = False

        def piece(chunk: StreamChunk) -> bytes:
            nonlocal started
            opening = b"" if started else events.start(chunk.usage)
            started = True
            return opening + events.pieces(reading.take(chunk))

        async def last(chunk: StreamChunk) -> bytes:
            result = chunk.result
            assert result is not None, "the last chunk carries the result"
            return events.closing(result, stops, reading.stop(result, stops))

        return stream_chunks(self.ctx, generation, piece=piece, last=last,
                             failed=lambda exc: sse_error(http_error(exc)))


async def _read(generation: Generation, reading: Translation) -> GenerationResult:
    """The answer read whole into ``reading``; its result."""
    async for chunk in generation.chunks():
        reading.take(chunk)
        if chunk.result is not None:
            return chunk.result
    raise AssertionError("a stream always ends with a final chunk")


class Translation:
    """An upstream's chat chunks read as the Message's content: text deltas, tool-call deltas (a new call's id and
    name begin a tool_use block, its arguments stream as input JSON), the finish reason."""

    def __init__(self, tools: ToolSpec | None) -> None:
        self.content = MessageContent(None)
        self.finish_reason: str | None = None
        self.stop_reason: Any = None
        self._calls: dict[int, int] = {}  # upstream tool-call index -> our call index

    def take(self, chunk: StreamChunk) -> list[Piece]:
        if chunk.event is None:  # an answer from the response cache: text of our own
            return self.content.take([Piece("text", chunk.text)] if chunk.text else [])
        pieces: list[Piece] = []
        for choice in chunk.event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            self.stop_reason = choice.get("stop_reason", self.stop_reason)  # vLLM: the stop string that ended it
            delta = choice.get("delta") or {}
            if delta.get("content"):
                pieces.append(Piece("text", delta["content"]))
            for call in delta.get("tool_calls") or ():
                pieces += self._call_pieces(call)
        return self.content.take(pieces)

    def _call_pieces(self, call: dict[str, Any]) -> list[Piece]:
        index = call.get("index", len(self._calls))
        function = call.get("function") or {}
        pieces = []
        if index not in self._calls:
            self._calls[index] = len(self._calls)
            pieces.append(Piece("name", function.get("name") or "", self._calls[index]))
        if function.get("arguments"):
            pieces.append(Piece("arguments", function["arguments"], self._calls[index]))
        return pieces

    def stop(self, result: GenerationResult, stops: list[str]) -> tuple[str, str | None]:
        """Anthropic's stop reason from the upstream's: OpenAI's "stop" covers both the end of the answer and a stop
        sequence, so a sequence is named only when the upstream says which (vLLM's ``stop_reason``)."""
        reason = _FINISH.get(self.finish_reason or "", "")
        if self.content.calls and reason != "max_tokens":  # OpenAI answers "stop" for a forced function
            return "tool_use", None
        if reason:
            return reason, None
        if isinstance(self.stop_reason, str) and self.stop_reason in stops:
            return "stop_sequence", self.stop_reason
        return ("max_tokens", None) if result.finish_reason == "length" else ("end_turn", None)


def chat_body(request: MessagesRequest, messages: list[dict[str, Any]], tools: ToolSpec | None) -> dict[str, Any]:
    """The Messages request as an OpenAI chat completions body."""
    body: dict[str, Any] = {"model": request.model, "messages": [_openai_message(m) for m in messages],
                            "max_tokens": request.max_tokens}
    for name in ("temperature", "top_p", "top_k"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    if request.stop_sequences:
        body["stop"] = list(request.stop_sequences)
    if tools is not None:
        body["tools"] = [{"type": "function", "function": {
            "name": f.name, "parameters": f.parameters, **({"description": f.description} if f.description else {})}}
            for f in tools.functions]
        body["tool_choice"] = {"type": "function", "function": {"name": tools.named}} if tools.named else tools.choice
        body["parallel_tool_calls"] = tools.parallel
    user = request.user()
    if user:
        body["user"] = user
    return body


def _openai_message(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message.get("tool_calls"):
        out["content"] = message["content"] or None
        out["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"],
                                                                             "arguments": c["arguments"]}}
                             for c in message["tool_calls"]]
    if message["role"] == "tool":
        out["tool_call_id"] = message["tool_call_id"]
    return out


def _for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the chat template counts them (as the relay counts chat requests)."""
    out = []
    for m in messages:
        entry: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            entry["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": json.loads(c["arguments"] or "{}")}} for c in m["tool_calls"]]
        if m["role"] == "tool":
            entry["tool_call_id"] = m["tool_call_id"]
        out.append(entry)
    return out
