"""`trtkit gateway`: put together the governor, its upstream, the store, the ledger and the app, and run uvicorn."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from trtkit.config.gateway_limits import GatewayLimitsSection
from trtkit.config.schema import ModelConfig
from trtkit.errors import ConfigError
from trtkit.gateway.admission import StoreRuleBook, waits_on_network
from trtkit.gateway.alerts import AlertSender, alert_secret
from trtkit.gateway.app import Door, create_app
from trtkit.gateway.generation import ServingParts
from trtkit.gateway.metrics import GatewayMetrics
from trtkit.gateway.telemetry import Telemetry, open_telemetry
from trtkit.gateway.upstreams import (
    GATEWAY_TRITON_MODEL as GATEWAY_TRITON_MODEL,  # the tests' and benches' name
)
from trtkit.gateway.upstreams import backend_of, open_gateway_upstream
from trtkit.governance.budgets import BudgetGuard
from trtkit.governance.client import AsyncClient
from trtkit.governance.governor import open_governor
from trtkit.governance.metrics import ClientMetrics
from trtkit.heap import freeze_startup_heap
from trtkit.store import GatewayStore, StoreUrl, gateway_store_url, ledger_url, open_gateway_store
from trtkit.store.ledger import Ledger, open_ledger

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Gateway:
    app: object  # the FastAPI app
    client: AsyncClient  # the governed client every endpoint runs through (its governor and upstream)
    store: GatewayStore
    alerts: AlertSender | None = None
    telemetry: Telemetry | None = None

    async def aclose(self) -> None:
        await self.client.close()  # commits the ledger
        if self.alerts is not None:
            await asyncio.to_thread(self.alerts.stop)
        if self.telemetry is not None:
            self.telemetry.shutdown()
        self.store.close()


def is_loopback(bind: str) -> bool:
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return bind == "localhost"


def build_gateway(config: ModelConfig, backend: str | None, *, no_auth: bool = False, bind: str | None = None,
                  store: GatewayStore | None = None, ledger: Ledger | None = None,
                  telemetry: Telemetry | None = None) -> Gateway:
    """The app and what it owns. ``backend``: a Triton repository or an OpenAI-compatible server
    (``gateway.upstreams``; None: ``gateway.upstream.url``). ``no_auth`` is refused unless the bind address is
    loopback. ``telemetry``: OpenTelemetry's recorder to use (tests pass in-memory readers); None: one exporting over
    OTLP when ``gateway.telemetry.enabled``, else none at all."""
    bind = bind or config.gateway.bind
    if no_auth and not is_loopback(bind):
        raise ConfigError(f"--no-auth on {bind} would open the model to the network; bind 127.0.0.1 or create "
                          f"keys with `trtkit keys create`")
    upstream = backend_of(config, backend)
    # $TRTKIT_GATEWAY_STORE (the k8s Secret) wins over gateway.store; unset: $TRTKIT_HOME/gateway.db.
    store_url = gateway_store_url(config.gateway.store)
    store = store or open_gateway_store(store_url, lease_seconds=config.gateway.lease_seconds)
    expired = store.release_expired()
    if expired:
        log.warning("released %d budget holds whose lease ran out (a gateway stopped mid-request)", expired)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    in_threads = waits_on_network(store, config.gateway.store_calls)
    alerts_config = config.gateway.alerts
    alerts = None if not alerts_config.webhook_url else AlertSender(
        store.spend_alerts, alerts_config, metrics, secret=alert_secret(alerts_config))
    rulebook = StoreRuleBook(store, list(config.client.budgets), waits_on_network=in_threads,
                             on_settle=None if alerts is None else alerts.saw,
                             alert_at=tuple(t / 100 for t in alerts_config.thresholds),
                             max_concurrent_per_key=config.gateway.limits.max_concurrent_per_key)
    own_ledger = ledger is None
    governor = open_governor(config, ledger=ledger or open_ledger(gateway_ledger_url(config)),
                             metrics=ClientMetrics(registry), budgets=BudgetGuard([], None, rulebook))
    # no max_tokens: all the room the prompt leaves, or at most gateway.default_max_tokens
    governor.default_max_tokens = config.gateway.default_max_tokens
    governor.max_tokens_overflow = config.gateway.max_tokens_overflow
    try:
        plug = open_gateway_upstream(config, upstream, governor)
    except BaseException:
        if own_ledger and governor.ledger is not None:
            governor.ledger.close()
        raise
    if telemetry is None and config.gateway.telemetry.enabled:
        telemetry = open_telemetry(config.gateway.telemetry, upstream)
    ctx = ServingParts(config, governor, plug, rulebook, metrics, telemetry)
    app = create_app(ctx, Door(store, require_auth=not no_auth, max_body_bytes=config.gateway.max_body_bytes,
                                   store_in_threads=in_threads, max_json_depth=config.gateway.limits.max_json_depth,
                                   body_timeout_s=config.gateway.limits.body_timeout_seconds))
    return Gateway(app, ctx.client, store, alerts, telemetry)


def gateway_ledger_url(config: ModelConfig) -> StoreUrl:
    """``client.store`` if set; else a PostgreSQL gateway store holds the ledger too (one database for a
    fleet's governance); else $TRTKIT_HOME/usage.db."""
    if config.client.store:
        return ledger_url(config.client.store)
    store_url = gateway_store_url(config.gateway.store)
    return store_url if store_url.backend == "postgresql" else ledger_url(None)


def free_port(bind: str) -> int:
    with socket.socket() as s:
        s.bind((bind, 0))
        return int(s.getsockname()[1])


def run_gateway(config: ModelConfig, backend: str | None, *, port: int | None = None, bind: str | None = None,
                no_auth: bool = False) -> None:
    """Serve until interrupted."""
    import uvicorn

    bind = bind or config.gateway.bind
    port = config.gateway.port if port is None else port
    port = port or free_port(bind)
    gateway = build_gateway(config, backend, no_auth=no_auth, bind=bind)
    if no_auth:
        log.warning("API keys are OFF (--no-auth): anyone on this machine can use the model")
    upstream = "Triton gRPC" if backend_of(config, backend).scheme == "grpc" else "OpenAI-compatible"
    log.warning("gateway for '%s' on http://%s:%d/v1 -> %s %s", config.name, bind, port, upstream,
                gateway.client.upstream.address)
    uv_config = uvicorn_config(gateway.app, bind, port)
    freeze_startup_heap()  # full collections skip the imports, the app and the tokenizer: no 30-70 ms pauses
    run_in_loop(_serve(uvicorn.Server(uv_config), gateway), uv_config.get_loop_factory())


def uvicorn_config(app: object, bind: str, port: int) -> uvicorn.Config:
    """The one uvicorn setup (the CLI and the live tests share it). The gateway's app carries its
    ``gateway.limits`` (``app.state.limits``): the head of every request is held to them (``http_limits.py``)."""
    import uvicorn

    from trtkit.gateway.http_limits import guarded_protocol

    # keep-alive longer than clients' pools keep idle connections, so a reused connection is not closed
    # under a request in flight (uvicorn's 5 s default races with httpx/openai connection reuse).
    # loop "auto": uvloop when importable; httptools under the gateway's limits: less CPU per request than
    # asyncio + h11 (benchmarks/gateway_overhead.py prints the gateway's CPU per request).
    state = getattr(app, "state", None)
    limits = getattr(state, "limits", None) or GatewayLimitsSection()
    http = guarded_protocol(limits, getattr(state, "on_refused", None))
    return uvicorn.Config(app, host=bind, port=port, log_level="warning", access_log=False,  # type: ignore[arg-type]
                          lifespan="off", timeout_keep_alive=75, loop="auto", http=http)


def run_in_loop(main: Coroutine[Any, Any, None], loop_factory: Callable[[], asyncio.AbstractEventLoop] | None) -> None:
    """asyncio.run on the loop uvicorn picked (uvloop when installed)."""
    if loop_factory is None:
        asyncio.run(main)
        return
    loop = loop_factory()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    finally:
        asyncio.set_event_loop(None)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _serve(server: object, gateway: Gateway) -> None:
    try:
        await server.serve()  # type: ignore[attr-defined]
    finally:
        await gateway.aclose()
