"""The organisation -> team -> project -> key hierarchy and the spend-alert outbox, on SQLite and PostgreSQL alike
(issue 49): every level's budget and rate window held in one transaction, never past a limit under concurrency,
refusals naming the limit, a move that keeps usage, and exactly one alert row per threshold whoever notes it."""

from __future__ import annotations

import threading
import time

import pytest

from trtkit.errors import ClientError
from trtkit.gateway.admission import StoreRuleBook, current_key
from trtkit.gateway.keys import ApiKey, hash_secret, new_secret
from trtkit.governance.vocabulary import Caller
from trtkit.store import BudgetLimit, RateLimit, Refused, open_gateway_store
from trtkit.store.records import Scope


def make_tree(store, *, org: dict | None = None, team: dict | None = None, project: dict | None = None,
              suffix: str = "") -> None:  # type: ignore[no-untyped-def]
    h = store.hierarchy
    h.create(Scope("org", f"acme{suffix}", **(org or {})))
    h.create(Scope("team", f"ml{suffix}", f"acme{suffix}", **(team or {})))
    h.create(Scope("project", f"search{suffix}", f"ml{suffix}", **(project or {})))


def add_key(store, name: str, project: str | None, **limits) -> ApiKey:  # type: ignore[no-untyped-def]
    key_id, secret = new_secret()
    store.add_key(ApiKey(key_id, name, created_at=time.time(), project=project, **limits), hash_secret(secret))
    found = store.find_key(key_id)
    assert found is not None
    return found[0]


def test_find_key_reads_the_chain_nearest_first(store_url: str) -> None:
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        make_tree(store, org={"budget_tokens": 500}, team={"rpm": 7}, project={"models": ("tiny-llama",)})
        key = add_key(store, "k", "search")
        assert [(s.level, s.name) for s in key.chain] == [("project", "search"), ("team", "ml"), ("org", "acme")]
        assert key.chain[2].budget_tokens == 500 and key.chain[1].rpm == 7
        assert key.refuses_model("other") == "project 'search'" and key.refuses_model("tiny-llama") is None
        assert add_key(store, "free", None).chain == ()
        with pytest.raises(ClientError, match="no project 'nowhere'"):
            add_key(store, "lost", "nowhere")
    finally:
        store.close()


