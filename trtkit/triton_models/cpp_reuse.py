"""``kv_cache_reused_blocks`` as TensorRT-LLM 1.2's C++ backend would report it, for the C++-emulation test switch.

The CPU engine reuses whole blocks only, and reports exactly what it reused. The 1.2 C++ backend also reuses a
partly matched block (partial reuse is on by default, and the 1.2 backend has no parameter to turn it off) and
counts it among the reused blocks (kvCacheManager.cpp loadOrAllocateBlocks: ``++mReusedBlocks`` for every matched
block, full or partial; contract: trtllm_1.2_rules.json kv_cache_reused_blocks_granularity). Emulated here: after
the whole blocks the CPU engine reused, the next block of the prompt's reusable tokens (all but the last) counts
too when an earlier sequence went on from the same prefix with the same next token, as a stored block it would
partly match. So a client that billed every reported block in full over-counts on CPU exactly as it would on a GPU.
"""

from __future__ import annotations

import threading
from collections import deque

REMEMBERED = 512  # earlier sequences kept: the GPU's reuse tree keeps blocks until it evicts them


class PartialReuse:
    def __init__(self, tokens_per_block: int, *, enabled: bool) -> None:
        self.tokens_per_block = tokens_per_block
        self.enabled = enabled
        self._seen: deque[tuple[int, ...]] = deque(maxlen=REMEMBERED)
        self._lock = threading.Lock()

    def reused_blocks(self, prompt_ids: list[int], whole_blocks: int) -> int:
        """The blocks the 1.2 backend would report: the engine's whole blocks, plus one partly matched block."""
        start = whole_blocks * self.tokens_per_block
        if not self.enabled or start >= len(prompt_ids) - 1:
            return whole_blocks
        prefix, following = tuple(prompt_ids[:start]), prompt_ids[start]
        with self._lock:
            partly = any(len(seq) > start and seq[start] == following and seq[:start] == prefix for seq in self._seen)
        return whole_blocks + 1 if partly else whole_blocks

    def remember(self, token_ids: list[int]) -> None:
        """A finished sequence (prompt and output): its blocks stay in the reuse tree."""
        if self.enabled:
            with self._lock:
                self._seen.append(tuple(token_ids))
