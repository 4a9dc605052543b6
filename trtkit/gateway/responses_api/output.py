"""A Responses API turn's output: the answer's text read as one message, or as function calls (``tool_format``), and
the stream events that carry it in OpenAI's order.

Text: ``response.output_item.added`` (the message), ``response.content_part.added``, ``response.output_text.delta``
per delta, ``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``. A function
call: ``response.output_item.added`` (a ``function_call`` item with its name, arguments empty),
``response.function_call_arguments.delta`` as they come, ``response.function_call_arguments.done``,
``response.output_item.done``. The stream opens with ``response.created`` and ``response.in_progress`` and closes
with ``response.completed`` (or ``response.incomplete``) carrying the usage; every event has its
``sequence_number``. With tools that may be called, a stream tells text from calls by the answer's first characters
(the grammar lets no text begin like a call), so nothing is held back longer than that.
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
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from trtkit.gateway.responses_api.items import call_item, message_item, new_id
from trtkit.gateway.tool_format import ToolSpec
from trtkit.gateway.tool_splitter import Piece, ToolTextSplitter

_TEXT_MARK = "trtkit-text-mark-93c4"
_SEQUENCE_MARK = 918_273_645


def sse(event: Any) -> bytes:
    return b"event: " + event.type.encode("ascii") + b"\ndata: " + event.model_dump_json(by_alias=True).encode("utf-8") + b"\n\n"


class OutputItems:
    """The output items of one answer as its text comes: a message (id ``message_id``), or calls (each a new
    ``fc_`` id and ``call_`` call id). ``pieces`` tell a stream what happened."""

    def __init__(self, spec: ToolSpec | None, message_id: str) -> None:
        self.splitter = ToolTextSplitter(spec) if spec is not None else None
        self.message_id = message_id
        self.text = ""
        self.calls: list[dict[str, Any]] = []  # each {"id", "call_id", "name", "arguments", "complete"}

    @property
    def is_text(self) -> bool:
        return self.splitter is None or self.splitter.is_text

    def feed(self, text: str) -> list[Piece]:
        if self.splitter is None:
            self.text += text
            return [Piece("text", text)] if text else []
        return self._note(self.splitter.feed(text))

    def finish(self) -> list[Piece]:
        return [] if self.splitter is None else self._note(self.splitter.finish())

    def _note(self, pieces: list[Piece]) -> list[Piece]:
        for piece in pieces:
            if piece.kind == "text":
                self.text += piece.value
            elif piece.kind == "name":
                self.calls.append({"id": new_id("fc"), "call_id": new_id("call"), "name": piece.value,
                                   "arguments": "", "complete": False})
            elif piece.kind == "arguments":
                self.calls[piece.index]["arguments"] += piece.value
            elif piece.kind == "done":
                self.calls[piece.index]["complete"] = piece.value != "cut"
        return pieces

    def items(self, status: str) -> list[dict[str, Any]]:
        """The output items once the answer is whole: ``status`` is the response's (a cut call is incomplete)."""
        if self.calls:
            return [call_item(c["call_id"], c["name"], c["arguments"], item_id=c["id"],
                              status="completed" if c["complete"] else "incomplete") for c in self.calls]
        return [message_item("assistant", self.text, item_id=self.message_id, status=status)]


