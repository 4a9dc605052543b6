"""Starting the CPU engine from the ``tensorrt_llm`` model's parameters, and the sinks that carry its
responses back (decoupled: one response per chunk; otherwise: exactly one response per request)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def engine_config(params: dict[str, str]):
    from trtkit.refengine import EngineConfig
    from trtkit.refengine.config import engine_dtype

    def integer(name: str) -> int | None:
        value = params.get(name, "")
        return int(value) if value not in ("", None) else None

    def boolean(name: str, default: bool) -> bool:
        value = params.get(name, "")
        return default if value == "" else value.lower() in ("1", "true", "yes")

    return EngineConfig(
        max_batch_size=integer("cpu_max_batch_size") or 8, max_num_tokens=integer("cpu_max_num_tokens") or 2048,
        max_input_len=integer("cpu_max_input_len") or 1024, max_seq_len=integer("cpu_max_seq_len") or 2048,
        tokens_per_block=integer("cpu_tokens_per_block") or 32, kv_cache_bytes=integer("cpu_kv_cache_bytes") or 256 << 20,
        max_tokens_in_paged_kv_cache=integer("max_tokens_in_paged_kv_cache"),
        enable_kv_cache_reuse=boolean("enable_kv_cache_reuse", True),
        enable_chunked_context=boolean("enable_chunked_context", False),
        scheduler_policy=params.get("batch_scheduler_policy") or "guaranteed_no_evict",  # type: ignore[arg-type]
        max_queue_size=integer("cpu_max_queue_size") or 1024,
        dtype=engine_dtype(params.get("cpu_dtype")),
        num_threads=integer("cpu_threads") or 0,
        attention=params.get("cpu_attention") or "auto",  # type: ignore[arg-type]
        # as the C++ backend: guided decoding only with both parameters set
        xgrammar_tokenizer_info=(params.get("xgrammar_tokenizer_info_path") or None)
        if params.get("guided_decoding_backend") == "xgrammar" else None)


def start_engine(params: dict[str, str]):
    from trtkit.refengine import EngineLoop, LLMEngine

    engine = LLMEngine.from_pretrained(params["gpt_model_path"], engine_config(params))
    return EngineLoop(engine, min_step_s=float(params.get("cpu_min_step_ms") or 0) / 1000)


@dataclass(slots=True)
class StatsPublisher:
    """Publishes engine stats every ``period_s`` (the backend's ``stats_check_period_ms``)."""

    read: Callable[[], Any]
    publish: Callable[[Any], None]
    period_s: float
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="trtkit-stats", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.period_s):
            try:
                stats = self.read()
                if stats is not None:  # an LLM-API engine may have no new iteration to report
                    self.publish(stats)
            except Exception:  # metrics must never take the model down
                log.exception("publishing engine stats failed")

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)


@dataclass(slots=True)
class CancellationWatch:
    """Every ``period_s`` (the backend's cancellation_check_period_ms), cancel the requests whose clients went away:
    a request still queued or in prefill sends nothing, so its cancellation is seen only by asking."""

    sweep: Callable[[], int]
    period_s: float
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="trtkit-cancellation", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.period_s):
            try:
                self.sweep()
            except Exception:
                log.exception("checking for cancelled requests failed")

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)


@dataclass(slots=True)
class StreamSink:
    """Decoupled: each chunk is a response; the last carries the final flag."""

    send_response: Callable[[dict[str, np.ndarray] | None, bool], None]
    cancelled: Callable[[], bool]
    on_final: Callable[[dict[str, np.ndarray]], None]
    send_error: Callable[[str], None] = lambda message: None

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None:
        self.send_response(outputs, final)
        if final:
            _quietly(self.on_final, outputs)

    def close(self) -> None:
        self.send_response(None, True)

    def fail(self, message: str) -> None:
        self.send_error(message)  # an error response that carries the final flag

    def is_cancelled(self) -> bool:
        return self.cancelled()


@dataclass(slots=True)
class WaitingSink:
    """Not decoupled: ``execute`` waits for the single final response."""

    on_final: Callable[[dict[str, np.ndarray]], None]
    done: threading.Event = field(default_factory=threading.Event)
    outputs: dict[str, np.ndarray] | None = None
    error: str | None = None

    def send(self, outputs: dict[str, np.ndarray], final: bool) -> None:
        if final:
            self.outputs = outputs
            self.done.set()
            _quietly(self.on_final, outputs)

    def close(self) -> None:
        self.done.set()

    def fail(self, message: str) -> None:
        self.error = message
        self.done.set()

    def wait(self, timeout_s: float) -> str | None:
        """None once the answer is in; else why there is none (failed, cancelled, or no answer in time)."""
        if not self.done.wait(timeout_s):
            return (f"no answer within {timeout_s:.0f} s; the request was cancelled. Lower max_tokens, or raise "
                    "the tensorrt_llm model's cpu_request_timeout_s parameter")
        if self.error is not None:
            return self.error
        return None if self.outputs is not None else "the request was cancelled before it finished"

    def is_cancelled(self) -> bool:
        return False


def _quietly(callback: Callable[[dict[str, np.ndarray]], None], outputs: dict[str, np.ndarray]) -> None:
    """Bookkeeping after a response (metrics) must never cost the client its answer."""
    try:
        callback(outputs)
    except Exception:
        log.exception("after-response callback failed")
