"""Anthropic's Messages API answers, built from the ``anthropic`` package's own types: the ``Message``, its stream's
events, and errors in Anthropic's shape.

Usage is Anthropic's split of the engine's counts: ``input_tokens`` the prompt tokens the engine computed,
``cache_read_input_tokens`` those its KV reuse served (block-granular), ``cache_creation_input_tokens`` 0 (the engine
keeps reusable blocks by itself; nothing is billed for writing them), ``output_tokens`` the answer's; their sum is
what the ledger bills. A stream: ``message_start`` (the message, empty, with the input usage, once the engine's first
answer says how much of the prompt was cached), ``ping``, per block ``content_block_start``, its deltas
(``text_delta``, or a tool's ``input_json_delta`` as its arguments come), ``content_block_stop``, then
``message_delta`` (stop reason, stop sequence, the usage in full) and ``message_stop``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from anthropic.types import (
    Message,
    MessageDeltaUsage,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    TextBlock,
    ToolUseBlock,
)
from anthropic.types import Usage as AnthropicUsage
from anthropic.types.shared import ErrorResponse
from fastapi.responses import JSONResponse

from trtkit.gateway.error_responses import HttpError
from trtkit.gateway.tool_format import ToolSpec
from trtkit.gateway.tool_splitter import Piece, ToolTextSplitter
from trtkit.governance.vocabulary import GenerationResult, Usage

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error", 503: "overloaded_error"}


def usage_of(usage: Usage) -> AnthropicUsage:
    return AnthropicUsage(input_tokens=usage.prompt_tokens - usage.cached_tokens, output_tokens=usage.completion_tokens,
                          cache_read_input_tokens=usage.cached_tokens, cache_creation_input_tokens=0)


def stop_of(result: GenerationResult, has_calls: bool, stop_sequences: list[str]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): tool_use when it called tools, max_tokens at the length limit, stop_sequence when
    one of the caller's ended it, else end_turn. Which sequence: the one sent; of several, the first (the engine
    reports that a stop string ended the answer, not which: one caught by its token id leaves no trace in the text)."""
    if result.finish_reason == "length":
        return "max_tokens", None
    if has_calls:
        return "tool_use", None
    if result.finish_reason == "stop" and stop_sequences:
        return "stop_sequence", stop_sequences[0]
    return "end_turn", None


class MessageContent:
    """The answer's content blocks as its text comes: text, or tool calls (``tool_format``) as ``tool_use`` blocks."""

    def __init__(self, spec: ToolSpec | None) -> None:
        self.splitter = ToolTextSplitter(spec or ToolSpec((), "none"))
        self.text = ""
        self.calls: list[dict[str, Any]] = []  # {"id", "name", "arguments"}

    def feed(self, text: str) -> list[Piece]:
        return self.take(self.splitter.feed(text))

    def finish(self) -> list[Piece]:
        return self.take(self.splitter.finish())

    def take(self, pieces: list[Piece]) -> list[Piece]:
        """Pieces read elsewhere (an upstream's tool-call deltas), noted as the splitter's are."""
        for piece in pieces:
            if piece.kind == "text":
                self.text += piece.value
            elif piece.kind == "name":
                self.calls.append({"id": f"toolu_{secrets.token_hex(12)}", "name": piece.value, "arguments": ""})
            elif piece.kind == "arguments":
                self.calls[piece.index]["arguments"] += piece.value
        return pieces

    def blocks(self) -> list[TextBlock | ToolUseBlock]:
        if self.calls:
            return [ToolUseBlock(type="tool_use", id=c["id"], name=c["name"], input=_object(c["arguments"]))
                    for c in self.calls]
        return [TextBlock(type="text", text=self.text)] if self.text else []


