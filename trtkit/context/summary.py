"""``summary``: newest turns verbatim; older ones folded into a summary the served model writes.

When turns fall out of the tail window they are summarized, together with the previous summary,
by the same model that serves the chat, into at most ``summary_max_tokens`` tokens. The
summarizing calls are real requests: they go through the client (or the gateway's governed flow), so they
are budgeted and recorded in the ledger like any other.

``select`` summarizes through ``summarize`` when a fold is due (the client's blocking call). An asyncio caller
(the gateway) asks ``pending_fold`` first, runs the summarizing request itself, hands the text to ``apply_fold``
and then calls ``select``, which finds nothing left to fold: the same steps, whoever waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trtkit.context.base import (
    MESSAGE_OVERHEAD_TOKENS,
    History,
    Selection,
    as_messages,
    clip_tokens,
    newest_turns_within,
)
from trtkit.governance.tokens import TokenCounter

Summarizer = Callable[[str, int], str]  # (prompt, max_tokens) -> text produced by the served model

SUMMARY_INSTRUCTION = "Summarize the conversation below in a few sentences, keeping names, numbers and decisions.\n\n"
SUMMARY_CUE = "\n\nSummary:"
NOTE_HEADER = "Summary of the earlier conversation: "


@dataclass(slots=True, frozen=True)
class Fold:
    """Turns [history.summarized_turns, upto) are to be folded with the old summary; ``prompt`` asks for it."""

    upto: int
    prompt: str


@dataclass(slots=True)
class SummaryStrategy:
    counter: TokenCounter
    summary_max_tokens: int
    max_input_tokens: int
    summarize: Summarizer
    name: str = "summary"

    def select(self, history: History, question: str, room: int) -> Selection:
        fold = self.pending_fold(history, room)
        if fold is not None:
            self.apply_fold(history, fold, self.summarize(fold.prompt, self.summary_max_tokens))
        start = max(newest_turns_within(self.counter, history.turns, self._window(room)), history.summarized_turns)
        messages = as_messages(history.turns[start:])
        if history.summary:
            messages.insert(0, {"role": "system", "content": f"{NOTE_HEADER}{history.summary}"})
        return Selection(messages, verbatim=len(history.turns) - start, summarized=history.summarized_turns)

    def pending_fold(self, history: History, room: int) -> Fold | None:
        """The fold this history needs before its newest turns fit ``room`` beside a summary, if any."""
        start = newest_turns_within(self.counter, history.turns, self._window(room))
        if start <= history.summarized_turns:
            return None
        return Fold(start, self._prompt(history, start))

    def apply_fold(self, history: History, fold: Fold, summary: str) -> None:
        history.summary = clip_tokens(self.counter, summary.strip(), self.summary_max_tokens)
        history.summarized_turns = fold.upto

    def _window(self, room: int) -> int:
        return max(0, room - self.summary_max_tokens - MESSAGE_OVERHEAD_TOKENS)

    def _prompt(self, history: History, upto: int) -> str:
        """The request that summarizes the previous summary plus turns [summarized_turns, upto)."""
        old = "\n".join(f"{t.role}: {t.content}" for t in history.turns[history.summarized_turns:upto])
        body = (f"Earlier summary: {history.summary}\n" if history.summary else "") + old
        # count_prompt includes what the server adds around text_input (chat template), so the
        # summarizing request itself always fits the input limit.
        overhead = self.counter.count_prompt(SUMMARY_INSTRUCTION + SUMMARY_CUE)
        room = self.max_input_tokens - overhead - 4
        body_ids = self.counter.text_ids(body)
        while True:
            if len(body_ids) > room:  # keep the newest part of what is being folded
                body = self.counter.decode(body_ids[len(body_ids) - room:])
            prompt = SUMMARY_INSTRUCTION + body + SUMMARY_CUE
            if self.counter.count_prompt(prompt) <= self.max_input_tokens:
                return prompt
            room -= 4
