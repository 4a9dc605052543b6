"""Response tensors, shaped as the TensorRT-LLM templates declare them (with the batch dimension 1)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

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
        "output_ids": np.array([[chunk]], dtype=np.int32).reshape(1, 1, len(chunk)),
        "sequence_length": _i32(len(chunk)),
        "cum_log_probs": np.array([[getattr(out, "cum_log_prob", 0.0) or 0.0]], dtype=np.float32),
        "output_log_probs": lp,
        "context_logits": np.zeros((1, 0, 0), dtype=np.float32),
        "generation_logits": np.zeros((1, 0, 0, 0), dtype=np.float32),
        "batch_index": _i32(0),
        "sequence_index": _i32(0),
        "context_phase_params": np.zeros((1, 0), dtype=np.uint8),
        "kv_cache_alloc_new_blocks": _i32(total_blocks - reused // tokens_per_block),
        "kv_cache_reused_blocks": _i32(reused // tokens_per_block),
        "kv_cache_alloc_total_blocks": _i32(total_blocks),
        "arrival_time_ns": _i64(_seconds_to_ns(getattr(out, "arrival_time", None))),
        "first_scheduled_time_ns": _i64(_seconds_to_ns(getattr(out, "first_scheduled_time", None))),
        "first_token_time_ns": _i64(_seconds_to_ns(getattr(out, "first_token_time", None))),
        "last_token_time_ns": _i64(_seconds_to_ns(getattr(out, "last_token_time", None)) or clock()),
        "acceptance_rate": np.zeros((1, 1), dtype=np.float32),
        "total_accepted_draft_tokens": _i32(0),
        "total_draft_tokens": _i32(0),
        "num_input_tokens": _i32(prompt),
        "num_output_tokens": _i32(generated),
        "num_cached_tokens": _i32(reused),
        "finish_reason": np.array([[(finish_reason or "").encode()]], dtype=np.object_),
    }


def text_outputs(text: str, engine: Tensors | None, finish_reason: str | None,
                 counts: tuple[int, int, int] | None = None) -> dict[str, np.ndarray]:
    """An ensemble/BLS response: the text plus the engine's outputs that the front models also declare."""
    result: dict[str, np.ndarray] = {}
    for name, value in (engine or {}).items():
        if name not in ("output_ids", "sequence_length", "context_phase_params"):
            result[name] = value
    result["text_output"] = np.array([[text.encode("utf-8")]], dtype=np.object_)
    if counts is not None:
        result["num_input_tokens"], result["num_output_tokens"], result["num_cached_tokens"] = map(_i32, counts)
    result["finish_reason"] = np.array([[(finish_reason or "").encode()]], dtype=np.object_)
    return result
