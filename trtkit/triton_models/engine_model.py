"""The engine slot's Python model: the TensorRT-LLM backend's tensors, answered by an engine behind a port.

One :class:`EngineModel` per model instance owns an engine port (engine_ports.py): the CPU reference engine's
``EngineLoop``, or an LLM-API engine (``tensorrt_llm.LLM`` on a GPU, the reference engine's LLM facade on CPU).
Each request is read once into ``trtkit.wire.engine_request.EngineRequest`` s (one per batch element), checked
against what this model serves, and started; the port calls back once per engine output and the
request's :class:`RequestStream` decides what to send (see ``token_gate``). Streaming requests get one response
per released chunk, the last one flagged final; other requests get exactly one response. Whatever the engine,
the responses carry the same tensors: running counts, cached tokens, the finish reason, the engine request key.

``cpp_responses`` (a test switch, parameter ``cpu_cpp_responses``) makes the responses look exactly like
the C++ tensorrtllm backend's: raw new tokens per response (nothing held back), ``num_output_tokens``
counting that response's tokens only, ``num_input_tokens`` / ``num_output_tokens`` only when the request
sets ``return_num_input_tokens`` / ``return_num_output_tokens``, and no ``finish_reason`` or
``num_cached_tokens``, and ``kv_cache_reused_blocks`` counting a partly matched block as the 1.2 backend does
(cpp_reuse.py). The GPU token accounting in the BLS and the client then runs for real on CPU.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trtkit.tokenizer.detokenizer import DEFAULT_OPTIONS, DecodeOptions
from trtkit.triton_models.batching import ElementSink, FinalCounter
from trtkit.triton_models.cpp_reuse import PartialReuse
from trtkit.triton_models.engine_ports import EnginePort, LoopPort
from trtkit.triton_models.outputs import engine_outputs
from trtkit.triton_models.token_gate import TokenGate
from trtkit.wire import names as n
from trtkit.wire.engine_request import EngineRequest
from trtkit.wire.request_tensors import InvalidRequest, Tensors, reject_unsupported, same_for_all, scalar
from trtkit.wire.stop_request import NOT_RUNNING

log = logging.getLogger(__name__)
__all__ = ["EngineModel", "EngineRequest", "RequestStream", "ResponseSink", "as_cpp_backend"]


class ResponseSink(Protocol):
    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None: ...

    def close(self) -> None: ...

    def fail(self, message: str) -> None:
        """End the request with an error response (never an empty success, never a bare final flag)."""

    def is_cancelled(self) -> bool: ...


@dataclass(slots=True)
class RequestStream:
    """One request's progress: what was generated, what was sent, and whether it is over."""

    parsed: EngineRequest
    gate: TokenGate
    sink: ResponseSink
    tokens_per_block: int
    generated: int = 0
    sent_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    done: bool = False
    answered: bool = False  # the final response went out
    triton_id: str = ""
    engine_id: str = ""
    reported_blocks: int | None = None  # cpp_responses: kv_cache_reused_blocks as the 1.2 backend counts them


