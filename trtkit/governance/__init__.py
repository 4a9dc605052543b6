"""Governance of one request, whatever carries it: exact token counts, limits, the response cache, budgets
(nested scopes and a rule book), the runaway guard, usage and cost, the ledger row. It imports no transport:
a transport is an upstream that takes a prepared request (its ids, or its text and parameters) and streams
deltas and counts back until it is told to stop (``upstream.py``)."""

from trtkit.governance.budgets import BudgetScope, budget_scope, current_scope
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import RawPrompt, TokenCount, TokenCounter, TokenIdsPrompt
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, StreamChunk, Usage

__all__ = ["BudgetScope", "budget_scope", "current_scope", "Caller", "ClientMetrics", "SamplingParams",
           "GenerationResult", "StreamChunk", "RawPrompt", "TokenCount", "TokenCounter", "TokenIdsPrompt", "Usage"]
