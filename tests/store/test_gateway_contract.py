"""The gateway store's contract on SQLite and PostgreSQL: exact limits under concurrent writers (threads
and several store objects, as replicas are), holds all-or-none, leases renewed and freed exactly once."""

from __future__ import annotations

import threading
import time

import pytest

from trtkit.store import BudgetLimit, RateLimit, Refused, open_gateway_store


def _in_threads(count: int, target) -> None:  # type: ignore[no-untyped-def]
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        target(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_concurrent_reservations_on_three_replicas_never_overshoot(store_url: str) -> None:
    replicas = [open_gateway_store(store_url, lease_seconds=60, keep_leases=False) for _ in range(3)]
    budget = [BudgetLimit("key:team", 0.0, 200, None), BudgetLimit("global:*:day", 0.0, None, 50.0)]
    admitted, refused = [], []
    lock = threading.Lock()

    def one(i: int) -> None:
        for _ in range(6):
            try:
                hold = replicas[i % 3].reserve(10, 1.0, budget, None)
                with lock:
                    admitted.append((i % 3, hold))
            except Refused as exc:
                with lock:
                    refused.append(exc)

    _in_threads(24, one)
    assert len(admitted) == 20 and len(refused) == 24 * 6 - 20  # 200 tokens / 10 per request
    assert replicas[0].account("key:team", 0.0) == (0, 200, 0.0, 20.0)  # every account holds tokens and cost
    assert replicas[0].account("global:*:day", 0.0) == (0, 200, 0.0, 20.0)
    for replica, hold in admitted:
        replicas[replica].settle(hold, 7, 0.5)
    assert replicas[1].account("key:team", 0.0) == (140, 0, 10.0, 0.0)  # settled to real use, nothing held
    assert replicas[1].account("global:*:day", 0.0) == (140, 0, 10.0, 0.0)
    assert replicas[2].reservations() == 0
    for replica in replicas:
        replica.close()


def test_a_refused_hold_takes_nothing(store_url: str) -> None:
    store = open_gateway_store(store_url, keep_leases=False)
    rate = RateLimit("k1", int(time.time() // 60) * 60, 1, None)
    budget = BudgetLimit("key:a", 0.0, 50, None)
    store.reserve(20, 0.0, [budget], rate)
    with pytest.raises(Refused) as refused:
        store.reserve(20, 0.0, [budget], rate)  # the rate limit refuses: the budget must be untouched
    assert refused.value.what == "requests" and refused.value.state == (1, 20)
    with pytest.raises(Refused) as too_big:
        store.reserve(60, 0.0, [budget], None)  # larger than the budget on its own
    assert too_big.value.limit == budget and too_big.value.state == (0, 20, 0.0, 0.0)
    second = BudgetLimit("user:ann:day", 0.0, 15, None)
    with pytest.raises(Refused) as one_short:
        store.reserve(10, 0.0, [budget, second, BudgetLimit("user:ann:day", 0.0, 9, None)], None)
    assert one_short.value.limit == BudgetLimit("user:ann:day", 0.0, 9, None)  # two rules: the tighter holds
    assert store.account("key:a", 0.0) == (0, 20, 0.0, 0.0) and store.reservations() == 1
    store.close()


def test_rate_windows_are_counters_shared_by_replicas(store_url: str) -> None:
    a, b = (open_gateway_store(store_url, keep_leases=False) for _ in range(2))
    window = int(time.time() // 60) * 60
    rate = RateLimit("k-rpm", window, 5, 1000)
    results: list[object] = []
    _in_threads(12, lambda i: results.append(_try((a, b)[i % 2], 10, rate)))
    holds = [r for r in results if not isinstance(r, Refused)]
    assert len(holds) == 5 and all(r.what == "requests" for r in results if isinstance(r, Refused))  # type: ignore[union-attr]
    assert sorted(h.rate_state["requests"] for h in holds) == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    a.settle(holds[0], 4, 0.0)  # type: ignore[arg-type]
    tpm = RateLimit("k-tpm", window, None, 100)
    first = a.reserve(60, 0.0, [], tpm)
    with pytest.raises(Refused) as refused:
        b.reserve(60, 0.0, [], tpm)
    assert refused.value.what == "tokens" and refused.value.state == (1, 60)
    a.settle(first, 20, 0.0)  # TPM counts use once known: 20 of the 60 held
    assert b.reserve(60, 0.0, [], tpm).rate_state == {"requests": 2, "tokens": 80}
    a.close()
    b.close()


def _try(store, tokens: int, rate: RateLimit) -> object:  # type: ignore[no-untyped-def]
    try:
        return store.reserve(tokens, 0.0, [], rate)
    except Refused as exc:
        return exc


def test_leases_are_renewed_and_expired_holds_freed_exactly_once(store_url: str) -> None:
    dead = open_gateway_store(store_url, lease_seconds=30, keep_leases=False)  # a replica about to die
    live = open_gateway_store(store_url, lease_seconds=30, keep_leases=False)
    budget = [BudgetLimit("key:z", 0.0, 1000, 100.0)]
    rate = RateLimit("kz", int(time.time() // 60) * 60, None, 10_000)
    for _ in range(7):
        dead.reserve(10, 1.0, budget, rate)
    kept = live.reserve(10, 1.0, budget, rate)
    later = time.time() + 100  # beyond every lease taken so far
    time.sleep(0.01)
    assert live.renew() == 1  # only its own in-flight hold ...
    live.lease_seconds = 1000
    assert live.renew() == 1  # ... pushed past `later`
    sweepers = [open_gateway_store(store_url, keep_leases=False) for _ in range(4)]
    freed: list[int] = []
    _in_threads(4, lambda i: freed.append(sweepers[i].release_expired(now=later)))
    assert sum(freed) == 7, freed  # each dead hold freed once, whoever swept
    assert live.account("key:z", 0.0) == (0, 10, 0.0, 1.0)
    live.settle(kept, 3, 0.25)
    assert live.account("key:z", 0.0) == (3, 0, 0.25, 0.0) and live.reservations() == 0
    for store in (dead, live, *sweepers):
        store.close()


def test_a_hold_freed_by_a_sweeper_is_not_freed_again_by_its_late_settle(store_url: str) -> None:
    store = open_gateway_store(store_url, lease_seconds=30, keep_leases=False)
    sweeper = open_gateway_store(store_url, keep_leases=False)  # another replica, which saw the lease run out
    hold = store.reserve(10, 0.0, [BudgetLimit("key:late", 0.0, 100, None)], None)
    assert sweeper.release_expired(now=time.time() + 1000) == 1
    store.settle(hold, 6, 0.0)  # its request finished after all: the use counts, the hold is not given back twice
    assert store.account("key:late", 0.0) == (6, 0, 0.0, 0.0)
    store.close()
    sweeper.close()


def test_a_store_never_sweeps_its_own_in_flight_holds(store_url: str) -> None:
    """However late its renewals, a replica's running request keeps its hold until it settles: a sweep that
    freed it would let the budget admit more than it holds (the sweep is the same thread as the renewal)."""
    store = open_gateway_store(store_url, lease_seconds=30, keep_leases=False)
    other = open_gateway_store(store_url, keep_leases=False)
    budget = [BudgetLimit("key:own", 0.0, 100, None)]
    running = store.reserve(10, 0.0, budget, None)
    ended = store.reserve(10, 0.0, budget, None)
    store._forget(ended)  # a settle whose commit was lost: no longer in flight here, only a lease frees it
    later = time.time() + 1000
    assert store.release_expired(now=later) == 1  # the forgotten one, not the running one
    assert store.account("key:own", 0.0) == (0, 10, 0.0, 0.0)
    assert other.release_expired(now=later) == 1  # a replica that saw this one go silent frees it
    store.settle(running, 7, 0.0)
    assert store.account("key:own", 0.0) == (7, 0, 0.0, 0.0) and store.reservations() == 0
    store.close()
    other.close()


def test_a_renewal_that_waited_for_the_database_writes_a_lease_ahead_of_now(store_url: str) -> None:
    store = open_gateway_store(store_url, lease_seconds=0.5, keep_leases=False)
    hold = store.reserve(10, 0.0, [BudgetLimit("key:slow", 0.0, 100, None)], None)
    transact = store.db.transact

    def after_a_wait(work, **kw):  # type: ignore[no-untyped-def]
        time.sleep(1.0)  # longer than the lease: a queue of commits ahead of the renewal
        return transact(work, **kw)

    store.db.transact = after_a_wait  # type: ignore[method-assign]
    waited_from = time.time()
    assert store.renew() == 1
    store.db.transact = transact  # type: ignore[method-assign]
    assert _expiry(store, hold.id) > waited_from + 1.0
    store.settle(hold, 10, 0.0)
    store.close()


def test_a_renewal_between_an_admissions_commit_and_its_return_covers_the_new_hold(store_url: str) -> None:
    store = open_gateway_store(store_url, lease_seconds=30, keep_leases=False)
    batch = store.db.batch
    renewed: list[int] = []

    def then_a_keeper_tick(statements):  # type: ignore[no-untyped-def]
        results = batch(statements)
        if any("reserv" in sql for sql, _ in statements):
            renewed.append(store.renew())  # the keeper's thread, between the commit and reserve's return
        return results

    store.db.batch = then_a_keeper_tick  # type: ignore[method-assign]
    hold = store.reserve(10, 0.0, [BudgetLimit("key:tick", 0.0, 100, None)], None)
    store.db.batch = batch  # type: ignore[method-assign]
    assert renewed == [1]
    store.settle(hold, 10, 0.0)
    store.close()


def test_the_keeper_renews_in_flight_holds_and_frees_a_dead_replicas(store_url: str) -> None:
    dead = open_gateway_store(store_url, lease_seconds=3, keep_leases=False)
    live = open_gateway_store(store_url, lease_seconds=3)  # its keeper renews and sweeps every second
    budget = [BudgetLimit("key:k", 0.0, 100, None)]
    dead.reserve(10, 0.0, budget, None)
    kept = live.reserve(10, 0.0, budget, None)
    first_expiry = _expiry(live, kept.id)
    _poll(lambda: live.account("key:k", 0.0) == (0, 10, 0.0, 0.0))  # the dead replica's hold is freed ...
    _poll(lambda: _expiry(live, kept.id) > first_expiry)  # ... the live one's lease is pushed ahead
    assert live.reservations() == 1
    live.settle(kept, 10, 0.0)
    assert live.account("key:k", 0.0) == (10, 0, 0.0, 0.0) and live.reservations() == 0
    live.close()
    dead.close()


def _expiry(store, hold_id: str) -> float:  # type: ignore[no-untyped-def]
    return float(store.db.read(lambda s: s.execute("SELECT expires_at FROM reservations WHERE id = ?",
                                                   (hold_id,)).fetchone()[0]))


def _poll(condition, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        time.sleep(0.05)
