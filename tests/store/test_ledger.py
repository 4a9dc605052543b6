"""The usage ledger: exact schema, migrations, file mode, durability under SIGKILL, reports."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from trtkit.store.ledger import Ledger, LedgerRow, default_ledger_path
from trtkit.store.migrations import MIGRATIONS
from trtkit.store.usage_reports import format_report, usage_report

# Declared types portable to PostgreSQL (SQLite reads BIGINT as INTEGER and DOUBLE PRECISION as REAL affinity).
EXPECTED_COLUMNS = [
    ("id", "INTEGER"), ("ts", "DOUBLE PRECISION"), ("model", "TEXT"), ("user", "TEXT"), ("key_id", "TEXT"),
    ("session", "TEXT"), ("request_id", "TEXT"), ("prompt_tokens", "BIGINT"), ("completion_tokens", "BIGINT"),
    ("cached_tokens", "BIGINT"), ("ttft_ms", "DOUBLE PRECISION"), ("latency_ms", "DOUBLE PRECISION"),
    ("finish_reason", "TEXT"), ("cost", "DOUBLE PRECISION"), ("cache_hit", "INTEGER"), ("cached_tokens_unit", "TEXT"),
    ("local_prompt_tokens", "BIGINT"), ("local_completion_tokens", "BIGINT"), ("counted_locally", "INTEGER"),
    ("usage_flags", "TEXT"), ("org", "TEXT"), ("team", "TEXT"), ("project", "TEXT"), ("dialect", "TEXT"),
]


def row(user: str = "alice", session: str = "s1", model: str = "tiny", ts: float | None = None,
        prompt: int = 10, completion: int = 5, cached: int = 0, cost: float = 0.001) -> LedgerRow:
    return LedgerRow(ts or time.time(), model, user, "key-a", session, "rid", prompt, completion, cached, 12.5, 40.0,
                     "length", cost, False)


def test_migrations_create_the_exact_columns_and_are_recorded(isolated_home: Path) -> None:
    Ledger().close()
    db = sqlite3.connect(default_ledger_path())
    columns = [(r[1], r[2]) for r in db.execute("PRAGMA table_info(requests)")]
    assert columns == EXPECTED_COLUMNS
    applied = [r[0] for r in db.execute("SELECT name FROM schema_version ORDER BY version")]
    assert applied == [m.name for m in MIGRATIONS]
    assert applied[:3] == ["m001_create_requests", "m002_report_indexes", "m003_cached_tokens_unit"]
    indexes = {r[1] for r in db.execute("PRAGMA index_list(requests)")}
    assert {"requests_ts", "requests_user_ts", "requests_session", "requests_key_ts"} <= indexes


def test_cached_tokens_are_marked_block_granular(isolated_home: Path) -> None:
    """Issue 11 item 4: the cached-token figure is whole KV blocks; every usage row says so."""
    with Ledger() as ledger:
        ledger.record(row())
        assert ledger.query("SELECT cached_tokens_unit FROM requests") == [("block",)]


def test_reopening_applies_nothing_twice_and_keeps_rows(isolated_home: Path) -> None:
    with Ledger() as ledger:
        ledger.record(row())
    with Ledger() as ledger:
        assert ledger.count() == 1
        assert len(ledger.query("SELECT * FROM schema_version")) == len(MIGRATIONS)


def test_ledger_lives_under_trtkit_home_is_private_and_in_wal_mode(isolated_home: Path) -> None:
    with Ledger() as ledger:
        ledger.record(row())
        assert ledger.path == isolated_home / "usage.db"
        assert ledger.query("PRAGMA journal_mode")[0][0] == "wal"
        assert ledger.query("PRAGMA synchronous")[0][0] == 2  # FULL
        for path in (ledger.path, Path(str(ledger.path) + "-wal")):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_concurrent_records_all_land(isolated_home: Path) -> None:
    with Ledger() as ledger:
        threads = [threading.Thread(target=lambda i=i: [ledger.record(row(user=f"u{i}")) for _ in range(50)])
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ledger.count() == 400
        tokens, cost = ledger.spent("user", "u3", 0.0)
        assert tokens == 50 * 15 and abs(cost - 50 * 0.001) < 1e-12


_WRITER = """
import sys, time
from trtkit.store.ledger import Ledger, LedgerRow
ledger = Ledger()
i = 0
while True:
    ledger.record(LedgerRow(time.time(), "m", "u", "", "", str(i), 1, 1, 0, None, 1.0, "length", 0.0))
    print(i, flush=True)  # printed only after record() returned: the row is committed
    i += 1
"""


def test_sigkill_mid_run_loses_no_committed_row(isolated_home: Path) -> None:
    env = {**os.environ, "TRTKIT_HOME": str(isolated_home)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER], stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    acknowledged = -1
    for line in proc.stdout:
        acknowledged = int(line)
        if acknowledged >= 150:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for line in proc.stdout.read().split():  # acknowledgements already in the pipe before the kill
        acknowledged = int(line)
    with Ledger() as ledger:
        ids = {int(r[0]) for r in ledger.query("SELECT request_id FROM requests")}
    assert set(range(acknowledged + 1)) <= ids


def test_reports_group_and_format(isolated_home: Path) -> None:
    day1 = 1_700_000_000.0  # 2023-11-14 UTC
    with Ledger() as ledger:
        ledger.record_many([row(ts=day1), row(ts=day1 + 60, user="bob", session="s2"),
                            row(ts=day1 + 86_400, model="other", prompt=100, completion=1, cached=64)])
        by_day = usage_report(ledger, "day")
        by_user = usage_report(ledger, "user")
        by_session = usage_report(ledger, "session")
    assert [(r.group, r.requests, r.total_tokens) for r in by_day] == [("2023-11-14", 2, 30), ("2023-11-15", 1, 101)]
    assert [(r.group, r.requests) for r in by_user] == [("alice", 2), ("bob", 1)]
    assert [(r.group, r.prompt_tokens, r.cached_tokens) for r in by_session] == [("s1", 110, 64), ("s2", 10, 0)]
    records = json.loads(format_report(by_day, "json", "day"))
    assert records[0]["day"] == "2023-11-14" and records[1]["cached_tokens"] == 64
    csv_text = format_report(by_day, "csv", "day").splitlines()
    assert csv_text[0].startswith("day,requests,prompt_tokens") and len(csv_text) == 3
    table = format_report(by_day, "table", "day").splitlines()
    assert table[0].split()[:3] == ["day", "requests", "prompt_tokens"] and "2023-11-15" in table[3]


def test_async_records_share_commits_and_all_land(isolated_home: Path) -> None:
    import asyncio

    async def many(ledger: Ledger) -> None:
        await asyncio.gather(*(ledger.arecord([row(user=f"u{i % 4}")]) for i in range(300)))

    with Ledger() as ledger:
        asyncio.run(many(ledger))
        assert ledger.count() == 300
        assert ledger.spent("user", "u1", 0.0)[0] == 75 * 15


def test_closed_ledger_refuses_new_rows(isolated_home: Path) -> None:
    import pytest

    from trtkit.errors import ClientError

    ledger = Ledger()
    ledger.close()
    with pytest.raises(ClientError, match="closed"):
        ledger.record(row())
