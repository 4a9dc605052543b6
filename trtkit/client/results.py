"""What a call returns: a final result, and the chunks of a stream."""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.client.usage import Usage


@dataclass(slots=True, frozen=True)
class GenerationResult:
    request_id: str
    text: str
    usage: Usage
    finish_reason: str  # end_id | stop | length | cancelled | deadline | guard_repetition | guard_punctuation
    cache_hit: bool
    ttft_s: float | None
    latency_s: float
    cost: float
    truncated_prompt_tokens: int = 0  # removed by client.input_overflow truncation


@dataclass(slots=True, frozen=True)
class StreamChunk:
    """A text delta with the usage so far; the last chunk has ``result`` set (the final usage record)."""

    text: str
    usage: Usage
    request_id: str  # pass it to client.cancel() to stop this stream
    result: GenerationResult | None = None

    @property
    def is_final(self) -> bool:
        return self.result is not None
