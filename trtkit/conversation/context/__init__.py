"""Context strategies for multi-turn chat: tail, summary, retrieval; each prompt fits max_input_tokens."""

from trtkit.conversation.context.base import BuiltPrompt, ContextStrategy, clip_tokens, fit_prompt
from trtkit.conversation.context.retrieval import RetrievalStrategy
from trtkit.conversation.context.summary import Summarizer, SummaryStrategy
from trtkit.conversation.context.tail import TailStrategy

STRATEGIES = ("tail", "summary", "retrieval")

__all__ = ["BuiltPrompt", "ContextStrategy", "clip_tokens", "fit_prompt", "RetrievalStrategy", "Summarizer",
           "SummaryStrategy", "TailStrategy", "STRATEGIES"]
