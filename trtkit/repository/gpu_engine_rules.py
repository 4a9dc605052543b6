"""What a built engine fixes for good, checked when a GPU repository is deployed on it.

The C++ backend takes some limits from the engine, not from Triton's config, so a serving setting that
contradicts the engine would be silently ignored (a batch cap) or fail only at run time (logits, prompt
lengths). Each function answers one such question from the engine's ``config.json`` and the resolved
serving settings; ``settings.resolve_settings`` raises or warns with the answer.
"""

from __future__ import annotations

from trtkit.trtllm_build.upstream_rules import engine_logits_dtype, unreturnable_logits_reason


def logits_refusal(engine_config: dict) -> str | None:
    """An engine whose logits the backend cannot return (bf16): refused, with the rebuild that fixes it."""
    reason = unreturnable_logits_reason(engine_logits_dtype(engine_config))
    if reason is None:
        return None
    return (f"{reason}; a request for context or generation logits would fail on it. Rebuild the engine with "
            f"`trtkit build CONFIG --force` (it passes --logits_dtype float32 for such checkpoints) or "
            f"`trtllm-build ... --logits_dtype float32`")


def batch_cap_warning(serve_cap: int | None, engine_batch: int, profile: str) -> str | None:
    """serve.max_batch_size below the engine's: Triton's max_batch_size drops, but the executor is built without
    a batch-size override and still runs the engine's full in-flight concurrency (model_instance_state.cc)."""
    if not serve_cap or serve_cap >= engine_batch:
        return None
    return (f"serve.max_batch_size {serve_cap} ({profile} profile) is below the engine's max_batch_size "
            f"{engine_batch}: the C++ backend runs the engine's in-flight concurrency whatever Triton's max_batch_size "
            f"says, so requests are NOT capped at {serve_cap}. To cap them, rebuild with `trtkit build CONFIG --force` "
            f"(it builds serve.max_batch_size into the engine), or deploy with --profile throughput")


def prompt_chunk_refusal(max_num_tokens: int, max_input_len: int, chunked: bool, why_off: str) -> str | None:
    """Without chunked context a prompt must fit one engine step (max_num_tokens); a longer prompt that
    max_input_len admits would fail at run time, so the repository is refused instead."""
    if chunked or max_num_tokens >= max_input_len:
        return None
    return (f"the engine's max_num_tokens ({max_num_tokens}) is below its max_input_len ({max_input_len}) and chunked "
            f"context is off ({why_off}): a prompt of {max_num_tokens + 1} to {max_input_len} tokens would fail at "
            f"run time. Rebuild with build.max_num_tokens >= {max_input_len}, or keep paged context FMHA "
            f"(it is what chunked context needs) and turn serve.enable_chunked_context on")
