"""Sampling parameters a client sends with a request (TensorRT-LLM 1.2 ensemble/BLS tensor names)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(slots=True, frozen=True)
class SamplingParams:
    max_tokens: int | None = None  # None: client.default_max_tokens
    temperature: float = 0.0  # 0 = greedy: deterministic, so cacheable
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None  # a fixed seed also makes sampling deterministic
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    min_tokens: int | None = None
    stop_words: tuple[str, ...] = ()
    bad_words: tuple[str, ...] = ()
    end_id: int | None = None
    pad_id: int | None = None
    return_log_probs: bool = False
    # structured output, as the backend's inputs: json | json_schema | regex | ebnf_grammar, and the schema,
    # expression or grammar (none for json); the deployment needs serve.guided_decoding: xgrammar
    guided_decoding_guide_type: str | None = None
    guided_decoding_guide: str | None = None
    # (token id, value) pairs added to the logits (OpenAI's logit_bias), sent as the engine's embedding_bias:
    # the token path only (the ensemble and the BLS take embedding_bias_words, which the CPU engine refuses)
    logit_bias: tuple[tuple[int, float], ...] = ()

    def with_max_tokens(self, max_tokens: int) -> SamplingParams:
        return replace(self, max_tokens=max_tokens)

    def identity(self) -> dict[str, Any]:
        """Every field that changes the answer; the cache key includes all of them."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v not in (None, ())}

    @property
    def is_deterministic(self) -> bool:
        return self.temperature == 0.0 or self.seed is not None
