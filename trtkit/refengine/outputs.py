"""What callers pass in (SamplingParams) and get back (RequestOutput, EngineStats)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from trtkit.errors import EngineError
from trtkit.refengine.guided_decoding import check_guide

FinishReason = Literal["end_id", "stop", "length", "cancelled", "error"]  # "error": RequestOutput.error says why


@dataclass(slots=True)
class SamplingParams:
    """Per-request generation controls, named like the TensorRT-LLM backend's inputs.

    end_id None means the model's end-of-sequence id (from its config); -1 never stops on an id.
    Stop sequences stay in the output (as in TensorRT-LLM); the end id does not.
    Repetition penalty counts prompt and output tokens; presence/frequency penalties count output only.
    """

    max_tokens: int = 32
    end_id: int | None = None
    pad_id: int | None = None
    stop_token_ids: list[list[int]] = field(default_factory=list)
    bad_token_ids: list[list[int]] = field(default_factory=list)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    exclude_input_in_output: bool = True
    return_log_probs: bool = False
    # structured output (refengine.guided_decoding): json | json_schema | regex | ebnf_grammar, and its guide
    guided_decoding_guide_type: str | None = None
    guided_decoding_guide: str | None = None
    # the backend's embedding_bias, kept sparse: token id -> value added to its logit before the other controls
    embedding_bias: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise EngineError(f"max_tokens: must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise EngineError(f"temperature: must be >= 0 (0 is greedy), got {self.temperature}")
        if self.top_k < 0:
            raise EngineError(f"top_k: must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise EngineError(f"top_p: must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise EngineError(f"repetition_penalty: must be > 0 (1 disables it), got {self.repetition_penalty}")
        if self.min_tokens < 0:
            raise EngineError(f"min_tokens: must be >= 0, got {self.min_tokens}")
        for name in ("stop_token_ids", "bad_token_ids"):
            if any(len(seq) == 0 for seq in getattr(self, name)):
                raise EngineError(f"{name}: every sequence needs at least one token id")
        check_guide(self.guided_decoding_guide_type, self.guided_decoding_guide)
        if not all(math.isfinite(value) for value in self.embedding_bias.values()):
            raise EngineError("embedding_bias: every value must be a finite number")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def needs_logit_processing(self) -> bool:
        return bool(self.bad_token_ids or self.min_tokens or self.repetition_penalty != 1.0
                    or self.presence_penalty or self.frequency_penalty or self.embedding_bias)


@dataclass(slots=True)
class RequestOutput:
    """One request's delta for one step; the last one has finished=True and a finish_reason.

    Times are time.monotonic() seconds; None until the event happened.
    """

    request_id: str
    new_token_ids: list[int]
    output_token_ids: list[int]
    finished: bool
    finish_reason: FinishReason | None
    num_prompt_tokens: int
    num_reused_tokens: int
    new_log_probs: list[float] | None
    cum_log_prob: float | None
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    last_token_time: float | None
    error: str | None = None  # set with finish_reason "error": this request failed, the others go on


@dataclass(slots=True)
class EngineStats:
    """A snapshot mirroring TensorRT-LLM's inflight-batcher and KV-cache metrics (counters are cumulative)."""

    active_requests: int
    waiting_requests: int
    scheduled_requests: int
    context_requests: int
    generation_requests: int
    max_kv_blocks: int
    free_kv_blocks: int
    used_kv_blocks: int
    reused_kv_blocks: int
    tokens_per_block: int
    iteration: int
    max_num_tokens: int
    queue_capacity: int
    completed_requests: int
    cancelled_requests: int = 0
    preempted_requests: int = 0
    evicted_kv_blocks: int = 0
    scheduled_tokens: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    reused_tokens: int = 0
