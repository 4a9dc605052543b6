"""The gateway's shared state behind one small interface: keys, budget accounts, rate windows.

``GatewayStore`` is what admission needs; ``SqliteGatewayStore`` implements it for one replica
(a later PostgreSQL store implements the same calls for many). Every budget and rate-limit change
is an atomic conditional UPDATE (``... WHERE used + reserved + need <= limit``) inside one
transaction, so concurrent requests can never reserve past a limit: the database decides, not a
read-then-write in Python. Only ``admission.StoreRuleBook`` calls ``reserve``/``settle``.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from trtkit.client.ledger.store import open_private_file
from trtkit.gateway.keys import ApiKey
from trtkit.paths import trtkit_home

STORE_FILENAME = "gateway.db"

_SCHEMA = """
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


@dataclass(slots=True, frozen=True)
class BudgetLimit:
    account: str  # "key:<name>", "user:<name>", "global"
    period_start: float
    max_tokens: int | None
    max_cost: float | None


@dataclass(slots=True, frozen=True)
class RateLimit:
    key_id: str
    window_start: int  # unix minute start
    rpm: int | None
    tpm: int | None


@dataclass(slots=True)
class Hold:
    """One admitted request's holds; settle() turns them into use."""

    id: str
    tokens: int
    cost: float
    budgets: list[BudgetLimit]
    rate: RateLimit | None
    rate_state: dict[str, int] = field(default_factory=dict)  # requests/tokens used in the window after admission


class Refused(Exception):
    """Internal: a conditional update matched no row. ``limit`` is what refused."""

    def __init__(self, limit: BudgetLimit | RateLimit, what: str, state: tuple) -> None:
        super().__init__(what)
        self.limit, self.what, self.state = limit, what, state


class GatewayStore(Protocol):
    def add_key(self, key: ApiKey, secret_hash: str) -> None: ...
    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None: ...
    def list_keys(self) -> list[ApiKey]: ...
    def revoke_key(self, name_or_id: str) -> bool: ...
    def reserve(self, tokens: int, cost: float, budgets: list[BudgetLimit], rate: RateLimit | None) -> Hold: ...
    def settle(self, hold: Hold, used_tokens: int, used_cost: float) -> None: ...
    def release_orphans(self) -> int: ...
    def close(self) -> None: ...


def default_store_path() -> Path:
    return trtkit_home() / STORE_FILENAME


