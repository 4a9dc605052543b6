"""A key's requests in flight, capped in the store (issue 44, item 12), on SQLite and PostgreSQL: exact under
concurrent admissions on three replicas, given back by settle and by the sweeper exactly once, never taken by a
refused admission, and one key's cap leaves another key's slots alone."""

from __future__ import annotations

import threading
import time

import pytest

from tests.store.test_gateway_contract import _in_threads
from trtkit.store import BudgetLimit, RateLimit, Refused, open_gateway_store
from trtkit.store.records import SlotLimit


def in_flight(store, key_id: str) -> int:  # type: ignore[no-untyped-def]
    row = store.db.read(lambda s: s.execute("SELECT in_flight FROM key_slots WHERE key_id = ?", (key_id,)).fetchone())
    return 0 if row is None else int(row[0])


def test_concurrent_admissions_on_three_replicas_never_pass_the_cap(store_url: str) -> None:
    replicas = [open_gateway_store(store_url, lease_seconds=60, keep_leases=False) for _ in range(3)]
    slot = SlotLimit("greedy", 5)
    budget = [BudgetLimit("key:greedy", 0.0, 10_000, None)]
    admitted, refused = [], []
    lock = threading.Lock()

    def one(i: int) -> None:
        for _ in range(3):
            try:
                hold = replicas[i % 3].reserve(10, 0.0, budget, None, slot)
                with lock:
                    admitted.append((i % 3, hold))
            except Refused as exc:
                with lock:
                    refused.append(exc)

    _in_threads(12, one)
    assert len(admitted) == 5 and len(refused) == 31
    assert {r.what for r in refused} == {"concurrency"} and all(r.state == (5,) for r in refused)
    assert in_flight(replicas[0], "greedy") == 5
    assert replicas[0].account("key:greedy", 0.0) == (0, 50, 0.0, 0.0)  # refused admissions held nothing
    other = replicas[1].reserve(10, 0.0, [], None, SlotLimit("polite", 5))  # another key is not held up
    replicas[1].settle(other, 1, 0.0)
    replica, hold = admitted.pop()
    replicas[replica].settle(hold, 4, 0.0)
    assert in_flight(replicas[2], "greedy") == 4
    again = replicas[2].reserve(10, 0.0, budget, None, slot)  # the slot given back is taken again
    for replica, hold in admitted + [(2, again)]:
        replicas[replica].settle(hold, 4, 0.0)
    assert in_flight(replicas[0], "greedy") == 0 and replicas[0].reservations() == 0
    for replica in replicas:
        replica.close()


def test_a_dead_replicas_slots_are_freed_once_and_a_late_settle_frees_nothing_more(store_url: str) -> None:
    dead = open_gateway_store(store_url, lease_seconds=30, keep_leases=False)
    sweepers = [open_gateway_store(store_url, keep_leases=False) for _ in range(3)]
    slot = SlotLimit("k", 3)
    holds = [dead.reserve(5, 0.0, [], None, slot) for _ in range(3)]
    with pytest.raises(Refused):
        dead.reserve(5, 0.0, [], None, slot)
    freed: list[int] = []
    _in_threads(3, lambda i: freed.append(sweepers[i].release_expired(now=time.time() + 1000)))
    assert sum(freed) == 3 and in_flight(dead, "k") == 0
    dead.settle(holds[0], 5, 0.0)  # its request finished after all: its slot was given back already
    assert in_flight(dead, "k") == 0
    for store in (dead, *sweepers):
        store.close()


def test_the_rate_window_and_budgets_still_refuse_first_when_they_are_the_limit(store_url: str) -> None:
    store = open_gateway_store(store_url, keep_leases=False)
    rate = RateLimit("r", int(time.time() // 60) * 60, 1, None)
    slot = SlotLimit("r", 10)
    store.reserve(5, 0.0, [], rate, slot)
    with pytest.raises(Refused) as refused:
        store.reserve(5, 0.0, [], rate, slot)
    assert refused.value.what == "requests" and in_flight(store, "r") == 1
    with pytest.raises(Refused) as budget:
        store.reserve(50, 0.0, [BudgetLimit("key:r", 0.0, 10, None)], None, slot)
    assert budget.value.what == "budget" and in_flight(store, "r") == 1
    store.close()
