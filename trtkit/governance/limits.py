"""Hard input limit and max_tokens clamp, applied to token ids before a request leaves."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from trtkit.errors import ClientError, InputTooLongError

log = logging.getLogger(__name__)

OVERFLOW_POLICIES = ("reject", "truncate_left", "truncate_right")


@dataclass(slots=True, frozen=True)
class FittedPrompt:
    token_ids: list[int]
    dropped_tokens: int  # removed by truncation (0 when the prompt fit)


def enforce_input_limit(token_ids: list[int], limit: int, policy: str) -> FittedPrompt:
    """Reject a prompt over ``limit`` tokens, or cut it: truncate_left keeps the end (the newest text)."""
    excess = len(token_ids) - limit
    if excess <= 0:
        return FittedPrompt(token_ids, 0)
    if policy == "reject":
        raise InputTooLongError(
            f"prompt is {len(token_ids)} tokens, the limit is {limit} (client.max_input_tokens); shorten it, "
            f"or set client.input_overflow to truncate_left or truncate_right")
    if policy == "truncate_left":
        kept = token_ids[excess:]
    elif policy == "truncate_right":
        kept = token_ids[:limit]
    else:
        raise ClientError(f"client.input_overflow={policy!r} is unknown; use one of {', '.join(OVERFLOW_POLICIES)}")
    log.warning("prompt truncated from %d to %d tokens (%s)", len(token_ids), limit, policy)
    return FittedPrompt(kept, excess)


def clamp_max_tokens(requested: int, prompt_tokens: int, max_seq_len: int) -> int:
    """The most new tokens that fit beside the prompt in the engine's max_seq_len."""
    if requested < 1:
        raise ClientError(f"max_tokens must be at least 1, got {requested}")
    room = max_seq_len - prompt_tokens
    if room < 1:
        raise InputTooLongError(f"prompt is {prompt_tokens} tokens and leaves no room to generate within "
                                f"build.max_seq_len ({max_seq_len}); shorten the prompt")
    if requested > room:
        log.info("max_tokens clamped from %d to %d to fit max_seq_len %d", requested, room, max_seq_len)
    return min(requested, room)
