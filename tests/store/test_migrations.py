"""SQLite files of every earlier schema migrate in place: rows survive, the new columns work."""

from __future__ import annotations

import sqlite3
import stat
import time
from pathlib import Path

import pytest

from tests.store.legacy_schemas import old_gateway, old_ledger
from trtkit.store import (
    MIGRATIONS,
    BudgetLimit,
    RateLimit,
    Refused,
    holds,
    migrations,
    open_database,
    open_gateway_store,
    parse_store_url,
    schema_version,
)
from trtkit.store.ledger import LedgerRow, open_ledger
from trtkit.store.records import Hold, SlotLimit


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_an_old_ledger_migrates_in_place_and_keeps_its_rows(tmp_path: Path, steps: int) -> None:
    path = tmp_path / "usage.db"
    old_ledger(path, steps, rows=5)
    with open_ledger(path) as ledger:
        assert ledger.count() == 5
        assert ledger.query('SELECT request_id, "user", prompt_tokens, cost, cached_tokens_unit FROM requests '
                            "ORDER BY id")[0] == ("old-0", "u0", 10, 0.25, "block")
        ledger.record(LedgerRow(1_700_000_100.0, "new", "u1", "k", "s", "new-0", 3, 4, 0, None, 9.0, "stop", 0.5))
        assert ledger.count() == 6 and ledger.spent("user", "u1", 0.0) == (2 * 15 + 7, 0.25 * 2 + 0.5)
    db = sqlite3.connect(path)
    assert [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")] == \
        [m.version for m in MIGRATIONS]
    indexes = {r[1] for r in db.execute("PRAGMA index_list(requests)")}
    assert {"requests_ts", "requests_user_ts", "requests_session", "requests_key_ts"} <= indexes
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_old_gateway_file_migrates_and_its_holds_get_leases(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    old_gateway(path)
    store = open_gateway_store(path, lease_seconds=30, keep_leases=False)
    key, secret_hash = store.find_key("abcdef012345")  # type: ignore[misc]
    assert key.name == "team-old" and key.budget_tokens == 500 and key.rpm == 5 and secret_hash == "h4sh"
    assert store.account("key:team-old", 0.0) == (100, 40, 0.0, 0.0)
    # The hold from before leases has expires_at 0: its gateway is gone, any sweep frees it.
    assert store.release_expired() == 1
    assert store.account("key:team-old", 0.0) == (100, 0, 0.0, 0.0)
    hold = store.reserve(50, 0.0, [BudgetLimit("key:team-old", 0.0, 500, None)], None)
    (expires_at,) = sqlite3.connect(path).execute("SELECT expires_at FROM reservations").fetchone()
    assert expires_at > 0 and store.release_expired() == 0
    store.settle(hold, 20, 0.0)
    assert store.account("key:team-old", 0.0) == (120, 0, 0.0, 0.0)
    store.close()


def test_migrating_twice_applies_nothing_twice(store_url: str) -> None:
    from trtkit.store import migrate

    db = open_database(parse_store_url(store_url))
    migrate(db)
    assert migrate(db) == [] and schema_version(db) == MIGRATIONS[-1].version
    db.close()


def test_replicas_starting_together_migrate_once(store_url: str) -> None:
    import threading

    opened, errors = [], []
    start = threading.Barrier(4)

    def open_one() -> None:
        start.wait()
        try:
            opened.append(open_gateway_store(store_url, keep_leases=False))
        except Exception as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(opened) == 4
    db = open_database(parse_store_url(store_url))
    versions = db.read(lambda s: s.execute("SELECT version FROM schema_version ORDER BY version").fetchall())
    assert [v[0] for v in versions] == [m.version for m in MIGRATIONS]
    db.close()
    for store in opened:
        store.close()


def test_a_store_at_version_11_without_10_gets_10_and_12_and_its_admission_takes_the_slot(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store migrated by a build that had migration 11 but not 10 (main before the hardening merge) catches up on
    its next open: migration 10's slots, then 12's admission functions (PostgreSQL), which hold the key's slot, every
    level's rate window and every budget in the one call, and give the slot back in settle's one call."""
    db = open_database(parse_store_url(store_url))
    monkeypatch.setattr(migrations, "MIGRATIONS", tuple(m for m in MIGRATIONS if m.version <= 11 and m.version != 10))
    migrations.migrate(db)
    assert schema_version(db) == 11
    monkeypatch.undo()
    db.close()
    store = open_gateway_store(store_url, keep_leases=False)
    try:
        versions = store.db.read(lambda s: s.execute("SELECT version FROM schema_version ORDER BY version").fetchall())
        assert [v[0] for v in versions] == [m.version for m in MIGRATIONS]
        window = int(time.time() // 60) * 60
        rates = [RateLimit("kid", window, 10, None), RateLimit("team:t", window, 10, None)]
        budgets = [BudgetLimit("key:k", 0.0, 100, None), BudgetLimit("team:t", 0.0, 100, None)]
        hold = store.reserve(5, 0.0, budgets, rates, SlotLimit("kid", 1))
        assert [st["requests"] for st in hold.rate_states] == [1, 1]
        with pytest.raises(Refused) as refused:
            store.reserve(5, 0.0, budgets, rates, SlotLimit("kid", 1))
        assert refused.value.what == "concurrency" and store.account("team:t", 0.0) == (0, 5, 0.0, 0.0)
        store.settle(hold, 3, 0.0)
        slots = store.db.read(lambda s: s.execute("SELECT in_flight FROM key_slots WHERE key_id = 'kid'").fetchone())
        assert slots == (0,) and all(store.account(b.account, 0.0) == (3, 0, 0.0, 0.0) for b in budgets)
    finally:
        store.close()


def test_postgresql_admits_and_settles_a_hold_of_every_kind_in_one_call() -> None:
    """However many levels and whether or not a slot: one statement each way (the prepared call of pg_prepared)."""
    hold = Hold("h", 10, 0.5, [BudgetLimit(a, 0.0, 100, None) for a in ("key:k", "org:o", "project:p", "team:t")],
                [RateLimit(s, 60, 5, 50) for s in ("kid", "org:o", "project:p", "team:t")], slot=SlotLimit("kid", 2))
    assert len(holds.reserve_statements(hold, "me", 1.0, 2.0, "postgresql")) == 1
    assert len(holds.settle_statements(hold, 7, 0.1, "postgresql")) == 1
    assert '"slot": ["kid", 2]' in holds.hold_json(hold) and len(holds.hold_body(hold)["rates"]) == 4
