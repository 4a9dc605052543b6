"""The usage ledger: one SQLite row per request, durable when ``record`` returns.

Durability: WAL journal with ``synchronous=FULL``, so every COMMIT fsyncs the WAL and a committed
row survives a killed process or a power cut. Throughput comes from group commit, not from
weaker settings: rows recorded concurrently (a batch call, many threads) share one transaction
and one fsync, and every caller still returns only after its own row is on disk.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from trtkit.client.ledger.migrations import migrate
from trtkit.paths import trtkit_home

LEDGER_FILENAME = "usage.db"


@dataclass(slots=True, frozen=True)
class LedgerRow:
    ts: float
    model: str
    user: str
    key_id: str
    session: str
    request_id: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    ttft_ms: float | None
    latency_ms: float
    finish_reason: str
    cost: float
    cache_hit: bool = False


ROW_COLUMNS = tuple(f.name for f in fields(LedgerRow))
_INSERT = f"INSERT INTO requests ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join('?' * len(ROW_COLUMNS))})"


@dataclass(slots=True)
class _Ticket:
    rows: Sequence[LedgerRow]
    done: bool = False
    error: BaseException | None = None


def default_ledger_path() -> Path:
    return trtkit_home() / LEDGER_FILENAME


def open_private_file(path: Path) -> None:
    """Create the database file with mode 0600 before SQLite does; its -wal/-shm files inherit the mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    os.chmod(path, 0o600)


class Ledger:
    """Thread-safe; one connection, writes serialized by a commit lock (group commit)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else default_ledger_path()
        open_private_file(self.path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._commit_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[_Ticket] = []
        with self._commit_lock:
            migrate(self._db)

    def record(self, row: LedgerRow) -> None:
        self.record_many([row])

    def record_many(self, rows: Sequence[LedgerRow]) -> None:
        """Returns once every row is committed (fsynced); rows from concurrent callers share a commit."""
        if not rows:
            return
        ticket = _Ticket(rows)
        with self._pending_lock:
            self._pending.append(ticket)
        with self._commit_lock:
            if not ticket.done:  # no earlier leader took our rows: commit everything pending
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._commit(batch)
        if ticket.error is not None:
            raise ticket.error

    def _commit(self, batch: list[_Ticket]) -> None:
        error: BaseException | None = None
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(_INSERT, [astuple(r) for t in batch for r in t.rows])
            self._db.execute("COMMIT")
        except BaseException as exc:  # every caller in the batch must learn its row was not stored
            error = exc
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        for ticket in batch:
            ticket.done, ticket.error = True, error

    def query(self, sql: str, params: Iterable[object] = ()) -> list[tuple]:
        with self._commit_lock:
            return list(self._db.execute(sql, tuple(params)))

    def spent(self, column: str, value: str | None, since: float) -> tuple[int, float]:
        """(tokens, cost) recorded since ``since`` where ``column`` == value (None: everyone)."""
        if column not in ("user", "key_id", "session"):
            raise ValueError(f"cannot sum by {column!r}")
        where = "ts >= ?"
        params: list[object] = [since]
        if value is not None:
            where += f" AND {column} = ?"
            params.append(value)
        sql = f"SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0), COALESCE(SUM(cost), 0) " \
              f"FROM requests WHERE {where}"
        tokens, cost = self.query(sql, params)[0]
        return int(tokens), float(cost)

    def count(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM requests")[0][0])

    def close(self) -> None:
        with self._commit_lock:
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
