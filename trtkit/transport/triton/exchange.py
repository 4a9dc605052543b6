"""One request's exchange with tritonserver, decided once for both Triton upstreams.

The blocking upstream (a gRPC stream per request) and the asyncio one (every request on one kept call) move
bytes differently, but decide alike: when to open the request's call, how long to wait for its next response
(the deadline), when it is over (its final response, a client-side stop), when to retry it (UNAVAILABLE before
any output: ``retry.retry_delay_s``), and how to stop one the caller left: the engine's ``stop`` request, sent
again while the request has not reached the engine, until its stream ends or STOP_GRACE_S pass
(``trtkit/wire/stop_request.py`` says why never a cancel). After a client-side stop (the deadline, a cancel)
it reads the request's stream to its end and hands those responses on too: the engine generated them
before the stop took, so they are billed, by the engine's count (their text never reaches the caller). :func:`exchange` makes those decisions and does no
I/O (sans-IO, as h11 does for HTTP): it yields what to do next (an :class:`Op`) and gets the answer back, and
yields each :class:`Delta` or client-side stop for the caller. Each upstream runs it itself (``grpc_upstream.drive``
over its blocking :class:`CallIO`, ``aio_upstream.adrive`` over its asyncio one): the exchange calls nothing of
theirs, it only answers :func:`advance`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

from trtkit.config.schema import ModelConfig
from trtkit.errors import ClientError
from trtkit.governance.metrics import UpstreamMetrics
from trtkit.governance.upstream import FINISH_CANCELLED, FINISH_DEADLINE, Delta
from trtkit.transport.triton.retry import retry_delay_s
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
class TritonTarget:
    """What a Triton upstream sends to: the server's gRPC address (``HOST:PORT``), the served model (the ensemble,
    ``tensorrt_llm_bls``, or the engine model ``tensorrt_llm``: the token path), how often a request that found the
    server unreachable before any output is tried again, and the KV block size (a GPU ensemble reports reused blocks,
    read as cached prompt tokens)."""

    url: str
    model_name: str = "ensemble"
    max_retries: int = 3
    tokens_per_block: int = 0

    @classmethod
    def of(cls, config: ModelConfig, url: str, model_name: str | None = None) -> TritonTarget:
        """The target a model config describes: ``client.model_name`` (unless ``model_name``), ``client.max_retries``,
        ``build.tokens_per_block``."""
        return cls(url, model_name or config.client.model_name, config.client.max_retries,
                   config.build.tokens_per_block)


@dataclass(slots=True, frozen=True)
class Op:
    """What the exchange asks its CallIO to do: the method ``name`` with ``args``; the upstream that drives the
    exchange calls it and sends the answer back."""

    name: str
    args: tuple[Any, ...] = ()


OPEN = Op("open")


@dataclass(slots=True)
class _Attempt:
    opened: bool = False
    final_seen: bool = False  # the request's last response was read: nothing left to stop
    broken: bool = False  # the call failed: it is not stopped, and not reused
    stop_tried: bool = False  # a client-side stop already sent the engine's stop (and waited out its grace)


@dataclass(slots=True)
class _Request:
    """What one request's exchange keeps across its attempts."""

    target: TritonTarget
    request_id: str
    metrics: UpstreamMetrics | None
    fallback: str
    has_output: bool = False  # text reached the caller: the request is never tried again


Step = Op | Delta | str


def exchange(target: TritonTarget, request_id: str, deadline: float, fallback: str,
             metrics: UpstreamMetrics | None = None) -> Generator[Step, Any, None]:
    """The decisions of one request. ``fallback`` names how the upstream ends a request the stop did not end in
    time (``trtkit_client_early_ends_total{how}``: "call_cancel" or "let_go"); ``metrics``: where retries and early
    ends are counted."""
    request = _Request(target, request_id, metrics, fallback)
    attempt = 0
    while True:
        state = _Attempt()
        try:
            reader = yield OPEN
            state.opened = True
            yield from _responses(reader, deadline, state, request)
            return
        except ClientError:
            state.broken = True
            raise
        except Exception as exc:  # tritonclient's InferenceServerException, a broken call
            state.broken = True
            delay = retry_delay_s(target.url, request_id, exc, has_output=request.has_output, attempt=attempt,
                                  max_retries=target.max_retries, metrics=metrics)
        except BaseException as exc:  # the caller left (GeneratorExit, a cancelled task): stop it; else broken
            state.broken = not isinstance(exc, (GeneratorExit, asyncio.CancelledError))
            raise
        finally:
            yield from _end(state, request)
        yield Op("sleep", (delay,))
        attempt += 1


def _responses(reader: Reader, deadline: float, state: _Attempt, request: _Request) -> Generator[Step, Any, None]:
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
        request.has_output = request.has_output or bool(delta.text)
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


def _end(state: _Attempt, request: _Request) -> Generator[Step, Any, None]:
    """Done with an attempt: at once when it finished; when the caller left, stop it with the engine's ``stop``
    request and read its stream to its end; the call is released whatever happens meanwhile."""
    ended = state.final_seen
    try:
        if state.opened and not state.broken and not ended:
            if not state.stop_tried:
                ended = yield Op("wait_ended", (time.monotonic(),))  # it may have ended while nobody read
            if not ended:
                ended = False if state.stop_tried else (yield from _stop())
                if request.metrics is not None:
                    request.metrics.ended_early("stop" if ended else request.fallback)
        elif state.stop_tried and ended and request.metrics is not None:
            request.metrics.ended_early("stop")
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


def advance(core: Generator[Step, Any, None], reply: Any, error: BaseException | None) -> Step | None:
    """The exchange's next step, given the answer to its last one (or the exception the call or the caller raised
    meanwhile, which the exchange decides on); None once it is over. Its own exceptions propagate."""
    try:
        return core.throw(error) if error is not None else core.send(reply)
    except StopIteration:
        return None
