"""One admitted request between its transport and its caller, shared by the sync and asyncio clients: what
each response becomes (a chunk for the caller, the end of the request) and what an early end is recorded as.
The governor admits before and settles after; the transports only move responses."""

from __future__ import annotations

import asyncio
import time

from trtkit.governance.accumulate import StreamAccumulator
from trtkit.governance.governor import Governor, Outcome, PreparedRequest
from trtkit.governance.results import GenerationResult, StreamChunk
from trtkit.transport.protocol import Delta
from trtkit.transport.setup import FINISH_CANCELLED, is_server_failure


class RequestFlow:
    """``server_stream``: None lets the runaway guard decide (it needs the deltas); ``deadline_s``: from now."""

    def __init__(self, governor: Governor, prepared: PreparedRequest, *, server_stream: bool | None,
                 deadline_s: float) -> None:
        guard = governor.new_guard()
        self.prepared = prepared
        self.use_stream = server_stream if server_stream is not None else guard is not None
        self.acc = StreamAccumulator(prepared.prompt_tokens, governor.counter, guard, prepared.params)
        self.deadline = time.monotonic() + deadline_s
        self.stop_reason: str | None = None
        self.unsent_log_probs: list[tuple[int, float]] = []  # tokens whose text no chunk has carried yet

    def take(self, delta: Delta | str) -> tuple[StreamChunk | None, bool]:
        """(the chunk to hand the caller or None, whether the request is over). A string is a client-side
        stop (cancelled, deadline); the guard's stop comes back from the accumulator."""
        if isinstance(delta, str):
            self.stop_reason = delta
            return None, True
        self.stop_reason = self.acc.add(delta)
        self.unsent_log_probs.extend(delta.log_probs or ())
        chunk = None
        if self.use_stream and delta.text:
            chunk = StreamChunk(delta.text, self.acc.running_usage(), self.prepared.request_id,
                                log_probs=tuple(self.unsent_log_probs))
            self.unsent_log_probs.clear()
        return chunk, bool(self.stop_reason or self.acc.finished)

    def last_chunk(self, result: GenerationResult) -> StreamChunk:
        """The chunk that carries the result: streamed, with no text (the deltas carried it) and the log-probs
        no delta carried; not streamed, the whole text and every log-prob."""
        if self.use_stream:
            return StreamChunk("", result.usage, result.request_id, result, tuple(self.unsent_log_probs))
        return StreamChunk(result.text, result.usage, result.request_id, result, result.log_probs or ())

    def outcome(self) -> Outcome:
        return self.acc.outcome(self.stop_reason)

    def ended_by(self, exc: BaseException) -> Outcome | None:
        """What to record when ``exc`` ended the request: None when the server never worked on it (refused, or
        never reached), so its reservation is only released; else an outcome billing what arrived, 'cancelled'
        when the caller left (task cancelled, stream closed), 'error' when something failed."""
        if not (self.acc.has_output or is_server_failure(exc)):
            return None
        left = isinstance(exc, (asyncio.CancelledError, GeneratorExit))
        return self.acc.outcome(FINISH_CANCELLED if left else "error")