class TurnEvents:
    """One stream's events, numbered in order. Text deltas are spliced into one event validated at start (a JSON
    string and a number per delta, not a pydantic event: the chat endpoints' TextChunks idea)."""

    def __init__(self, output: OutputItems) -> None:
        self.output = output
        self.sequence = 0
        self._message_open = False
        template = sse(ResponseTextDeltaEvent(type="response.output_text.delta", item_id=output.message_id,
                                              output_index=0, content_index=0, delta=_TEXT_MARK, logprobs=[],
                                              sequence_number=_SEQUENCE_MARK))
        head, _, rest = template.partition(json.dumps(_TEXT_MARK).encode())
        middle, _, tail = rest.partition(str(_SEQUENCE_MARK).encode())
        self._delta = (head, middle, tail)

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence - 1

    def opening(self, started: Response) -> bytes:
        """Created and in progress; a text answer's message at once when no call can come."""
        events = [sse(ResponseCreatedEvent(type="response.created", response=started, sequence_number=self._next())),
                  sse(ResponseInProgressEvent(type="response.in_progress", response=started,
                                              sequence_number=self._next()))]
        if self.output.splitter is None or not self.output.splitter.spec.calls_tools:
            events.append(self._open_message())
        return b"".join(events)

    def delta(self, text: str) -> bytes:
        return b"".join(self._event(piece) for piece in self.output.feed(text))

    def flush(self) -> bytes:
        """The answer ended: what the splitter held back goes out (before the response is made of the items)."""
        return b"".join(self._event(piece) for piece in self.output.finish())

    def closing(self, finished: Response) -> bytes:
        """Every item done, then the response completed (or incomplete) with its usage."""
        events = []
        for index, item in enumerate(finished.output):
            if isinstance(item, ResponseOutputMessage):
                events.append(self._close_message(item))
            elif isinstance(item, ResponseFunctionToolCall):
                events.append(self._close_call(item, index))
        last = ResponseIncompleteEvent if finished.status == "incomplete" else ResponseCompletedEvent
        kind = "response.incomplete" if finished.status == "incomplete" else "response.completed"
        events.append(sse(cast(Any, last)(type=kind, response=finished, sequence_number=self._next())))
        return b"".join(events)

    def _event(self, piece: Piece) -> bytes:
        if piece.kind == "text":
            opened = b"" if self._message_open else self._open_message()
            head, middle, tail = self._delta
            return opened + head + json.dumps(piece.value, ensure_ascii=False).encode("utf-8") + middle + \
                str(self._next()).encode("ascii") + tail
        call = self.output.calls[piece.index]
        if piece.kind == "name":
            item = ResponseFunctionToolCall(type="function_call", id=call["id"], call_id=call["call_id"],
                                            name=call["name"], arguments="", status="in_progress")
            return sse(ResponseOutputItemAddedEvent(type="response.output_item.added", item=item,
                                                    output_index=piece.index, sequence_number=self._next()))
        if piece.kind == "arguments":
            return sse(ResponseFunctionCallArgumentsDeltaEvent(
                type="response.function_call_arguments.delta", item_id=call["id"], output_index=piece.index,
                delta=piece.value, sequence_number=self._next()))
        return b""  # "done": closed with the response (its item's final status is the response's to say)

    def _open_message(self) -> bytes:
        self._message_open = True
        item = ResponseOutputMessage(id=self.output.message_id, type="message", role="assistant", status="in_progress",
                                     content=[])
        part = ResponseOutputText(type="output_text", text="", annotations=[], logprobs=[])
        return sse(ResponseOutputItemAddedEvent(type="response.output_item.added", item=item, output_index=0,
                                                sequence_number=self._next())) + \
            sse(ResponseContentPartAddedEvent(type="response.content_part.added", item_id=self.output.message_id,
                                              output_index=0, content_index=0, part=part,
                                              sequence_number=self._next()))

    def _close_message(self, item: ResponseOutputMessage) -> bytes:
        opened = b"" if self._message_open else self._open_message()
        part = item.content[0]
        assert isinstance(part, ResponseOutputText)
        return opened + b"".join((
            sse(ResponseTextDoneEvent(type="response.output_text.done", item_id=item.id, output_index=0,
                                      content_index=0, text=part.text, logprobs=[], sequence_number=self._next())),
            sse(ResponseContentPartDoneEvent(type="response.content_part.done", item_id=item.id, output_index=0,
                                             content_index=0, part=part, sequence_number=self._next())),
            sse(ResponseOutputItemDoneEvent(type="response.output_item.done", item=item, output_index=0,
                                            sequence_number=self._next()))))

    def _close_call(self, item: ResponseFunctionToolCall, index: int) -> bytes:
        assert item.id is not None
        return sse(ResponseFunctionCallArgumentsDoneEvent(
            type="response.function_call_arguments.done", item_id=item.id, output_index=index,
            arguments=item.arguments, sequence_number=self._next())) + \
            sse(ResponseOutputItemDoneEvent(type="response.output_item.done", item=item, output_index=index,
                                            sequence_number=self._next()))
