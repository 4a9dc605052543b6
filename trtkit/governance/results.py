"""What a call returns: a final result, and the chunks of a stream."""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.governance.usage import Usage


@dataclass(slots=True, frozen=True)
class GenerationResult:
    request_id: str
    text: str
    usage: Usage
    finish_reason: str  # end_id | stop | length | cancelled | deadline | guard_repetition | guard_punctuation | guard_whitespace
    cache_hit: bool
    ttft_s: float | None
    latency_s: float
    cost: float
    truncated_prompt_tokens: int = 0  # removed by client.input_overflow truncation
    # (token id, log-probability) of every token of the answer, with SamplingParams(return_log_probs=True) on
    # the token path (the engine model); None otherwise
    log_probs: tuple[tuple[int, float], ...] | None = None


@dataclass(slots=True, frozen=True)
class StreamChunk:
    """A text delta with the usage so far; the last chunk has ``result`` set (the final usage record)."""

    text: str
    usage: Usage
    request_id: str  # pass it to client.cancel() to stop this stream
    result: GenerationResult | None = None
    # with return_log_probs: (token id, log-probability) of the tokens whose text this chunk carries (the last
    # chunk: any tokens whose text never came, such as the bytes of a character the length limit cut)
    log_probs: tuple[tuple[int, float], ...] = ()

    @property
    def is_final(self) -> bool:
        return self.result is not None
