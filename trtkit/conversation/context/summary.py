"""``summary``: newest turns verbatim; older ones folded into a summary the served model writes.

When turns fall out of the tail window they are summarized, together with the previous summary,
by the same model that serves the chat, into at most ``summary_max_tokens`` tokens. The
summarizing calls are real requests: they go through the client, so they are budgeted and
recorded in the ledger like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trtkit.conversation.context.base import MESSAGE_OVERHEAD_TOKENS, clip_tokens, newest_turns_within
from trtkit.conversation.sessions import ChatSession
from trtkit.governance.tokens import TokenCounter

Summarizer = Callable[[str, int], str]  # (prompt, max_tokens) -> text produced by the served model

SUMMARY_INSTRUCTION = "Summarize the conversation below in a few sentences, keeping names, numbers and decisions.\n\n"
SUMMARY_CUE = "\n\nSummary:"


@dataclass(slots=True)
class SummaryStrategy:
    counter: TokenCounter
    summary_max_tokens: int
    max_input_tokens: int
    summarize: Summarizer
    name: str = "summary"

    def select(self, session: ChatSession, question: str, room: int) -> list[dict[str, str]]:
        window = max(0, room - self.summary_max_tokens - MESSAGE_OVERHEAD_TOKENS)
        start = newest_turns_within(self.counter, session.turns, window)
        if start > session.summarized_turns:
            self._fold(session, start)
        history = [{"role": t.role, "content": t.content} for t in session.turns[max(start, session.summarized_turns):]]
        if session.summary:
            history.insert(0, {"role": "system", "content": f"Summary of the earlier conversation: {session.summary}"})
        return history

    def _fold(self, session: ChatSession, upto: int) -> None:
        """Summarize the previous summary plus turns [summarized_turns, upto) into the new summary."""
        old = "\n".join(f"{t.role}: {t.content}" for t in session.turns[session.summarized_turns:upto])
        body = (f"Earlier summary: {session.summary}\n" if session.summary else "") + old
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
                break
            room -= 4
        summary = self.summarize(prompt, self.summary_max_tokens).strip()
        session.summary = clip_tokens(self.counter, summary, self.summary_max_tokens)
        session.summarized_turns = upto
