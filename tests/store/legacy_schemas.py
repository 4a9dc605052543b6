"""The SQLite schemas trtkit wrote before the store's one migration list, verbatim (from git history:
trtkit/client/ledger/migrations.py and trtkit/gateway/store.py at bc39544), to build old files in tests."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

LEDGER_STEPS = [
    ("m001_create_requests", ["""
        CREATE TABLE requests (
            id INTEGER PRIMARY KEY,
            ts REAL NOT NULL,
            model TEXT NOT NULL,
            user TEXT NOT NULL DEFAULT '',
            key_id TEXT NOT NULL DEFAULT '',
            session TEXT NOT NULL DEFAULT '',
            request_id TEXT NOT NULL DEFAULT '',
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL DEFAULT 0,
            ttft_ms REAL,
            latency_ms REAL NOT NULL,
            finish_reason TEXT NOT NULL,
            cost REAL NOT NULL DEFAULT 0,
            cache_hit INTEGER NOT NULL DEFAULT 0
        )"""]),
    ("m002_report_indexes", ["CREATE INDEX requests_ts ON requests (ts)",
                             "CREATE INDEX requests_user_ts ON requests (user, ts)",
                             "CREATE INDEX requests_session ON requests (session)"]),
    ("m003_cached_tokens_unit", ["ALTER TABLE requests ADD COLUMN cached_tokens_unit TEXT NOT NULL DEFAULT 'block'"]),
]

GATEWAY_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, secret_hash TEXT NOT NULL, user TEXT NOT NULL,
    budget_tokens INTEGER, budget_cost REAL, period TEXT NOT NULL, rpm INTEGER, tpm INTEGER,
    models TEXT NOT NULL, created_at REAL NOT NULL, revoked_at REAL);
CREATE TABLE IF NOT EXISTS budget_accounts (
    account TEXT NOT NULL, period_start REAL NOT NULL, max_tokens INTEGER, max_cost REAL,
    reserved_tokens INTEGER NOT NULL DEFAULT 0, reserved_cost REAL NOT NULL DEFAULT 0,
    used_tokens INTEGER NOT NULL DEFAULT 0, used_cost REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (account, period_start));
CREATE TABLE IF NOT EXISTS rate_windows (
    key_id TEXT NOT NULL, window_start INTEGER NOT NULL, requests INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key_id, window_start));
CREATE TABLE IF NOT EXISTS reservations (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at REAL NOT NULL, body TEXT NOT NULL);
"""


def old_ledger(path: Path, steps: int, rows: int) -> None:
    """A ledger as version ``steps`` (1..3) of the old code left it, with ``rows`` requests in it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, statements in LEDGER_STEPS[:steps]:
        for sql in statements:
            db.execute(sql)
        db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
    for i in range(rows):
        db.execute("INSERT INTO requests (ts, model, user, key_id, session, request_id, prompt_tokens, "
                   "completion_tokens, cached_tokens, ttft_ms, latency_ms, finish_reason, cost, cache_hit) "
                   "VALUES (?, 'old', ?, 'k', 's', ?, 10, 5, 0, 1.5, 20.0, 'length', 0.25, 0)",
                   (1_700_000_000.0 + i, f"u{i % 2}", f"old-{i}"))
    db.close()


def old_gateway(path: Path) -> None:
    """A gateway.db as the old code left it: one key, a budget with a hold in flight and its reservation."""
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(GATEWAY_SCHEMA)
    db.execute("INSERT INTO api_keys VALUES ('abcdef012345', 'team-old', 'h4sh', 'ann', 500, NULL, 'month', 5, NULL, "
               "'[]', 1.0, NULL)")
    db.execute("INSERT INTO budget_accounts VALUES ('key:team-old', 0.0, 500, NULL, 40, 0.0, 100, 0.0)")
    db.execute("INSERT INTO reservations VALUES ('r-old', 'host:1:x', 1.0, "
               "'{\"tokens\": 40, \"cost\": 0.0, \"budgets\": [[\"key:team-old\", 0.0, 500, null]], \"rate\": null}')")
    db.close()
