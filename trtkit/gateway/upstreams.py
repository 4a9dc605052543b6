"""What the gateway governs: a Triton repository trtkit deployed (gRPC, the token path) or any OpenAI-compatible
server (HTTP), chosen by the backend URL (``trtkit.config.upstream_url``) and opened as any client opens it
(``trtkit.upstreams``). Either way the gateway's governor runs the one governance path; only the upstream under it
differs, and it says what it takes in its capabilities."""

from __future__ import annotations

import logging

from trtkit.config.schema import ModelConfig
from trtkit.config.upstream_url import Scheme, UpstreamUrl, parse_upstream_url
from trtkit.errors import ConfigError
from trtkit.gateway.upstream_model import checked_upstream_model
from trtkit.governance.governor import Governor
from trtkit.governance.upstream import AsyncUpstream
from trtkit.upstreams import open_async_upstream, upstream_settings
from trtkit.wire.stop_request import ENGINE_MODEL

log = logging.getLogger(__name__)

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


def open_gateway_upstream(config: ModelConfig, backend: UpstreamUrl, governor: Governor) -> AsyncUpstream:
    """The upstream at ``backend``: Triton's engine model, or an OpenAI-compatible server whose model name was
    checked against what it serves."""
    if backend.scheme == "http":
        if config.client.input_overflow != "reject":
            raise ConfigError(f"client.input_overflow: {config.client.input_overflow} cuts the prompt, but the gateway "
                              f"passes an OpenAI upstream the messages as given; set it to reject")
        settings = checked_upstream_model(upstream_settings(config, backend.address),
                                          configured=config.gateway.upstream.model is not None)
        log.info("upstream %s, model %s, key %s", settings.url, settings.model,
                 "from $" + str(config.gateway.upstream.api_key_env) if settings.api_key else "none")
        return open_async_upstream(backend, governor, settings=settings)
    return open_async_upstream(backend, governor, model_name=GATEWAY_TRITON_MODEL)
