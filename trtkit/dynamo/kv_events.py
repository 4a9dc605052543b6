"""The reference engine's KV block events on their way to Dynamo's KV router.

The engine's block manager tells a ``BlockListener`` each time a full block is registered for prefix reuse and
each time a registered block is evicted (``trtkit.refengine.block_manager``). This relay queues them on the engine's
thread, and a thread of its own hands them to Dynamo's ``KvEventPublisher`` (``publish_stored``: the block's tokens,
its hash and its parent's hash; ``publish_removed``), in order. The router hashes the tokens itself; our hashes only
name blocks, chain them and remove them, so any signed 64-bit value that is stable for the worker's lifetime does
(Python's hash of the parent hash and the block's tokens is). Published blocks are what the router believes this
worker holds: it routes a request to the worker with the longest cached prefix.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Protocol

log = logging.getLogger(__name__)


class KvPublisher(Protocol):
    """What the relay needs of ``dynamo.llm.KvEventPublisher``."""

    def publish_stored(self, token_ids: list[int], num_block_tokens: list[int], block_hashes: list[int],
                       parent_hash: int | None = None) -> None: ...

    def publish_removed(self, block_hashes: list[int]) -> None: ...


class KvEventRelay:
    """A ``BlockListener`` that forwards to a publisher from its own thread; ``close`` sends what is queued."""

    def __init__(self, publisher: KvPublisher) -> None:
        self.publisher = publisher
        self.num_stored = 0
        self.num_removed = 0
        self._queue: queue.SimpleQueue[tuple[str, tuple] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="trtkit-kv-events", daemon=True)
        self._thread.start()

    def stored(self, block_hash: int, parent_hash: int | None, token_ids: tuple[int, ...]) -> None:
        self._queue.put(("stored", (block_hash, parent_hash, token_ids)))

    def removed(self, block_hash: int) -> None:
        self._queue.put(("removed", (block_hash,)))

    def close(self, timeout_s: float = 2.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            kind, args = item
            try:
                if kind == "stored":
                    block_hash, parent_hash, token_ids = args
                    self.publisher.publish_stored(list(token_ids), [len(token_ids)], [block_hash], parent_hash)
                    self.num_stored += 1
                else:
                    self.publisher.publish_removed([args[0]])
                    self.num_removed += 1
            except Exception:  # one lost event makes the router's view stale, never the worker's answers wrong
                log.exception("publishing a KV %s event failed; the router's view of this worker is stale", kind)
