"""The gateway's view of the governance store (``trtkit.store``): the interface admission needs.

``open_gateway_store(url, lease_seconds=...)`` gives a ``GatewayStore`` on SQLite (one replica) or
PostgreSQL (a fleet); every budget and rate-limit change is an atomic conditional statement inside one
transaction, and every hold carries a lease. Only ``admission.StoreRuleBook`` calls ``reserve``/``settle``.
"""

from __future__ import annotations

from trtkit.store import (
    DEFAULT_LEASE_SECONDS,
    BudgetLimit,
    GatewayStore,
    Hold,
    RateLimit,
    Refused,
    SqlGatewayStore,
    open_gateway_store,
)

__all__ = ["DEFAULT_LEASE_SECONDS", "BudgetLimit", "GatewayStore", "Hold", "RateLimit", "Refused",
           "SqlGatewayStore", "open_gateway_store"]
