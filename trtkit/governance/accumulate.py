"""Folding stream deltas into running usage and a final outcome; shared by both transports."""

from __future__ import annotations

import time

from trtkit.governance.governor import Outcome
from trtkit.governance.guard import RunawayGuard
from trtkit.governance.output_cap import FINISH_OVERRUN, OutputMeter
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import Delta
from trtkit.governance.vocabulary import SamplingParams, Usage


class StreamAccumulator:
    """``params``: the request's sampling parameters, to name the finish reason when the server sends none
    (the C++ backend through the GPU ensemble): length at max_tokens, else stop or end_id. ``meter``: counts the
    output of an upstream that may not honour max_tokens, and stops it past the reservation (``output_cap``)."""

    def __init__(self, prompt_tokens: int, counter: TokenCounter, guard: RunawayGuard | None,
                 params: SamplingParams | None = None, meter: OutputMeter | None = None) -> None:
        self.params = params
        self.meter = meter
        self.prompt_tokens = prompt_tokens
        self.counter = counter
        self.guard = guard
        self.pieces: list[str] = []
        self.local_completion_tokens = 0
        self.server = Outcome(text="", finish_reason="")
        self.finished = False
        self.log_probs: list[tuple[int, float]] | None = None  # None: the wire carried none (the text path)

    @property
    def has_output(self) -> bool:
        return self.server.first_token_at is not None

    def add(self, delta: Delta) -> str | None:
        """Take one response; returns the guard's stop reason if the output ran away."""
        if delta.text:
            if self.server.first_token_at is None:
                self.server.first_token_at = time.perf_counter()
            self.pieces.append(delta.text)
        self.add_counts(delta)
        if delta.log_probs is not None:
            if self.log_probs is None:
                self.log_probs = []
            self.log_probs.extend(delta.log_probs)
        if delta.finish_reason:
            self.server.finish_reason = delta.finish_reason
        self.finished = self.finished or delta.is_final
        if not delta.text:
            return None
        if self.meter is not None and self.meter.passed(delta.text):
            self.pieces.pop()  # past the reservation: not part of the answer (its count stays in the meter)
            self.server.overrun_tokens = self.meter.overrun
            return FINISH_OVERRUN
        return None if self.guard is None else self.guard.feed([delta.text])

    def add_counts(self, delta: Delta) -> None:
        """Take only a response's counts: what the engine generated after a client-side stop (the deadline, a
        cancel), until the stop took. It is billed; its text never reaches the caller."""
        if delta.text:
            self.local_completion_tokens += 1  # only used if the server sends no counts: one piece ~ one token
        for name in ("num_input_tokens", "num_output_tokens", "num_cached_tokens"):
            value = getattr(delta, name)
            if value is not None:
                previous = getattr(self.server, name)
                if name == "num_output_tokens" and delta.counts_per_response and previous is not None:
                    value += previous  # per-response counts (C++ backend) add up to the completion
                setattr(self.server, name, value)
        if delta.usage_reported:  # an upstream's own usage: its counts are the bill
            self.server.usage_reported = True
        if delta.usage_doubtful:
            self.server.usage_doubtful = True

    def running_usage(self) -> Usage:
        completion = self.server.num_output_tokens
        if completion is None:
            completion = self.local_completion_tokens
        prompt = self.server.num_input_tokens or self.prompt_tokens
        return Usage.of(prompt, completion, self.server.num_cached_tokens or 0)

    def outcome(self, finish_reason: str | None = None) -> Outcome:
        """The final outcome; a client-side stop (guard, cancel, deadline) overrides the server's reason."""
        o = self.server
        finish_reason = finish_reason or o.finish_reason or self._derived_reason()
        return Outcome(text="".join(self.pieces), finish_reason=finish_reason,
                       num_input_tokens=o.num_input_tokens,
                       num_output_tokens=o.num_output_tokens,  # None: the governor counts the text received
                       num_cached_tokens=o.num_cached_tokens, first_token_at=o.first_token_at,
                       usage_reported=o.usage_reported, pieces=self.local_completion_tokens,
                       usage_doubtful=o.usage_doubtful, overrun_tokens=o.overrun_tokens,
                       log_probs=None if self.log_probs is None else tuple(self.log_probs))

    def _derived_reason(self) -> str:
        """A finished stream without a finish_reason tensor (the C++ backend has none) still ended for a
        reason the counts tell: so the response cache keeps working on GPU."""
        completion, params = self.server.num_output_tokens, self.params
        if not self.finished or completion is None or params is None or params.max_tokens is None:
            return "unknown"
        if completion >= params.max_tokens:
            return "length"
        return "stop" if params.stop_words else "end_id"
