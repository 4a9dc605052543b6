"""Triton's gRPC server as a blocking upstream of the governed client, over ``tritonclient.grpc``.

Every request goes over a gRPC stream of its own (the served models are decoupled, and plain infer() is refused
by decoupled models); ``stream=False`` makes the server answer with one response. A tritonclient client holds one
stream at a time, so a small pool of them serves concurrent requests. What to do when is decided by the exchange
(``exchange.py``), which this module drives over its own calls (:func:`drive`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Generator
from typing import Any

import tritonclient.grpc as grpcclient

from trtkit.governance.governor import PreparedRequest
from trtkit.governance.metrics import UpstreamMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Delta
from trtkit.transport.triton.exchange import CANCELLED, CallIO, Op, Step, TritonTarget, advance, exchange
from trtkit.transport.triton.protocol import is_final_response, stop_inputs, stop_outcome
from trtkit.transport.triton.request_path import TextReader, TokenReader
from trtkit.transport.triton.upstream_base import TritonUpstreamBase
from trtkit.wire.stop_request import ENGINE_MODEL, STOP_GRACE_S

_CANCEL = object()
_POLL_S = 0.05


class TritonUpstream(TritonUpstreamBase):
    """The blocking upstream of one served model (what both Triton upstreams share: upstream_base.py)."""

    def __init__(self, target: TritonTarget, counter: TokenCounter, metrics: UpstreamMetrics | None = None) -> None:
        super().__init__(target, counter, metrics)
        self._idle: queue.SimpleQueue[grpcclient.InferenceServerClient] = queue.SimpleQueue()
        self._active: dict[str, queue.SimpleQueue] = {}
        self._lock = threading.Lock()

    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float) -> Generator[Delta | str, None, None]:
        """The request's responses (exchange.py decides; _StreamCall carries). Closing it early stops the
        request with the engine's ``stop``, and cancels its call only if that does not end it in time."""
        call = _StreamCall(self, request, stream, deadline)
        try:
            yield from drive(exchange(self.target, request.request_id, deadline, "call_cancel", self.metrics), call)
        finally:
            call.forget()

    def cancel(self, request_id: str) -> bool:
        """Cancel a running request (its result gets finish_reason 'cancelled'); False if not running."""
        with self._lock:
            inbox = self._active.get(request_id)
        if inbox is not None:
            inbox.put(_CANCEL)
        return inbox is not None

    def active_requests(self) -> list[str]:
        with self._lock:
            return list(self._active)

    def is_ready(self) -> bool:
        """True when the server is up and the served model is ready."""
        client = self._client()
        try:
            ready = bool(client.is_server_ready()) and bool(client.is_model_ready(self.target.model_name))
        except Exception:  # any failure to ask means "not ready"
            client.close()
            return False
        self._idle.put(client)
        return ready

    def close(self) -> None:
        while not self._idle.empty():
            self._idle.get().close()

    def _client(self) -> grpcclient.InferenceServerClient:
        return self._idle.get() if not self._idle.empty() else grpcclient.InferenceServerClient(self.target.url)

    def _send(self, client: grpcclient.InferenceServerClient, request: PreparedRequest, stream: bool,
              inbox: queue.SimpleQueue, deadline: float) -> TextReader | TokenReader:
        model = self.target.model_name
        path = self._path or self._path_from(client.get_model_metadata(model, as_json=True))
        inputs, outputs = path.request(request, stream=stream)
        client.start_stream(callback=lambda result, error: inbox.put((result, error)),
                            # past our own deadline and the time a stop may take: the local deadline and the stop
                            # end the request, never gRPC's deadline (a cancel: see trtkit/wire/stop_request.py)
                            stream_timeout=max(0.001, deadline - time.monotonic()) + STOP_GRACE_S + 1.0)
        client.async_stream_infer(model, inputs, outputs=outputs, request_id=request.request_id,
                                  enable_empty_final_response=True)
        return path.reader(request)

    def _send_stop(self, request_id: str, until: float) -> str:
        """One stop request on its own stream (this client's streams carry one request each)."""
        client = self._client()
        answers: queue.SimpleQueue = queue.SimpleQueue()
        answered = False
        try:
            client.start_stream(callback=lambda result, error: answers.put(error),
                                stream_timeout=max(0.001, until - time.monotonic()) + 1.0)
            client.async_stream_infer(ENGINE_MODEL, stop_inputs(), request_id=request_id,
                                      enable_empty_final_response=True)
            said = stop_outcome(answers.get(timeout=max(0.001, until - time.monotonic())))
            answered = True
            return said
        except Exception:  # no answer in time, or the server is gone
            return "failed"
        finally:
            client.stop_stream(cancel_requests=not answered)
            if answered:
                self._idle.put(client)
            else:
                client.close()


