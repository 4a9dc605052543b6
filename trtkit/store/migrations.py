"""The one schema history of the store, for SQLite and PostgreSQL alike; ``schema_version`` records it.

Every database gets every table (a SQLite ledger file carries empty gateway tables and vice versa),
so one URL may serve both the gateway and the ledger. Never edit a released migration: append one.
``{id_pk}`` is the only dialect word (an auto-numbered row id); types are BIGINT / DOUBLE PRECISION,
which SQLite reads as INTEGER / REAL affinity.

Files written before this list existed migrate in place: a ledger recorded its steps in
``_migrations`` (names m001..m003, kept as versions 1..3 here); a gateway file had no history and its
tables match version 4 (``IF NOT EXISTS`` adopts them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from trtkit.errors import StoreNotFound
from trtkit.store import pg_admission
from trtkit.store.db import Database, Session

log = logging.getLogger(__name__)

_KEY_COLUMNS = ('key_id, name, secret_hash, "user", budget_tokens, budget_cost, period, rpm, tpm, models, '
                'created_at, revoked_at, can_budget_conversations')
_MIGRATION_LOCK_ID = 7_400_113  # pg_advisory_xact_lock key: replicas starting together migrate one at a time


@dataclass(slots=True, frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    dialects: tuple[str, ...] = ("sqlite", "postgresql")  # elsewhere the version is recorded, nothing run


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "m001_create_requests", ("""
        CREATE TABLE requests (
            id {id_pk},
            ts DOUBLE PRECISION NOT NULL,
            model TEXT NOT NULL,
            "user" TEXT NOT NULL DEFAULT '',
            key_id TEXT NOT NULL DEFAULT '',
            session TEXT NOT NULL DEFAULT '',
            request_id TEXT NOT NULL DEFAULT '',
            prompt_tokens BIGINT NOT NULL,
            completion_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL DEFAULT 0,
            ttft_ms DOUBLE PRECISION,
            latency_ms DOUBLE PRECISION NOT NULL,
            finish_reason TEXT NOT NULL,
            cost DOUBLE PRECISION NOT NULL DEFAULT 0,
            cache_hit INTEGER NOT NULL DEFAULT 0
        )""",)),
    Migration(2, "m002_report_indexes", (
        "CREATE INDEX requests_ts ON requests (ts)",
        'CREATE INDEX requests_user_ts ON requests ("user", ts)',
        "CREATE INDEX requests_session ON requests (session)")),
    # cached_tokens come from whole reused KV blocks: a block-granular figure, clamped to the prompt.
    Migration(3, "m003_cached_tokens_unit", (
        "ALTER TABLE requests ADD COLUMN cached_tokens_unit TEXT NOT NULL DEFAULT 'block'",)),
    Migration(4, "m004_gateway_tables", (
        """CREATE TABLE IF NOT EXISTS api_keys (
            key_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, secret_hash TEXT NOT NULL, "user" TEXT NOT NULL,
            budget_tokens BIGINT, budget_cost DOUBLE PRECISION, period TEXT NOT NULL, rpm BIGINT, tpm BIGINT,
            models TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION)""",
        """CREATE TABLE IF NOT EXISTS budget_accounts (
            account TEXT NOT NULL, period_start DOUBLE PRECISION NOT NULL, max_tokens BIGINT,
            max_cost DOUBLE PRECISION, reserved_tokens BIGINT NOT NULL DEFAULT 0,
            reserved_cost DOUBLE PRECISION NOT NULL DEFAULT 0, used_tokens BIGINT NOT NULL DEFAULT 0,
            used_cost DOUBLE PRECISION NOT NULL DEFAULT 0, PRIMARY KEY (account, period_start))""",
        """CREATE TABLE IF NOT EXISTS rate_windows (
            key_id TEXT NOT NULL, window_start BIGINT NOT NULL, requests BIGINT NOT NULL DEFAULT 0,
            tokens BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (key_id, window_start))""",
        """CREATE TABLE IF NOT EXISTS reservations (
            id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL)""")),
    # Leases: a hold is freed by any replica once expires_at passes unrenewed (0 for holds made before
    # leases existed: their gateway is gone after the upgrade, so they are free at once).
    Migration(5, "m005_reservation_leases", (
        "ALTER TABLE reservations ADD COLUMN expires_at DOUBLE PRECISION NOT NULL DEFAULT 0",
        "CREATE INDEX reservations_expires ON reservations (expires_at)",
        "CREATE INDEX requests_key_ts ON requests (key_id, ts)")),
    # PostgreSQL runs admission and settle as one function call each: one statement for the client to send
    # and plans the server keeps, instead of three and four statements parsed per call. They do what the
    # statements of ``holds.reserve_statements`` / ``holds.settle_statements`` do on SQLite, in the same lock
    # order, with the same division-by-zero guard; the store's contract tests run on both backends. The hold
    # arrives as its reservation body (``holds.hold_body``: JSON, which the row keeps anyway), so the client
    # sends a few text parameters instead of arrays.
    Migration(6, "m006_pg_admission_functions", ("""
        CREATE OR REPLACE FUNCTION trtkit_reserve(p_id TEXT, p_owner TEXT, p_now DOUBLE PRECISION,
                                                  p_expires DOUBLE PRECISION, p_body TEXT,
                                                  OUT out_requests BIGINT, OUT out_tokens BIGINT)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            hold JSONB := p_body::JSONB;
            rate JSONB := hold->'rate';
            need_tokens BIGINT := (hold->>'tokens')::BIGINT;
            need_cost DOUBLE PRECISION := (hold->>'cost')::DOUBLE PRECISION;
            budget JSONB;
        BEGIN
            IF jsonb_typeof(rate) = 'array' THEN
                INSERT INTO rate_windows AS w (key_id, window_start, requests, tokens)
                VALUES (rate->>0, (rate->>1)::BIGINT, 1, need_tokens)
                ON CONFLICT (key_id, window_start) DO UPDATE SET
                    requests = w.requests + 1 / (CASE WHEN (rate->>2 IS NULL OR w.requests + 1 <= (rate->>2)::BIGINT)
                        AND (rate->>3 IS NULL OR w.tokens + excluded.tokens <= (rate->>3)::BIGINT) THEN 1 ELSE 0 END),
                    tokens = w.tokens + excluded.tokens
                RETURNING w.requests, w.tokens INTO out_requests, out_tokens;
            END IF;
            FOR budget IN SELECT value FROM jsonb_array_elements(hold->'budgets') LOOP
                INSERT INTO budget_accounts AS b (account, period_start, max_tokens, max_cost, reserved_tokens,
                                                  reserved_cost)
                VALUES (budget->>0, (budget->>1)::DOUBLE PRECISION, (budget->>2)::BIGINT,
                        (budget->>3)::DOUBLE PRECISION, need_tokens, need_cost)
                ON CONFLICT (account, period_start) DO UPDATE SET
                    reserved_tokens = b.reserved_tokens + excluded.reserved_tokens / (CASE WHEN
                        (excluded.max_tokens IS NULL
                         OR b.used_tokens + b.reserved_tokens + excluded.reserved_tokens <= excluded.max_tokens)
                        AND (excluded.max_cost IS NULL
                         OR b.used_cost + b.reserved_cost + excluded.reserved_cost <= excluded.max_cost)
                        THEN 1 ELSE 0 END),
                    reserved_cost = b.reserved_cost + excluded.reserved_cost,
                    max_tokens = excluded.max_tokens, max_cost = excluded.max_cost;
            END LOOP;
            INSERT INTO reservations (id, owner, created_at, expires_at, body)
            VALUES (p_id, p_owner, p_now, p_expires, p_body);
        END
        $fn$""", """
        CREATE OR REPLACE FUNCTION trtkit_settle(p_id TEXT, p_body TEXT, p_used_tokens BIGINT,
                                                 p_used_cost DOUBLE PRECISION) RETURNS INTEGER
        LANGUAGE plpgsql AS $fn$
        DECLARE
            hold JSONB := p_body::JSONB;
            rate JSONB := hold->'rate';
            back_tokens BIGINT := 0;
            back_cost DOUBLE PRECISION := 0;
            budget JSONB;
            deleted INTEGER;
        BEGIN
            PERFORM 1 FROM reservations WHERE id = p_id FOR UPDATE;
            IF FOUND THEN
                back_tokens := (hold->>'tokens')::BIGINT;
                back_cost := (hold->>'cost')::DOUBLE PRECISION;
            END IF;
            IF jsonb_typeof(rate) = 'array' THEN
                UPDATE rate_windows SET tokens = tokens - back_tokens + p_used_tokens
                WHERE key_id = rate->>0 AND window_start = (rate->>1)::BIGINT;
            END IF;
            FOR budget IN SELECT value FROM jsonb_array_elements(hold->'budgets') LOOP
                UPDATE budget_accounts SET reserved_tokens = reserved_tokens - back_tokens,
                    reserved_cost = reserved_cost - back_cost, used_tokens = used_tokens + p_used_tokens,
                    used_cost = used_cost + p_used_cost
                WHERE account = budget->>0 AND period_start = (budget->>1)::DOUBLE PRECISION;
            END LOOP;
            DELETE FROM reservations WHERE id = p_id;
            GET DIAGNOSTICS deleted = ROW_COUNT;
            RETURN deleted;
        END
        $fn$""",), dialects=("postgresql",)),
    # Stored conversations (the Responses API): a conversation is a leased row like a hold (``leases.py``:
    # ``expires_at`` = last touch + its TTL, swept by any replica); its responses each hold what they added to the
    # chain (``messages``, JSON), the summary state their context ended with, and their body as answered; an expired
    # conversation's responses leave tombstones (``expired_responses``, leased too) that say so. A key may be
    # allowed to give a conversation its own token budget (``metadata.trtkit_budget_tokens``).
    Migration(7, "m007_stored_conversations", (
        """CREATE TABLE IF NOT EXISTS conversations (
            id TEXT PRIMARY KEY, key_id TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL, ttl_seconds DOUBLE PRECISION NOT NULL, budget_tokens BIGINT)""",
        "CREATE INDEX conversations_expires ON conversations (expires_at)",
        """CREATE TABLE IF NOT EXISTS stored_responses (
            id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, key_id TEXT NOT NULL, previous_id TEXT,
            created_at DOUBLE PRECISION NOT NULL, messages TEXT NOT NULL, summary TEXT NOT NULL,
            summarized_turns BIGINT NOT NULL, body TEXT NOT NULL)""",
        "CREATE INDEX stored_responses_conversation ON stored_responses (conversation_id)",
        """CREATE TABLE IF NOT EXISTS expired_responses (
            id TEXT PRIMARY KEY, key_id TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX expired_responses_expires ON expired_responses (expires_at)",
        "ALTER TABLE api_keys ADD COLUMN can_budget_conversations INTEGER NOT NULL DEFAULT 0")),
    # A key name is unique among active keys only, so a revoked name can be given to a new key (rotating a
    # secret keeps the tenant: ledger rows and budget accounts are by name); revoked rows stay as history.
    # Neither database drops an inline UNIQUE in place portably, so the table is rebuilt.
    Migration(8, "m008_key_names_unique_while_active", (
        """CREATE TABLE api_keys_m008 (
            key_id TEXT PRIMARY KEY, name TEXT NOT NULL, secret_hash TEXT NOT NULL, "user" TEXT NOT NULL,
            budget_tokens BIGINT, budget_cost DOUBLE PRECISION, period TEXT NOT NULL, rpm BIGINT, tpm BIGINT,
            models TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION,
            can_budget_conversations INTEGER NOT NULL DEFAULT 0)""",
        f"INSERT INTO api_keys_m008 ({_KEY_COLUMNS}) SELECT {_KEY_COLUMNS} FROM api_keys",
        "DROP TABLE api_keys",
        "ALTER TABLE api_keys_m008 RENAME TO api_keys",
        "CREATE UNIQUE INDEX api_keys_active_name ON api_keys (name) WHERE revoked_at IS NULL")),
    # An upstream that reports its own usage (an OpenAI-compatible server): the row bills its count and keeps the
    # gateway's own beside it; counted_locally marks a bill made of the text received (the upstream sent none).
    Migration(9, "m009_upstream_usage_columns", (
        "ALTER TABLE requests ADD COLUMN local_prompt_tokens BIGINT",
        "ALTER TABLE requests ADD COLUMN local_completion_tokens BIGINT",
        "ALTER TABLE requests ADD COLUMN counted_locally INTEGER NOT NULL DEFAULT 0")),
    # Hardening (docs/hardening.md): a bill the governor corrected names how (``usage_flags``: overrun,
    # usage_doubtful, usage_clamped); a key may cap its requests in flight (``max_concurrent``), counted per key in
    # ``key_slots`` by the same admission transaction as its budgets, so the cap is exact across replicas.
    Migration(10, "m010_hardening", (
        "ALTER TABLE requests ADD COLUMN usage_flags TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE api_keys ADD COLUMN max_concurrent BIGINT",
        """CREATE TABLE IF NOT EXISTS key_slots (
            key_id TEXT PRIMARY KEY, in_flight BIGINT NOT NULL DEFAULT 0)""")),
    # The organisation -> team -> project -> key hierarchy (``hierarchy.py``): one table for the three levels above
    # the keys, each with its limits; a key names its project. The ledger names every level a request was admitted
    # under (what it was then: a project moved later keeps its history where it was spent). Spend alerts are an
    # outbox: one row per (account, period, threshold), inserted by whichever replica sees the threshold passed first
    # (the unique key decides: exactly one alert), drained by any replica's sender (``spend_alerts.py``).
    Migration(11, "m011_governance_hierarchy", (
        """CREATE TABLE IF NOT EXISTS scopes (
            level TEXT NOT NULL, name TEXT NOT NULL, parent TEXT, budget_tokens BIGINT, budget_cost DOUBLE PRECISION,
            period TEXT NOT NULL, rpm BIGINT, tpm BIGINT, models TEXT NOT NULL, alert_at TEXT NOT NULL,
            prices TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (level, name))""",
        "CREATE INDEX scopes_parent ON scopes (level, parent)",
        "ALTER TABLE api_keys ADD COLUMN project TEXT",
        "ALTER TABLE api_keys ADD COLUMN alert_at TEXT NOT NULL DEFAULT '[]'",
        "ALTER TABLE requests ADD COLUMN org TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE requests ADD COLUMN team TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE requests ADD COLUMN project TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE IF NOT EXISTS spend_alerts (
            id TEXT PRIMARY KEY, account TEXT NOT NULL, period_start DOUBLE PRECISION NOT NULL,
            threshold DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
            attempts BIGINT NOT NULL DEFAULT 0, next_attempt_at DOUBLE PRECISION NOT NULL,
            claimed_until DOUBLE PRECISION NOT NULL DEFAULT 0, sent_at DOUBLE PRECISION, last_error TEXT,
            UNIQUE (account, period_start, threshold))""",
        "CREATE INDEX spend_alerts_due ON spend_alerts (sent_at, next_attempt_at)")),
    # PostgreSQL's admission and settle (``pg_admission.py``), one call each whatever a hold holds: the key's slot
    # (migration 10), the rate windows of the key and of each level above it, one (requests, tokens) row answered per
    # window (migration 11), the budgets. Holds made before read as one window (``rate``) and no slot.
    Migration(12, "m012_pg_admission_levels_and_slots", pg_admission.MIGRATION_STATEMENTS, dialects=("postgresql",)),
    # The Conversations API: a conversation made by POST /v1/conversations has ``metadata`` (a chain's has none) and
    # its items in order (``conversation_items``: the position comes from the row's ``next_position``, taken by an
    # UPDATE so that concurrent appends queue on the row); a ledger row names the API dialect it was asked in.
    Migration(13, "m013_conversation_items_and_dialect", (
        "ALTER TABLE conversations ADD COLUMN metadata TEXT",
        "ALTER TABLE conversations ADD COLUMN next_position BIGINT NOT NULL DEFAULT 0",
        """CREATE TABLE IF NOT EXISTS conversation_items (
            conversation_id TEXT NOT NULL, position BIGINT NOT NULL, id TEXT NOT NULL, key_id TEXT NOT NULL,
            response_id TEXT, item TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (conversation_id, position))""",
        "CREATE INDEX conversation_items_id ON conversation_items (conversation_id, id)",
        "ALTER TABLE requests ADD COLUMN dialect TEXT NOT NULL DEFAULT 'openai'")),
)

_LEGACY_LEDGER_NAMES = {m.name: m.version for m in MIGRATIONS[:3]}


def migrate(db: Database, *, create: bool = True) -> list[str]:
    """Apply the migrations not yet recorded, all in one transaction; returns the names applied now.
    ``create=False`` (a command that only reads): a database without trtkit's schema is refused, not set up."""
    if not create and not db.read(lambda s: _table_exists(s, "schema_version")):
        raise StoreNotFound(f"{db.url.redacted()} holds no trtkit store (no schema_version table); check the URL "
                            f"(a command that only reads a store never creates one)")
    return db.transact(_migrate)


def check_readable(db: Database) -> int:
    """For a command that only reads: the store holds trtkit's schema at this version, and nothing is written
    (no table made, no migration run: an older store is refused, naming how to upgrade it). Returns the version."""
    if not db.read(lambda s: _table_exists(s, "schema_version")):
        raise StoreNotFound(f"{db.url.redacted()} holds no trtkit store (no schema_version table); check the URL "
                            f"(a command that only reads a store never creates one)")
    version = schema_version(db)
    if version < MIGRATIONS[-1].version:
        raise StoreNotFound(f"{db.url.redacted()} holds a trtkit store of schema version {version}, older than this "
                            f"trtkit's {MIGRATIONS[-1].version}; a command that only reads it never upgrades it: run "
                            f"`trtkit gateway` or `trtkit keys create` on it once (they migrate it), then read it")
    return version


def schema_version(db: Database) -> int:
    return int(db.read(lambda s: s.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]))


