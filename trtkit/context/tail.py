"""``tail``: keep the newest turns that fit in the room left."""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.context.base import History, Selection, as_messages, newest_turns_within
from trtkit.governance.tokens import TokenCounter


@dataclass(slots=True)
class TailStrategy:
    counter: TokenCounter
    name: str = "tail"

    def select(self, history: History, question: str, room: int) -> Selection:
        start = newest_turns_within(self.counter, history.turns, room)
        return Selection(as_messages(history.turns[start:]), verbatim=len(history.turns) - start)
