"""The keys and usage CLI without a server: hashed secrets, usage --by key (store contract: tests/store/)."""

from __future__ import annotations

import time

from typer.testing import CliRunner

from trtkit.cli.main import app
from trtkit.gateway.keys import key_id_of, secret_matches
from trtkit.store import open_gateway_store
from trtkit.store.ledger import Ledger, LedgerRow


def test_keys_cli_prints_the_secret_once_and_stores_only_its_hash(tmp_path) -> None:
    runner = CliRunner()
    db = tmp_path / "gw.db"
    created = runner.invoke(app, ["keys", "create", "--name", "team-a", "--user", "ann", "--budget-tokens", "1000",
                                  "--rpm", "5", "--store", str(db)])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[0]
    key_id = key_id_of(secret)
    assert key_id is not None
    store = open_gateway_store(db, keep_leases=False)
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
    result = CliRunner().invoke(app, ["usage", "--by", "key", "--json", "--store", str(path)])
    assert result.exit_code == 0, result.output
    import json

    rows = {r["key"]: r for r in json.loads(result.stdout)}
    assert rows["team-a"]["requests"] == 2 and rows["team-a"]["refused"] == 1 and rows["team-a"]["total_tokens"] == 15
    assert rows["team-b"]["refused"] == 0