def _migrate(session: Session) -> list[str]:
    if session.dialect.name == "postgresql":
        session.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_ID})")
    session.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY, name TEXT NOT NULL, "
                    "applied_at DOUBLE PRECISION NOT NULL)")
    done = {int(row[0]) for row in session.execute("SELECT version FROM schema_version").fetchall()}
    if not done:
        done = _adopt_legacy_ledger(session)
    applied = []
    for migration in MIGRATIONS:
        if migration.version in done:
            continue
        for statement in migration.statements if session.dialect.name in migration.dialects else ():
            session.execute(statement.replace("{id_pk}", session.dialect.id_primary_key))
        _record(session, migration)
        applied.append(migration.name)
    if applied:
        log.info("store schema: applied %s", ", ".join(applied))
    return applied


def _adopt_legacy_ledger(session: Session) -> set[int]:
    """A ledger file from before ``schema_version``: its ``_migrations`` names map onto versions 1..3."""
    if not _table_exists(session, "_migrations"):
        return set()
    names = {row[0] for row in session.execute("SELECT name FROM _migrations").fetchall()}
    adopted = set()
    for migration in MIGRATIONS:
        if _LEGACY_LEDGER_NAMES.get(migration.name) is not None and migration.name in names:
            _record(session, migration)
            adopted.add(migration.version)
    return adopted


def _record(session: Session, migration: Migration) -> None:
    session.execute("INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()))


def _table_exists(session: Session, table: str) -> bool:
    if session.dialect.name == "sqlite":
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    else:
        sql = "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?"
    return session.execute(sql, (table,)).fetchone() is not None
