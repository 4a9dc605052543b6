"""The LLM API's iteration statistics as TensorRT-LLM 1.2 hands them out, served by the reference engine.

Upstream (``trtkit/contracts/llm_api_1.2.json``, ``llm.get_stats``; read in tensorrt_llm/executor/executor.py,
executor/result.py and llmapi/utils.py) behaves like this, and so does this facade, so that a caller who uses it
the wrong way fails here as it would on a GPU:

- Nothing exists before the first ``generate_async``: ``get_stats`` warns and returns ``[]``,
  ``get_stats_async`` warns and returns an empty async iterable (a warning on every call).
- The first ``generate_async`` creates one ``IterationResult``. Created inside a running event loop, its queue
  is an async queue; every later ``generate_async`` marks it undone.
- Each record is a JSON string of one iteration's statistics.
- ``get_stats(timeout)`` reads the queue until a read finds nothing. On an async queue the synchronous read
  warns, marks the queue unusable for async readers (``MixedSyncAsyncAPIError`` from then on) and returns
  ``None`` at its timeout instead of raising ``Empty``; the ``json.loads(None)`` that follows raises
  ``TypeError``, and the records read so far are lost.
- ``get_stats_async(timeout)`` is that ``IterationResult``: ``async for`` yields records until none came for
  ``timeout`` seconds; it is then done until the next ``generate_async``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

log = logging.getLogger(__name__)
NOT_YET = ("Iteration statistics are not available yet. To collect runtime statistics, call get_stats() / "
           "get_stats_async() AFTER prompts have been submitted.")
POLL_S = 0.02  # how often the facade looks at the engine for a changed iteration record


class MixedSyncAsyncAPIError(Exception):
    """The async queue was read with the synchronous API; async readers cannot use it any more."""


class AsyncStatsQueue:
    """Upstream's ``AsyncQueue`` semantics: fed from any thread, read with ``await aget`` on its loop; a
    synchronous ``sync_get`` taints it and answers ``None`` at its timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._event = asyncio.Event()
        self.tainted = False

    def put(self, item: str) -> None:
        self._items.put(item)
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self._event.set)

    async def aget(self, timeout: float) -> str:
        if self.tainted:
            raise MixedSyncAsyncAPIError()
        deadline = self.loop.time() + timeout
        while self._items.empty():
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                raise asyncio.TimeoutError()
            self._event.clear()
            if self._items.empty():
                await asyncio.wait_for(self._event.wait(), timeout=remaining)
        return self._items.get_nowait()

    def sync_get(self, timeout: float) -> str | None:
        log.warning("LLM API is running in async mode because you have a running event loop, but you are using "
                    "sync API. This may lead to potential performance loss.")
        self.tainted = True
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                return self._items.get_nowait()
            except queue.Empty:
                time.sleep(0.01)
        return None  # upstream's synchronous read of an async queue ends without raising


class IterationResult:
    """The async iterable ``get_stats_async`` returns, and the store ``get_stats`` reads."""

    def __init__(self) -> None:
        self._done = False
        self.timeout = 2.0
        try:
            self.aqueue: AsyncStatsQueue | None = AsyncStatsQueue(asyncio.get_running_loop())
            self.queue: Any = None
        except RuntimeError:  # no running loop: a plain thread-safe queue
            self.aqueue, self.queue = None, queue.Queue()

    def put(self, record: str) -> None:
        (self.aqueue or self.queue).put(record)

    def mark_undone(self) -> None:
        self._done = False

    def get_results(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        while not self._done:
            try:
                data: Any = self.aqueue.sync_get(self.timeout) if self.aqueue else self.queue.get(timeout=self.timeout)
                results.append(json.loads(data))  # None from the async queue: TypeError, as upstream
            except queue.Empty:
                self._done = True
        return results

    def __aiter__(self) -> IterationResult:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._done:
            raise StopAsyncIteration
        if self.aqueue is None:
            raise RuntimeError("The asyncio event loop was not present during initialization, so async operations "
                               "are not available.")
        try:
            return json.loads(await self.aqueue.aget(self.timeout))
        except asyncio.TimeoutError:
            self._done = True
            raise StopAsyncIteration from None


async def _nothing() -> AsyncIterator[dict[str, Any]]:
    return
    yield  # pragma: no cover - makes this an async generator


class IterationStats:
    """The facade's statistics: one IterationResult made by the first request, fed with a record whenever the
    engine's figures change: at every engine output (each iteration of a running request), and by a thread that
    looks in between (a queued request, blocks freed once the engine is idle)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot
        self.result: IterationResult | None = None
        self._last: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_request(self) -> None:
        """What upstream's executor does on every generate_async (_maybe_initialize_iteration_results)."""
        if self.result is None:
            self.result = IterationResult()
            self._thread = threading.Thread(target=self._feed, name="trtkit-llm-api-stats", daemon=True)
            self._thread.start()
        else:
            self.result.mark_undone()

    def get(self, timeout: float) -> list[dict[str, Any]]:
        if self.result is None:
            log.warning(NOT_YET)
            return []
        self.result.timeout = timeout
        return self.result.get_results()

    def aget(self, timeout: float) -> Any:
        if self.result is None:
            log.warning(NOT_YET)
            return _nothing()
        self.result.timeout = timeout
        return self.result

    def record(self) -> None:
        """Put the engine's figures on the queue when they changed since the last record."""
        if self.result is None:
            return
        with self._lock:
            record = self._snapshot()
            if record != self._last:
                self.result.put(json.dumps(record))
                self._last = record

    def _feed(self) -> None:
        while not self._stop.wait(POLL_S):
            self.record()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
