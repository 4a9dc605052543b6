"""The client classes ``trtkit.transport`` exported before the governed client moved into governance (issue 46),
kept for one release so that programs written against them still run; each access warns with the new path.

Each is now a governed client (``trtkit.Client`` / ``trtkit.AsyncClient``) over one of this package's upstreams,
made as ``trtkit.connect`` and ``trtkit.connect_async`` make them, with the old constructors' arguments."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from trtkit.config.schema import ModelConfig
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.client import AsyncClient, Client
from trtkit.governance.governor import LedgerChoice, open_governor
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import Caller
from trtkit.transport.openai.upstream import OpenAIUpstream, UpstreamSettings
from trtkit.transport.triton.aio_upstream import AsyncTritonUpstream
from trtkit.transport.triton.exchange import TritonTarget
from trtkit.transport.triton.grpc_upstream import TritonUpstream
from trtkit.transport.triton.retry import ServerUnavailableError

NEW_PATHS = {
    "TritonLLMClient": "trtkit.connect(address, config=...), a trtkit.Client",
    "AsyncTritonLLMClient": "trtkit.connect_async(address, config=...), a trtkit.AsyncClient",
    "AsyncOpenAIUpstreamClient": "trtkit.connect_async('http://HOST:PORT/v1', config=...), a trtkit.AsyncClient",
    "ServerUnavailableError": "trtkit.ServerUnavailableError",
}


class TritonLLMClient(Client):
    """The blocking governed client over Triton gRPC, with the old constructor."""

    def __init__(self, grpc_url: str, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                 metrics: ClientMetrics | None = None, model_name: str | None = None) -> None:
        governor = open_governor(config, ledger=ledger, counter=counter, metrics=metrics)
        upstream = TritonUpstream(TritonTarget.of(config, grpc_url, model_name), governor.counter,
                                  governor.upstream_metrics())
        super().__init__(governor, upstream, caller=caller)
        self.url = grpc_url

    def active_requests(self) -> list[str]:
        assert isinstance(self.upstream, TritonUpstream)
        return self.upstream.active_requests()


class AsyncTritonLLMClient(AsyncClient):
    """The asyncio governed client over Triton gRPC, with the old constructor."""

    def __init__(self, grpc_url: str, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                 metrics: ClientMetrics | None = None, model_name: str | None = None,
                 budgets: BudgetGuard | None = None) -> None:
        governor = open_governor(config, ledger=ledger, counter=counter, metrics=metrics, budgets=budgets)
        upstream = AsyncTritonUpstream(TritonTarget.of(config, grpc_url, model_name), governor.counter,
                                       governor.upstream_metrics())
        super().__init__(governor, upstream, caller=caller)
        self.url = grpc_url


class AsyncOpenAIUpstreamClient(AsyncClient):
    """The asyncio governed client over an OpenAI-compatible server, with the old constructor."""

    def __init__(self, settings: UpstreamSettings, *, config: ModelConfig, caller: Caller | None = None,
                 ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                 metrics: ClientMetrics | None = None, budgets: BudgetGuard | None = None) -> None:
        governor = open_governor(config, ledger=ledger, counter=counter, metrics=metrics, budgets=budgets)
        upstream = OpenAIUpstream(settings, chat_wrapped=governor.counter.wraps_in_chat_template,
                                  metrics=governor.upstream_metrics())
        super().__init__(governor, upstream, caller=caller)
        self.url = settings.url


_CLASSES: dict[str, Any] = {"TritonLLMClient": TritonLLMClient, "AsyncTritonLLMClient": AsyncTritonLLMClient,
                            "AsyncOpenAIUpstreamClient": AsyncOpenAIUpstreamClient,
                            "ServerUnavailableError": ServerUnavailableError}


def moved(module: str, names: tuple[str, ...]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that hands out ``names`` with a DeprecationWarning naming where each went."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated and goes in the next release; use {NEW_PATHS[name]}",
                      DeprecationWarning, stacklevel=2)
        return _CLASSES[name]

    return __getattr__
