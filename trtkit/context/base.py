"""What every context strategy shares: the history it reads, what it chose, and a prompt that fits.

A strategy picks which history goes into the prompt (a :class:`Selection`, which also says what it did with the
rest); ``fit_prompt`` / ``fit_messages`` then render it, count it with the model's tokenizer and, if it is still
too long, drop the oldest history and (``fit_prompt``) finally cut the question itself, so the guarantee holds
whatever the strategy chose. The client's ``Conversation`` and the gateway's Responses API both build their
prompts here: one implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trtkit.errors import InputTooLongError
from trtkit.governance.tokens import TokenCounter

MESSAGE_OVERHEAD_TOKENS = 6  # role markers and separators the chat template adds around each message
QUESTION_MARGIN_TOKENS = 16  # role markers and the answer cue around the question


@dataclass(slots=True)
class Turn:
    role: str  # "user", "assistant", "system" (an instruction given as an input message), or "tool" (a call's output)
    content: str
    extra: dict[str, Any] | None = None  # an assistant's ``tool_calls``, a tool output's ``tool_call_id``


class History(Protocol):
    """What a strategy reads and (summary) updates: a session of the client, a stored chain of the gateway."""

    turns: list[Turn]
    summary: str  # running summary of turns that no longer fit (summary strategy)
    summarized_turns: int  # how many leading turns the summary covers


@dataclass(slots=True)
class ChainHistory:
    """A History with no lifetime of its own (the gateway's: its lifetime is the stored chain's)."""

    turns: list[Turn] = field(default_factory=list)
    summary: str = ""
    summarized_turns: int = 0


class Selection(list[dict[str, Any]]):
    """History messages a strategy chose (oldest first), and what became of the others: ``verbatim`` history
    messages kept as they were (the newest), ``summarized`` folded into a summary note, ``retrieved`` (indices into
    the history) quoted in a note."""

    def __init__(self, messages: list[dict[str, Any]], *, verbatim: int, summarized: int = 0,
                 retrieved: tuple[int, ...] = ()) -> None:
        super().__init__(messages)
        self.verbatim, self.summarized, self.retrieved = verbatim, summarized, retrieved


class ContextStrategy(Protocol):
    name: str

    def select(self, history: History, question: str, room: int) -> Selection:
        """History messages (oldest first) to put before the question, about ``room`` tokens at most."""
        ...


@dataclass(slots=True, frozen=True)
class BuiltPrompt:
    text: str
    num_tokens: int
    messages: list[dict[str, str]]
    dropped_messages: int  # history removed by the final fit (0 when the strategy's choice fit)


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


def history_room(counter: TokenCounter, question: str, max_input_tokens: int, max_context_tokens: int | None) -> int:
    """Tokens the history may take beside ``question`` (``client.context.max_context_tokens`` caps it)."""
    free = max_input_tokens - counter.count(question) - QUESTION_MARGIN_TOKENS
    return min(max_context_tokens or max_input_tokens, free)


def fit_prompt(counter: TokenCounter, history: list[dict[str, str]], question: str,
               max_input_tokens: int) -> BuiltPrompt:
    """Render the conversation as the prompt to send; ``num_tokens`` is what the engine will count.

    The whole conversation is rendered by the model's chat template (each turn in its own role, the
    system prompt in place) and sent as a ``RawPrompt`` in the rendered form, so the server does not wrap
    it again; "Role: text" lines where the tokenizer has no template (``TokenCounter.chat_prompt``, the
    rendering the gateway's chat uses). A question too long on its own is cut from its start.
    """
    try:
        return fit_messages(counter, [], history, [{"role": "user", "content": question}], max_input_tokens)
    except InputTooLongError:
        pass
    messages = [{"role": "user", "content": question}]
    while True:
        text = counter.chat_prompt(messages)
        num_tokens = counter.count_prompt(text)
        if num_tokens <= max_input_tokens:
            return BuiltPrompt(text, num_tokens, messages, len(history))
        messages = [{"role": "user", "content": _cut_left(counter, messages[0]["content"],
                                                          num_tokens - max_input_tokens)}]


def fit_messages(counter: TokenCounter, system: list[dict[str, str]], history: list[dict[str, str]],
                 new: list[dict[str, str]], max_input_tokens: int,
                 render: Callable[[list[dict[str, Any]]], str] | None = None) -> BuiltPrompt:
    """``system`` + ``history`` + ``new`` rendered (by ``render``, default the counter's chat template); the oldest
    history dropped until it fits. Raises InputTooLongError when ``system`` and ``new`` alone do not fit (nothing of
    them is cut)."""
    kept = list(history)
    while True:
        messages = [*system, *kept, *new]
        text = render(messages) if render is not None else counter.chat_prompt(messages)
        num_tokens = counter.count_prompt(text)
        if num_tokens <= max_input_tokens:
            return BuiltPrompt(text, num_tokens, messages, len(history) - len(kept))
        if not kept:
            raise InputTooLongError(f"the new input is {num_tokens} tokens with the chat template, over the "
                                    f"input limit of {max_input_tokens}; send a shorter input")
        kept.pop(0)


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


def as_messages(turns: list[Turn]) -> list[dict[str, Any]]:
    return [{"role": t.role, "content": t.content, **(t.extra or {})} for t in turns]
