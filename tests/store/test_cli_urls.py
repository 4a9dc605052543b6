"""`trtkit keys ...` and `trtkit usage` against either store URL."""

from __future__ import annotations

import json
import time

from typer.testing import CliRunner

from trtkit.cli.main import app
from trtkit.gateway.keys import key_id_of, secret_matches
from trtkit.store import open_gateway_store
from trtkit.store.ledger import LedgerRow, open_ledger


def test_keys_and_usage_commands_work_on_the_url(store_url: str) -> None:
    runner = CliRunner()
    created = runner.invoke(app, ["keys", "create", "--name", "team-a", "--budget-tokens", "1000", "--store", store_url])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[0]
    store = open_gateway_store(store_url, keep_leases=False)
    key, stored_hash = store.find_key(key_id_of(secret) or "")  # type: ignore[misc]
    assert key.budget_tokens == 1000 and secret_matches(secret, stored_hash)
    listed = runner.invoke(app, ["keys", "list", "--json", "--store", store_url])
    assert [k["name"] for k in json.loads(listed.stdout)] == ["team-a"] and secret not in listed.stdout
    assert runner.invoke(app, ["keys", "revoke", "team-a", "--store", store_url]).exit_code == 0
    assert store.find_key(key.key_id)[0].is_revoked  # type: ignore[index]
    store.close()
    with open_ledger(store_url) as ledger:
        ledger.record(LedgerRow(time.time(), "m", "ann", "team-a", "", "r1", 10, 5, 0, 1.0, 2.0, "length", 0.0))
    report = runner.invoke(app, ["usage", "--by", "key", "--json", "--store", store_url])
    assert report.exit_code == 0, report.output
    (row,) = json.loads(report.stdout)
    assert row["key"] == "team-a" and row["requests"] == 1 and row["total_tokens"] == 15


def test_a_bad_url_names_the_option_and_the_fix() -> None:
    from trtkit.errors import ConfigError

    for argv in (["keys", "list", "--store", "mongodb://x/y"], ["usage", "--store", "sqlite://"]):
        result = CliRunner().invoke(app, argv)
        assert isinstance(result.exception, ConfigError), result.output
        assert str(result.exception).startswith(argv[-2] + ": ") and "sqlite:///PATH" in str(result.exception)
