"""The token-governing client: exact usage, a durable ledger, budgets, limits, cache, guards, sessions.

    from trtkit.client import TritonLLMClient, SamplingParams, budget_scope
    with TritonLLMClient("127.0.0.1:8001", config=load_config("model_configs/tiny-llama.yaml")) as client:
        result = client.generate("Hello", SamplingParams(max_tokens=16))
        result.usage.to_openai()
"""

from trtkit.client.aio_client import AsyncTritonLLMClient
from trtkit.client.budgets import BudgetScope, budget_scope, current_scope
from trtkit.client.caller import Caller
from trtkit.client.chat import ChatTurn, Conversation
from trtkit.client.grpc_client import TritonLLMClient
from trtkit.client.ledger import Ledger, LedgerRow, format_report, usage_report
from trtkit.client.metrics import ClientMetrics
from trtkit.client.params import SamplingParams
from trtkit.client.results import GenerationResult, StreamChunk
from trtkit.client.sessions import SessionExpiredError, SessionStore
from trtkit.client.tokens import RawPrompt, TokenCount, TokenCounter, TokenIdsPrompt
from trtkit.client.transport import ServerUnavailableError
from trtkit.client.usage import Usage

__all__ = ["AsyncTritonLLMClient", "BudgetScope", "budget_scope", "current_scope", "Caller", "ChatTurn",
           "Conversation", "TritonLLMClient", "Ledger", "LedgerRow", "format_report", "usage_report", "ClientMetrics",
           "SamplingParams", "GenerationResult", "RawPrompt", "TokenIdsPrompt", "StreamChunk", "SessionExpiredError", "SessionStore", "TokenCount",
           "TokenCounter", "ServerUnavailableError", "Usage"]
