"""Context strategies for multi-turn chat (tail, summary, retrieval): which history a prompt carries, and a
prompt that always fits the input limit. One implementation for both sides: the client's ``Conversation``
(trtkit.conversation) and the gateway's Responses API (``truncation: "auto"``)."""

from __future__ import annotations

from collections.abc import Sequence

from trtkit.config.schema import ContextSection
from trtkit.context.base import (
    BuiltPrompt,
    ChainHistory,
    ContextStrategy,
    History,
    Selection,
    Turn,
    as_messages,
    clip_tokens,
    fit_messages,
    fit_prompt,
    history_room,
)
from trtkit.context.retrieval import RetrievalStrategy
from trtkit.context.summary import Fold, Summarizer, SummaryStrategy
from trtkit.context.tail import TailStrategy
from trtkit.errors import ClientError
from trtkit.governance.tokens import TokenCounter

STRATEGIES = ("tail", "summary", "retrieval")


def make_strategy(name: str, counter: TokenCounter, context: ContextSection, max_input_tokens: int,
                  summarize: Summarizer, documents: Sequence[str] = ()) -> ContextStrategy:
    """The strategy ``name`` with the settings of ``client.context``; ``summarize`` writes summaries."""
    if name == "tail":
        return TailStrategy(counter)
    if name == "summary":
        return SummaryStrategy(counter, context.summary_max_tokens, max_input_tokens, summarize)
    if name == "retrieval":
        return RetrievalStrategy(counter, context.retrieval_top_k, list(documents))
    raise ClientError(f"unknown context strategy {name!r}; use one of {', '.join(STRATEGIES)}")


__all__ = ["BuiltPrompt", "ChainHistory", "ContextStrategy", "Fold", "History", "RetrievalStrategy", "STRATEGIES",
           "Selection", "Summarizer", "SummaryStrategy", "TailStrategy", "Turn", "as_messages", "clip_tokens", "fit_messages",
           "fit_prompt", "history_room", "make_strategy"]
