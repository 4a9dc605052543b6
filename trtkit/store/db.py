"""A thin database layer over ``sqlite3`` and psycopg 3: one placeholder style, transactions, and one
error (``StoreUnavailable``) for a database that cannot be reached.

Callers hand a function to ``transact``; it runs inside one transaction on one connection and may
run twice on PostgreSQL: a pooled connection found dead (the server restarted) before COMMIT was sent
means nothing was committed, so the work is retried once on a fresh connection, and a deadlock or
serialization failure is retried too. Work functions therefore only touch the database.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from trtkit.errors import StoreNotFound, StoreUnavailable
from trtkit.store.dialect import SQLITE, Dialect
from trtkit.store.session import LimitReached, Result, Rows, Session, Statement
from trtkit.store.sqlite_file import connect_read_only, open_private_file
from trtkit.store.url import StoreUrl

log = logging.getLogger(__name__)

T = TypeVar("T")
_SQLITE_UNAVAILABLE = ("locked", "unable to open", "disk i/o", "readonly", "busy")


class Database(Protocol):
    dialect: Dialect
    url: StoreUrl

    def transact(self, work: Callable[[Session], T], *, durable: bool = True) -> T: ...
    def read(self, work: Callable[[Session], T]) -> T: ...
    def batch(self, statements: Sequence[Statement]) -> list[Result]: ...
    def close(self) -> None: ...


def open_database(url: StoreUrl, *, fast_commit: bool = False, create: bool = True,
                  read_only: bool = False) -> Database:
    """``fast_commit``: commits need not wait for the disk (PostgreSQL ``synchronous_commit = off``,
    SQLite ``synchronous=NORMAL``), for transient state such as budget holds. ``durable=True``
    transactions still wait on PostgreSQL; the ledger never opens with ``fast_commit``. ``create=False``:
    a SQLite file that does not exist is refused (``StoreNotFound``) instead of made, folders and all.
    ``read_only`` (commands that only read: ``keys list``, ``usage``): the database is opened so that nothing in it
    or around it can change (``sqlite_file.connect_read_only``; PostgreSQL read-only transactions)."""
    if url.backend == "sqlite":
        assert url.path is not None
        if (read_only or not create) and not Path(url.path).is_file():
            raise StoreNotFound(f"{url.path}: no such store; check the path (a command that only reads a store "
                                f"never creates one)")
        return SqliteDatabase(url, fast_commit=fast_commit, read_only=read_only)
    from trtkit.store.postgres_db import PostgresDatabase  # psycopg loads only for a PostgreSQL URL

    return PostgresDatabase(url, fast_commit=fast_commit, read_only=read_only)


class _SqliteSession:
    __slots__ = ("db", "dialect")

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.dialect = SQLITE

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows:
        return self.db.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self.db.executemany(sql, rows)


class SqliteDatabase:
    """One connection under a lock: a process's writers queue here rather than in SQLite's busy handler
    (which sleeps up to 100 ms a try); other processes share the file through SQLite's own locking.
    WAL journal; 0600 file; ``synchronous=FULL`` (every commit fsynced) unless ``fast_commit``."""

    def __init__(self, url: StoreUrl, *, fast_commit: bool = False, read_only: bool = False) -> None:
        assert url.path is not None
        self.url, self.dialect, self.path = url, SQLITE, Path(url.path)
        try:
            if read_only:  # no file made, no mode changed, no journal switched
                self._db = connect_read_only(self.path)
            else:
                open_private_file(self.path)
                self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
                _switch_to_wal(self._db)
                self._db.execute(f"PRAGMA synchronous={'NORMAL' if fast_commit else 'FULL'}")
        except sqlite3.DatabaseError as exc:
            if read_only and "not a database" in str(exc):
                raise StoreNotFound(f"{self.path} is not a trtkit store (not an SQLite database); check the path "
                                    f"(a command that only reads a store changes nothing in it)") from None
            raise self._cannot_open(exc) from exc
        except OSError as exc:
            raise self._cannot_open(exc) from exc
        self._lock = threading.Lock()
        self._session = _SqliteSession(self._db)

    def transact(self, work: Callable[[Session], T], *, durable: bool = True) -> T:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._unavailable(exc) from exc
            try:
                result = work(self._session)
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError) and _is_unavailable(exc):
                    raise self._unavailable(exc) from exc
                raise
            return result

    def batch(self, statements: Sequence[Statement]) -> list[Result]:
        """Fixed statements in one transaction; a guard that fires raises LimitReached (rolled back)."""
        def run(session: Session) -> list[Result]:
            results = []
            for sql, params in statements:
                cur = session.execute(sql, params)
                rows = cur.fetchall()
                results.append(Result(rows, cur.rowcount))
            return results

        try:
            return self.transact(run, durable=False)
        except sqlite3.IntegrityError as exc:
            if "NOT NULL constraint failed" in str(exc):  # a guard's x / 0 is NULL in SQLite
                raise LimitReached(str(exc)) from exc
            raise

    def read(self, work: Callable[[Session], T]) -> T:
        with self._lock:
            try:
                return work(self._session)
            except sqlite3.OperationalError as exc:
                if _is_unavailable(exc):
                    raise self._unavailable(exc) from exc
                raise

    def _cannot_open(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"cannot open the SQLite store {self.path} ({exc}); check the folder exists and is "
                                f"writable by this user")

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"the SQLite store {self.path} is unusable ({exc}); another process may hold "
                                f"it locked, or the disk is full or read-only")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _is_unavailable(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return any(word in text for word in _SQLITE_UNAVAILABLE)


def _switch_to_wal(db: sqlite3.Connection, deadline_s: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, retried: while another process creates the same new file and switches it,
    SQLite can answer "database is locked" at once, without its busy handler (seen with 4 replicas opening
    one fresh store together)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
