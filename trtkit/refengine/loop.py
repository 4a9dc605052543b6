"""EngineLoop: a background thread that steps the engine while requests are in flight (for servers).

Callers submit and cancel from any thread; on_output runs on the loop thread once per step with the
request's delta, and a last time with finished=True. A failing callback is logged and does not stop
the loop or other requests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from trtkit.errors import EngineError
from trtkit.refengine.llm_engine import LLMEngine
from trtkit.refengine.outputs import EngineStats, RequestOutput, SamplingParams

log = logging.getLogger(__name__)
OutputCallback = Callable[[RequestOutput], None]


class EngineLoop:
    def __init__(self, engine: LLMEngine, *, name: str = "trtkit-engine-loop") -> None:
        self.engine = engine
        self._lock = threading.Lock()  # guards engine state; the forward pass (engine.compute) runs outside it
        self._wake = threading.Event()
        self._callbacks: dict[str, OutputCallback] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, prompt_ids: list[int], params: SamplingParams, on_output: OutputCallback,
               request_id: str | None = None) -> str:
        """Queue a request; raises EngineError at once when it is invalid or the queue is full."""
        with self._lock:
            if self._stopping:
                raise EngineError("the engine loop is shut down; start a new one")
            request_id = self.engine.add_request(prompt_ids, params, request_id)
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
        while True:
            with self._lock:
                busy = self.engine.has_unfinished()
                if not busy and self._stopping:
                    return
            outputs = self._step() if busy else []
            if not busy:
                self._wake.wait()
                self._wake.clear()
                continue
            self._deliver(outputs)

    def _step(self) -> list[RequestOutput]:
        try:
            with self._lock:
                plan = self.engine.begin_step()
            logits = self.engine.compute(plan)  # without the lock: submit, cancel and stats do not wait for it
            with self._lock:
                return self.engine.finish_step(plan, logits)
        except Exception:  # a broken step must not hang every caller: fail the batch, keep serving
            log.exception("engine step failed; cancelling the requests in flight")
            with self._lock:
                for request_id in list(self.engine.sequences):
                    self.engine.cancel(request_id)
            return []

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
            except Exception:
                log.exception("on_output for request %s raised; the request continues", output.request_id)
