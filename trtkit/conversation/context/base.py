"""What every context strategy shares: the prompt it builds always fits ``max_input_tokens``.

A strategy picks which history goes into the prompt; ``fit_prompt`` then renders it, counts it with the model's tokenizer and, if it is still too long,
drops the oldest history and finally cuts the question itself, so the guarantee holds whatever
the strategy chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trtkit.conversation.sessions import ChatSession, Turn
from trtkit.governance.tokens import TokenCounter

MESSAGE_OVERHEAD_TOKENS = 6  # role markers and separators the chat template adds around each message


@dataclass(slots=True, frozen=True)
class BuiltPrompt:
    text: str
    num_tokens: int
    messages: list[dict[str, str]]
    dropped_messages: int  # history removed by the final fit (0 when the strategy's choice fit)


class ContextStrategy(Protocol):
    name: str

    def select(self, session: ChatSession, question: str, room: int) -> list[dict[str, str]]:
        """History messages (oldest first) to put before the question, about ``room`` tokens at most."""
        ...


def turn_cost(counter: TokenCounter, turn: Turn) -> int:
    return counter.count(turn.content) + MESSAGE_OVERHEAD_TOKENS


def newest_turns_within(counter: TokenCounter, turns: list[Turn], max_tokens: int) -> int:
    """Index of the first turn of the longest suffix of ``turns`` within ``max_tokens``."""
    total, start = 0, len(turns)
    for index in range(len(turns) - 1, -1, -1):
        total += turn_cost(counter, turns[index])
        if total > max_tokens:
            break
        start = index
    return start


def fit_prompt(counter: TokenCounter, history: list[dict[str, str]], question: str,
               max_input_tokens: int) -> BuiltPrompt:
    """Render the conversation as the prompt to send; ``num_tokens`` is what the engine will count.

    The whole conversation is rendered by the model's chat template (each turn in its own role, the
    system prompt in place) and sent as a ``RawPrompt`` in the rendered form, so the server does not wrap
    it again; "Role: text" lines where the tokenizer has no template (``TokenCounter.chat_prompt``, the
    rendering the gateway's chat uses).
    """
    messages = [*history, {"role": "user", "content": question}]
    dropped = 0
    while True:
        text = counter.chat_prompt(messages)
        num_tokens = counter.count_prompt(text)
        if num_tokens <= max_input_tokens:
            return BuiltPrompt(text, num_tokens, messages, dropped)
        if len(messages) > 1:
            messages.pop(0)
            dropped += 1
            continue
        messages = [{"role": "user", "content": _cut_left(counter, question, num_tokens - max_input_tokens)}]


def _cut_left(counter: TokenCounter, text: str, excess: int) -> str:
    """Drop at least ``excess`` tokens from the start of ``text`` (the end of a question matters most)."""
    ids = counter.text_ids(text)
    return counter.decode(ids[min(len(ids), excess + 1):])


def clip_tokens(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens, re-checked because decode/encode may not round-trip."""
    ids = counter.text_ids(text)
    keep = min(len(ids), max_tokens)
    while keep > 0:
        clipped = counter.decode(ids[:keep])
        if len(counter.text_ids(clipped)) <= max_tokens:
            return clipped
        keep -= 1
    return ""


def as_messages(turns: list[Turn]) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.content} for t in turns]
