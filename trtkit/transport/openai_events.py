"""An OpenAI-compatible stream read as the governed flow reads any upstream: SSE events in, ``Delta`` s out.

Each event (a ``chat.completion.chunk`` or a streamed ``text_completion``) becomes one Delta that carries the event
itself (a relaying gateway passes it on as it came), the text it adds (content, reasoning, tool calls: what the
runaway guard watches, and what a stream cut short is billed by), its finish reason, and the upstream's usage when
the event has one. A usage of zero is a count of zero, never "missing" (an explicit zero is billed as zero).
"""

from __future__ import annotations

import json
from typing import Any

from trtkit.governance.upstream import Delta
from trtkit.transport.upstream_errors import UpstreamBrokenError, openai_error_of, refusal_in_stream

DONE = b"[DONE]"


class SseSplitter:
    """Bytes as they arrive -> the ``data`` of each complete event (several ``data:`` lines joined by a newline;
    comments and other fields skipped)."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, piece: bytes) -> list[bytes]:
        buffer = self.buffer + piece
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events = []
        while (end := buffer.find(b"\n\n")) >= 0:
            data = _data_of(buffer[:end])
            buffer = buffer[end + 2:]
            if data is not None:
                events.append(data)
        self.buffer = buffer
        return events

    def rest(self) -> list[bytes]:
        """An event the stream ended on without its blank line."""
        data = _data_of(self.buffer.strip(b"\n")) if self.buffer.strip() else None
        self.buffer = b""
        return [] if data is None else [data]


def _data_of(raw: bytes) -> bytes | None:
    if raw.startswith(b"data:") and b"\n" not in raw:  # the usual event: one data line
        return raw[6:] if raw[5:6] == b" " else raw[5:]
    lines = [line[6:] if line[5:6] == b" " else line[5:] for line in raw.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def parse_event(data: bytes) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UpstreamBrokenError(f"the upstream sent an event that is not JSON ({exc}): {data[:200]!r}") from None
    if not isinstance(event, dict):
        raise UpstreamBrokenError(f"the upstream sent an event that is not a JSON object: {data[:200]!r}")
    vendor = None if "choices" in event else openai_error_of(event, 500)  # Dynamo's error body as an event
    if vendor is not None or ("error" in event and not event.get("choices")):  # vLLM's and others' mid-stream failure
        error = vendor or event["error"]
        message = error.get("message") if isinstance(error, dict) else error
        refusal = refusal_in_stream(error)  # Dynamo answers a streamed request it refuses with 200, then this
        if refusal is not None:
            raise refusal
        raise UpstreamBrokenError(f"the upstream failed mid-stream: {message}")
    return event


class UsageReports:
    """One stream's usage as reported. A usage in a chunk with choices is a running total (vLLM's
    ``continuous_usage_stats``): the latest stands. The usage chunks OpenAI's spec ends a stream with (no choices)
    are final reports; llama-server sends one per choice (``n`` > 1), so those add up."""

    def __init__(self) -> None:
        self.final: tuple[int | None, int | None, int | None] | None = None

    def delta_of(self, event: dict[str, Any]) -> Delta:
        text, finish = "", ""
        choices = event.get("choices")
        if choices:
            for choice in choices:
                text += _choice_text(choice)
                finish = finish or choice.get("finish_reason") or ""
        usage = event.get("usage")
        if not isinstance(usage, dict):
            return Delta(text, None, None, None, finish, False, event=event)
        details = usage.get("prompt_tokens_details")
        counts = (_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                  _count(details.get("cached_tokens")) if isinstance(details, dict) else None)
        if not choices:
            if self.final is not None:
                counts = (_add(self.final[0], counts[0]), _add(self.final[1], counts[1]), _add(self.final[2], counts[2]))
            self.final = counts
        return Delta(text, counts[0], counts[1], counts[2], finish, False, usage_reported=True, event=event)


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _choice_text(choice: dict[str, Any]) -> str:
    text = choice.get("text")  # completions
    if isinstance(text, str):
        return text
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    found = ""
    for name in ("content", "reasoning_content", "reasoning", "refusal"):
        value = delta.get(name)
        if isinstance(value, str):
            found += value
    for call in delta.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            found += (function.get("name") or "") + (function.get("arguments") or "")
    return found


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number >= 0, else None (not reported)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