def _object(arguments: str) -> dict[str, Any]:
    """A call's input (the length limit may have cut it: what parses, else nothing)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message(message_id: str, model: str, content: MessageContent, result: GenerationResult,
            stop_sequences: list[str], stop: tuple[str, str | None] | None = None) -> Message:
    """``stop``: (stop_reason, stop_sequence) when the caller knows better (an upstream's finish reason)."""
    reason, sequence = stop or stop_of(result, bool(content.calls), stop_sequences)
    return Message(id=message_id, type="message", role="assistant", model=model, content=list(content.blocks()),
                   stop_reason=reason, stop_sequence=sequence, usage=usage_of(result.usage))  # type: ignore[arg-type]


def sse(event: Any) -> bytes:
    return b"event: " + event.type.encode("ascii") + b"\ndata: " + event.model_dump_json(
        by_alias=True, exclude_none=True).encode("utf-8") + b"\n\n"


class MessageEvents:
    """One stream's events in Anthropic's order; blocks are numbered as they open."""

    def __init__(self, message_id: str, model: str, content: MessageContent) -> None:
        self.message_id, self.model, self.content = message_id, model, content
        self.index = -1
        self.open: str | None = None  # "text" or "tool:<call index>"

    def start(self, usage: Usage) -> bytes:
        started = Message(id=self.message_id, type="message", role="assistant", model=self.model, content=[],
                          stop_reason=None, stop_sequence=None, usage=usage_of(Usage.of(usage.prompt_tokens, 0,
                                                                                        usage.cached_tokens)))
        return sse(RawMessageStartEvent(type="message_start", message=started)) + \
            b'event: ping\ndata: {"type": "ping"}\n\n'

    def delta(self, text: str) -> bytes:
        return self.pieces(self.content.feed(text))

    def pieces(self, pieces: list[Piece]) -> bytes:
        """The events of pieces already noted in the content."""
        return b"".join(self._event(piece) for piece in pieces)

    def closing(self, result: GenerationResult, stop_sequences: list[str],
                stop: tuple[str, str | None] | None = None) -> bytes:
        events = [self._event(piece) for piece in self.content.finish()]
        events.append(self._close())
        reason, sequence = stop or stop_of(result, bool(self.content.calls), stop_sequences)
        usage = usage_of(result.usage)
        delta_usage = MessageDeltaUsage(output_tokens=usage.output_tokens, input_tokens=usage.input_tokens,
                                        cache_read_input_tokens=usage.cache_read_input_tokens,
                                        cache_creation_input_tokens=0)
        events.append(sse(RawMessageDeltaEvent(type="message_delta", usage=delta_usage, delta={  # type: ignore[arg-type]
            "stop_reason": reason, "stop_sequence": sequence})))
        events.append(sse(RawMessageStopEvent(type="message_stop")))
        return b"".join(events)

    def _event(self, piece: Piece) -> bytes:
        if piece.kind == "text":
            opened = b"" if self.open == "text" else self._start(TextBlock(type="text", text=""), "text")
            return opened + sse(RawContentBlockDeltaEvent(type="content_block_delta", index=self.index, delta={
                "type": "text_delta", "text": piece.value}))  # type: ignore[arg-type]
        if piece.kind == "name":
            call = self.content.calls[piece.index]
            block = ToolUseBlock(type="tool_use", id=call["id"], name=call["name"], input={})
            return self._start(block, f"tool:{piece.index}")
        if piece.kind == "arguments":
            return sse(RawContentBlockDeltaEvent(type="content_block_delta", index=self.index, delta={
                "type": "input_json_delta", "partial_json": piece.value}))  # type: ignore[arg-type]
        return self._close()  # "done"

    def _start(self, block: TextBlock | ToolUseBlock, kind: str) -> bytes:
        closed = self._close()
        self.index += 1
        self.open = kind
        return closed + sse(RawContentBlockStartEvent(type="content_block_start", index=self.index,
                                                      content_block=block))

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return sse(RawContentBlockStopEvent(type="content_block_stop", index=self.index))


def error_body(error: HttpError) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(error.status, "invalid_request_error" if error.status < 500 else "api_error")
    text = error.message  # Anthropic's error has no param: the message names the field
    if error.param and error.param not in text:
        text = f"{error.param}: {text}"
    body = ErrorResponse.model_validate({"type": "error", "error": {"type": kind, "message": text}})
    return body.model_dump(exclude_none=True)


def error_response(error: HttpError) -> JSONResponse:
    """An error in Anthropic's shape (the message names the field, as the gateway's every 4xx does)."""
    return JSONResponse(error_body(error), status_code=error.status, headers=error.headers)


def sse_error(error: HttpError) -> bytes:
    return b"event: error\ndata: " + json.dumps(error_body(error)).encode("utf-8") + b"\n\n"
