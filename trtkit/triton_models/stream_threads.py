"""The threads a decoupled Python model runs its streams on, and how long its unload waits for them.

tritonserver gives the unload of every model together one exit timeout (``--exit-timeout-secs``, 5 s by
default), and a model whose ``finalize`` has not returned by then is left behind: the server exits with
"Exit timeout expired" and its stub is killed. So ``finalize`` waits for running streams for a bounded
time in all (not per thread), and names each stream still running, with the line it waits on: a stream
that never ends is a bug to find, and its stack is what finds it. The threads are daemons: they end with
the stub (before 2026-12-06 the BLS joined each for 5 s, so one stuck stream alone could pass the timeout).

Not what the soak's slow BLS unloads were (benchmarks/results/soak.md, 2026-12-06): there the BLS stub sat
idle, never asked to finalize, and the ensemble stayed loaded too; the models left are the ones raw
clients cancel gRPC streams on, tritonserver keeping a reference after some cancels (as in
triton-inference-server/server issue 7626).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

log = logging.getLogger(__name__)

UNLOAD_WAIT_S = 2.0  # below tritonserver's default exit timeout of 5 s, which every model's unload shares


class StreamThreads:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[threading.Thread] = set()

    def start(self, target: Callable[..., object], *args: object) -> threading.Thread:
        """Run ``target(*args)`` on a daemon thread of its own, counted until it returns."""
        def run() -> None:
            try:
                target(*args)
            finally:
                with self._lock:
                    self._running.discard(threading.current_thread())

        thread = threading.Thread(target=run, daemon=True)
        with self._lock:
            self._running.add(thread)
        thread.start()
        return thread

    def running(self) -> list[threading.Thread]:
        with self._lock:
            return [t for t in self._running if t.is_alive()]

    def wait(self, total_s: float = UNLOAD_WAIT_S) -> list[str]:
        """Wait up to ``total_s`` in all for the running streams; the stacks of those still running after
        (each logged as a warning: the stub's stderr goes to tritonserver's log)."""
        deadline = time.monotonic() + total_s
        for thread in self.running():
            self._join(thread, max(0.0, deadline - time.monotonic()))
        frames = sys._current_frames()
        stacks = [f"{thread.name}:\n" + "".join(traceback.format_stack(frames[thread.ident]))
                  if thread.ident in frames else thread.name for thread in self.running()]
        for stack in stacks:
            log.warning("a stream was still running after %.1f s of unload (left to end with the process); it "
                        "waits in %s", total_s, stack)
        return stacks

    def _join(self, thread: threading.Thread, timeout: float) -> None:
        """One thread's share of the wait: what is left of the budget (its own seam, so a test can read the shares)."""
        thread.join(timeout=timeout)
