"""Typed views of the responses that are read on both sides of Triton: the engine model's and
preprocessing's. Each is read from its tensors once (``from_tensors``), so the code that acts on a response
names fields instead of looking up arrays, and an absent tensor is told apart from an empty one once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtkit.wire import names as n
from trtkit.wire.tensors import Tensors


@dataclass(slots=True, frozen=True)
class EngineResponse:
    """One response of the ``tensorrt_llm`` model. ``None``: the model did not send that tensor (the C++ backend
    sends no ``num_cached_tokens`` nor ``finish_reason``, and counts only when asked)."""

    output_ids: list[int] | None  # this response's new tokens; None: no token tensor (a final flag alone)
    num_input_tokens: int | None
    num_output_tokens: int | None  # the CPU engine: a running total; the C++ backend: this response's own
    num_cached_tokens: int | None  # prompt tokens served from the KV cache (the CPU engine)
    kv_cache_reused_blocks: int | None  # whole reused blocks (the C++ backend, with perf metrics)
    finish_reason: str | None
    output_log_probs: np.ndarray | None  # [1, beam, L]
    batch_index: int
    tensors: Tensors  # the response as it came: a model that passes outputs through reads the rest here

    @classmethod
    def from_tensors(cls, tensors: Tensors) -> EngineResponse:
        ids = tensors.get(n.OUTPUT_IDS)
        return cls(output_ids=None if ids is None else [int(i) for i in np.asarray(ids).reshape(-1)],
                   num_input_tokens=_int(tensors, n.NUM_INPUT_TOKENS),
                   num_output_tokens=_int(tensors, n.NUM_OUTPUT_TOKENS),
                   num_cached_tokens=_int(tensors, n.NUM_CACHED_TOKENS, empty=0),
                   kv_cache_reused_blocks=_int(tensors, n.KV_CACHE_REUSED_BLOCKS, empty=0),
                   finish_reason=_str(tensors, n.FINISH_REASON), output_log_probs=tensors.get(n.OUTPUT_LOG_PROBS),
                   batch_index=_int(tensors, n.BATCH_INDEX) or 0, tensors=tensors)


@dataclass(slots=True, frozen=True)
class PreprocResponse:
    """Preprocessing's answer, as the BLS hands it to the engine: arrays with the request's batch rows."""

    input_ids: np.ndarray  # INPUT_ID
    input_lengths: np.ndarray  # REQUEST_INPUT_LEN
    request_output_len: np.ndarray  # REQUEST_OUTPUT_LEN
    end_id: np.ndarray  # OUT_END_ID
    pad_id: np.ndarray  # OUT_PAD_ID
    stop_words_list: np.ndarray  # STOP_WORDS_IDS: [B, 2, L] word lists
    bad_words_list: np.ndarray  # BAD_WORDS_IDS

    @classmethod
    def from_tensors(cls, tensors: Tensors) -> PreprocResponse:
        return cls(input_ids=tensors[n.INPUT_ID], input_lengths=tensors[n.REQUEST_INPUT_LEN],
                   request_output_len=tensors[n.PRE_REQUEST_OUTPUT_LEN], end_id=tensors[n.OUT_END_ID],
                   pad_id=tensors[n.OUT_PAD_ID], stop_words_list=tensors[n.STOP_WORDS_IDS],
                   bad_words_list=tensors[n.BAD_WORDS_IDS])

    def prompt_lengths(self) -> list[int]:
        """Each batch element's prompt length in tokens."""
        return [int(length) for length in np.asarray(self.input_lengths).reshape(-1)]


def _int(tensors: Tensors, name: str, *, empty: int | None = None) -> int | None:
    value = tensors.get(name)
    if value is None:
        return None
    return empty if value.size == 0 else int(np.asarray(value).reshape(-1)[0])


def _str(tensors: Tensors, name: str) -> str | None:
    value = tensors.get(name)
    if value is None:
        return None
    if value.size == 0:
        return ""
    item = np.asarray(value).reshape(-1)[0]
    return item.decode() if isinstance(item, bytes) else str(item)


def cached_tokens_from_reused_blocks(reused_blocks: int, tokens_per_block: int, num_input: int) -> int:
    """Prompt tokens certainly served from the KV cache, from the C++ backend's ``kv_cache_reused_blocks``.

    TensorRT-LLM 1.2 (contract: trtllm_1.2_rules.json kv_cache_reused_blocks_granularity) counts a partly matched
    block as reused: partial reuse is on by default in KvCacheConfig, and the 1.2 backend's parameters cannot turn it
    off. Its exact count, ``numMatchedTokens``, is in no response. A partial match ends the search, so only the last
    reused block may be partial, and nothing says whether it was: the blocks before it are the ones known whole.
    Billing those only never grants a discount the cache did not earn; it may leave up to one block of cached tokens
    billed at the prompt price. Never more than the prompt minus one: its last token is always computed."""
    known_whole = max(reused_blocks - 1, 0)
    return min(known_whole * tokens_per_block, max(num_input - 1, 0))
