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
from trtkit.transport.openai.errors import UpstreamBrokenError, openai_error_of, refusal_in_stream

DONE = b"[DONE]"


class SseSplitter:
    """Bytes as they arrive -> the ``data`` of each complete event (several ``data:`` lines joined by a newline;
    comments and other fields skipped). Linear in what arrives: each byte is scanned for the blank line that ends
    an event once, however the stream is cut into pieces, and an event larger than ``max_event_bytes`` breaks the
    stream (``UpstreamBrokenError``) before it is held whole: an upstream cannot make the gateway buffer or rescan
    without bound (``gateway.upstream.max_event_bytes``)."""

    def __init__(self, max_event_bytes: int = 1 << 18) -> None:
        self.max_event_bytes = max_event_bytes
        self.buffer = bytearray()
        self.scanned = 0  # bytes of the buffer already searched for an event's end
        self.held_cr = False  # a piece ended on CR: it may be the first half of a CRLF

    def feed(self, piece: bytes) -> list[bytes]:
        if self.held_cr:
            piece, self.held_cr = b"\r" + piece, False
        if piece.endswith(b"\r"):
            piece, self.held_cr = piece[:-1], True
        if b"\r" in piece:  # CRLF and lone CR end lines too (the SSE spec)
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        self.buffer += piece
        events = []
        start = 0
        while (end := self.buffer.find(b"\n\n", max(start, self.scanned - 1))) >= 0:
            data = _data_of(bytes(self.buffer[start:end]))
            if data is not None:
                events.append(data)
            start = self.scanned = end + 2
        if start:
            del self.buffer[:start]
            self.scanned = 0
        self.scanned = len(self.buffer)
        if len(self.buffer) > self.max_event_bytes:
            raise UpstreamBrokenError(f"the upstream sent an event larger than {self.max_event_bytes} bytes "
                                      f"(gateway.upstream.max_event_bytes)")
        return events

    def rest(self) -> list[bytes]:
        """An event the stream ended on without its blank line."""
        raw = bytes(self.buffer).strip(b"\n")
        data = _data_of(raw) if raw.strip() else None
        self.buffer.clear()
        self.scanned = 0
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
    are final reports; llama-server sends one per choice (``n`` > 1), so up to ``n`` of them add up. More final
    reports than choices, or a count no server could have made (``MAX_PLAUSIBLE_COUNT``), make the report doubtful
    (``Delta.usage_doubtful``): governance then bills its own count (``governance.billing``).

    Each choice's ``finish_reason`` is read as one of the values engines are known to send (``FINISH_REASONS``);
    anything else is ``unknown``, in the event passed on as well (OpenAI's ``stop``): an upstream's free text never
    becomes a metric label, a ledger value or an answer's field."""

    def __init__(self, choices: int = 1) -> None:
        self.choices = choices
        self.final: tuple[int | None, int | None, int | None] | None = None
        self.final_reports = 0
        self.doubtful = False

    def delta_of(self, event: dict[str, Any]) -> Delta:
        text, finish = "", ""
        choices = event.get("choices")
        if choices:
            for choice in choices if isinstance(choices, list) else ():
                if not isinstance(choice, dict):
                    continue
                text += _choice_text(choice)
                finish = finish or _finish_reason(choice)
        usage = event.get("usage")
        if not isinstance(usage, dict):
            return Delta(text, None, None, None, finish, False, event=event)
        details = usage.get("prompt_tokens_details")
        raw = (usage.get("prompt_tokens"), usage.get("completion_tokens"),
               details.get("cached_tokens") if isinstance(details, dict) else None)
        counts = (_count(raw[0]), _count(raw[1]), _count(raw[2]))
        if any(value is not None and count is None for value, count in zip(raw, counts, strict=True)):
            self.doubtful = True  # a count that is no count (negative, a string, 2**63): the report is not the bill
        if not choices:
            self.final_reports += 1
            if self.final_reports > self.choices:
                self.doubtful = True  # 1,000 final reports of one answer are not summed
            elif self.final is not None:
                counts = (_add(self.final[0], counts[0]), _add(self.final[1], counts[1]),
                          _add(self.final[2], counts[2]))
            if self.final_reports <= self.choices:
                self.final = counts
            else:
                counts = self.final or counts
        return Delta(text, counts[0], counts[1], counts[2], finish, False, usage_reported=True, event=event,
                     usage_doubtful=self.doubtful)


# OpenAI's values, and those engines behind an OpenAI-compatible API are known to send (vLLM and SGLang: abort;
# TensorRT-LLM's serve: timeout, cancelled; vLLM: error)
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call", "abort", "error",
                            "timeout", "cancelled"})
MAX_PLAUSIBLE_COUNT = 1 << 40  # tokens: more than any one request of any server could count


def _finish_reason(choice: dict[str, Any]) -> str:
    reason = choice.get("finish_reason")
    if not reason:
        return ""
    if isinstance(reason, str) and reason in FINISH_REASONS:
        return reason
    choice["finish_reason"] = "stop"  # what the caller reads: a value of OpenAI's enum
    return "unknown"


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
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            for part in (function.get("name"), function.get("arguments")):
                found += part if isinstance(part, str) else ""
    return found


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number from 0 to MAX_PLAUSIBLE_COUNT, else None (not reported)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_PLAUSIBLE_COUNT:
        return value
    return None
