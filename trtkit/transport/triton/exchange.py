"""One request's exchange with tritonserver, decided once for both clients.

The sync client (a gRPC stream per request) and the asyncio client (every request on one kept call) move
bytes differently, but decide alike: when to open the request's call, how long to wait for its next response
(the deadline), when it is over (its final response, a client-side stop), when to retry it (UNAVAILABLE before
any token: ``setup.retry_delay_s``), and how to stop one the caller left: the engine's ``stop`` request, sent
again while the request has not reached the engine, until its stream ends or STOP_GRACE_S pass
(``trtkit/wire/stop_request.py`` says why never a cancel). After a client-side stop (the deadline, a cancel)
it reads the request's stream to its end and hands those responses on too: the engine generated them
before the stop took, so they are billed, by the engine's count (their text never reaches the caller). :func:`exchange` makes those decisions and does no
I/O (sans-IO, as h11 does for HTTP): it yields what to do next (an :class:`Op`) and gets the answer back, and
yields each :class:`Delta` or client-side stop for the caller. :func:`drive` runs it over a blocking
:class:`CallIO`, :func:`adrive` over an asyncio one; each client's ``CallIO`` is its own way to carry one
request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from trtkit.errors import ClientError
from trtkit.governance.upstream import FINISH_CANCELLED, FINISH_DEADLINE, Delta
from trtkit.transport.triton.retry import ClientSetup, retry_delay_s
from trtkit.wire.stop_request import STOP_GRACE_S, STOP_RETRY_S

CANCELLED = object()  # what ``next`` answers when the caller cancelled the request (client.cancel)
END = object()  # what ``next`` answers when the request's stream ended without a final response


class Reader(Protocol):
    """Turns one response of the request's call into a Delta (the text path's or the token path's reader)."""

    def read(self, result: Any) -> Delta: ...


class CallIO(Protocol):
    """One request's call, as a blocking client carries it. ``next`` answers a ``(result, error)`` pair,
    CANCELLED, END, an exception that broke the call, or None when nothing came within ``timeout``."""

    def open(self) -> Reader: ...
    def next(self, timeout: float) -> object: ...
    def send_stop(self, until: float) -> str: ...  # "stopped", "not running" or "failed" (protocol.stop_outcome)
    def wait_ended(self, until: float) -> bool: ...  # the stream ended by ``until`` (now: already ended)
    def sleep(self, seconds: float) -> None: ...
    def release(self, ended: bool, broken: bool) -> None: ...  # done with the call (broken: never reuse it)


class AsyncCallIO(Protocol):
    """The same, for an asyncio client."""

    async def open(self) -> Reader: ...
    async def next(self, timeout: float) -> object: ...
    async def send_stop(self, until: float) -> str: ...
    async def wait_ended(self, until: float) -> bool: ...
    async def sleep(self, seconds: float) -> None: ...
    async def release(self, ended: bool, broken: bool) -> None: ...


@dataclass(slots=True, frozen=True)
class Op:
    """What the exchange asks its CallIO to do: the method ``name`` with ``args``. ``on(io)`` does it, and
    gives the answer (a blocking CallIO) or an awaitable of it (an asyncio one)."""

    name: str
    args: tuple[Any, ...] = ()

    def on(self, io: Any) -> Any:
        return getattr(io, self.name)(*self.args)


OPEN = Op("open")


@dataclass(slots=True)
class _Attempt:
    opened: bool = False
    final_seen: bool = False  # the request's last response was read: nothing left to stop
    broken: bool = False  # the call failed: it is not stopped, and not reused
    stop_tried: bool = False  # a client-side stop already sent the engine's stop (and waited out its grace)


Step = Op | Delta | str


def exchange(setup: ClientSetup, url: str, request_id: str, deadline: float, has_output: Callable[[], bool],
             fallback: str) -> Generator[Step, Any, None]:
    """The decisions of one request. ``fallback`` names how the client ends a request the stop did not end in
    time (``trtkit_client_early_ends_total{how}``: "call_cancel" or "let_go")."""
    attempt = 0
    while True:
        state = _Attempt()
        try:
            reader = yield OPEN
            state.opened = True
            yield from _responses(reader, deadline, state)
            return
        except ClientError:
            state.broken = True
            raise
        except Exception as exc:  # tritonclient's InferenceServerException, a broken call
            state.broken = True
            delay = retry_delay_s(setup, url, request_id, exc, has_output=has_output(), attempt=attempt)
        except BaseException as exc:  # the caller left (GeneratorExit, a cancelled task): stop it; else broken
            state.broken = not isinstance(exc, (GeneratorExit, asyncio.CancelledError))
            raise
        finally:
            yield from _end(state, setup, fallback)
        yield Op("sleep", (delay,))
        attempt += 1


