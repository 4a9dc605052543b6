"""Numbered schema migrations for the usage ledger; applied ones are recorded in ``_migrations``.

Never edit a released migration: add ``m00N_...`` instead. Each runs in its own transaction.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

Migration = Callable[[sqlite3.Connection], None]


def m001_create_requests(db: sqlite3.Connection) -> None:
    # key_id is the caller's name for an API key (or a hash of it), never the secret itself.
    db.execute("""
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
        )""")


def m002_report_indexes(db: sqlite3.Connection) -> None:
    db.execute("CREATE INDEX requests_ts ON requests (ts)")
    db.execute("CREATE INDEX requests_user_ts ON requests (user, ts)")
    db.execute("CREATE INDEX requests_session ON requests (session)")


def m003_cached_tokens_unit(db: sqlite3.Connection) -> None:
    # cached_tokens come from whole reused KV blocks (kv_cache_reused_blocks x tokens_per_block on GPU, the
    # prefix cache's blocks on CPU): a block-granular figure, clamped to the prompt. Every row says so.
    db.execute("ALTER TABLE requests ADD COLUMN cached_tokens_unit TEXT NOT NULL DEFAULT 'block'")


MIGRATIONS: list[Migration] = [m001_create_requests, m002_report_indexes, m003_cached_tokens_unit]


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet recorded; returns the names applied now."""
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    done = {row[0] for row in db.execute("SELECT name FROM _migrations")}
    applied = []
    for migration in MIGRATIONS:
        if migration.__name__ in done:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            migration(db)
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (migration.__name__, time.time()))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        applied.append(migration.__name__)
    return applied
