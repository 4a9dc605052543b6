"""An OpenAI-compatible upstream's events on their way back to the caller (``gateway.relay``).

Streamed: each event goes on as it came, but under this gateway's response id and the model name the caller
asked for. The events that end a choice are held until the request is settled, so the last of them can carry the
``trtkit`` extension (our finish reason, cache hit, request id); the upstream's usage chunk goes on only if the
caller asked for it (``stream_options.include_usage``: the gateway always asks the upstream for it). A stream the
gateway ended (runaway guard, deadline) gets finish events of its own. Not streamed: the events are merged into one
``chat.completion`` or ``text_completion`` body, as the upstream would have answered it (every choice, tool calls
and log-probabilities included).
"""

from __future__ import annotations

import json
import time
from typing import Any

from trtkit.gateway.openai_objects import extension, openai_finish_reason
from trtkit.governance.vocabulary import GenerationResult


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n\n"


class EventRelay:
    """One streamed answer's events, restamped and passed on; see the module docstring."""

    def __init__(self, response_id: str, model: str, *, chat: bool, include_usage: bool = False) -> None:
        self.response_id, self.model, self.chat = response_id, model, chat
        self.include_usage = include_usage
        self.object = "chat.completion.chunk" if chat else "text_completion"
        self.created = int(time.time())
        self.held: list[dict[str, Any]] = []  # events that end a choice
        self.open: set[int] = set()  # choices seen and not ended

    def pass_on(self, event: dict[str, Any]) -> bytes:
        """The bytes to send now for ``event`` (none when it is held)."""
        event["id"], event["model"] = self.response_id, self.model
        choices = event.get("choices")
        if not choices:
            if event.get("usage") is not None:  # the final usage: the bill goes instead (finish)
                return b""
            return sse(event)
        if not self.include_usage and event.get("usage") is not None:  # a running or final count in a choice's
            event["usage"] = None  # chunk (vLLM's continuous stats, llama-server's completions): not asked for
        ended = False
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            index = _index(choice)
            if choice.get("finish_reason"):
                self.open.discard(index)
                ended = True
            else:
                self.open.add(index)
        if ended:
            self.held.append(event)
            return b""
        return sse(event)

    def text(self, text: str) -> bytes:
        """A chunk of our own (an answer from the response cache has no upstream events)."""
        self.open.add(0)
        return sse(self._event([self._choice(0, text)]))

    def finish(self, result: GenerationResult) -> bytes:
        """The held events, finish events for choices the gateway ended, the ``trtkit`` extension, and the usage
        chunk if the caller asked for it."""
        events = list(self.held)
        reason = openai_finish_reason(result.finish_reason)
        ended = [self._choice(i, None, reason) for i in sorted(self.open)]
        if ended or not events:
            events.append(self._event(ended or [self._choice(0, None, reason)]))
        events[-1]["trtkit"] = extension(result)
        out = b"".join(sse(e) for e in events)
        if self.include_usage:  # the bill (the upstream's report, once checked and bounded: governance/billing.py)
            usage = self._event([])
            usage["usage"] = result.usage.to_openai()
            out += sse(usage)
        return out

    def _event(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.response_id, "object": self.object, "created": self.created, "model": self.model,
                "choices": choices}

    def _choice(self, index: int, text: str | None, finish_reason: str | None = None) -> dict[str, Any]:
        if self.chat:
            delta = {} if text is None else {"role": "assistant", "content": text}
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish_reason}


class AnswerMerger:
    """A non-streamed answer: the upstream's events merged into the body it would have sent."""

    def __init__(self, *, chat: bool) -> None:
        self.chat = chat
        self.choices: dict[int, dict[str, Any]] = {}
        self.extra: dict[str, Any] = {}  # top-level fields besides the ones we set (system_fingerprint, ...)

    def add(self, event: dict[str, Any]) -> None:
        for name, value in event.items():
            if name not in ("id", "object", "created", "model", "choices", "usage", "trtkit"):
                self.extra[name] = value
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            index = _index(choice)
            merged = self.choices.setdefault(index, self._empty(index))
            _merge_choice(merged, choice, self.chat)

    def add_text(self, text: str) -> None:
        self.add({"choices": [{"index": 0, "delta": {"content": text}} if self.chat else {"index": 0, "text": text}]})

    def body(self, response_id: str, model: str, result: GenerationResult) -> dict[str, Any]:
        if not self.choices:
            self.add_text("")
        reason = openai_finish_reason(result.finish_reason)
        choices = [self.choices[i] for i in sorted(self.choices)]
        for choice in choices:
            choice["finish_reason"] = choice["finish_reason"] or reason
        return {"id": response_id, "object": "chat.completion" if self.chat else "text_completion",
                "created": int(time.time()), "model": model, "choices": choices, **self.extra,
                "usage": result.usage.to_openai(),  # the bill: the upstream's report once checked and bounded
                "trtkit": extension(result)}

    def _empty(self, index: int) -> dict[str, Any]:
        if self.chat:
            return {"index": index, "message": {"role": "assistant", "content": None}, "logprobs": None,
                    "finish_reason": None}
        return {"index": index, "text": "", "logprobs": None, "finish_reason": None}


MAX_INDEX = 128  # choices and tool calls: an index past this is read as 0 (relay.MAX_CHOICES bounds n)


def _index(item: dict[str, Any], default: int = 0) -> int:
    """An upstream's ``index``, trusted only as a small whole number: an index of 10**9 must not make a list
    that long."""
    index = item.get("index", default)
    return index if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < MAX_INDEX else default


def _merge_choice(merged: dict[str, Any], choice: dict[str, Any], chat: bool) -> None:
    if choice.get("finish_reason"):
        merged["finish_reason"] = choice["finish_reason"]
    if not chat:
        text = choice.get("text")
        merged["text"] += text if isinstance(text, str) else ""
        merged["logprobs"] = _merge_lists(merged["logprobs"], choice.get("logprobs"))
        return
    message, delta = merged["message"], choice.get("delta")
    if not isinstance(delta, dict):
        delta = {}
    for name, value in delta.items():
        if name == "tool_calls":
            _merge_tool_calls(message.setdefault("tool_calls", []), value if isinstance(value, list) else [])
        elif isinstance(value, str) and name != "role":
            message[name] = (message.get(name) or "") + value
        elif name != "role" and value is not None:
            message[name] = value
    merged["logprobs"] = _merge_lists(merged["logprobs"], choice.get("logprobs"))


def _merge_lists(merged: dict[str, Any] | None, piece: Any) -> dict[str, Any] | None:
    """Log-probabilities: each field's list grows piece by piece (chat's ``content``, completions' ``tokens`` ...)."""
    if not isinstance(piece, dict):
        return merged
    merged = merged if merged is not None else {}
    for name, value in piece.items():
        if isinstance(value, list):
            merged[name] = (merged.get(name) or []) + value
        elif name not in merged:
            merged[name] = value
    return merged


def _merge_tool_calls(calls: list[dict[str, Any]], pieces: list[dict[str, Any]]) -> None:
    for piece in pieces:
        if not isinstance(piece, dict):
            continue
        index = _index(piece, min(len(calls), MAX_INDEX - 1))
        while len(calls) <= index:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = calls[index]
        call["id"] = piece.get("id") or call["id"]
        call["type"] = piece.get("type") or call["type"]
        function = piece.get("function")
        for name in ("name", "arguments"):
            part = function.get(name) if isinstance(function, dict) else None
            call["function"][name] += part if isinstance(part, str) else ""
