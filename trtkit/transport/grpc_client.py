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
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import tritonclient.grpc as grpcclient

from trtkit.config.schema import ModelConfig
from trtkit.errors import ClientError
from trtkit.governance.accumulate import StreamAccumulator
from trtkit.governance.caller import Caller
from trtkit.governance.flow import RequestFlow
from trtkit.governance.governor import PreparedRequest
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.params import SamplingParams
from trtkit.governance.results import GenerationResult, StreamChunk
from trtkit.governance.tokens import TokenCounter
from trtkit.store.ledger import Ledger
from trtkit.transport.model_wire import TextReader, TokenReader, Wire, wire_for
from trtkit.transport.protocol import Delta, is_final_response, stop_inputs, stop_outcome
from trtkit.transport.setup import (
    FINISH_CANCELLED,
    FINISH_DEADLINE,
    make_setup,
    retry_delay_s,
)
from trtkit.wire.stop_request import ENGINE_MODEL, STOP_GRACE_S, STOP_RETRY_S

_CANCEL = object()
_POLL_S = 0.05


class TritonLLMClient:
    def __init__(self, grpc_url: str, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: Ledger | None | bool = True, counter: TokenCounter | None = None,
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

    # -- one request ------------------------------------------------------------------------------
    def _chunks(self, prompt: str, params: SamplingParams | None, caller: Caller | None, deadline_s: float | None,
                *, server_stream: bool | None) -> Generator[StreamChunk, None, None]:
        prepared = self.governor.prepare(prompt, params or SamplingParams(), caller or self.setup.caller)
        if isinstance(prepared, GenerationResult):
            yield StreamChunk(prepared.text, prepared.usage, prepared.request_id, prepared)
            return
        flow = RequestFlow(self.governor, prepared, server_stream=server_stream,
                           deadline_s=deadline_s or self.setup.deadline_s)
        settled = False
        try:
            with closing(self._deltas(prepared, flow.use_stream, flow.deadline, flow.acc)) as deltas:
                for delta in deltas:
                    chunk, over = flow.take(delta)
                    if chunk is not None:
                        yield chunk
                    if over:
                        break
                result, committed = self.governor.submit(prepared, flow.outcome())
                settled = True
            # leaving the block closed the stream (or cancelled the request) while the row was committing
        except BaseException as exc:  # a consumer that stopped reading (GeneratorExit), or a failure
            if settled:
                raise
            outcome = flow.ended_by(exc)
            if outcome is None:  # refused, or never reached the server
                self.governor.release(prepared)
            else:
                self.governor.complete(prepared, outcome)
            raise
        self.governor.wait_committed(prepared, committed)
        yield flow.last_chunk(result)

    def _deltas(self, request: PreparedRequest, stream: bool, deadline: float,
                acc: StreamAccumulator) -> Generator[Delta | str, None, None]:
        """Responses of one request; retries UNAVAILABLE only while nothing has arrived."""
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            self._active[request.request_id] = inbox
        client: grpcclient.InferenceServerClient | None = None
        attempt, done, broken = 0, False, False
        try:
            while True:
                client = self._idle.get() if not self._idle.empty() else grpcclient.InferenceServerClient(self.url)
                try:
                    decoder = self._send(client, request, stream, inbox, deadline)
                    for item in self._receive(inbox, decoder, deadline):
                        done = isinstance(item, Delta) and item.is_final and not item.engine_running
                        yield item
                        if done or isinstance(item, str):
                            return
                    return
                except ClientError:
                    raise
                except Exception as raised:  # tritonclient raises InferenceServerException
                    delay = retry_delay_s(self.setup, self.url, request.request_id, _reported_error(inbox, raised),
                                          has_output=acc.has_output, attempt=attempt)
                    client.stop_stream(cancel_requests=True)
                    client.close()  # a channel that failed is not reused
                    client = None
                    time.sleep(delay)
                    attempt += 1
        except GeneratorExit:  # the caller stopped reading (done, cancelled, or a guard stop): still usable
            raise
        except BaseException:
            broken = True
            raise
        finally:
            with self._lock:
                self._active.pop(request.request_id, None)
            if client is not None:
                if not done and not broken:  # ended early (unless it just ended on its own)
                    done = _read_to_final(inbox, time.monotonic())
                    if not done:  # stop it server-side and read its stream to the end
                        done = self._stop_early(request.request_id, inbox)
                        self.governor.metrics.early_ends.labels(self.governor.model,
                                                                "stop" if done else "call_cancel").inc()
                client.stop_stream(cancel_requests=not done)  # cancelling the call is the last resort
                if broken:  # a stream that failed leaves its client unusable: never hand it out again
                    client.close()
                else:
                    self._idle.put(client)

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

    def _stop_early(self, request_id: str, inbox: queue.SimpleQueue) -> bool:
        """Stop a request the caller left (cancel, deadline, guard) with the engine's `stop` input, and read its
        stream until it ends. True when it ended; False when it did not within STOP_GRACE_S (the caller then
        cancels the gRPC call, which tritonserver may not survive: trtkit/wire/stop_request.py)."""
        until = time.monotonic() + STOP_GRACE_S
        while True:
            said = self._send_stop(request_id, until)
            if said == "failed":
                return False
            if _read_to_final(inbox, until if said == "stopped" else min(until, time.monotonic() + STOP_RETRY_S)):
                return True
            if time.monotonic() >= until:
                return False

    def _send_stop(self, request_id: str, until: float) -> str:
        """One stop request on its own stream (this client's streams carry one request each)."""
        client = self._idle.get() if not self._idle.empty() else grpcclient.InferenceServerClient(self.url)
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

    def _receive(self, inbox: queue.SimpleQueue, decoder: TextReader | TokenReader,
                 deadline: float) -> Iterator[Delta | str]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                yield FINISH_DEADLINE
                return
            try:
                item = inbox.get(timeout=min(remaining, _POLL_S * 20))
            except queue.Empty:
                continue
            if item is _CANCEL:
                yield FINISH_CANCELLED
                return
            result, error = item
            if error is not None:
                raise error
            yield decoder.read(result)


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
