"""What a finished request is billed: the upstream's counts when it sent them, else what arrived, counted locally.

An upstream that reports its own usage (an OpenAI-compatible server: ``Delta.usage_reported``) is billed on that
report, and the governor's own count is kept beside it (the ledger's ``local_*`` columns), with metrics counting where
the two differ. A request that ended without the upstream's count of its completion (a client that left, an upstream
that broke, the guard, a deadline) is billed for the text that arrived and marked ``counted_locally``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import Usage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    """What the transport saw: text, the server's final counts (None if it never sent them), timings."""

    text: str
    finish_reason: str
    num_input_tokens: int | None = None
    num_output_tokens: int | None = None
    num_cached_tokens: int | None = None
    first_token_at: float | None = None
    log_probs: tuple[tuple[int, float], ...] | None = None
    usage_reported: bool = False  # the counts are the upstream's usage report (Delta.usage_reported)
    pieces: int = 0  # responses that carried text: each carried at least one token


@dataclass(slots=True, frozen=True)
class Billing:
    """How a request's usage was reached: ``local`` is the governor's own count (prompt, completion) beside an
    upstream's usage report; ``counted_locally``: the upstream sent no count of the completion."""

    usage: Usage
    local: tuple[int, int] | None = None
    counted_locally: bool = False


def bill(prompt_counted: int, outcome: Outcome, counter: TokenCounter, metrics: ClientMetrics, model: str) -> Billing:
    """``prompt_counted``: the prompt as the governor counted it before admission."""
    prompt = prompt_counted
    if outcome.num_input_tokens is not None and outcome.num_input_tokens != prompt:
        if not outcome.usage_reported:  # a reported usage is checked below, and its difference counted
            log.warning("server counted %d prompt tokens, the client %d; billing the server's count",
                        outcome.num_input_tokens, prompt)
        prompt = outcome.num_input_tokens
    completion = outcome.num_output_tokens
    counted_locally = completion is None
    if completion is None:  # cancelled or cut off before the final counts: count what arrived
        completion = count_received(outcome, counter)
        metrics.counted_locally.labels(model).inc()
    usage = Usage.of(prompt, completion, outcome.num_cached_tokens or 0)
    if not outcome.usage_reported:
        return Billing(usage, None, counted_locally)
    local = (prompt_counted, count_received(outcome, counter))
    for kind, ours, theirs in (("prompt", local[0], prompt), ("completion", local[1], completion)):
        if ours != theirs:
            metrics.usage_mismatches.labels(model, kind).inc()
            metrics.usage_mismatch_tokens.labels(model, kind).inc(abs(ours - theirs))
    return Billing(usage, local, counted_locally)


def count_received(outcome: Outcome, counter: TokenCounter) -> int:
    """The completion's tokens as received: the text's ids under the model's tokenizer, but never fewer than the
    responses that carried text (each carried a token at least: a model may generate "!" eight times where the
    tokenizer reads "!!!!!!!!" as two tokens)."""
    return max(len(counter.text_ids(outcome.text)) if outcome.text else 0, outcome.pieces)
