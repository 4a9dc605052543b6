"""Synchronous client over ``tritonclient.grpc``: generate, stream, generate_batch, cancel.

Every request goes over a gRPC stream (the served models are decoupled, and plain infer() is
refused by decoupled models); ``stream=False`` makes the server answer with one response. A
tritonclient client holds one stream at a time, so a small pool of them serves concurrent calls.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor

import tritonclient.grpc as grpcclient

from trtkit.config.schema import ModelConfig
from trtkit.governance.flow import run_governed
from trtkit.governance.governor import LedgerChoice, PreparedRequest
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Delta
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk
from trtkit.transport.triton.exchange import CANCELLED, drive, exchange
from trtkit.transport.triton.protocol import is_final_response, stop_inputs, stop_outcome
from trtkit.transport.triton.request_path import TextReader, TokenReader, Wire, wire_for
from trtkit.transport.triton.retry import is_server_failure, make_setup
from trtkit.wire.stop_request import ENGINE_MODEL, STOP_GRACE_S

_CANCEL = object()
_POLL_S = 0.05


class TritonLLMClient:
    # an upstream of the governed flow whose engine stops at max_tokens and counts every token it sends (the
    # Triton contract): governance reads its counts instead of metering the output (governance/output_cap.py)
    honours_max_tokens = True

    def __init__(self, grpc_url: str, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                 metrics: ClientMetrics | None = None, model_name: str | None = None) -> None:
        self.url = grpc_url
        self.setup = make_setup(config, caller=caller, ledger=ledger, counter=counter, metrics=metrics,
                                model_name=model_name)
        self.governor = self.setup.governor
        self._idle: queue.SimpleQueue[grpcclient.InferenceServerClient] = queue.SimpleQueue()
        self._active: dict[str, queue.SimpleQueue] = {}
        self._lock = threading.Lock()
        self._wire: Wire | None = None
        self._tokens_per_block = config.build.tokens_per_block

    # -- public API -------------------------------------------------------------------------------
    def generate(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
                 deadline_s: float | None = None) -> GenerationResult:
        final = None
        for chunk in self._chunks(prompt, params, caller, deadline_s, server_stream=None):
            final = chunk.result or final
        assert final is not None, "a stream always ends with a final chunk"
        return final

    def stream(self, prompt: str, params: SamplingParams | None = None, *, caller: Caller | None = None,
               deadline_s: float | None = None) -> Generator[StreamChunk, None, None]:
        """Deltas with running usage; the last chunk carries the final GenerationResult. Closing the
        generator early cancels the request (recorded with finish reason 'cancelled')."""
        return self._chunks(prompt, params, caller, deadline_s, server_stream=True)

    def generate_batch(self, prompts: list[str], params: SamplingParams | None = None, *,
                       caller: Caller | None = None, max_concurrency: int = 8,
                       deadline_s: float | None = None) -> list[GenerationResult]:
        """Results in the order of ``prompts``; requests run concurrently (the engine batches them)."""
        with ThreadPoolExecutor(max_workers=max(1, min(max_concurrency, len(prompts)))) as pool:
            futures = [pool.submit(contextvars.copy_context().run, self.generate, p, params, caller=caller,
                                   deadline_s=deadline_s) for p in prompts]
            return [f.result() for f in futures]

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

    def close(self) -> None:
        while not self._idle.empty():
            self._idle.get().close()
        if self.governor.ledger is not None:
            self.governor.ledger.close()

    def __enter__(self) -> TritonLLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _chunks(self, prompt: str, params: SamplingParams | None, caller: Caller | None, deadline_s: float | None,
                *, server_stream: bool | None) -> Generator[StreamChunk, None, None]:
        return run_governed(self.governor, self, prompt, params or SamplingParams(), caller or self.setup.caller,
                            deadline_s or self.setup.deadline_s, server_stream=server_stream)

    # -- the upstream of the governed flow: one gRPC stream per request -----------------------------------------
    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float,
               has_output: Callable[[], bool]) -> Generator[Delta | str, None, None]:
        """The request's responses (exchange.py decides; _StreamCall carries). Closing it early stops the
        request with the engine's ``stop``, and cancels its call only if that does not end it in time."""
        call = _StreamCall(self, request, stream, deadline)
        try:
            yield from drive(exchange(self.setup, self.url, request.request_id, deadline, has_output, "call_cancel"),
                             call)
        finally:
            call.forget()

    def is_server_failure(self, error: BaseException) -> bool:
        return is_server_failure(error)

    def _client(self) -> grpcclient.InferenceServerClient:
        return self._idle.get() if not self._idle.empty() else grpcclient.InferenceServerClient(self.url)

    def _send(self, client: grpcclient.InferenceServerClient, request: PreparedRequest, stream: bool,
              inbox: queue.SimpleQueue, deadline: float) -> TextReader | TokenReader:
        if self._wire is None:
            self._wire = wire_for(client.get_model_metadata(self.setup.model_name, as_json=True),
                                  self.governor.counter, self._tokens_per_block)
        inputs, outputs = self._wire.request(request, stream=stream)
        client.start_stream(callback=lambda result, error: inbox.put((result, error)),
                            # past our own deadline and the time a stop may take: the local deadline and the stop
                            # end the request, never gRPC's deadline (a cancel: see trtkit/wire/stop_request.py)
                            stream_timeout=max(0.001, deadline - time.monotonic()) + STOP_GRACE_S + 1.0)
        client.async_stream_infer(self.setup.model_name, inputs, outputs=outputs, request_id=request.request_id,
                                  enable_empty_final_response=True)
        return self._wire.reader(request)

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

    def __init__(self, owner: TritonLLMClient, request: PreparedRequest, stream: bool, deadline: float) -> None:
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
