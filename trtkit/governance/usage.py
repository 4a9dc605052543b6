"""Token usage of one request, in the shape OpenAI's API made familiar."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class Usage:
    """prompt + completion = total; ``cached_tokens`` is the part of the prompt served from the KV cache.

    ``cached_tokens`` is block-granular: the engines reuse whole KV blocks, and on GPU the figure is
    ``kv_cache_reused_blocks x tokens_per_block`` clamped to the prompt. The ledger records it with
    ``cached_tokens_unit = 'block'``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Usage:
        return cls(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens, cached_tokens)

    def to_openai(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    def __add__(self, other: Usage) -> Usage:
        return Usage.of(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                        self.cached_tokens + other.cached_tokens)


ZERO_USAGE = Usage()


def usage_cost(usage: Usage, input_per_million: float, output_per_million: float,
               cached_input_per_million: float) -> float:
    """Price of one request; cached prompt tokens are billed at the (usually lower) cached rate."""
    uncached = usage.prompt_tokens - usage.cached_tokens
    return (uncached * input_per_million + usage.cached_tokens * cached_input_per_million
            + usage.completion_tokens * output_per_million) / 1_000_000