class SqliteGatewayStore:
    """One replica. Thread-safe (one connection under a lock); other processes (`trtkit keys`) share the
    file through SQLite's own locking."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else default_store_path()
        open_private_file(self.path)
        # host:pid:instance. A hold whose process is gone (or an older store of this process) is orphaned.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        # Holds are transient: the durable record of spending is the ledger. NORMAL skips an fsync per hold.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def add_key(self, key: ApiKey, secret_hash: str) -> None:
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO api_keys VALUES (?,?,?,?,?,?,?,?,?,?,?,NULL)",
                    (key.key_id, key.name, secret_hash, key.user, key.budget_tokens, key.budget_cost, key.period,
                     key.rpm, key.tpm, json.dumps(list(key.models)), key.created_at))
            except sqlite3.IntegrityError as exc:
                from trtkit.errors import ClientError

                raise ClientError(f"a key named '{key.name}' exists; pick another --name or revoke it") from exc

    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        return None if row is None else (_key_of(row), row[2])

    def list_keys(self) -> list[ApiKey]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM api_keys ORDER BY created_at").fetchall()
        return [_key_of(r) for r in rows]

    def revoke_key(self, name_or_id: str) -> bool:
        with self._lock:
            cur = self._db.execute("UPDATE api_keys SET revoked_at = ? WHERE (name = ? OR key_id = ?) "
                                   "AND revoked_at IS NULL", (time.time(), name_or_id, name_or_id))
        return cur.rowcount > 0

    def reserve(self, tokens: int, cost: float, budgets: list[BudgetLimit], rate: RateLimit | None) -> Hold:
        """All holds or none, in one transaction; raises Refused naming the limit that said no."""
        hold = Hold(uuid.uuid4().hex, tokens, cost, budgets, rate)
        with self._lock, _transaction(self._db):
            if rate is not None:
                hold.rate_state = self._take_rate(rate, tokens)
            for limit in budgets:
                self._take_budget(limit, tokens, cost)
            self._db.execute("INSERT INTO reservations VALUES (?,?,?,?)",
                             (hold.id, self.owner, time.time(), json.dumps(_hold_body(hold))))
        return hold

    def _take_rate(self, rate: RateLimit, tokens: int) -> dict[str, int]:
        db = self._db
        db.execute("INSERT OR IGNORE INTO rate_windows (key_id, window_start) VALUES (?, ?)",
                   (rate.key_id, rate.window_start))
        cur = db.execute(
            "UPDATE rate_windows SET requests = requests + 1, tokens = tokens + ? WHERE key_id = ? AND "
            "window_start = ? AND (? IS NULL OR requests + 1 <= ?) AND (? IS NULL OR tokens + ? <= ?)",
            (tokens, rate.key_id, rate.window_start, rate.rpm, rate.rpm, rate.tpm, tokens, rate.tpm))
        used = db.execute("SELECT requests, tokens FROM rate_windows WHERE key_id = ? AND window_start = ?",
                          (rate.key_id, rate.window_start)).fetchone()
        if cur.rowcount == 0:
            what = "requests" if rate.rpm is not None and used[0] + 1 > rate.rpm else "tokens"
            raise Refused(rate, what, tuple(used))
        return {"requests": int(used[0]), "tokens": int(used[1])}

    def _take_budget(self, limit: BudgetLimit, tokens: int, cost: float) -> None:
        db = self._db
        db.execute("INSERT OR IGNORE INTO budget_accounts (account, period_start, max_tokens, max_cost) "
                   "VALUES (?, ?, ?, ?)", (limit.account, limit.period_start, limit.max_tokens, limit.max_cost))
        # Limits are re-applied on every hold: a key's budget edited later takes effect at once.
        cur = db.execute(
            "UPDATE budget_accounts SET reserved_tokens = reserved_tokens + ?, reserved_cost = reserved_cost + ?, "
            "max_tokens = ?, max_cost = ? WHERE account = ? AND period_start = ? "
            "AND (? IS NULL OR used_tokens + reserved_tokens + ? <= ?) "
            "AND (? IS NULL OR used_cost + reserved_cost + ? <= ?)",
            (tokens, cost, limit.max_tokens, limit.max_cost, limit.account, limit.period_start,
             limit.max_tokens, tokens, limit.max_tokens, limit.max_cost, cost, limit.max_cost))
        if cur.rowcount == 0:
            state = db.execute("SELECT used_tokens, reserved_tokens, used_cost, reserved_cost FROM budget_accounts "
                               "WHERE account = ? AND period_start = ?", (limit.account, limit.period_start)).fetchone()
            raise Refused(limit, "budget", tuple(state))

    def settle(self, hold: Hold, used_tokens: int, used_cost: float) -> None:
        with self._lock, _transaction(self._db):
            self._settle(hold.budgets, hold.rate, hold.tokens, hold.cost, used_tokens, used_cost)
            self._db.execute("DELETE FROM reservations WHERE id = ?", (hold.id,))

    def _settle(self, budgets: list[BudgetLimit], rate: RateLimit | None, tokens: int, cost: float,
                used_tokens: int, used_cost: float) -> None:
        for limit in budgets:
            self._db.execute(
                "UPDATE budget_accounts SET reserved_tokens = reserved_tokens - ?, reserved_cost = reserved_cost - ?,"
                " used_tokens = used_tokens + ?, used_cost = used_cost + ? WHERE account = ? AND period_start = ?",
                (tokens, cost, used_tokens, used_cost, limit.account, limit.period_start))
        if rate is not None:  # TPM counts what was used, once known
            self._db.execute("UPDATE rate_windows SET tokens = tokens - ? WHERE key_id = ? AND window_start = ?",
                             (tokens - used_tokens, rate.key_id, rate.window_start))

    def release_orphans(self) -> int:
        """Free the holds of gateways that died mid-request: their process is gone (gateways sharing this
        file run on this host). Their use is unknown here; the ledger has what was billed."""
        with self._lock, _transaction(self._db):
            rows = [(hold_id, body) for hold_id, owner, body in
                    self._db.execute("SELECT id, owner, body FROM reservations WHERE owner != ?", (self.owner,))
                    if _is_orphan(owner)]
            for hold_id, body in rows:
                b = json.loads(body)
                budgets = [BudgetLimit(*limit) for limit in b["budgets"]]
                rate = RateLimit(*b["rate"]) if b["rate"] else None
                self._settle(budgets, rate, b["tokens"], b["cost"], 0, 0.0)
                self._db.execute("DELETE FROM reservations WHERE id = ?", (hold_id,))
        return len(rows)

    def account(self, account: str, period_start: float) -> tuple[int, int, float, float] | None:
        """(used_tokens, reserved_tokens, used_cost, reserved_cost), for reports and tests."""
        with self._lock:
            row = self._db.execute("SELECT used_tokens, reserved_tokens, used_cost, reserved_cost FROM "
                                   "budget_accounts WHERE account = ? AND period_start = ?",
                                   (account, period_start)).fetchone()
        return None if row is None else tuple(row)  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _is_orphan(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text, _, _instance = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False  # another host's gateway: its liveness is not knowable from here
    pid = int(pid_text)
    if pid == os.getpid():
        return True  # an earlier store object of this very process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class _transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _hold_body(hold: Hold) -> dict:
    rate = hold.rate
    return {"tokens": hold.tokens, "cost": hold.cost,
            "budgets": [[b.account, b.period_start, b.max_tokens, b.max_cost] for b in hold.budgets],
            "rate": [rate.key_id, rate.window_start, rate.rpm, rate.tpm] if rate else None}


def _key_of(row: tuple) -> ApiKey:
    return ApiKey(key_id=row[0], name=row[1], user=row[3], budget_tokens=row[4], budget_cost=row[5], period=row[6],
                  rpm=row[7], tpm=row[8], models=tuple(json.loads(row[9])), created_at=row[10], revoked_at=row[11])
