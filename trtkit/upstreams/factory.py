"""The upstream an address names, and the governed client over it (see the package docstring)."""

from __future__ import annotations

import os
from pathlib import Path

from trtkit.config.schema import ModelConfig
from trtkit.config.upstream_url import Scheme, UpstreamUrl, parse_upstream_url
from trtkit.errors import ConfigError
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.client import AsyncClient, Client
from trtkit.governance.governor import Governor, LedgerChoice, open_governor
from trtkit.governance.metrics import ClientMetrics
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.upstream import AsyncUpstream, Upstream
from trtkit.governance.vocabulary import Caller
from trtkit.transport.blocking import BlockingUpstream
from trtkit.transport.openai.upstream import OpenAIUpstream, UpstreamSettings
from trtkit.transport.triton.aio_upstream import AsyncTritonUpstream
from trtkit.transport.triton.exchange import TritonTarget
from trtkit.transport.triton.grpc_upstream import TritonUpstream

SCHEMES: tuple[Scheme, ...] = ("grpc", "http")  # Triton's gRPC port; an OpenAI-compatible server


def connect(address: str | UpstreamUrl, *, config: ModelConfig | str | os.PathLike[str], caller: Caller | None = None,
            ledger: LedgerChoice = True, counter: TokenCounter | None = None, metrics: ClientMetrics | None = None,
            budgets: BudgetGuard | None = None, model_name: str | None = None) -> Client:
    """The blocking governed client of the server at ``address``, governed by ``config`` (a ModelConfig, or the path
    of its YAML file). ``ledger``: True records each request at ``client.store`` (default: TRTKIT_HOME/usage.db), a
    Ledger records there, False records nothing; ``model_name``: the served model to call (Triton: default
    ``client.model_name``; an OpenAI server: default ``gateway.upstream.model``, else the config's name)."""
    governor = _governor(config, ledger, counter, metrics, budgets)
    return Client(governor, open_upstream(address, governor, model_name=model_name), caller=caller)


def connect_async(address: str | UpstreamUrl, *, config: ModelConfig | str | os.PathLike[str],
                  caller: Caller | None = None, ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                  metrics: ClientMetrics | None = None, budgets: BudgetGuard | None = None,
                  model_name: str | None = None) -> AsyncClient:
    """:func:`connect` for asyncio."""
    governor = _governor(config, ledger, counter, metrics, budgets)
    return AsyncClient(governor, open_async_upstream(address, governor, model_name=model_name), caller=caller)


def open_upstream(address: str | UpstreamUrl, governor: Governor, *, model_name: str | None = None) -> Upstream:
    """The blocking upstream at ``address``, reading token ids with ``governor``'s counter and counting retries and
    early ends in its metrics."""
    url = _parsed(address)
    if url.scheme == "http":
        return BlockingUpstream(openai_upstream(upstream_settings(governor.config, url.address, model=model_name),
                                                governor))
    return TritonUpstream(TritonTarget.of(governor.config, url.address, model_name), governor.counter,
                          governor.upstream_metrics())


def open_async_upstream(address: str | UpstreamUrl, governor: Governor, *, model_name: str | None = None,
                        settings: UpstreamSettings | None = None) -> AsyncUpstream:
    """:func:`open_upstream` for asyncio; ``settings``: an OpenAI server's, where the caller resolved them already
    (the gateway checks the model name against what the server lists)."""
    url = _parsed(address)
    if url.scheme == "http":
        return openai_upstream(settings or upstream_settings(governor.config, url.address, model=model_name), governor)
    return AsyncTritonUpstream(TritonTarget.of(governor.config, url.address, model_name), governor.counter,
                               governor.upstream_metrics())


def openai_upstream(settings: UpstreamSettings, governor: Governor) -> OpenAIUpstream:
    """A library prompt goes up as the governor counted it: one user message where the model's chat template wraps
    it, else a completions prompt."""
    return OpenAIUpstream(settings, chat_wrapped=governor.counter.wraps_in_chat_template,
                          metrics=governor.upstream_metrics())


def upstream_settings(config: ModelConfig, url: str, environ: dict[str, str] | None = None, *,
                      model: str | None = None) -> UpstreamSettings:
    """An OpenAI server's settings from ``gateway.upstream``; its API key read from the variable it names."""
    u = config.gateway.upstream
    api_key = None
    if u.api_key_env:
        api_key = (os.environ if environ is None else environ).get(u.api_key_env)
        if not api_key:
            raise ConfigError(f"gateway.upstream.api_key_env names ${u.api_key_env}, which is not set; export the "
                              f"upstream's API key in it (or remove api_key_env for an upstream without keys)")
    return UpstreamSettings(url, model or u.model or config.name, api_key, u.connect_timeout_seconds,
                            u.read_timeout_seconds, u.pool_size, config.client.max_retries, u.max_event_bytes)


def _parsed(address: str | UpstreamUrl) -> UpstreamUrl:
    return address if isinstance(address, UpstreamUrl) else parse_upstream_url(address, "address", SCHEMES)


def _governor(config: ModelConfig | str | os.PathLike[str], ledger: LedgerChoice, counter: TokenCounter | None,
              metrics: ClientMetrics | None, budgets: BudgetGuard | None) -> Governor:
    if not isinstance(config, ModelConfig):
        from trtkit.config import load_config

        config = load_config(Path(config))
    return open_governor(config, ledger=ledger, counter=counter, metrics=metrics, budgets=budgets)
