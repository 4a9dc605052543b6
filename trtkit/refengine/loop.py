"""EngineLoop: a background thread that steps the engine while requests are in flight (for servers).

Callers submit and cancel from any thread; on_output runs on the loop thread once per step with the
request's delta, and a last time with finished=True. A failure never ends silently: a request whose
step or callback fails gets a last output with finish_reason "error" (and ``error`` saying why), its
blocks go back at once, and the loop and the other requests go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from trtkit.errors import EngineError
from trtkit.refengine.llm_engine import LLMEngine
from trtkit.refengine.outputs import EngineStats, RequestOutput, SamplingParams

log = logging.getLogger(__name__)
OutputCallback = Callable[[RequestOutput], None]


class EngineLoop:
    """``min_step_s`` (a test switch, 0 in service): each step lasts at least this long, the rest slept outside
    the lock. It puts a floor under how long a generation takes on any machine, so a test that must act while
    a request still runs (cancel it, let its deadline pass, kill a replica mid-stream) waits on a condition the
    engine controls rather than on how fast this machine happens to be."""

    def __init__(self, engine: LLMEngine, *, name: str = "trtkit-engine-loop", min_step_s: float = 0.0) -> None:
        self.engine = engine
        self.min_step_s = min_step_s
        self._lock = threading.Lock()  # guards engine state; the forward pass (engine.compute) runs outside it
        self._wake = threading.Event()
        self._callbacks: dict[str, OutputCallback] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: SamplingParams, on_output: OutputCallback,
               request_id: str | None = None) -> str:
        """Queue a request; raises EngineError at once when it is invalid or the queue is full. A guide is
        compiled before the lock is taken, so a fresh schema never holds up the running requests' steps."""
        grammar = self.engine.grammar_for(params)
        with self._lock:
            if self._stopping:
                raise EngineError("the engine loop is shut down; start a new one")
            request_id = self.engine.add_request(prompt_ids, params, request_id, grammar=grammar)
            self._callbacks[request_id] = on_output
        self._wake.set()
        return request_id

    def cancel(self, request_id: str) -> bool:
        with self._lock:
            cancelled = self.engine.cancel(request_id)
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
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.engine.bind_compute_threads()  # this thread only steps the engine
        except Exception:  # a binding that fails leaves the threads as they were: slower under contention, not wrong
            log.exception("binding the CPU engine's threads failed; they stay unbound")
        while True:
            with self._lock:
                busy = self.engine.has_unfinished()
                if not busy and self._stopping:
                    return
            if not busy:
                self._wake.wait()
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