class _StreamCall:
    """One request's call as the sync client carries it (exchange.CallIO): a pooled tritonclient client holding
    the request's own stream, its responses queued in an inbox that ``cancel`` can also reach."""

    def __init__(self, owner: TritonUpstream, request: PreparedRequest, stream: bool, deadline: float) -> None:
        self.owner, self.request, self.stream, self.deadline = owner, request, stream, deadline
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.client: grpcclient.InferenceServerClient | None = None
        with owner._lock:
            owner._active[request.request_id] = self.inbox

    def open(self) -> TextReader | TokenReader:
        self.client = self.owner._client()
        try:
            return self.owner._send(self.client, self.request, self.stream, self.inbox, self.deadline)
        except Exception as raised:  # tritonclient raises InferenceServerException
            reported = _reported_error(self.inbox, raised)
            if reported is raised:
                raise
            raise reported from raised

    def next(self, timeout: float) -> object:
        try:
            item = self.inbox.get(timeout=min(timeout, _POLL_S * 20))
        except queue.Empty:
            return None
        return CANCELLED if item is _CANCEL else item

    def send_stop(self, until: float) -> str:
        return self.owner._send_stop(self.request.request_id, until)

    def wait_ended(self, until: float) -> bool:
        return _read_to_final(self.inbox, until)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def release(self, ended: bool, broken: bool) -> None:
        """Cancelling the call is the last resort (a stop that did not end it); a stream that failed leaves
        its client unusable, so it is closed, never handed out again."""
        client, self.client = self.client, None
        if client is None:
            return
        client.stop_stream(cancel_requests=not ended)
        if broken:
            client.close()
        else:
            self.owner._idle.put(client)

    def forget(self) -> None:
        with self.owner._lock:
            self.owner._active.pop(self.request.request_id, None)


def _read_to_final(inbox: queue.SimpleQueue, until: float) -> bool:
    """Read a request's responses until its final one (or an error, which is final too), by ``until``."""
    while True:
        remaining = until - time.monotonic()
        try:
            item = inbox.get(timeout=remaining) if remaining > 0 else inbox.get_nowait()
        except queue.Empty:
            return False
        if item is _CANCEL:
            continue
        result, error = item
        if error is not None or is_final_response(result):
            return True


def _reported_error(inbox: queue.SimpleQueue, raised: Exception) -> BaseException:
    """The stream's own error when tritonclient only says that the stream broke: a stream to a server that
    is down fails in the callback (UNAVAILABLE) and the send then raises "no longer in valid state"."""
    if "no longer in valid state" not in str(raised):
        return raised
    try:
        item = inbox.get(timeout=1.0)
    except queue.Empty:
        return raised
    if isinstance(item, tuple) and item[1] is not None:
        return item[1]
    return raised


def drive(core: Generator[Step, Any, None], io: CallIO) -> Generator[Delta | str, None, None]:
    """Run the exchange over a blocking call: its ops are done here, its deltas handed to the caller. A caller
    that stops reading (GeneratorExit) is thrown into the exchange, which stops the request before it ends."""
    reply: Any = None
    error: BaseException | None = None
    while (step := advance(core, reply, error)) is not None:
        reply, error = None, None
        try:
            if isinstance(step, Op):
                reply = getattr(io, step.name)(*step.args)
            else:
                yield step
        except BaseException as exc:  # the call's failure, or the caller leaving: the exchange decides
            error = exc
