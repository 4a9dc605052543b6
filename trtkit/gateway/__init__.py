"""The OpenAI-compatible gateway: API keys, budgets, rate limits, cache and exact usage at the server boundary.

Routes (app.py) are thin; one serving class per endpoint (serving_chat, serving_completions) holds the
logic; every request goes through the client's Governor (serving.py) with the store-backed RuleBook
(admission.py) as its budget rules. Request models in protocol.py, responses from the openai package's
types in responses.py.
"""

from trtkit.gateway.server import Gateway, build_gateway, run_gateway

__all__ = ["Gateway", "build_gateway", "run_gateway"]
