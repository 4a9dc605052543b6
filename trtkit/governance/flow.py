"""One governed request from its caller to its upstream and back, the one flow of the governed client
(``client.py``): the governor admits it (``prepare``), an upstream carries it (``upstream.py``), each delta
becomes a chunk for the caller, and the governor settles what it cost; an early end is billed for what arrived, or
only released when the server never worked on it. A client-side stop (the deadline, a cancel) is billed for what the
engine generated until the stop took: the upstream hands those responses on after the stop, then ends. The flow
only calls down (the governor, the upstream); nothing it calls calls back into it. ``run_governed`` is the flow for
a blocking upstream, ``arun_governed`` for an asyncio one: they differ in how they wait for the ledger's commit,
never in what they decide."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

from trtkit.governance.accumulate import StreamAccumulator
from trtkit.governance.governor import Governor, Outcome, PreparedRequest
from trtkit.governance.output_cap import FINISH_OVERRUN
from trtkit.governance.upstream import FINISH_CANCELLED, AsyncUpstream, Delta, Upstream
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk


class RequestFlow:
    """``server_stream``: None lets the runaway guard decide (it needs the deltas); ``deadline_s``: from now."""

    def __init__(self, governor: Governor, prepared: PreparedRequest, *, server_stream: bool | None,
                 deadline_s: float, honours_max_tokens: bool = True) -> None:
        guard = governor.new_guard()
        self.prepared = prepared
        self.use_stream = server_stream if server_stream is not None else guard is not None
        meter = None if honours_max_tokens else governor.output_meter(prepared)
        self.acc = StreamAccumulator(prepared.prompt_tokens, governor.counter, guard, prepared.params, meter)
        self.deadline = time.monotonic() + deadline_s
        self.stop_reason: str | None = None
        self.client_stopped = False  # a client-side stop came: later deltas are only counted
        self.unsent_log_probs: list[tuple[int, float]] = []  # tokens whose text no chunk has carried yet

    def take(self, delta: Delta | str) -> tuple[StreamChunk | None, bool]:
        """(the chunk to hand the caller or None, whether the request is over). A string is a client-side
        stop (cancelled, deadline): the upstream then stops the request and hands on what the engine generated
        until it stopped, counted and not shown, and ends; the guard's stop comes back from the accumulator."""
        if isinstance(delta, str):
            self.stop_reason, self.client_stopped = delta, True
            return None, False
        if self.client_stopped:
            self.acc.add_counts(delta)
            return None, False
        self.stop_reason = self.acc.add(delta)
        if self.stop_reason == FINISH_OVERRUN:  # past the reservation: nothing of it reaches the caller
            return None, True
        self.unsent_log_probs.extend(delta.log_probs or ())
        chunk = None
        if self.use_stream and (delta.text or delta.event is not None):
            chunk = StreamChunk(delta.text, self.acc.running_usage(), self.prepared.request_id,
                                log_probs=tuple(self.unsent_log_probs), event=delta.event)
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

    def ended_by(self, exc: BaseException, server_failed: Callable[[BaseException], bool]) -> Outcome | None:
        """What to record when ``exc`` ended the request: None when the server never worked on it (refused, or
        never reached: ``server_failed`` is the upstream's word on that), so its reservation is only released;
        else an outcome billing what arrived, 'cancelled' when the caller left (task cancelled, stream closed),
        'error' when something failed."""
        if not (self.acc.has_output or server_failed(exc)):
            return None
        left = isinstance(exc, (asyncio.CancelledError, GeneratorExit))
        return self.acc.outcome(FINISH_CANCELLED if left else "error")


def run_governed(governor: Governor, upstream: Upstream, prompt: str, params: SamplingParams, caller: Caller,
                 deadline_s: float, *, server_stream: bool | None,
                 payload: Any = None) -> Generator[StreamChunk, None, None]:
    """The chunks of one request over a blocking upstream; the last carries the result. The ledger row's commit
    overlaps closing the upstream's stream, and the result is handed over only once the row is durable."""
    prepared = governor.prepare(prompt, params, caller, payload=payload)
    if isinstance(prepared, GenerationResult):
        yield StreamChunk(prepared.text, prepared.usage, prepared.request_id, prepared)
        return
    flow = RequestFlow(governor, prepared, server_stream=server_stream, deadline_s=deadline_s,
                       honours_max_tokens=upstream.capabilities.honours_max_tokens)
    settled = False
    try:
        deltas = upstream.deltas(prepared, stream=flow.use_stream, deadline=flow.deadline)
        with contextlib.closing(deltas):  # closing it stops the request upstream
            for delta in deltas:
                chunk, over = flow.take(delta)
                if chunk is not None:
                    yield chunk
                if over:
                    break
            result, committed = governor.submit(prepared, flow.outcome())
            settled = True
        # leaving the block closed the stream (or cancelled the request) while the row was committing
    except BaseException as exc:  # a consumer that stopped reading (GeneratorExit), or a failure
        if settled:
            raise
        outcome = flow.ended_by(exc, upstream.is_server_failure)
        if outcome is None:  # refused, or never reached the server
            governor.release(prepared)
        else:
            governor.complete(prepared, outcome)
        raise
    governor.wait_committed(prepared, committed)
    yield flow.last_chunk(result)


async def arun_governed(governor: Governor, upstream: AsyncUpstream, prompt: str, params: SamplingParams,
                        caller: Caller, deadline_s: float, *, server_stream: bool | None, request_id: str | None = None,
                        on_admitted: Callable[[], None] | None = None,
                        payload: Any = None) -> AsyncGenerator[StreamChunk, None]:
    """The chunks of one request over an asyncio upstream; the last carries the result. ``on_admitted`` is
    called once the request passed every limit and budget, before it goes upstream (an asyncio event's ``set``: it
    runs no code of the caller's). ``payload``: what a relaying upstream sends as the caller sent it. Nothing here
    blocks the event loop: a budget store across the network is waited on in a worker thread, the ledger's commit is
    awaited, and a cancelled request's row is committed without waiting."""
    prepare = functools.partial(governor.prepare, prompt, params, caller, record_hit=False, request_id=request_id,
                                payload=payload)
    prepared = await asyncio.to_thread(prepare) if governor.budgets.waits_on_network else prepare()
    if isinstance(prepared, GenerationResult):
        await governor.arecord_hit(prepared, caller)
        yield StreamChunk(prepared.text, prepared.usage, prepared.request_id, prepared)
        return
    flow = RequestFlow(governor, prepared, server_stream=server_stream, deadline_s=deadline_s,
                       honours_max_tokens=upstream.capabilities.honours_max_tokens)
    if on_admitted is not None:
        on_admitted()
    try:
        deltas = upstream.deltas(prepared, stream=flow.use_stream, deadline=flow.deadline)
        # aclosing: when this stream is closed early, the request is stopped now, not by a finaliser
        async with contextlib.aclosing(deltas):
            async for delta in deltas:
                chunk, over = flow.take(delta)
                if chunk is not None:
                    yield chunk
                if over:
                    break
    except BaseException as exc:  # cancelled task, a consumer that stopped reading, or a failure
        outcome = flow.ended_by(exc, upstream.is_server_failure)
        if outcome is None:  # refused, or never reached the server
            governor.release(prepared)
        else:  # never blocks the loop on the ledger's fsync (a cancelled task must end now)
            governor.complete_detached(prepared, outcome)
        raise
    result = await governor.acomplete(prepared, flow.outcome())
    yield flow.last_chunk(result)
