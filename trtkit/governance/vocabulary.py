"""The vocabulary of a governed request, in one module (as simonw/llm keeps Prompt, Response and Usage in its
``models.py``): who asks (:class:`Caller`), what is asked beside the prompt (:class:`SamplingParams`), what it
cost (:class:`Usage`, :func:`usage_cost`) and what comes back (:class:`GenerationResult`, and a stream's
:class:`StreamChunk` s). Every layer that speaks of a request speaks these: the governor, the upstreams, the
gateway, the bench, the conversation. None of them names a transport: what an upstream relays as its caller sent
it travels beside them (``governor.PreparedRequest.payload``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from trtkit.store.records import ModelPrice


# -- who asks: the keys that budgets, cache scoping and the ledger use
@dataclass(slots=True, frozen=True)
class Caller:
    user: str = ""
    key_id: str = ""  # a name or hash for the API key; never the secret itself
    session: str = ""
    # the levels the key hangs under (the gateway's hierarchy): the ledger row names them
    org: str = ""
    team: str = ""
    project: str = ""
    prices: ModelPrice | None = None  # the organisation's price for the model, over the config's
    dialect: str = "openai"  # the API asked: openai or anthropic (the ledger row records it)

    @property
    def tenant(self) -> str:
        """Cache entries are shared only within a tenant: the key if there is one, else the user."""
        return self.key_id or self.user

    def field(self, scope: str) -> str:
        return {"user": self.user, "key": self.key_id, "session": self.session}.get(scope, "")


# -- what is asked beside the prompt (TensorRT-LLM 1.2 ensemble/BLS tensor names)
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
    # choices asked for (OpenAI's n): an upstream that takes a body generates n answers, so n x (prompt +
    # max_tokens) is reserved; the Triton paths refuse n > 1
    n: int = 1
    # False when the answer is more than its text (tool calls, several choices, an upstream's log-probabilities):
    # the response cache keeps text only, so it must not answer such a request
    cacheable: bool = True

    def with_max_tokens(self, max_tokens: int) -> SamplingParams:
        return replace(self, max_tokens=max_tokens)

    def identity(self) -> dict[str, Any]:
        """Every field that changes the answer; the cache key includes all of them (``cacheable`` changes none,
        and one choice is the default)."""
        found = {}
        for name, value in asdict(self).items():
            if value is None or value == () or name == "cacheable" or (name == "n" and value == 1):
                continue
            found[name] = list(value) if isinstance(value, tuple) else value
        return found

    @property
    def is_deterministic(self) -> bool:
        return self.temperature == 0.0 or self.seed is not None


# -- what it cost: token usage of one request, in the shape OpenAI's API made familiar
@dataclass(slots=True, frozen=True)
class Usage:
    """prompt + completion = total; ``cached_tokens`` is the part of the prompt served from the KV cache.

    ``cached_tokens`` is block-granular: the engines reuse whole KV blocks, and on GPU the figure is
    ``kv_cache_reused_blocks x tokens_per_block`` clamped to the prompt minus one (the last prompt token is
    always computed). The ledger records it with
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


def price_cost(usage: Usage, price: ModelPrice | None) -> float:
    """Price of one request at ``price`` (None: the model has no price, billed 0)."""
    if price is None:
        return 0.0
    return usage_cost(usage, price.input_per_million, price.output_per_million, price.cached_input_per_million)


def usage_cost(usage: Usage, input_per_million: float, output_per_million: float,
               cached_input_per_million: float) -> float:
    """Price of one request; cached prompt tokens are billed at the (usually lower) cached rate."""
    uncached = usage.prompt_tokens - usage.cached_tokens
    return (uncached * input_per_million + usage.cached_tokens * cached_input_per_million
            + usage.completion_tokens * output_per_million) / 1_000_000


# -- what comes back: a final result, and the chunks of a stream
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
    event: Any = None  # the upstream's own event, for a caller that relays it (governance.upstream.Delta.event)

    @property
    def is_final(self) -> bool:
        return self.result is not None
