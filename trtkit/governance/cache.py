"""Response cache: exact match on tenant, model, prompt and sampling params, deterministic requests only.

Only requests whose answer is reproducible are cached: greedy (temperature 0) or sampled with a
fixed seed. Keys are scoped per tenant so one customer never sees another's answers.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class CachedResponse:
    text: str
    completion_tokens: int
    finish_reason: str
    stored_at: float


def cache_key(tenant: str, model: str, prompt: str | list[int], params: dict[str, Any]) -> str:
    blob = json.dumps({"tenant": tenant, "model": model, "prompt": prompt, "params": params},
                      sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """In-process LRU with a TTL; thread-safe."""

    def __init__(self, ttl_seconds: float, max_entries: int, clock: Any = time.monotonic) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, CachedResponse] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> CachedResponse | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if self._clock() - entry.stored_at > self.ttl_seconds:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry

    def put(self, key: str, text: str, completion_tokens: int, finish_reason: str) -> None:
        with self._lock:
            self._entries[key] = CachedResponse(text, completion_tokens, finish_reason, self._clock())
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