def _responses(reader: Reader, deadline: float, state: _Attempt) -> Generator[Step, Any, None]:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            yield FINISH_DEADLINE
            yield from _stop_and_read(reader, state)
            return
        item = yield Op("next", (remaining,))
        if item is None:  # nothing within the wait: look at the deadline again
            continue
        if item is CANCELLED:
            yield FINISH_CANCELLED
            yield from _stop_and_read(reader, state)
            return
        if item is END:
            return
        if isinstance(item, BaseException):
            raise item
        result, error = item
        if error is not None:  # an error ends the request (Triton sends nothing after it)
            raise error
        delta = reader.read(result)
        state.final_seen = delta.is_final and not delta.engine_running
        yield delta
        if delta.is_final:
            return


def _stop_and_read(reader: Reader, state: _Attempt) -> Generator[Step, Any, None]:
    """After a client-side stop: the responses already here, then the engine's ``stop`` request and the rest of
    the stream to its final response, each handed on as a Delta (the flow bills their counts and drops their
    text). A stop that finds nothing ("not running": it has not reached the engine, or it just ended) is sent
    again STOP_RETRY_S on; after STOP_GRACE_S ``_end`` falls back as for a caller that left."""
    until = time.monotonic() + STOP_GRACE_S
    send_at: float | None = None  # when to send the stop; None once the engine took it
    pending = True  # read what already arrived before stopping: it may be the whole rest of the stream
    while (now := time.monotonic()) < until:
        if not pending and send_at is not None and now >= send_at:
            said = yield Op("send_stop", (until,))
            state.stop_tried = True
            if said == "failed":
                return
            send_at = None if said == "stopped" else time.monotonic() + STOP_RETRY_S
        wait = 0.0 if pending else max(0.0, min(until, send_at or until) - time.monotonic())
        item = yield Op("next", (wait,))
        if item is None:
            if pending:
                pending, send_at = False, time.monotonic()
            continue
        if item is CANCELLED:
            continue
        if item is END or isinstance(item, BaseException):
            state.final_seen = item is END
            state.broken = item is not END
            return
        result, error = item
        if error is not None:  # an error is the stream's last response
            state.final_seen = True
            return
        delta = reader.read(result)
        yield delta
        if delta.is_final and not delta.engine_running:
            state.final_seen = True
            return


def _end(state: _Attempt, setup: ClientSetup, fallback: str) -> Generator[Step, Any, None]:
    """Done with an attempt: at once when it finished; when the caller left, stop it with the engine's ``stop``
    request and read its stream to its end; the call is released whatever happens meanwhile."""
    ended = state.final_seen
    try:
        if state.opened and not state.broken and not ended:
            if not state.stop_tried:
                ended = yield Op("wait_ended", (time.monotonic(),))  # it may have ended while nobody read
            if not ended:
                ended = False if state.stop_tried else (yield from _stop())
                governor = setup.governor
                governor.metrics.early_ends.labels(governor.model, "stop" if ended else fallback).inc()
        elif state.stop_tried and ended:
            governor = setup.governor
            governor.metrics.early_ends.labels(governor.model, "stop").inc()
    finally:
        yield Op("release", (ended, state.broken))


def _stop() -> Generator[Step, Any, bool]:
    """Stop the request and wait for its stream to end: True when it ended within STOP_GRACE_S. A stop that
    finds nothing ("not running": it ended, or has not reached the engine yet) is sent again STOP_RETRY_S on."""
    until = time.monotonic() + STOP_GRACE_S
    while True:
        said = yield Op("send_stop", (until,))
        if said == "failed":
            return False
        wait = until if said == "stopped" else min(until, time.monotonic() + STOP_RETRY_S)
        if (yield Op("wait_ended", (wait,))):
            return True
        if time.monotonic() >= until:
            return False


def drive(core: Generator[Step, Any, None], io: CallIO) -> Generator[Delta | str, None, None]:
    """Run the exchange over a blocking call: its ops are done here, its deltas handed to the caller. A caller
    that stops reading (GeneratorExit) is thrown into the exchange, which stops the request before it ends."""
    reply: Any = None
    error: BaseException | None = None
    while (step := _advance(core, reply, error)) is not None:
        reply, error = None, None
        try:
            if isinstance(step, Op):
                reply = step.on(io)
            else:
                yield step
        except BaseException as exc:  # the call's failure, or the caller leaving: the exchange decides
            error = exc


async def adrive(core: Generator[Step, Any, None], io: AsyncCallIO) -> AsyncGenerator[Delta | str, None]:
    """:func:`drive` for an asyncio call; a cancelled task is thrown into the exchange likewise."""
    reply: Any = None
    error: BaseException | None = None
    while (step := _advance(core, reply, error)) is not None:
        reply, error = None, None
        try:
            if isinstance(step, Op):
                reply = await step.on(io)
            else:
                yield step
        except BaseException as exc:
            error = exc


def _advance(core: Generator[Step, Any, None], reply: Any, error: BaseException | None) -> Step | None:
    """The exchange's next step (None once it is over); its own exceptions propagate."""
    try:
        return core.throw(error) if error is not None else core.send(reply)
    except StopIteration:
        return None
