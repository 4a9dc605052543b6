"""The engine's running totals and the EngineStats snapshot built from them, the pool and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.refengine.block_manager import BlockManager
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.outputs import EngineStats, FinishReason
from trtkit.refengine.scheduler import ScheduledChunk, Scheduler


@dataclass(slots=True)
class EngineCounters:
    iteration: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    scheduled_tokens: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    reused_tokens: int = 0
    last_scheduled: int = 0
    last_context: int = 0

    def begin_iteration(self, chunks: list[ScheduledChunk], now: float) -> None:
        """Count a step's chunks and stamp each request's first scheduling."""
        self.iteration += 1
        self.last_scheduled = len(chunks)
        self.last_context = sum(1 for c in chunks if c.num_tokens > 1 or c.start == 0)
        for chunk in chunks:
            seq = chunk.seq
            self.scheduled_tokens += chunk.num_tokens
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = now
                self.prompt_tokens += seq.num_prompt_tokens
                self.reused_tokens += seq.num_reused_tokens

    def finished(self, reason: FinishReason | None) -> None:
        if reason == "cancelled":
            self.cancelled += 1
        elif reason == "error":
            self.failed += 1
        else:
            self.completed += 1

    def stats(self, manager: BlockManager, scheduler: Scheduler, config: EngineConfig) -> EngineStats:
        return EngineStats(
            active_requests=len(scheduler.running), waiting_requests=len(scheduler.waiting),
            scheduled_requests=self.last_scheduled, context_requests=self.last_context,
            generation_requests=self.last_scheduled - self.last_context, max_kv_blocks=manager.num_blocks,
            free_kv_blocks=manager.num_free_blocks, used_kv_blocks=manager.num_used_blocks,
            reused_kv_blocks=manager.num_reused_blocks, tokens_per_block=manager.block_size, iteration=self.iteration,
            max_num_tokens=config.max_num_tokens, queue_capacity=config.max_queue_size,
            completed_requests=self.completed, cancelled_requests=self.cancelled,
            preempted_requests=scheduler.num_preemptions, evicted_kv_blocks=manager.num_evicted_blocks,
            scheduled_tokens=self.scheduled_tokens, prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens, reused_tokens=self.reused_tokens)