class EngineModel:
    def __init__(self, engine: Any, tokenizer, anchor: list[int], *, tokens_per_block: int,
                 exclude_input_default: bool, decoupled: bool, options: DecodeOptions = DEFAULT_OPTIONS,
                 cpp_responses: bool = False) -> None:
        """``engine``: an engine port, or the reference engine's ``EngineLoop`` (run through a LoopPort)."""
        self.cpp_responses = cpp_responses
        self.port: EnginePort = engine if hasattr(engine, "start_request") else LoopPort(engine)
        self.loop = getattr(self.port, "loop", None)  # the CPU engine's loop, when that is the engine
        self.vocab_size = int(self.port.vocab_size)  # embedding_bias: one value per entry
        self.tokenizer = tokenizer
        self.anchor = anchor
        self.tokens_per_block = tokens_per_block
        self.exclude_input_default = exclude_input_default
        self.decoupled = decoupled
        self.options = options
        self.live: dict[str, set[str]] = {}  # Triton request id -> engine request ids, for the template's `stop` input
        self.engine_ids: set[str] = set()  # live engine request ids: `stop` also takes one as the request id
        self.streams: dict[str, RequestStream] = {}  # engine request id -> its stream, for sweep_cancelled
        self.live_lock = threading.Lock()
        engine_config = getattr(getattr(self.loop, "engine", None), "config", None)
        reuse = bool(engine_config is not None and engine_config.enable_kv_cache_reuse)
        self.partial_reuse = PartialReuse(tokens_per_block, enabled=cpp_responses and reuse)

    def parse(self, inputs: Tensors) -> list[EngineRequest]:
        """The request's elements, each read once and checked against what this model serves."""
        requests = EngineRequest.from_batch(inputs, vocab_size=self.vocab_size,
                                            exclude_input_default=self.exclude_input_default)
        for index, request in enumerate(requests):
            try:
                reject_unsupported(request.extras)  # the C++ backend's inputs: refused, never ignored
            except InvalidRequest as exc:
                raise InvalidRequest(f"batch element {index}: {exc}" if len(requests) > 1 else str(exc)) from exc
        if len(requests) > 1 and not self.decoupled:
            raise InvalidRequest(f"a batch of {len(requests)} is answered with one response per element, which needs "
                                 f"a decoupled model; deploy with serve.streaming: true or send one prompt per request")
        if any(request.stream for request in requests) and not self.decoupled:
            raise InvalidRequest("streaming needs a decoupled model; deploy with serve.streaming: true")
        return requests

    def submit(self, inputs: Tensors, sink: ResponseSink, request_id: str | None = None, triton_id: str = "") -> str:
        """Check and enqueue one request; bad requests raise :class:`InvalidRequest` before anything is sent.

        As in the C++ backend, a request with ``stop`` = true cancels the live request that carries the
        same Triton request id (how the BLS cancels its engine call when its own client goes away)."""
        if bool(scalar(inputs, n.STOP, False)):
            self.stop(triton_id)
            sink.close()
            return ""
        parsed = self.parse(inputs)  # a bad element refuses the request before any starts
        if len(parsed) == 1:
            return self._start(parsed[0], sink, request_id, triton_id)
        same_for_all([p.stream for p in parsed], n.STREAMING)
        counter, rids = FinalCounter(len(parsed)), []
        try:
            for index, element in enumerate(parsed):
                rids.append(self._start(element, ElementSink(sink, index, counter), None, triton_id))
        except Exception:
            counter.failed = True  # the elements already started answer nothing more: the error is the answer
            for rid in rids:
                self.port.cancel(rid)
            raise
        return ",".join(rids)

    def _start(self, parsed: EngineRequest, sink: ResponseSink, request_id: str | None, triton_id: str) -> str:
        stops = [self.tokenizer.decode(w, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                 for w in parsed.stop_ids]
        stream = RequestStream(parsed, TokenGate(self.tokenizer, self.anchor, stops, self.options), sink,
                               self.tokens_per_block, triton_id=triton_id)
        holder: dict[str, str] = {}
        try:
            rid = self.port.start_request(parsed, lambda out: self._on_output(stream, out, holder), request_id)
        except InvalidRequest:
            raise
        except Exception as exc:  # the engine refused the request (EngineError, or the LLM API's ValueError)
            raise InvalidRequest(str(exc)) from exc
        holder["rid"] = stream.engine_id = rid
        with self.live_lock:
            if not stream.done:
                self.engine_ids.add(rid)
                self.streams[rid] = stream
                if triton_id:
                    self.live.setdefault(triton_id, set()).add(rid)
        return rid

    def sweep_cancelled(self) -> int:
        """Cancel every live request whose client went away (a Triton cancellation), even one that has produced
        nothing yet; the engine's final output then closes it. Upstream's LLM-API model polls the same way
        (is_cancelled every 100 ms, then abort()). Returns how many were cancelled."""
        with self.live_lock:
            gone = [rid for rid, stream in self.streams.items() if not stream.done and stream.sink.is_cancelled()]
        for rid in gone:
            self.port.cancel(rid)
        return len(gone)

    def stop(self, triton_id: str) -> None:
        """Cancel the live request with this Triton request id, or with this engine request id (the key
        every response carries as ``cpu_request_key``: how postprocessing stops a cancelled ensemble stream)."""
        with self.live_lock:
            rids = self.live.pop(triton_id, None) if triton_id else None
            if not rids and triton_id in self.engine_ids:
                rids = {triton_id}
        if not rids:
            raise InvalidRequest(NOT_RUNNING.format(request_id=triton_id))
        for rid in rids:  # a batched request: every element
            self.port.cancel(rid)

    def _forget(self, stream: RequestStream) -> None:
        with self.live_lock:
            self.engine_ids.discard(stream.engine_id)
            self.streams.pop(stream.engine_id, None)
            if stream.triton_id:
                rids = self.live.get(stream.triton_id, set())
                rids.discard(stream.engine_id)
                if not rids:
                    self.live.pop(stream.triton_id, None)

    def _on_output(self, stream: RequestStream, out, holder: dict[str, str]) -> None:
        if out.finish_reason == "error":
            self._fail(stream, out.error or "the engine failed this request")
            return
        if stream.done:
            return
        rid = holder.get("rid", out.request_id)
        if stream.sink.is_cancelled():  # the client went away: nobody reads an answer
            stream.done = True
            self._forget(stream)
            self.port.cancel(rid)
            stream.sink.close()
            return
        if out.finish_reason == "cancelled":  # a `stop` (or the BLS, or postprocessing): answer what it made
            self._deliver(stream, out, [], True, "cancelled")  # as the C++ backend's final CANCELLED response
            return
        stream.generated += len(out.new_token_ids)
        stream.log_probs.extend(out.new_log_probs or [])
        ids = stream.gate.push(list(out.new_token_ids))
        if self.cpp_responses:
            ids = list(out.new_token_ids)  # the C++ backend holds nothing back
        reason = out.finish_reason
        final = bool(out.finished)
        if stream.gate.stopped:
            final, reason = True, "stop"
            if not out.finished:
                self.port.cancel(rid)
        elif final and not self.cpp_responses:
            ids += stream.gate.finish()
            if stream.gate.stopped:
                reason = "stop"
        self._deliver(stream, out, ids, final, reason)

    def _deliver(self, stream: RequestStream, out, ids: list[int], final: bool, reason: str | None) -> None:
        start = len(stream.sent_ids)
        stream.sent_ids.extend(ids)
        if stream.parsed.stream:
            if not ids and not final:
                return
            chunk, lp = ids, stream.log_probs[start:start + len(ids)]
        elif not final:
            return
        else:
            chunk = stream.sent_ids if stream.parsed.exclude_input else stream.parsed.prompt_ids + stream.sent_ids
            lp = stream.log_probs[:len(stream.sent_ids)]
        if final:
            stream.done = True
            self._forget(stream)
        outputs = engine_outputs(out, chunk, lp, stream.generated, reason if final else None,
                                 self.tokens_per_block, _now_ns)
        outputs[n.CPU_REQUEST_KEY] = np.array([[stream.engine_id.encode()]], dtype=np.object_)
        if self.cpp_responses:
            self._as_cpp_reuse(stream, outputs, final)
        generated_here = len(ids) if stream.parsed.stream else len(stream.sent_ids)
        stream.sink.send(as_cpp_backend(outputs, generated_here, stream.parsed.return_counts,
                                        stream.parsed.return_perf_metrics)
                         if self.cpp_responses else outputs, final)
        stream.answered = final

    def _as_cpp_reuse(self, stream: RequestStream, outputs: dict[str, np.ndarray], final: bool) -> None:
        """The reused blocks as the 1.2 C++ backend counts them (a partly matched block too: cpp_reuse.py)."""
        if stream.reported_blocks is None:
            whole = int(outputs[n.KV_CACHE_REUSED_BLOCKS].item())
            stream.reported_blocks = self.partial_reuse.reused_blocks(stream.parsed.prompt_ids, whole)
        outputs[n.KV_CACHE_REUSED_BLOCKS] = np.array([[stream.reported_blocks]], dtype=np.int32)
        if final:
            self.partial_reuse.remember(stream.parsed.prompt_ids + stream.sent_ids)

    def _fail(self, stream: RequestStream, reason: str) -> None:
        """An engine-side failure of this request: its client gets an error, whatever was sent before."""
        if stream.answered:
            return
        stream.done = stream.answered = True
        self._forget(stream)
        log.error("request failed in the engine: %s", reason)
        stream.sink.fail(f"the engine failed this request: {reason}; the server keeps serving, retry it")


# fillTritonResponse sends these only with return_perf_metrics (model_instance_state.cc, 1.2.0rc8 0c8de69)
PERF_METRICS_OUTPUTS = (n.KV_CACHE_ALLOC_NEW_BLOCKS, n.KV_CACHE_REUSED_BLOCKS, n.KV_CACHE_ALLOC_TOTAL_BLOCKS,
                        n.ARRIVAL_TIME_NS, n.FIRST_SCHEDULED_TIME_NS, n.FIRST_TOKEN_TIME_NS, n.LAST_TOKEN_TIME_NS,
                        n.ACCEPTANCE_RATE, n.TOTAL_ACCEPTED_DRAFT_TOKENS, n.TOTAL_DRAFT_TOKENS)
# ... and these only for a batched request (B > 1) and with num_return_sequences > 1 (one sequence here)
NOT_FOR_ONE = (n.BATCH_INDEX, n.SEQUENCE_INDEX)


def as_cpp_backend(outputs: dict[str, np.ndarray], num_tokens: int, return_counts: tuple[bool, bool],
                   return_perf_metrics: bool = False) -> dict[str, np.ndarray]:
    """A response as the C++ backend's fillTritonResponse shapes it (TensorRT-LLM 1.2, model_instance_state.cc):
    no trtkit extras, counts and perf metrics only when asked, this response's own token count."""
    dropped = (n.FINISH_REASON, n.NUM_CACHED_TOKENS, n.NUM_INPUT_TOKENS, n.NUM_OUTPUT_TOKENS, n.CPU_REQUEST_KEY,
               *NOT_FOR_ONE, *(() if return_perf_metrics else PERF_METRICS_OUTPUTS))
    shaped = {k: v for k, v in outputs.items() if k not in dropped}
    if return_counts[0]:
        shaped[n.NUM_INPUT_TOKENS] = outputs[n.NUM_INPUT_TOKENS]
    if return_counts[1]:
        shaped[n.NUM_OUTPUT_TOKENS] = np.array([[num_tokens]], dtype=np.int32)
    return shaped


def _now_ns() -> int:
    return time.time_ns()


Clock = Callable[[], int]
