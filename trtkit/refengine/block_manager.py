"""The paged KV pool: fixed-size blocks with reference counts, a free list and prefix reuse.

Full blocks are registered under a chained hash of their tokens (hash of the previous block's hash
and this block's token ids), so a block matches only when the whole prefix before it matches too.
Freed blocks keep their contents and hash; they are handed out again least-recently-freed first,
after blocks that hold nothing reusable.

A ``BlockListener`` hears every registration and every eviction of a cached block (its hash, its parent's, its
tokens): what Dynamo's KV router needs to route requests to the worker that holds their prefix
(``trtkit.dynamo.kv_events``). It runs on the engine's thread, under its lock: it must only queue.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from trtkit.refengine.sequence import Sequence


class BlockListener(Protocol):
    def stored(self, block_hash: int, parent_hash: int | None, token_ids: tuple[int, ...]) -> None: ...

    def removed(self, block_hash: int) -> None: ...


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None
    token_ids: tuple[int, ...] = ()  # kept to rule out hash collisions on a match


def chain_hash(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    return hash((parent_hash, token_ids))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, *, enable_reuse: bool) -> None:
        assert num_blocks > 0 and block_size > 0
        self.block_size = block_size
        self.enable_reuse = enable_reuse
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block_id: dict[int, int] = {}
        # Insertion order is eviction order: uncached blocks go first, cached ones by time freed.
        self.free_block_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.num_reused_blocks = 0  # cumulative prefix-cache hits, in blocks
        self.num_evicted_blocks = 0
        self.listener: BlockListener | None = None

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_block_ids)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids holding the longest cached prefix of seq; at least one token is left to compute."""
        if not self.enable_reuse:
            return []
        hits: list[int] = []
        parent: int | None = None
        for index in range((seq.num_tokens - 1) // self.block_size):
            tokens = tuple(seq.token_ids[index * self.block_size:(index + 1) * self.block_size])
            parent = chain_hash(parent, tokens)
            block_id = self.hash_to_block_id.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
        return hits

    def num_blocks_to_claim(self, seq: Sequence, cached: list[int], num_tokens: int) -> int:
        """Free blocks that admitting seq up to num_tokens would take (cached hits that are free count too)."""
        fresh = max(self.blocks_for(num_tokens) - len(seq.block_table) - len(cached), 0)
        return fresh + sum(1 for block_id in cached if self.blocks[block_id].ref_count == 0)

    def allocate_prefix(self, seq: Sequence, cached: list[int]) -> None:
        """Give a new (or recomputing) seq the cached blocks found for it; their tokens count as computed."""
        assert not seq.block_table
        for block_id in cached:
            self._take(block_id, as_hit=True)
            block_hash = self.blocks[block_id].block_hash
            assert block_hash is not None
            seq.block_table.append(block_id)
            seq.block_hashes.append(block_hash)
        seq.num_computed_tokens = len(cached) * self.block_size
        self.num_reused_blocks += len(cached)

    def can_append(self, seq: Sequence, num_new_tokens: int, *, reserve: int = 0) -> bool:
        needed = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        return needed + reserve <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Make room for num_new_tokens more K/V entries; the caller checked can_append."""
        needed = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        for _ in range(needed):
            block_id = next(iter(self.free_block_ids))
            self._take(block_id, as_hit=False)
            seq.block_table.append(block_id)

    def commit_full_blocks(self, seq: Sequence) -> None:
        """Register every newly completed block of seq under its chained hash, for later requests."""
        if not self.enable_reuse:
            return
        num_full = seq.num_computed_tokens // self.block_size
        for index in range(len(seq.block_hashes), num_full):
            tokens = tuple(seq.token_ids[index * self.block_size:(index + 1) * self.block_size])
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            block_hash = chain_hash(parent, tokens)
            seq.block_hashes.append(block_hash)
            block = self.blocks[seq.block_table[index]]
            if block_hash in self.hash_to_block_id:
                continue  # an identical block is already registered; this one stays private
            block.block_hash, block.token_ids = block_hash, tokens
            self.hash_to_block_id[block_hash] = block.block_id
            if self.listener is not None:
                self.listener.stored(block_hash, parent, tokens)

    def free(self, seq: Sequence) -> None:
        """Drop seq's references; tail blocks are freed first so they are also evicted first."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            assert block.ref_count > 0, f"block {block_id} freed more often than taken"
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
                if block.block_hash is None:
                    self.free_block_ids.move_to_end(block_id, last=False)
        seq.block_table.clear()
        seq.block_hashes.clear()

    def _take(self, block_id: int, *, as_hit: bool) -> None:
        """A free block taken as fresh space loses its cached contents; one taken as a prefix hit keeps them."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free_block_ids[block_id]
            if not as_hit and block.block_hash is not None:
                self._evict(block)
        block.ref_count += 1

    def _evict(self, block: Block) -> None:
        if block.block_hash is not None and self.hash_to_block_id.get(block.block_hash) == block.block_id:
            del self.hash_to_block_id[block.block_hash]
            if self.listener is not None:
                self.listener.removed(block.block_hash)
        block.block_hash, block.token_ids = None, ()
        self.num_evicted_blocks += 1
