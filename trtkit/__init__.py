"""trtkit: Hugging Face model to a production LLM service on NVIDIA GPUs.

The Python API (docs/python-api.md): the governed client over any upstream, its vocabulary, budgets and the ledger.

    import trtkit
    with trtkit.connect("127.0.0.1:8001", config="model_configs/tiny-llama.yaml") as client:
        print(client.generate("Hello", trtkit.SamplingParams(max_tokens=16)).usage)

Each name is imported on first use (module ``__getattr__``), so ``import trtkit`` (and the CLI's start-up) loads
nothing but this file (not even ``typing``: type checkers read the imports under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (mypy reads the name so)
if TYPE_CHECKING:
    from typing import Any

    from trtkit.config import load_config as load_config
    from trtkit.errors import BudgetExceededError as BudgetExceededError
    from trtkit.errors import ClientError as ClientError
    from trtkit.errors import InputTooLongError as InputTooLongError
    from trtkit.errors import TrtkitError as TrtkitError
    from trtkit.governance.budgets import BudgetScope as BudgetScope
    from trtkit.governance.budgets import budget_scope as budget_scope
    from trtkit.governance.client import AsyncClient as AsyncClient
    from trtkit.governance.client import Client as Client
    from trtkit.governance.tokens import RawPrompt as RawPrompt
    from trtkit.governance.tokens import TokenIdsPrompt as TokenIdsPrompt
    from trtkit.governance.upstream import AsyncUpstream as AsyncUpstream
    from trtkit.governance.upstream import Capabilities as Capabilities
    from trtkit.governance.upstream import Upstream as Upstream
    from trtkit.governance.vocabulary import Caller as Caller
    from trtkit.governance.vocabulary import GenerationResult as GenerationResult
    from trtkit.governance.vocabulary import SamplingParams as SamplingParams
    from trtkit.governance.vocabulary import StreamChunk as StreamChunk
    from trtkit.governance.vocabulary import Usage as Usage
    from trtkit.store.ledger import Ledger as Ledger
    from trtkit.store.ledger import open_ledger as open_ledger
    from trtkit.transport.triton.retry import ServerUnavailableError as ServerUnavailableError
    from trtkit.upstreams.factory import connect as connect
    from trtkit.upstreams.factory import connect_async as connect_async

# public name -> the module that defines it
_PUBLIC: dict[str, str] = {
    "connect": "trtkit.upstreams.factory",
    "connect_async": "trtkit.upstreams.factory",
    "Client": "trtkit.governance.client",
    "AsyncClient": "trtkit.governance.client",
    "Upstream": "trtkit.governance.upstream",
    "AsyncUpstream": "trtkit.governance.upstream",
    "Capabilities": "trtkit.governance.upstream",
    "Caller": "trtkit.governance.vocabulary",
    "SamplingParams": "trtkit.governance.vocabulary",
    "Usage": "trtkit.governance.vocabulary",
    "GenerationResult": "trtkit.governance.vocabulary",
    "StreamChunk": "trtkit.governance.vocabulary",
    "RawPrompt": "trtkit.governance.tokens",
    "TokenIdsPrompt": "trtkit.governance.tokens",
    "budget_scope": "trtkit.governance.budgets",
    "BudgetScope": "trtkit.governance.budgets",
    "Ledger": "trtkit.store.ledger",
    "open_ledger": "trtkit.store.ledger",
    "load_config": "trtkit.config",
    "TrtkitError": "trtkit.errors",
    "ClientError": "trtkit.errors",
    "BudgetExceededError": "trtkit.errors",
    "InputTooLongError": "trtkit.errors",
    "ServerUnavailableError": "trtkit.transport.triton.retry",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'trtkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
