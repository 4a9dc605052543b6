"""What the gateway governs: a Triton repository trtkit deployed (gRPC, the token path) or any OpenAI-compatible
server (HTTP), chosen by the backend URL (``trtkit.config.upstream_url``). Either way the client's Governor runs the
one governance path; only the upstream under it differs."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from trtkit.config.schema import ModelConfig
from trtkit.config.upstream_url import Scheme, UpstreamUrl, parse_upstream_url
from trtkit.errors import ConfigError
from trtkit.gateway.upstream_model import checked_upstream_model
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.metrics import ClientMetrics
from trtkit.store.ledger import Ledger
from trtkit.transport.openai.upstream import UpstreamSettings
from trtkit.transport.openai_client import AsyncOpenAIUpstreamClient
from trtkit.transport.triton.aio_upstream import AsyncTritonLLMClient
from trtkit.wire.stop_request import ENGINE_MODEL

log = logging.getLogger(__name__)

GatewayClient = AsyncTritonLLMClient | AsyncOpenAIUpstreamClient

# The gateway calls Triton's engine model with the prompt ids it counted (trtkit/transport/triton/token_path.py): no
# tensorrt_llm_bls and preprocessing hops, and it stops requests with the engine's own `stop` request.
GATEWAY_TRITON_MODEL = ENGINE_MODEL


BACKEND_SCHEMES: tuple[Scheme, ...] = ("grpc", "http")  # a Triton repository trtkit deployed; an OpenAI-compatible server


def backend_of(config: ModelConfig, backend: str | None) -> UpstreamUrl:
    """``--backend`` if given, else ``gateway.upstream.url``."""
    if backend:
        return parse_upstream_url(backend, "--backend", BACKEND_SCHEMES)
    if config.gateway.upstream.url:
        return parse_upstream_url(config.gateway.upstream.url, "gateway.upstream.url", BACKEND_SCHEMES)
    raise ConfigError("no backend: give --backend grpc://HOST:PORT (Triton) or http://HOST:PORT/v1 (an OpenAI-compatible "
                      "server), or set gateway.upstream.url in the config")


def upstream_settings(config: ModelConfig, url: str, environ: dict[str, str] | None = None) -> UpstreamSettings:
    """The HTTP upstream's settings from ``gateway.upstream``; its API key read from the variable it names."""
    u = config.gateway.upstream
    api_key = None
    if u.api_key_env:
        api_key = (os.environ if environ is None else environ).get(u.api_key_env)
        if not api_key:
            raise ConfigError(f"gateway.upstream.api_key_env names ${u.api_key_env}, which is not set; export the "
                              f"upstream's API key in it (or remove api_key_env for an upstream without keys)")
    return UpstreamSettings(url, u.model or config.name, api_key, u.connect_timeout_seconds, u.read_timeout_seconds,
                            u.pool_size, config.client.max_retries, u.max_event_bytes)


def open_gateway_client(config: ModelConfig, backend: UpstreamUrl, *, ledger: Ledger, metrics: ClientMetrics,
                        budgets: BudgetGuard) -> GatewayClient:
    if backend.scheme == "http":
        if config.client.input_overflow != "reject":
            raise ConfigError(f"client.input_overflow: {config.client.input_overflow} cuts the prompt, but the gateway "
                              f"passes an OpenAI upstream the messages as given; set it to reject")
        settings = checked_upstream_model(upstream_settings(config, backend.address),
                                          configured=config.gateway.upstream.model is not None)
        log.info("upstream %s, model %s, key %s", settings.url, settings.model,
                 "from $" + str(config.gateway.upstream.api_key_env) if settings.api_key else "none")
        return AsyncOpenAIUpstreamClient(settings, config=config, ledger=ledger, metrics=metrics, budgets=budgets)
    config = replace(config, client=replace(config.client, model_name=GATEWAY_TRITON_MODEL))
    return AsyncTritonLLMClient(backend.address, config=config, ledger=ledger, metrics=metrics, budgets=budgets)
