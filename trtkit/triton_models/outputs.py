"""Response tensors, shaped as the TensorRT-LLM templates declare them (with the batch dimension 1)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trtkit.wire import names as n
from trtkit.wire.tensors import Tensors


def _i32(value: int) -> np.ndarray:
    return np.array([[value]], dtype=np.int32)


def _i64(value: int) -> np.ndarray:
    return np.array([[value]], dtype=np.int64)


def _seconds_to_ns(value: object) -> int:
    if value is None:
        return 0
    return int(float(value) * 1e9)  # type: ignore[arg-type]


def engine_outputs(out, chunk: list[int], log_probs: list[float], generated: int, finish_reason: str | None,
                   tokens_per_block: int, clock: Callable[[], int]) -> dict[str, np.ndarray]:
    """Every output the ``tensorrt_llm`` template declares, plus ``num_cached_tokens`` and ``finish_reason``."""
    prompt = int(getattr(out, "num_prompt_tokens", 0) or 0)
    reused = int(getattr(out, "num_reused_tokens", 0) or 0)
    total_blocks = -(-(prompt + generated) // tokens_per_block)
    lp = np.zeros((1, 1, len(chunk)), dtype=np.float32)
    lp[0, 0, :len(log_probs[:len(chunk)])] = log_probs[:len(chunk)]
    return {
        n.OUTPUT_IDS: np.array([[chunk]], dtype=np.int32).reshape(1, 1, len(chunk)),
        n.SEQUENCE_LENGTH: _i32(len(chunk)),
        n.CUM_LOG_PROBS: np.array([[getattr(out, "cum_log_prob", 0.0) or 0.0]], dtype=np.float32),
        n.OUTPUT_LOG_PROBS: lp,
        n.CONTEXT_LOGITS: np.zeros((1, 0, 0), dtype=np.float32),
        n.GENERATION_LOGITS: np.zeros((1, 0, 0, 0), dtype=np.float32),
        n.BATCH_INDEX: _i32(0),
        n.SEQUENCE_INDEX: _i32(0),
        n.CONTEXT_PHASE_PARAMS: np.zeros((1, 0), dtype=np.uint8),
        n.KV_CACHE_ALLOC_NEW_BLOCKS: _i32(total_blocks - reused // tokens_per_block),
        n.KV_CACHE_REUSED_BLOCKS: _i32(reused // tokens_per_block),
        n.KV_CACHE_ALLOC_TOTAL_BLOCKS: _i32(total_blocks),
        n.ARRIVAL_TIME_NS: _i64(_seconds_to_ns(getattr(out, "arrival_time", None))),
        n.FIRST_SCHEDULED_TIME_NS: _i64(_seconds_to_ns(getattr(out, "first_scheduled_time", None))),
        n.FIRST_TOKEN_TIME_NS: _i64(_seconds_to_ns(getattr(out, "first_token_time", None))),
        n.LAST_TOKEN_TIME_NS: _i64(_seconds_to_ns(getattr(out, "last_token_time", None)) or clock()),
        n.ACCEPTANCE_RATE: np.zeros((1, 1), dtype=np.float32),
        n.TOTAL_ACCEPTED_DRAFT_TOKENS: _i32(0),
        n.TOTAL_DRAFT_TOKENS: _i32(0),
        n.NUM_INPUT_TOKENS: _i32(prompt),
        n.NUM_OUTPUT_TOKENS: _i32(generated),
        n.NUM_CACHED_TOKENS: _i32(reused),
        n.FINISH_REASON: np.array([[(finish_reason or "").encode()]], dtype=np.object_),
    }


def text_outputs(text: str, engine: Tensors | None, finish_reason: str | None,
                 counts: tuple[int, int, int] | None = None) -> dict[str, np.ndarray]:
    """An ensemble/BLS response: the text plus the engine's outputs that the front models also declare."""
    result: dict[str, np.ndarray] = {}
    for name, value in (engine or {}).items():
        if name not in (n.OUTPUT_IDS, n.SEQUENCE_LENGTH, n.CONTEXT_PHASE_PARAMS):
            result[name] = value
    result[n.TEXT_OUTPUT] = np.array([[text.encode("utf-8")]], dtype=np.object_)
    if counts is not None:
        result[n.NUM_INPUT_TOKENS], result[n.NUM_OUTPUT_TOKENS], result[n.NUM_CACHED_TOKENS] = map(_i32, counts)
    result[n.FINISH_REASON] = np.array([[(finish_reason or "").encode()]], dtype=np.object_)
    return result
