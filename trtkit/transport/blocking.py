"""An asyncio upstream as a blocking one, so that the blocking governed client (``governance.client.Client``) runs
over an upstream that only speaks asyncio (the OpenAI-compatible one): its requests run on an event loop of its own,
in a thread, and their deltas are handed to the calling thread one by one."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Generator
from concurrent.futures import Future
from typing import Any

from trtkit.governance.governor import PreparedRequest
from trtkit.governance.upstream import FINISH_CANCELLED, AsyncUpstream, Delta

_POLL_S = 0.05  # how often a thread waiting for the next delta looks for a cancel


class BlockingUpstream:
    """``upstream``'s requests, each read on its loop's thread. ``cancel`` stops a running request from any thread:
    its read is cancelled (the upstream stops the request upstream), and it ends with finish reason 'cancelled'."""

    def __init__(self, upstream: AsyncUpstream) -> None:
        self.upstream = upstream
        self.capabilities = upstream.capabilities
        self.address = upstream.address
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trtkit-upstream-loop", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._cancelled: set[str] = set()
        self._running: set[str] = set()

    def deltas(self, request: PreparedRequest, *, stream: bool, deadline: float) -> Generator[Delta | str, None, None]:
        rid = request.request_id
        with self._lock:
            self._running.add(rid)
        read = _Read(self.upstream.deltas(request, stream=stream, deadline=deadline))
        try:
            while True:
                item = self._next(read, rid)
                if item is None:
                    return
                yield item
                if item == FINISH_CANCELLED:
                    return
        finally:
            with self._lock:
                self._running.discard(rid)
                self._cancelled.discard(rid)
            self._run(read.close())  # stops the request upstream if it still runs

    def _next(self, read: _Read, rid: str) -> Delta | str | None:
        """The next delta (None at the end), or FINISH_CANCELLED once ``cancel`` named the request (its read is
        then cancelled by ``read.close``)."""
        pending: Future[Delta | str | None] = asyncio.run_coroutine_threadsafe(read.next(), self._loop)
        while True:
            with self._lock:
                if rid in self._cancelled:
                    return FINISH_CANCELLED
            try:
                return pending.result(timeout=_POLL_S)
            except TimeoutError:
                continue

    def is_server_failure(self, error: BaseException) -> bool:
        return self.upstream.is_server_failure(error)

    def cancel(self, request_id: str) -> bool:
        with self._lock:
            running = request_id in self._running
            if running:
                self._cancelled.add(request_id)
        return running

    def is_ready(self) -> bool:
        return bool(self._run(self.upstream.is_ready()))

    def close(self) -> None:
        """Closes the upstream, then stops the loop's thread."""
        if self._loop.is_closed():
            return
        try:
            self._run(self.upstream.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def _run(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()


class _Read:
    """One request's async deltas, read on the loop one at a time; ``close`` cancels a read in progress, waits for it
    to end, and closes the deltas (the upstream stops the request)."""

    def __init__(self, deltas: AsyncGenerator[Delta | str, None]) -> None:
        self.deltas = deltas
        self.task: asyncio.Task[Any] | None = None

    async def next(self) -> Delta | str | None:
        self.task = asyncio.current_task()
        try:
            return await self.deltas.__anext__()
        except StopAsyncIteration:
            return None

    async def close(self) -> None:
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):  # the read's own end: cancelled, or what it raised meanwhile
                await task
        await self.deltas.aclose()
