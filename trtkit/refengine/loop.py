"""EngineLoop: a background thread that steps the engine while requests are in flight (for servers).

Callers submit and cancel from any thread; on_output runs on the loop thread once per step with the
request's delta, and a last time with finished=True. A failure never ends silently: a request whose
step or callback fails gets a last output with finish_reason "error" (and ``error`` saying why), its
blocks go back at once, and the loop and the other requests go on.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from trtkit.errors import EngineError
from trtkit.refengine.grammar_compiler import (
    DEFAULT_TIMEOUT_S,
    GrammarCompiler,
    PendingGuide,
    final_output,
    timed_out,
)
from trtkit.refengine.llm_engine import LLMEngine
from trtkit.refengine.outputs import EngineStats, RequestOutput, SamplingParams

log = logging.getLogger(__name__)
OutputCallback = Callable[[RequestOutput], None]


class EngineLoop:
    """``min_step_s`` (a test switch, 0 in service): each step lasts at least this long, the rest slept outside
    the lock. It puts a floor under how long a generation takes on any machine, so a test that must act while
    a request still runs (cancel it, let its deadline pass, kill a replica mid-stream) waits on a condition the
    engine controls rather than on how fast this machine happens to be."""

    def __init__(self, engine: LLMEngine, *, name: str = "trtkit-engine-loop", min_step_s: float = 0.0,
                 compile_timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.engine = engine
        self.min_step_s = min_step_s
        self._lock = threading.Lock()  # guards engine state; the forward pass (engine.compute) runs outside it
        self._wake = threading.Event()
        self._callbacks: dict[str, OutputCallback] = {}
        self._stopping = False
        self.compiler = GrammarCompiler(engine.grammar_for, timeout_s=compile_timeout_s)
        self._compiling: dict[str, PendingGuide] = {}  # requests whose guide compiles in the background
        self._early: list[tuple[OutputCallback, RequestOutput]] = []  # their last outputs, for the loop to deliver
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: SamplingParams, on_output: OutputCallback,
               request_id: str | None = None) -> str:
        """Queue a request; raises EngineError at once when it is invalid or the queue is full. A guide compiles
        on the compiler's workers (``grammar_compiler.py``): never under the lock, never in the caller's thread
        for longer than a moment, so a slow schema holds up neither the running requests nor the next caller."""
        grammar = None
        if params.guided_decoding_guide_type is not None:
            future = self.compiler.start(params)
            done, grammar = self.compiler.quick(future)
            if not done:
                return self._compile_later(prompt_ids, params, on_output, request_id, future)
        return self._add(prompt_ids, params, on_output, request_id, grammar)

    def _add(self, prompt_ids: list[int], params: SamplingParams, on_output: OutputCallback, request_id: str | None,
             grammar: Any) -> str:
        with self._lock:
            if self._stopping:
                raise EngineError("the engine loop is shut down; start a new one")
            request_id = self.engine.add_request(prompt_ids, params, request_id, grammar=grammar)
            self._callbacks[request_id] = on_output
        self._wake.set()
        return request_id

    def _compile_later(self, prompt_ids: list[int], params: SamplingParams, on_output: OutputCallback,
                       request_id: str | None, future: concurrent.futures.Future[Any]) -> str:
        request_id = request_id if request_id is not None else uuid.uuid4().hex
        pending = PendingGuide(request_id, list(prompt_ids), params, on_output,
                               time.monotonic() + self.compiler.timeout_s)
        with self._lock:
            if self._stopping:
                raise EngineError("the engine loop is shut down; start a new one")
            self._compiling[request_id] = pending
        future.add_done_callback(lambda done: self._compiled(pending, done))
        self._wake.set()  # the loop watches the time bound
        return request_id

    def _compiled(self, pending: PendingGuide, future: concurrent.futures.Future[Any]) -> None:
        """On a compiler worker: the request joins the engine, or fails alone."""
        with self._lock:
            if self._compiling.pop(pending.request_id, None) is None:
                return  # cancelled, or its time bound passed first
        try:
            self._add(pending.prompt_ids, pending.params, pending.on_output, pending.request_id, future.result())
        except Exception as exc:  # the guide does not compile, or the request is refused: its own error
            self._finish_early(pending, "error", str(exc))

    def _finish_early(self, pending: PendingGuide, finish_reason: str, error: str | None = None) -> None:
        with self._lock:
            self._early.append((pending.on_output, final_output(pending, finish_reason, error)))
        self._wake.set()

    def _expire_compiles(self) -> float | None:
        """Fail the requests whose guide passed its time bound; the seconds until the next bound, if any."""
        now = time.monotonic()
        with self._lock:
            late = [p for p in self._compiling.values() if p.deadline <= now]
            for pending in late:
                del self._compiling[pending.request_id]
            nearest = min((p.deadline for p in self._compiling.values()), default=None)
        for pending in late:
            self._finish_early(pending, "error", timed_out(self.compiler.timeout_s))
        return None if nearest is None else max(0.0, nearest - now)

    def cancel(self, request_id: str) -> bool:
        with self._lock:
            pending = self._compiling.pop(request_id, None)
            cancelled = pending is not None or self.engine.cancel(request_id)
        if pending is not None:
            self._finish_early(pending, "cancelled")
        self._wake.set()
        return cancelled

    def stats(self) -> EngineStats:
        with self._lock:
            return self.engine.stats()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Cancel whatever is in flight (callers get a final "cancelled" output), then stop the thread."""
        with self._lock:
            self._stopping = True
            for request_id in list(self.engine.sequences):
                self.engine.cancel(request_id)
            compiling, self._compiling = list(self._compiling.values()), {}
        for pending in compiling:
            self._finish_early(pending, "cancelled")
        self._wake.set()
        self._thread.join(timeout)
        self.compiler.shutdown()

    def _run(self) -> None:
        try:
            self.engine.bind_compute_threads()  # this thread only steps the engine
        except Exception:  # a binding that fails leaves the threads as they were: slower under contention, not wrong
            log.exception("binding the CPU engine's threads failed; they stay unbound")
        while True:
            next_bound = self._expire_compiles()
            with self._lock:
                early, self._early = self._early, []
            self._deliver_early(early)
            with self._lock:
                busy = self.engine.has_unfinished()
                if not busy and self._stopping and not self._early:
                    return
            if not busy:
                self._wake.wait(next_bound)
                self._wake.clear()
                continue
            started = time.monotonic()
            self._deliver(self._step())
            if self.min_step_s:
                time.sleep(max(0.0, started + self.min_step_s - time.monotonic()))

    def _step(self) -> list[RequestOutput]:
        plan = None
        try:
            with self._lock:
                plan = self.engine.begin_step()
            logits = self.engine.compute(plan)  # without the lock: submit, cancel and stats do not wait for it
            with self._lock:
                return self.engine.finish_step(plan, logits)
        except Exception as exc:  # the engine isolates per-request faults; this is a fault of the step itself
            log.exception("engine step failed; failing the requests in flight")
            with self._lock:
                if plan is not None:
                    self.engine.requeue_outputs(plan)
                for request_id in list(self.engine.sequences):
                    self.engine.fail(request_id, f"engine step failed: {type(exc).__name__}: {exc}")
                return self.engine.drain_finished()  # with the finals of earlier cancellations

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            if output.finished:
                with self._lock:
                    callback = self._callbacks.pop(output.request_id, None)
            else:
                callback = self._callbacks.get(output.request_id)
            if callback is None:
                continue
            try:
                callback(output)
            except Exception as exc:
                log.exception("on_output for request %s raised; failing that request", output.request_id)
                self._fail_after_callback(output, callback, exc)

    def _deliver_early(self, early: list[tuple[OutputCallback, RequestOutput]]) -> None:
        for callback, output in early:
            try:
                callback(output)
            except Exception:
                log.exception("on_output for request %s raised on its last output", output.request_id)

    def _fail_after_callback(self, output: RequestOutput, callback: OutputCallback, exc: Exception) -> None:
        """The caller could not take an output: stop the request, then tell the caller once, as an error."""
        with self._lock:
            self._callbacks.pop(output.request_id, None)
            # frees its blocks now (nothing when it had finished); the error output is made here
            self.engine.fail(output.request_id, f"output callback raised {type(exc).__name__}", queue_output=False)
        failed = RequestOutput(
            request_id=output.request_id, new_token_ids=[], output_token_ids=output.output_token_ids,
            finished=True, finish_reason="error", num_prompt_tokens=output.num_prompt_tokens,
            num_reused_tokens=output.num_reused_tokens, new_log_probs=None, cum_log_prob=output.cum_log_prob,
            arrival_time=output.arrival_time, first_scheduled_time=output.first_scheduled_time,
            first_token_time=output.first_token_time, last_token_time=output.last_token_time,
            error=f"the output callback raised {type(exc).__name__}: {exc}")
        try:
            callback(failed)
        except Exception:
            log.exception("on_output for request %s raised again on its error output", output.request_id)
