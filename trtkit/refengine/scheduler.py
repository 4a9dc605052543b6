"""In-flight batching: which requests run this step, and how many tokens each computes.

There is no separate prefill or decode phase: every scheduled request moves its computed-token count
forward within the step's max_num_tokens budget (a decode is one token, a prompt is many; with chunked
context a prompt may take several steps). Running requests go first, then waiting ones in arrival
order (FCFS: the head of the queue is never overtaken).

guaranteed_no_evict admits a request only when the free blocks cover its worst case (prompt plus
max_tokens) on top of the worst case of everything already running, so no one is ever evicted.
max_utilization admits whenever the next chunk fits; when a running request cannot get a block, the
most recently admitted request is preempted: its blocks are freed and it is recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trtkit.errors import EngineError
from trtkit.refengine.block_manager import BlockManager
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledChunk:
    seq: Sequence
    start: int  # first token position computed this step
    num_tokens: int

    @property
    def completes_sequence(self) -> bool:
        """After this chunk every token has K/V, so the step samples the next token."""
        return self.start + self.num_tokens == self.seq.num_tokens


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    @property
    def is_idle(self) -> bool:
        return not self.waiting and not self.running

    def add(self, seq: Sequence) -> None:
        if len(self.waiting) >= self.config.max_queue_size:
            raise EngineError(f"request queue is full ({self.config.max_queue_size} waiting); retry later or "
                              "raise serve.max_queue_size")
        self.waiting.append(seq)

    def schedule(self) -> list[ScheduledChunk]:
        budget = self.config.max_num_tokens
        chunks: list[ScheduledChunk] = []
        preempted = False
        for seq in list(self.running):
            if seq.status is not SequenceStatus.RUNNING or budget == 0:
                continue  # preempted earlier in this loop, or the budget is spent
            num_new = self._chunk_size(seq, seq.num_tokens - seq.num_computed_tokens, budget)
            if num_new == 0:
                continue
            if not self._make_room(seq, num_new):
                preempted = True
                continue
            self.block_manager.append_slots(seq, num_new)
            chunks.append(ScheduledChunk(seq, seq.num_computed_tokens, num_new))
            budget -= num_new
        if not preempted:  # after a preemption, admitting others would only thrash
            budget = self._admit_waiting(chunks, budget)
        return chunks

    def _chunk_size(self, seq: Sequence, remaining: int, budget: int) -> int:
        if remaining <= budget:
            return remaining
        # A preempted request recomputes prompt plus output, which may exceed one step's budget.
        can_chunk = self.config.enable_chunked_context or seq.num_preemptions > 0
        return budget if can_chunk else 0

    def _make_room(self, seq: Sequence, num_new: int) -> bool:
        """True when seq can grow by num_new tokens, preempting later arrivals if the policy allows."""
        reserve = self.reserved_blocks(exclude=seq)
        while not self.block_manager.can_append(seq, num_new, reserve=reserve):
            assert self.config.scheduler_policy == "max_utilization", "no-evict reservation was violated"
            victim = self.running[-1]
            self.preempt(victim)
            if victim is seq:
                return False
        return True

    def _admit_waiting(self, chunks: list[ScheduledChunk], budget: int) -> int:
        manager = self.block_manager
        while self.waiting and budget > 0 and len(self.running) < self.config.max_batch_size:
            seq = self.waiting[0]
            cached = manager.find_cached_prefix(seq)
            num_cached = len(cached) * manager.block_size
            num_new = self._chunk_size(seq, seq.num_tokens - num_cached, budget)
            if num_new == 0:
                break
            target = seq.max_total_tokens if self.config.scheduler_policy == "guaranteed_no_evict" \
                else num_cached + num_new
            claim = manager.num_blocks_to_claim(seq, cached, target)
            if claim + self.reserved_blocks() > manager.num_free_blocks:
                break
            self.waiting.popleft()
            manager.allocate_prefix(seq, cached)
            if seq.num_preemptions == 0:
                seq.num_reused_tokens = num_cached
            manager.append_slots(seq, num_new)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            chunks.append(ScheduledChunk(seq, num_cached, num_new))
            budget -= num_new
        return budget

    def reserved_blocks(self, exclude: Sequence | None = None) -> int:
        """Blocks promised to running requests' future growth (guaranteed_no_evict only)."""
        if self.config.scheduler_policy != "guaranteed_no_evict":
            return 0
        manager = self.block_manager
        return sum(max(manager.blocks_for(seq.max_total_tokens) - len(seq.block_table), 0)
                   for seq in self.running if seq is not exclude)

    def preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.reset_for_recompute()
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish(self, seq: Sequence) -> None:
        """Remove a finished or cancelled request wherever it is and free its blocks at once."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
