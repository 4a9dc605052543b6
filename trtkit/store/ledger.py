"""The usage ledger: one row per request, durable when ``record`` returns, on SQLite or PostgreSQL.

Durability: on SQLite a WAL journal with ``synchronous=FULL``, so every COMMIT fsyncs the WAL and a
committed row survives a killed process or a power cut; on PostgreSQL a normal (synchronous) commit.
``record`` returns only after its row's commit. Throughput comes from group commit, not from weaker
settings: rows recorded concurrently (a batch call, many threads) share one transaction and one fsync.
A PostgreSQL restart is outlived: a batch that certainly did not commit is retried for a while.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, fields
from operator import attrgetter
from pathlib import Path

from trtkit.errors import ClientError, StoreUnavailable, TrtkitError
from trtkit.store.db import Database, open_database
from trtkit.store.dialect import Dialect
from trtkit.store.migrations import check_readable, migrate
from trtkit.store.url import LEDGER_DB_FILENAME, StoreUrl, ledger_url

log = logging.getLogger(__name__)

LEDGER_FILENAME = LEDGER_DB_FILENAME
MAX_ROWS_PER_COMMIT = 4096
OUTAGE_RETRY_S = 15.0  # how long a batch waits for an unreachable database before its callers get the error


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
    # an upstream that reports its own usage (OpenAI HTTP): the bill above is its count, and these are the
    # gateway's own count of the prompt and of the text received, kept beside it (None: not compared)
    local_prompt_tokens: int | None = None
    local_completion_tokens: int | None = None
    counted_locally: bool = False  # the bill is the text received, counted locally: the upstream sent no count
    # the levels of the gateway's hierarchy the request was admitted under ('' for none)
    org: str = ""
    team: str = ""
    project: str = ""
    # how the governor corrected the bill, comma-separated (governance/billing.py: overrun, usage_doubtful,
    # usage_clamped); empty when nothing was
    usage_flags: str = ""
    dialect: str = "openai"  # the API the request was asked in: openai (chat, completions, responses) or anthropic


ROW_COLUMNS = tuple(f.name for f in fields(LedgerRow))
_values = attrgetter(*ROW_COLUMNS)  # a flat tuple, ~20x cheaper than dataclasses.astuple
_FLAGS = (ROW_COLUMNS.index("cache_hit"), ROW_COLUMNS.index("counted_locally"))
# "user" is reserved in PostgreSQL: quoted, as everywhere in our SQL.
_INSERT = (f"INSERT INTO requests ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in ROW_COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(ROW_COLUMNS))})")


def _row_values(row: LedgerRow) -> tuple:
    values = list(_values(row))
    for index in _FLAGS:  # PostgreSQL: 0/1, not bool
        values[index] = int(values[index])
    return tuple(values)


@dataclass(slots=True)
class _Ticket:
    rows: Sequence[LedgerRow]
    committed: Future[None] | None = None  # thread callers wait on this ...
    loop: asyncio.AbstractEventLoop | None = None  # ... asyncio callers on ``waiter`` in their loop
    waiter: asyncio.Future[None] | None = None


def default_ledger_path() -> Path:
    path = ledger_url(None).path
    assert path is not None
    return path


def open_ledger(url: str | os.PathLike[str] | StoreUrl | None = None, *, create: bool = True,
                read_only: bool = False) -> Ledger:
    """The ledger at ``url``: sqlite:///PATH, a file path or postgresql://...; None: $TRTKIT_HOME/usage.db.
    ``create=False``: a ledger that does not exist raises ``StoreNotFound`` instead of being made; ``read_only``
    (reports): nothing in it or around it changes (no migration, no writer)."""
    return Ledger(url=url if isinstance(url, StoreUrl) else ledger_url(url), create=create, read_only=read_only)


def _settle_waiters(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for waiter in waiters:
        if waiter.done():  # the awaiting task was cancelled
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)


class Ledger:
    """Thread-safe. One writer thread owns the writes: it takes every row queued since its last
    commit and commits them in one transaction (group commit); each caller waits for its own.
    ``Ledger(path)`` is a SQLite file; ``Ledger(url=...)`` (or ``open_ledger``) any store URL."""

    def __init__(self, path: Path | None = None, *, url: StoreUrl | None = None, create: bool = True,
                 read_only: bool = False) -> None:
        self.url = url or (StoreUrl("sqlite", Path(path), None) if path else ledger_url(None))
        self.path = self.url.path  # the SQLite file; None on PostgreSQL
        self.where = self.url.redacted()
        # reads (and migrations); a SQLite file is made 0600 unless ``create`` is off; ``read_only``: reports
        self._db: Database = open_database(self.url, create=create and not read_only, read_only=read_only)
        try:
            check_readable(self._db) if read_only else migrate(self._db, create=create)
        except BaseException:
            self._db.close()
            raise
        self._queue: queue.SimpleQueue[_Ticket | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        if not read_only:  # a report writes nothing, so it has no writer
            self._writer = threading.Thread(target=self._write_loop, args=(open_database(self.url),),
                                            name="trtkit-ledger", daemon=True)
            self._writer.start()
        self._closed = False

    @property
    def dialect(self) -> Dialect:
        return self._db.dialect

    def record(self, row: LedgerRow) -> None:
        self.record_many([row])

    def record_many(self, rows: Sequence[LedgerRow]) -> None:
        """Returns once every row is committed (fsynced); rows from concurrent callers share a commit."""
        if not rows:
            return
        self.submit(rows).result()

    def submit(self, rows: Sequence[LedgerRow]) -> Future[None]:
        """Queue rows without waiting; the future completes when they are committed (asyncio callers
        await it with asyncio.wrap_future, so the event loop never blocks on an fsync)."""
        ticket = _Ticket(rows, committed=Future())
        self._enqueue(ticket)
        assert ticket.committed is not None
        return ticket.committed

    async def arecord(self, rows: Sequence[LedgerRow]) -> None:
        """asyncio: returns once the rows are committed, without blocking the event loop. The writer
        wakes each loop once per commit, not once per row, so thousands of requests in flight are cheap."""
        loop = asyncio.get_running_loop()
        ticket = _Ticket(rows, loop=loop, waiter=loop.create_future())
        self._enqueue(ticket)
        assert ticket.waiter is not None
        await ticket.waiter

    def _enqueue(self, ticket: _Ticket) -> None:
        if self._closed:
            raise ClientError(f"ledger {self.where} is closed; open a new Ledger")
        if self._writer is None:
            raise ClientError(f"ledger {self.where} was opened read-only; open it without read_only to record")
        self._queue.put(ticket)

    def _write_loop(self, db: Database) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while not self._queue.empty() and len(batch) < MAX_ROWS_PER_COMMIT:
                batch.append(self._queue.get())
            if None in batch:  # close(): commit what came before it, then stop
                stop = True
            tickets = [t for t in batch if t is not None]
            if tickets:
                self._commit(db, tickets)
        db.close()

    def _commit(self, db: Database, batch: list[_Ticket]) -> None:
        values = [_row_values(r) for t in batch for r in t.rows]
        error = _insert_durably(db, values, self.where)
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for ticket in batch:
            if ticket.committed is not None:
                if error is None:
                    ticket.committed.set_result(None)
                else:
                    ticket.committed.set_exception(error)
            elif ticket.loop is not None and ticket.waiter is not None:
                by_loop.setdefault(ticket.loop, []).append(ticket.waiter)
        for loop, waiters in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_waiters, waiters, error)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass

    def query(self, sql: str, params: Iterable[object] = ()) -> list[tuple]:
        """Read-only SQL with ``?`` placeholders (quote "user"); runs on either backend."""
        args = tuple(params)
        return [tuple(r) for r in self._db.read(lambda s: s.execute(sql, args).fetchall())]

    def spent(self, column: str, value: str | None, since: float) -> tuple[int, float]:
        """(tokens, cost) recorded since ``since`` where ``column`` == value (None: everyone)."""
        if column not in ("user", "key_id", "session"):
            raise ValueError(f"cannot sum by {column!r}")
        where = "ts >= ?"
        params: list[object] = [since]
        if value is not None:
            where += f' AND "{column}" = ?'
            params.append(value)
        sql = f"SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0), COALESCE(SUM(cost), 0) " \
              f"FROM requests WHERE {where}"
        tokens, cost = self.query(sql, params)[0]
        return int(tokens), float(cost)

    def count(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM requests")[0][0])

    def close(self) -> None:
        """Commits everything recorded so far, then stops the writer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _insert_durably(db: Database, values: list[tuple], where: str) -> TrtkitError | None:
    """One transaction for the batch. A database that is unreachable before COMMIT was sent (nothing
    committed) is retried for OUTAGE_RETRY_S, so a PostgreSQL restart loses no row and adds none."""
    deadline = time.monotonic() + OUTAGE_RETRY_S
    while True:
        try:
            db.transact(lambda s: s.executemany(_INSERT, values))
            return None
        except StoreUnavailable as exc:
            if getattr(exc, "commit_unknown", False) or time.monotonic() >= deadline:
                log.error("ledger commit of %d rows failed: %s", len(values), exc)
                return StoreUnavailable(f"usage ledger {where}: could not record ({exc})")
            time.sleep(0.2)
        except Exception as exc:  # every caller in the batch must learn its rows were not stored
            log.error("ledger commit of %d rows failed: %s", len(values), exc)
            return ClientError(f"usage ledger {where}: could not record ({exc}); check the disk, the file's "
                               f"permissions or the database")
