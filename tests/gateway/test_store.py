"""The store and the keys CLI without a server: atomic holds under threads, hashed secrets, usage --by key."""

from __future__ import annotations

import threading
import time

from typer.testing import CliRunner

from trtkit.cli.main import app
from trtkit.client.ledger import Ledger, LedgerRow
from trtkit.gateway.keys import key_id_of, secret_matches
from trtkit.gateway.store import BudgetLimit, RateLimit, Refused, SqliteGatewayStore


def test_fifty_threads_never_reserve_past_a_budget(tmp_path) -> None:
    store = SqliteGatewayStore(tmp_path / "gw.db")
    limit = BudgetLimit("key:team", 0.0, 100, None)
    admitted, refused = [], []

    def one() -> None:
        try:
            admitted.append(store.reserve(10, 0.0, [limit], None))
        except Refused:
            refused.append(1)

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 10 and len(refused) == 40
    for hold in admitted:
        store.settle(hold, 7, 0.0)
    assert store.account("key:team", 0.0) == (70, 0, 0.0, 0.0)  # settled to real use, nothing held


def test_a_refused_hold_takes_nothing_and_orphans_are_released(tmp_path) -> None:
    store = SqliteGatewayStore(tmp_path / "gw.db")
    rate = RateLimit("k1", int(time.time() // 60) * 60, 1, None)
    budget = BudgetLimit("key:a", 0.0, 50, None)
    store.reserve(20, 0.0, [budget], rate)
    try:
        store.reserve(20, 0.0, [budget], rate)  # the rate limit refuses: the budget must be untouched
        raise AssertionError("the second request in the minute was admitted")
    except Refused as refused:
        assert refused.what == "requests"
    assert store.account("key:a", 0.0) == (0, 20, 0.0, 0.0)
    restarted = SqliteGatewayStore(tmp_path / "gw.db")  # a new gateway process after a crash
    assert restarted.release_orphans() == 1
    assert restarted.account("key:a", 0.0) == (0, 0, 0.0, 0.0)


def test_keys_cli_prints_the_secret_once_and_stores_only_its_hash(tmp_path) -> None:
    runner = CliRunner()
    db = tmp_path / "gw.db"
    created = runner.invoke(app, ["keys", "create", "--name", "team-a", "--user", "ann", "--budget-tokens", "1000",
                                  "--rpm", "5", "--store", str(db)])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[0]
    key_id = key_id_of(secret)
    assert key_id is not None
    store = SqliteGatewayStore(db)
    key, stored_hash = store.find_key(key_id)  # type: ignore[misc]
    assert key.name == "team-a" and key.budget_tokens == 1000 and secret_matches(secret, stored_hash)
    raw = db.read_bytes() + (db.parent / "gw.db-wal").read_bytes() if (db.parent / "gw.db-wal").exists() \
        else db.read_bytes()
    assert secret.encode() not in raw
    listed = runner.invoke(app, ["keys", "list", "--store", str(db)])
    assert "team-a" in listed.stdout and secret not in listed.stdout
    assert runner.invoke(app, ["keys", "revoke", "team-a", "--store", str(db)]).exit_code == 0
    assert store.find_key(key_id)[0].is_revoked  # type: ignore[index]


def test_usage_by_key_counts_refusals(tmp_path) -> None:
    path = tmp_path / "usage.db"
    with Ledger(path) as ledger:
        now = time.time()
        ledger.record_many([
            LedgerRow(now, "m", "ann", "team-a", "", "r1", 10, 5, 0, 1.0, 2.0, "length", 0.0),
            LedgerRow(now, "m", "ann", "team-a", "", "r2", 0, 0, 0, None, 0.0, "refused:budget", 0.0),
            LedgerRow(now, "m", "bob", "team-b", "", "r3", 3, 1, 0, 1.0, 2.0, "stop", 0.0)])
    result = CliRunner().invoke(app, ["usage", "--by", "key", "--format", "json", "--ledger", str(path)])
    assert result.exit_code == 0, result.output
    import json

    rows = {r["key"]: r for r in json.loads(result.stdout)}
    assert rows["team-a"]["requests"] == 2 and rows["team-a"]["refused"] == 1 and rows["team-a"]["total_tokens"] == 15
    assert rows["team-b"]["refused"] == 0


def test_holds_of_a_live_gateway_process_are_not_released(tmp_path) -> None:
    import subprocess
    import sys

    db = tmp_path / "gw.db"
    script = ("import sys, time; from pathlib import Path; from trtkit.gateway.store import *; "
              "s = SqliteGatewayStore(Path(sys.argv[1])); s.reserve(5, 0.0, [BudgetLimit('key:x', 0.0, 100, None)], "
              "None); print('held', flush=True); time.sleep(60)")
    other = subprocess.Popen([sys.executable, "-c", script, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        assert SqliteGatewayStore(db).release_orphans() == 0  # that gateway still runs
    finally:
        other.kill()
        other.wait()
    assert SqliteGatewayStore(db).release_orphans() == 1  # now it is gone