def test_every_level_is_held_in_one_admission_and_settled_to_use(store_url: str) -> None:
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        window = int(time.time() // 60) * 60
        budgets = [BudgetLimit(a, 0.0, 1000, None) for a in ("key:k", "project:p", "team:t", "org:o")]
        rates = [RateLimit(s, window, 100, 10_000) for s in ("kid", "project:p", "team:t", "org:o")]
        hold = store.reserve(50, 0.0, budgets, rates)
        assert len(hold.rate_states) == 4 and all(st == {"requests": 1, "tokens": 50} for st in hold.rate_states)
        assert all(store.account(b.account, 0.0) == (0, 50, 0.0, 0.0) for b in budgets)
        store.settle(hold, 30, 0.0)
        assert all(store.account(b.account, 0.0) == (30, 0, 0.0, 0.0) for b in budgets)
        # the org is the tight one: a refusal there leaves every other level untouched
        tight = [*budgets[:3], BudgetLimit("org:o", 0.0, 40, None)]
        with pytest.raises(Refused) as refused:
            store.reserve(20, 0.0, tight, rates)
        assert refused.value.limit.account == "org:o"  # type: ignore[union-attr]
        assert all(store.account(b.account, 0.0) == (30, 0, 0.0, 0.0) for b in budgets[:3])
        # a level's RPM refuses alone
        with pytest.raises(Refused) as by_rate:
            store.reserve(1, 0.0, [], [RateLimit("team:t", window, 1, None)])
        assert by_rate.value.limit.key_id == "team:t" and by_rate.value.what == "requests"  # type: ignore[union-attr]
    finally:
        store.close()


def test_concurrent_keys_of_one_team_on_three_stores_never_pass_the_team(store_url: str) -> None:
    replicas = [open_gateway_store(store_url, keep_leases=False) for _ in range(3)]
    try:
        make_tree(replicas[0], team={"budget_tokens": 1000})
        keys = [add_key(replicas[0], name, "search") for name in ("a", "b")]
        book = [StoreRuleBook(r, []) for r in replicas]
        admitted, refusals = [], []
        lock = threading.Lock()

        def hammer(i: int) -> None:
            key = keys[i % 2]
            token = current_key.set(replicas[i % 3].find_key(key.key_id)[0])  # type: ignore[index]
            try:
                for _ in range(10):
                    try:
                        hold = book[i % 3].reserve(Caller(key_id=key.name), 45, 0.0, "")
                    except Exception as exc:  # noqa: BLE001 - collected and checked below
                        with lock:
                            refusals.append(str(exc))
                        continue
                    book[i % 3].settle(hold, 45, 0.0)
                    with lock:
                        admitted.append(45)
            finally:
                current_key.reset(token)

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(admitted) <= 1000 and len(admitted) == 1000 // 45  # exactly what fits, never one more
        assert refusals and all(r.startswith("team 'ml': budget of 1000 tokens per month") for r in refusals)
        used = replicas[0].db.read(lambda s: s.execute(
            "SELECT used_tokens, reserved_tokens FROM budget_accounts WHERE account = 'team:ml'").fetchall())
        assert [tuple(r) for r in used] == [(sum(admitted), 0)]
    finally:
        for r in replicas:
            r.close()


def test_a_moved_project_keeps_its_usage_and_counts_in_the_new_team(store_url: str) -> None:
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        make_tree(store, project={"budget_tokens": 100}, team={"budget_tokens": 1000})
        store.hierarchy.create(Scope("team", "ads", "acme", budget_tokens=1000))
        key = add_key(store, "k", "search")
        book = StoreRuleBook(store, [])
        token = current_key.set(key)
        try:
            book.settle(book.reserve(Caller(key_id="k"), 80, 0.0, ""), 80, 0.0)
        finally:
            current_key.reset(token)
        store.hierarchy.move_project("search", "ads")
        moved = store.find_key(key.key_id)[0]  # type: ignore[index]
        assert [s.name for s in moved.chain] == ["search", "ads", "acme"]
        token = current_key.set(moved)
        try:
            with pytest.raises(Exception, match="project 'search': budget of 100 tokens per month, 80 used"):
                book.reserve(Caller(key_id="k"), 30, 0.0, "")  # the project's usage went with it
            book.settle(book.reserve(Caller(key_id="k"), 20, 0.0, ""), 20, 0.0)
        finally:
            current_key.reset(token)
        accounts = dict(store.db.read(lambda s: s.execute(
            "SELECT account, used_tokens FROM budget_accounts WHERE account LIKE 'team:%'").fetchall()))
        assert accounts == {"team:ml": 80, "team:ads": 20}  # spent where it ran; from the move on, in the new team
        with pytest.raises(ClientError, match="still has projects: search"):
            store.hierarchy.remove("team", "ads")
    finally:
        store.close()


def test_exactly_one_alert_row_per_threshold_however_many_note_it(store_url: str) -> None:
    replicas = [open_gateway_store(store_url, keep_leases=False) for _ in range(3)]
    try:
        budget = BudgetLimit("team:ml", 0.0, 100, None)
        hold = replicas[0].reserve(85, 0.0, [budget], None)
        replicas[0].settle(hold, 85, 0.0)
        made: list[int] = []
        threads = [threading.Thread(target=lambda r=r: made.append(r.spend_alerts.note(
            [budget], {"team:ml": (0.5, 0.8, 1.0)}))) for r in replicas for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(made) == 2  # 50% and 80% once each; 100% not reached
        claimed = [a for r in replicas for a in r.spend_alerts.claim_due(time.time(), 30)]
        assert len(claimed) == 2  # each claimed by exactly one sender
        assert not replicas[1].spend_alerts.claim_due(time.time(), 30)
        replicas[2].spend_alerts.mark_failed(claimed[0].id, "HTTP 500", time.time() - 1)
        again = replicas[1].spend_alerts.claim_due(time.time(), 30)
        assert [a.id for a in again] == [claimed[0].id] and again[0].attempts == 1
        for alert in [*again, claimed[1]]:
            replicas[0].spend_alerts.mark_sent(alert.id, time.time())
        assert replicas[0].spend_alerts.pending() == 0
    finally:
        for r in replicas:
            r.close()
