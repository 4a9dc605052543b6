"""One request's token state, block table and timestamps."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from trtkit.refengine.outputs import FinishReason, SamplingParams


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]  # prompt followed by generated tokens
    num_prompt_tokens: int
    params: SamplingParams
    end_id: int | None  # resolved: the request's, else the model's; None never stops on an id
    generator: torch.Generator | None = None
    grammar: Any = None  # a guided request's xgrammar matcher (refengine.guided_decoding), at its output so far
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chained hashes of the full blocks committed so far
    num_computed_tokens: int = 0  # tokens whose K/V sit in the cache
    num_reused_tokens: int = 0  # prompt tokens served from the prefix cache at first admission
    num_delivered_tokens: int = 0  # output tokens already handed out in a RequestOutput
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None  # why it failed, with finish_reason "error"
    cum_log_prob: float = 0.0
    pending_log_probs: list[float] = field(default_factory=list)
    arrival_time: float = field(default_factory=time.monotonic)
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def max_total_tokens(self) -> int:
        """The worst case this request can grow to (what guaranteed_no_evict reserves)."""
        return self.num_prompt_tokens + self.params.max_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def is_prefilling(self) -> bool:
        """Still computing tokens it already has (prompt, or recompute after preemption)."""
        return self.num_computed_tokens < self.num_tokens - 1

    def reset_for_recompute(self) -> None:
        """After preemption: the cache is gone, every token (prompt and output) is computed again."""
        self.block_table.clear()
        self.block_hashes.clear()
        self.num_computed_tokens = 0
        self.num_preemptions += 1
        self.status = SequenceStatus.WAITING
