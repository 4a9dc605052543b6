"""Response objects and stream events of POST /v1/responses, built from the ``openai`` package's own types.

A stream is the sequence the SDK expects: ``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta`` (one per text
delta), ``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``, and
``response.completed`` (``response.incomplete`` when ``max_output_tokens`` cut the answer), whose response carries
the usage. Every event has its ``sequence_number``. The project's own fields (finish reason, conversation, what
the context strategy dropped or summarized) travel in the response's ``trtkit`` extension field.
"""

from __future__ import annotations

import json
from typing import Any, cast

from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from trtkit.gateway.responses_protocol import ResponseRequest
from trtkit.governance.vocabulary import GenerationResult, Usage

_TEXT_MARK = "trtkit-text-mark-93c4"
_SEQUENCE_MARK = 918_273_645


def usage_of(usage: Usage) -> ResponseUsage:
    """The engine's counts: cached_tokens are the prompt tokens its KV reuse served (block-granular). Nothing is
    billed for writing the cache (the engine keeps reusable blocks by itself), so cache_write_tokens is 0."""
    return ResponseUsage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
                         total_tokens=usage.total_tokens,
                         input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens, cache_write_tokens=0),
                         output_tokens_details=OutputTokensDetails(reasoning_tokens=0))


def status_of(result: GenerationResult) -> str:
    """OpenAI's status: ``incomplete`` when max_output_tokens cut the answer, else ``completed`` (our own stops, a
    guard's or a deadline's, are in the trtkit extension)."""
    return "incomplete" if result.finish_reason == "length" else "completed"


def message(message_id: str, text: str | None, status: str) -> ResponseOutputMessage:
    content = [] if text is None else [ResponseOutputText(type="output_text", text=text, annotations=[], logprobs=[])]
    return ResponseOutputMessage(id=message_id, type="message", role="assistant", status=status,  # type: ignore[arg-type]
                                 content=content)  # type: ignore[arg-type]


def response(response_id: str, model: str, request: ResponseRequest, created_at: float, *,
             result: GenerationResult | None = None, message_id: str = "", extension: dict[str, Any] | None = None
             ) -> Response:
    """The response object: in progress (no ``result``) or finished, with its output message and usage."""
    status = "in_progress" if result is None else status_of(result)
    output = [] if result is None else [message(message_id, result.text, status)]
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    extra = {} if extension is None else {"trtkit": extension}
    return cast(Any, Response)(
        id=response_id, object="response", created_at=created_at, model=model, output=output, status=status,
        parallel_tool_calls=False, tool_choice="none", tools=[], instructions=request.instructions,
        metadata=request.metadata, temperature=request.temperature, top_p=request.top_p,
        max_output_tokens=request.max_output_tokens, previous_response_id=request.previous_response_id,
        text=request.text or {"format": {"type": "text"}}, truncation=request.truncation or "disabled",
        user=request.user, incomplete_details=incomplete, usage=None if result is None else usage_of(result.usage),
        **extra)


def sse(event: Any) -> bytes:
    return (b"event: " + event.type.encode("ascii") + b"\ndata: " + event.model_dump_json().encode("utf-8") + b"\n\n")


class ResponseEvents:
    """One stream's events, numbered in order. Text deltas are spliced into one event validated at start (a JSON
    string and a number per delta, not a pydantic event: the chat endpoints' TextChunks idea)."""

    def __init__(self, response_id: str, message_id: str) -> None:
        self.response_id, self.message_id = response_id, message_id
        self.sequence = 0
        template = sse(ResponseTextDeltaEvent(type="response.output_text.delta", item_id=message_id, output_index=0,
                                              content_index=0, delta=_TEXT_MARK, logprobs=[],
                                              sequence_number=_SEQUENCE_MARK))
        head, _, rest = template.partition(json.dumps(_TEXT_MARK).encode())
        middle, _, tail = rest.partition(str(_SEQUENCE_MARK).encode())
        self._delta = (head, middle, tail)

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence - 1

    def opening(self, started: Response) -> bytes:
        """Created, in progress, the output message and its text part added."""
        item = message(self.message_id, None, "in_progress")
        part = ResponseOutputText(type="output_text", text="", annotations=[], logprobs=[])
        return b"".join((
            sse(ResponseCreatedEvent(type="response.created", response=started, sequence_number=self._next())),
            sse(ResponseInProgressEvent(type="response.in_progress", response=started, sequence_number=self._next())),
            sse(ResponseOutputItemAddedEvent(type="response.output_item.added", item=item, output_index=0,
                                             sequence_number=self._next())),
            sse(ResponseContentPartAddedEvent(type="response.content_part.added", item_id=self.message_id,
                                              output_index=0, content_index=0, part=part,
                                              sequence_number=self._next()))))

    def delta(self, text: str) -> bytes:
        head, middle, tail = self._delta
        return head + json.dumps(text, ensure_ascii=False).encode("utf-8") + middle + \
            str(self._next()).encode("ascii") + tail

    def closing(self, finished: Response) -> bytes:
        """The text, its part and its item done, then the response completed (or incomplete) with its usage."""
        item = finished.output[0]
        assert isinstance(item, ResponseOutputMessage)
        part = item.content[0]
        assert isinstance(part, ResponseOutputText)
        last = ResponseIncompleteEvent if finished.status == "incomplete" else ResponseCompletedEvent
        kind = "response.incomplete" if finished.status == "incomplete" else "response.completed"
        return b"".join((
            sse(ResponseTextDoneEvent(type="response.output_text.done", item_id=self.message_id, output_index=0,
                                      content_index=0, text=part.text, logprobs=[], sequence_number=self._next())),
            sse(ResponseContentPartDoneEvent(type="response.content_part.done", item_id=self.message_id,
                                             output_index=0, content_index=0, part=part, sequence_number=self._next())),
            sse(ResponseOutputItemDoneEvent(type="response.output_item.done", item=item, output_index=0,
                                            sequence_number=self._next())),
            sse(cast(Any, last)(type=kind, response=finished, sequence_number=self._next()))))
