"""What a finished request is billed: the upstream's counts when it sent them, else what arrived, counted locally.

An upstream that reports its own usage (an OpenAI-compatible server: ``Delta.usage_reported``) is billed on that
report, and the governor's own count is kept beside it (the ledger's ``local_*`` columns), with metrics counting where
the two differ. A request that ended without the upstream's count of its completion (a client that left, an upstream
that broke, the guard, a deadline) is billed for the text that arrived and marked ``counted_locally``.

Nothing an upstream reports is billed beyond what the request reserved: at most ``n x max_tokens`` of completion and
``(prompt + max_tokens) x n`` in all, cached tokens between 0 and the prompt. A report that cannot be true (far from
the governor's own counts, more final reports than choices, a count no server makes) is not believed: the bill is
the governor's own count. Each correction is a flag on the ledger row (``usage_flags``) and a metric.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.output_cap import FINISH_OVERRUN
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
    usage_doubtful: bool = False  # the upstream's report is not to be believed (Delta.usage_doubtful)
    overrun_tokens: int = 0  # output counted past the reservation when the stream was cut (output_cap)


@dataclass(slots=True, frozen=True)
class Reserved:
    """What a request reserved: ``completion`` tokens for every choice together (n x max_tokens) and ``total``
    tokens ((prompt + max_tokens) x n). Nothing is billed beyond them."""

    completion: int
    total: int
    choices: int = 1


# Flags of a bill the governor corrected (the ledger's ``usage_flags``, the metric's ``flag`` label)
OVERRUN = "overrun"  # the upstream sent more output than the reservation: cut, billed the reservation
DOUBTFUL = "usage_doubtful"  # the upstream's usage report was not believed: billed the governor's own count
CLAMPED = "usage_clamped"  # the bill was cut down to what the request reserved


@dataclass(slots=True, frozen=True)
class Billing:
    """How a request's usage was reached: ``local`` is the governor's own count (prompt, completion) beside an
    upstream's usage report; ``counted_locally``: the upstream sent no count of the completion; ``flags``: how
    the bill was corrected (OVERRUN, DOUBTFUL, CLAMPED)."""

    usage: Usage
    local: tuple[int, int] | None = None
    counted_locally: bool = False
    flags: tuple[str, ...] = ()


def bill(prompt_counted: int, outcome: Outcome, counter: TokenCounter, metrics: ClientMetrics, model: str,
         reserved: Reserved | None = None) -> Billing:
    """``prompt_counted``: the prompt as the governor counted it before admission. ``reserved``: the ceiling of
    the bill (None: none, for a caller with no reservation)."""
    prompt = prompt_counted
    if outcome.num_input_tokens is not None and outcome.num_input_tokens != prompt:
        if not outcome.usage_reported:  # a reported usage is checked below, and its difference counted
            log.warning("server counted %d prompt tokens, the client %d; billing the server's count",
                        outcome.num_input_tokens, prompt)
        prompt = outcome.num_input_tokens
    completion = outcome.num_output_tokens
    counted_locally = completion is None
    received = count_received(outcome, counter) if counted_locally or outcome.usage_reported else 0
    if completion is None:  # cancelled or cut off before the final counts: count what arrived
        completion = received
        metrics.counted_locally.labels(model).inc()
    cached = min(max(outcome.num_cached_tokens or 0, 0), prompt)
    flags: list[str] = []
    if outcome.usage_reported and (outcome.usage_doubtful or not counted_locally and
                                   not _plausible(outcome, prompt_counted, received, reserved)):
        prompt, completion, cached = prompt_counted, received, 0
        flags.append(DOUBTFUL)
    if reserved is not None:
        if completion > reserved.completion or outcome.finish_reason == FINISH_OVERRUN:
            flags.append(OVERRUN)
            metrics.overrun_tokens.labels(model).inc(
                max(outcome.overrun_tokens, completion - reserved.completion, received - reserved.completion, 0))
        completion = min(completion, reserved.completion)
        if prompt + completion > reserved.total:
            prompt = max(0, reserved.total - completion)
            cached = min(cached, prompt)
            flags.append(CLAMPED)
    for flag in flags:
        metrics.usage_flags.labels(model, flag).inc()
    usage = Usage.of(prompt, completion, cached)
    if not outcome.usage_reported:
        return Billing(usage, None, counted_locally, tuple(flags))
    local = (prompt_counted, received)
    for kind, ours, theirs in (("prompt", local[0], prompt), ("completion", local[1], completion)):
        if ours != theirs:
            metrics.usage_mismatches.labels(model, kind).inc()
            metrics.usage_mismatch_tokens.labels(model, kind).inc(abs(ours - theirs))
    return Billing(usage, local, counted_locally, tuple(flags))


def _plausible(outcome: Outcome, prompt_counted: int, received: int, reserved: Reserved | None) -> bool:
    """Whether an upstream's usage report could be true: the governor counted the prompt before it went and the
    text that came back. A template of the upstream's own may count the prompt a little differently, and a model
    may write in tokens that the text re-reads as fewer (or, through replacement characters, more); a report far
    outside that, more completion than the reservation while less text came, or more cached tokens than prompt
    tokens is not believed."""
    if outcome.usage_doubtful:
        return False
    prompt, completion = outcome.num_input_tokens, outcome.num_output_tokens
    cached = outcome.num_cached_tokens or 0
    choices = reserved.choices if reserved is not None else 1
    if prompt is not None and not prompt_counted // 2 - 16 <= prompt <= 2 * prompt_counted * choices + 64:
        return False
    if prompt is not None and cached > prompt:
        return False
    if completion is None:
        return True
    if completion < received // 4 - 16:
        return False
    return reserved is None or completion <= reserved.completion or received > reserved.completion


def count_received(outcome: Outcome, counter: TokenCounter) -> int:
    """The completion's tokens as received: the text's ids under the model's tokenizer, but never fewer than the
    responses that carried text (each carried a token at least: a model may generate "!" eight times where the
    tokenizer reads "!!!!!!!!" as two tokens)."""
    return max(len(counter.text_ids(outcome.text)) if outcome.text else 0, outcome.pieces)
