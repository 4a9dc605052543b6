"""Context strategies for multi-turn chat: tail, summary, retrieval; each prompt fits max_input_tokens."""

from trtkit.client.context.base import BuiltPrompt, ContextStrategy, clip_tokens, fit_prompt
from trtkit.client.context.retrieval import RetrievalStrategy
from trtkit.client.context.summary import Summarizer, SummaryStrategy
from trtkit.client.context.tail import TailStrategy

STRATEGIES = ("tail", "summary", "retrieval")

__all__ = ["BuiltPrompt", "ContextStrategy", "clip_tokens", "fit_prompt", "RetrievalStrategy", "Summarizer",
           "SummaryStrategy", "TailStrategy", "STRATEGIES"]
