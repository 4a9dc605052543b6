"""One governance store, two backends chosen by URL: ``sqlite:///PATH`` (embedded default) or
``postgresql://...`` (one database shared by many gateway replicas).

    store = open_gateway_store("postgresql://u:p@db/trtkit", lease_seconds=30)   # GatewayStore
    ledger = open_ledger("postgresql://u:p@db/trtkit")                            # usage ledger

Modules: ``url`` (parsing, defaults, $TRTKIT_GATEWAY_STORE), ``dialect`` and ``db`` (sqlite3 / psycopg 3,
one placeholder style, transactions, ``StoreUnavailable``), ``migrations`` (the one schema history),
``holds`` (the conditional statements of admission), ``gateway_state`` (the ``GatewayStore``),
``leases`` (renewal and sweeping in the background), ``ledger`` (the usage ledger: one durable row per
request, group commit), ``usage_reports`` (the ledger summed by day, model, user or session).
"""

from __future__ import annotations

import os

from trtkit.store.db import Database, open_database
from trtkit.store.gateway_state import DEFAULT_LEASE_SECONDS, GatewayStore, SqlGatewayStore
from trtkit.store.ledger import Ledger, LedgerRow, open_ledger
from trtkit.store.migrations import MIGRATIONS, migrate, schema_version
from trtkit.store.records import ApiKey, BudgetLimit, Hold, RateLimit, Refused
from trtkit.store.url import GATEWAY_STORE_ENV, StoreUrl, gateway_store_url, ledger_url, parse_store_url
from trtkit.store.usage_reports import format_report, usage_report


def open_gateway_store(url: str | os.PathLike[str] | StoreUrl | None = None, *,
                       lease_seconds: float = DEFAULT_LEASE_SECONDS, keep_leases: bool = True,
                       create: bool = True, read_only: bool = False) -> GatewayStore:
    """The gateway store at ``url`` (None: $TRTKIT_GATEWAY_STORE, else $TRTKIT_HOME/gateway.db), migrated.
    ``keep_leases`` starts the background renewal/sweeping (a gateway wants it; `trtkit keys` does not).
    ``create=False``: a store that does not exist raises ``StoreNotFound`` (`keys revoke`). ``read_only``
    (`keys list`): opened so that nothing in it or around it changes, not even a migration."""
    target = url if isinstance(url, StoreUrl) else (gateway_store_url(None) if url is None
                                                    else parse_store_url(url, "gateway.store"))
    db = open_database(target, fast_commit=not read_only, create=create and not read_only, read_only=read_only)
    return SqlGatewayStore(db, lease_seconds=lease_seconds, keep_leases=keep_leases and not read_only,
                           create=create, read_only=read_only)


__all__ = ["open_gateway_store", "GatewayStore", "SqlGatewayStore", "DEFAULT_LEASE_SECONDS", "Database",
           "open_database", "MIGRATIONS", "migrate", "schema_version", "ApiKey", "BudgetLimit", "Hold", "RateLimit",
           "Refused", "GATEWAY_STORE_ENV", "StoreUrl", "gateway_store_url", "ledger_url", "parse_store_url", "Ledger",
           "LedgerRow", "open_ledger", "format_report", "usage_report"]
