"""The store outlives its database: PostgreSQL stopped -> StoreUnavailable (nothing admitted), started ->
the same store objects work again; committed ledger rows survive a crash; a replica killed with kill -9
strands no hold beyond its lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from trtkit.errors import StoreUnavailable
from trtkit.store import BudgetLimit, open_gateway_store
from trtkit.store.ledger import LedgerRow, open_ledger

BUDGET = [BudgetLimit("key:outage", 0.0, 1000, None)]


def _row(i: int) -> LedgerRow:
    return LedgerRow(time.time(), "tiny", "ann", "k", "", f"r{i}", 1, 1, 0, None, 1.0, "length", 0.0)


def test_database_down_refuses_and_back_recovers_by_itself(postgres_cluster, postgres_db: str) -> None:
    store = open_gateway_store(postgres_db, lease_seconds=30)
    ledger = open_ledger(postgres_db)
    try:
        hold = store.reserve(10, 0.0, BUDGET, None)
        ledger.record_many([_row(i) for i in range(50)])  # committed: must survive the crash below
        postgres_cluster.stop(mode="immediate")  # a crash: no checkpoint, recovery on start
        with pytest.raises(StoreUnavailable, match="unreachable"):
            store.reserve(10, 0.0, BUDGET, None)
        store.settle(hold, 5, 0.0)  # the request is done: its settle waits for the database, it does not fail
        late = threading.Thread(target=ledger.record, args=(_row(50),))  # waits out the outage, then lands
        late.start()
        postgres_cluster.start()
        late.join(timeout=60)
        assert not late.is_alive()
        again = store.reserve(10, 0.0, BUDGET, None)  # the same store object, reconnected
        store.settle(again, 10, 0.0)
        assert store.retry_settles() == 0  # the deferred settle landed once
        assert store.account("key:outage", 0.0) == (15, 0, 0.0, 0.0) and store.reservations() == 0
        assert ledger.count() == 51
        assert len({r[0] for r in ledger.query("SELECT request_id FROM requests")}) == 51
    finally:
        postgres_cluster.start()
        store.close()
        ledger.close()


_REPLICA = """
import sys, time
from trtkit.store import BudgetLimit, open_gateway_store
store = open_gateway_store(sys.argv[1], lease_seconds=1.0)
for _ in range(3):
    store.reserve(10, 0.0, [BudgetLimit("key:outage", 0.0, 1000, None)], None)
print("held", flush=True)
time.sleep(120)
"""


def test_a_replica_killed_with_kill_9_strands_no_hold(store_url: str) -> None:
    survivor = open_gateway_store(store_url, lease_seconds=1.0)  # its keeper sweeps every 1/3 s
    replica = subprocess.Popen([sys.executable, "-c", _REPLICA, store_url], stdout=subprocess.PIPE, text=True)
    try:
        assert replica.stdout is not None and replica.stdout.readline().strip() == "held"
        os.kill(replica.pid, signal.SIGKILL)
        replica.wait()
        deadline = time.monotonic() + 60
        while survivor.account("key:outage", 0.0) != (0, 0, 0.0, 0.0) or survivor.reservations():
            assert time.monotonic() < deadline, survivor.account("key:outage", 0.0)
            time.sleep(0.1)
    finally:
        if replica.poll() is None:
            replica.kill()
            replica.wait()
        survivor.close()
