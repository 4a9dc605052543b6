"""A refused admission must leave the store's pooled PostgreSQL connections usable.

A refusal aborts the admission's pipeline; psycopg had counted the statements of that flight towards
preparing them, but an aborted pipeline parses nothing after the failing statement, so a connection could
later name a prepared statement the server never made ("prepared statement _pg3_N does not exist") and
every admission on it failed with a 500. Seen live in the 3-replica suite after a budget burst.
Admission is now one prepared function call (migration 6), refused by an error in that call: the
connection must stay usable through refusals then too.
"""

from __future__ import annotations

import pytest

from trtkit.store import BudgetLimit, Refused, open_gateway_store


def test_many_refusals_then_admissions_on_one_connection(postgres_db: str) -> None:
    store = open_gateway_store(postgres_db, lease_seconds=60, keep_leases=False)
    try:
        full = [BudgetLimit("key:full", 0.0, 10, None)]
        store.settle(store.reserve(10, 0.0, full, None), 10, 0.0)  # spent: every later hold is refused
        roomy = [BudgetLimit("key:roomy", 0.0, 10**9, None)]
        for _ in range(12):  # past psycopg's prepare threshold (5), refusals and admissions interleaved
            with pytest.raises(Refused):
                store.reserve(10, 0.0, full, None)
            store.settle(store.reserve(10, 0.0, roomy, None), 10, 0.0)
        assert store.account("key:roomy", 0.0) == (120, 0, 0.0, 0.0)
        assert store.reservations() == 0
    finally:
        store.close()
