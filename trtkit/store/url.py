"""Where the stores are: a URL from the config or the environment, else files under $TRTKIT_HOME."""

from __future__ import annotations

import os

from trtkit.config.paths import trtkit_home
from trtkit.config.store_url import GATEWAY_STORE_ENV, StoreUrl, parse_store_url

GATEWAY_DB_FILENAME = "gateway.db"
LEDGER_DB_FILENAME = "usage.db"
__all__ = ["GATEWAY_STORE_ENV", "StoreUrl", "parse_store_url", "gateway_store_url", "ledger_url",
           "GATEWAY_DB_FILENAME", "LEDGER_DB_FILENAME"]


def gateway_store_url(configured: str | None) -> StoreUrl:
    """$TRTKIT_GATEWAY_STORE (set by the k8s manifests from a Secret) wins over ``gateway.store``;
    neither: $TRTKIT_HOME/gateway.db."""
    env = os.environ.get(GATEWAY_STORE_ENV, "").strip()
    if env:
        return parse_store_url(env, GATEWAY_STORE_ENV)
    if configured:
        return parse_store_url(configured, "gateway.store")
    return StoreUrl("sqlite", trtkit_home(create=False) / GATEWAY_DB_FILENAME, None)


def ledger_url(configured: str | os.PathLike[str] | None, field: str = "client.store") -> StoreUrl:
    """``client.store`` (or `usage --store`); unset: $TRTKIT_HOME/usage.db."""
    if configured:
        return parse_store_url(configured, field)
    return StoreUrl("sqlite", trtkit_home(create=False) / LEDGER_DB_FILENAME, None)
