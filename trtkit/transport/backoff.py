"""How long an upstream waits before it tries a request again: exponential backoff with full jitter, so that many
clients do not retry in lockstep. Each upstream decides when to retry (``triton/retry.py``, ``openai/upstream.py``);
they wait alike."""

from __future__ import annotations

import random

RETRY_BASE_S = 0.1
RETRY_MAX_S = 2.0


def backoff_s(attempt: int) -> float:
    """The wait before retry number ``attempt`` (from 0)."""
    return random.uniform(0, min(RETRY_MAX_S, RETRY_BASE_S * 2 ** attempt))
