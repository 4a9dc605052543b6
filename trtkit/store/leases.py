"""Rows with a lease, and their keeper. A leased row carries ``expires_at``: it lives while something renews it
(a budget hold while its request runs, a stored conversation while it is used or heart-beaten) and is swept by
whoever finds it expired: any replica, any number at once, each row claimed exactly once by a conditional
``DELETE ... RETURNING``. Holds (``holds.free_expired``) and conversations (``conversations.py``) share these
statements; the background keeper renews this replica's in-flight holds, frees expired ones (any replica's, never
this one's in-flight holds), sweeps expired conversations and prunes old rate windows. A database outage is
logged and outlived, never fatal."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Protocol

from trtkit.errors import StoreUnavailable
from trtkit.store.session import Session

log = logging.getLogger(__name__)

IN_LIST_MAX = 500  # ids per ``IN (...)`` list: well under either database's limit on bound parameters
LEASED_TABLES = ("reservations", "conversations", "expired_responses")  # every table these statements may name


def id_batches(ids: list[str]) -> Iterator[tuple[list[str], str]]:
    """``ids`` in batches of at most IN_LIST_MAX, each with its ``?, ?, ...`` placeholder list."""
    for start in range(0, len(ids), IN_LIST_MAX):
        batch = ids[start:start + IN_LIST_MAX]
        yield batch, ", ".join("?" * len(batch))


def extend(session: Session, table: str, ids: list[str], expires_at: float, *, alive_at: float | None = None) -> int:
    """Push the lease of ``ids`` to ``expires_at``; with ``alive_at``, only rows still alive then (an expired row
    is never revived: it is the sweeper's). Returns how many rows were extended."""
    _check(table)
    alive = "" if alive_at is None else " AND expires_at >= ?"
    extended = 0
    for batch, marks in id_batches(ids):
        params = (expires_at, *batch) if alive_at is None else (expires_at, *batch, alive_at)
        extended += session.execute(f"UPDATE {table} SET expires_at = ? WHERE id IN ({marks}){alive}", params).rowcount
    return extended


def claim_expired(session: Session, table: str, now: float, returning: str, *,
                  spared: frozenset[str] | set[str] = frozenset()) -> list[tuple]:
    """Delete every row of ``table`` whose lease ran out before ``now`` (but ``spared`` ids) and return their
    ``returning`` columns. The DELETE is the claim: a second sweeper finds the row gone and frees nothing twice;
    it checks the expiry again, so a row renewed meanwhile stays."""
    _check(table)
    ids = [row[0] for row in session.execute(f"SELECT id FROM {table} WHERE expires_at < ?", (now,)).fetchall()
           if row[0] not in spared]
    rows: list[tuple] = []
    for batch, marks in id_batches(ids):
        rows += session.execute(f"DELETE FROM {table} WHERE expires_at < ? AND id IN ({marks}) RETURNING {returning}",
                                (now, *batch)).fetchall()
    return rows


def _check(table: str) -> None:
    if table not in LEASED_TABLES:  # table names are ours, never a caller's text: SQL is built from them
        raise ValueError(f"{table!r} is not a leased table ({', '.join(LEASED_TABLES)})")


class KeptStore(Protocol):
    """What the keeper runs on its store (``gateway_state.SqlGatewayStore``), named here so that this module
    imports nothing of the store that starts it."""

    def renew(self) -> int: ...
    def retry_settles(self) -> int: ...
    def release_expired(self) -> int: ...
    def prune_rate_windows(self) -> int: ...
    def expire_conversations(self) -> int: ...


class LeaseKeeper:
    """Wakes three times a lease: a hold survives two missed renewals before any sweeper may free it."""

    def __init__(self, store: KeptStore, lease_seconds: float) -> None:
        self.store = store
        self.interval_s = lease_seconds / 3.0
        self._stop = threading.Event()
        self._outage = False
        self._thread = threading.Thread(target=self._run, name="trtkit-store-leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self) -> None:
        try:
            self.store.renew()
            self.store.retry_settles()
            freed = self.store.release_expired()
            self.store.prune_rate_windows()
            swept = self.store.expire_conversations()
        except StoreUnavailable as exc:
            if not self._outage:
                log.warning("store unreachable, leases not renewed: %s", exc)
            self._outage = True
            return
        except Exception:  # a bug must not stop renewals for good: log it and try again next tick
            log.exception("lease keeper tick failed")
            return
        if self._outage:
            log.warning("store reachable again; leases renewed")
        self._outage = False
        if freed:
            log.warning("freed %d budget holds whose lease ran out (a gateway stopped mid-request)", freed)
        if swept:
            log.info("swept %d stored conversations idle past their TTL", swept)

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
