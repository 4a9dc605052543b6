"""PostgreSQL through psycopg 3: a small LIFO pool of autocommit connections (a connection per
concurrent caller, reused), explicit BEGIN/COMMIT, and every way of not reaching the server mapped
to ``StoreUnavailable``. A dead pooled connection is replaced on the next use, so the store recovers
by itself when the server is back."""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from trtkit.errors import StoreUnavailable
from trtkit.store.dialect import POSTGRESQL, Dialect
from trtkit.store.pg_prepared import run_prepared
from trtkit.store.session import LimitReached, Result, Session, Statement
from trtkit.store.url import StoreUrl

log = logging.getLogger(__name__)

T = TypeVar("T")
CONNECT_TIMEOUT_S = 3  # a gateway answers 503 fast rather than hanging on a dead database
MAX_IDLE_CONNECTIONS = 64
SLOW_CONNECT_S = 0.5  # a connect that failed only after this long (an unreachable host) ...
RECONNECT_PAUSE_S = 1.0  # ... is not tried again for this long: requests fail fast instead of each waiting
PREPARE_AFTER_USES = 5  # psycopg's default threshold for preparing a statement on the server
MAX_ROLLBACK_RETRIES = 3  # deadlock / serialization failure: the database rolled back, try again
_ROLLED_BACK = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.TransactionRollback)


class PgSession:
    __slots__ = ("conn", "dialect")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.dialect: Dialect = POSTGRESQL

    def execute(self, sql: str, params: Sequence[object] = ()) -> psycopg.Cursor[Any]:
        return self.conn.execute(POSTGRESQL.sql(sql), tuple(params))  # type: ignore[arg-type]

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(POSTGRESQL.sql(sql), rows)  # type: ignore[arg-type]


class PostgresDatabase:
    def __init__(self, url: StoreUrl, *, fast_commit: bool = False, read_only: bool = False) -> None:
        assert url.dsn is not None
        self.url, self.dialect, self.fast_commit = url, POSTGRESQL, fast_commit
        self.read_only = read_only  # every transaction read-only (commands that only read)
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._slow_failure: tuple[float, StoreUnavailable] | None = None
        self._release(self._connect())  # fail now, with a clear message, if the URL is wrong

    def transact(self, work: Callable[[Session], T], *, durable: bool = True) -> T:
        attempt = 0
        while True:
            attempt += 1
            conn = self._acquire()
            commit_sent = False
            try:
                conn.execute("BEGIN")
                if durable and self.fast_commit:
                    conn.execute("SET LOCAL synchronous_commit = on")
                result = work(PgSession(conn))
                commit_sent = True
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                if conn.broken or conn.closed:
                    self._discard(conn)
                    if attempt == 1 and not commit_sent:  # a stale pooled connection: nothing was committed
                        continue
                    raise self._unavailable(exc, commit_unknown=commit_sent) from exc
                self._rollback(conn)
                if isinstance(exc, _ROLLED_BACK) and attempt <= MAX_ROLLBACK_RETRIES:
                    continue
                raise
            except BaseException:
                self._rollback(conn)
                raise
            self._release(conn)
            return result

    def batch(self, statements: Sequence[Statement]) -> list[Result]:
        """Fixed statements sent in one flight: one round trip, one implicit transaction that commits or rolls
        back whole (several statements go in pipeline mode; admission and settle on PostgreSQL are one
        function call each, so the gateway sends one, prepared, through libpq: ``pg_prepared``). Not retried
        once sent (it may have committed)."""
        conn = self._acquire()
        try:
            if len(statements) == 1:  # admission and settle: one prepared call through libpq (pg_prepared)
                sql, params = statements[0]
                results = [run_prepared(conn, sql, params)]
            else:
                # Unprepared: a failing statement aborts the rest of the flight, and psycopg (3.3) may then count
                # as prepared a statement of that flight the server never parsed ("prepared statement _pg3_N
                # does not exist" on every later use of the connection).
                with conn.pipeline():
                    cursors = [conn.execute(POSTGRESQL.sql(sql), tuple(params), prepare=False)  # type: ignore[arg-type]
                               for sql, params in statements]
                results = [Result(c.fetchall() if c.description else [], c.rowcount) for c in cursors]
        except LimitReached:
            self._release(conn)
            raise
        except pg_errors.DivisionByZero as exc:
            self._release(conn)
            raise LimitReached(str(exc)) from exc
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                self._discard(conn)
                raise self._unavailable(exc, commit_unknown=True) from exc
            self._release(conn)
            raise
        except BaseException:
            self._discard(conn)
            raise
        self._release(conn)
        return results

    def read(self, work: Callable[[Session], T]) -> T:
        for attempt in (1, 2):
            conn = self._acquire()
            try:
                result = work(PgSession(conn))
            except psycopg.Error as exc:
                if conn.broken or conn.closed:
                    self._discard(conn)
                    if attempt == 1:
                        continue
                    raise self._unavailable(exc) from exc
                self._release(conn)
                raise
            except BaseException:
                self._release(conn)
                raise
            self._release(conn)
            return result
        raise AssertionError("unreachable")

    def _connect(self) -> psycopg.Connection[Any]:
        failed = self._slow_failure
        if failed is not None and time.monotonic() - failed[0] < RECONNECT_PAUSE_S:
            raise failed[1]  # the last try hung until its timeout: answer at once instead of queueing on it
        started = time.monotonic()
        try:
            conn = psycopg.connect(self.url.dsn or "", autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
            # Statements used often are prepared on the server (admission and settle calls: no parse and
            # plan per call). Never inside a pipeline, see batch().
            conn.prepare_threshold = PREPARE_AFTER_USES
            if self.fast_commit:
                conn.execute("SET synchronous_commit = off")
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
        except psycopg.Error as exc:
            error = self._unavailable(exc)
            if time.monotonic() - started > SLOW_CONNECT_S:  # a refused connection fails fast: try it each time
                self._slow_failure = (time.monotonic(), error)
            raise error from exc
        self._slow_failure = None
        return conn

    def _acquire(self) -> psycopg.Connection[Any]:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"the store {self.url.redacted()} was closed; open it again")
            while self._idle:
                conn = self._idle.pop()
                if _still_open(conn):
                    return conn
                self._discard(conn)
        return self._connect()

    def _release(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE_CONNECTIONS and not conn.broken:
                self._idle.append(conn)
                return
        conn.close()

    def _discard(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.close()
        except psycopg.Error:
            pass

    def _rollback(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            self._discard(conn)
            return
        self._release(conn)

    def _unavailable(self, exc: Exception, *, commit_unknown: bool = False) -> StoreUnavailable:
        """``commit_unknown``: the connection died after COMMIT was sent, so the work may have committed."""
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error = StoreUnavailable(f"PostgreSQL store {self.url.redacted()} is unreachable ({first_line}); check "
                                 f"the server runs and the URL; requests are refused until it answers")
        error.commit_unknown = commit_unknown  # type: ignore[attr-defined]
        return error

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)


def _still_open(conn: psycopg.Connection[Any]) -> bool:
    """An idle connection has nothing to read; if its socket is readable the server closed it (a restart,
    an admin's terminate). Costs one poll, no round trip, so a stale connection is never sent work."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable
