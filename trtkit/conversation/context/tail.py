"""``tail``: keep the newest turns that fit in ``max_context_tokens``."""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.conversation.context.base import as_messages, newest_turns_within
from trtkit.conversation.sessions import ChatSession
from trtkit.governance.tokens import TokenCounter


@dataclass(slots=True)
class TailStrategy:
    counter: TokenCounter
    name: str = "tail"

    def select(self, session: ChatSession, question: str, room: int) -> list[dict[str, str]]:
        start = newest_turns_within(self.counter, session.turns, room)
        return as_messages(session.turns[start:])
