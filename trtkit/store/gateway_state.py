"""The gateway's shared state on one database (SQLite or PostgreSQL): keys, budget holds with leases,
rate windows, stored conversations (``conversations.py``). Every limit is enforced by a conditional statement inside one transaction, so concurrent
requests on any number of replicas can never reserve past a limit: the database decides."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from trtkit.config.store_url import StoreUrl
from trtkit.errors import ClientError, StoreUnavailable
from trtkit.store import holds, leases
from trtkit.store.conversation_items import ConversationItems
from trtkit.store.conversations import ConversationStore
from trtkit.store.db import Database, Session
from trtkit.store.hierarchy import SCOPE_COLUMNS, Hierarchy, scope_of
from trtkit.store.leases import LeaseKeeper
from trtkit.store.migrations import check_readable, migrate
from trtkit.store.records import ApiKey, BudgetLimit, Hold, RateLimit, SlotLimit
from trtkit.store.session import LimitReached
from trtkit.store.spend_alerts import SpendAlerts

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 30.0
RATE_WINDOW_KEEP_S = 180  # rate windows older than this are pruned by the sweeper


class GatewayStore(Protocol):
    """What the gateway and `trtkit keys` need. ``reserve`` raises ``Refused`` (a limit said no) or
    ``StoreUnavailable`` (the database did not answer: nothing was admitted). ``settle`` never raises
    ``StoreUnavailable``: a settle the database did not receive is retried by the keeper (``retry_settles``).
    ``renew`` / ``release_expired`` are what the keeper runs; tests and tools may call them directly."""

    lease_seconds: float
    url: StoreUrl
    conversations: ConversationStore  # the Responses API's stored chains, leased like holds
    hierarchy: Hierarchy  # organisations, teams, projects; keys attached to projects
    spend_alerts: SpendAlerts  # the outbox of spend alerts
    conversation_items: ConversationItems  # the Conversations API's conversations and their items, leased alike

    def add_key(self, key: ApiKey, secret_hash: str) -> None: ...
    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None: ...
    def list_keys(self) -> list[ApiKey]: ...
    def revoke_key(self, name_or_id: str) -> bool: ...
    def reserve(self, tokens: int, cost: float, budgets: list[BudgetLimit],
                rate: RateLimit | Sequence[RateLimit] | None, slot: SlotLimit | None = None) -> Hold: ...
    def settle(self, hold: Hold, used_tokens: int, used_cost: float) -> None: ...
    def renew(self) -> int: ...
    def retry_settles(self) -> int: ...
    def release_expired(self, now: float | None = None) -> int: ...
    def expire_conversations(self) -> int: ...
    def account(self, account: str, period_start: float) -> tuple[int, int, float, float] | None: ...
    def reservations(self) -> int: ...
    def close(self) -> None: ...


class SqlGatewayStore:
    """Thread-safe. Holds of this store are renewed by a background ``LeaseKeeper`` while in flight; the
    same keeper frees any replica's holds whose lease ran out (a replica killed with kill -9)."""

    def __init__(self, db: Database, *, lease_seconds: float = DEFAULT_LEASE_SECONDS, keep_leases: bool = True,
                 create: bool = True, read_only: bool = False) -> None:
        if lease_seconds <= 0:
            raise ClientError(f"lease_seconds must be > 0, got {lease_seconds}; set gateway.lease_seconds")
        self.db = db
        self.url = db.url
        self.lease_seconds = float(lease_seconds)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        try:
            if read_only:
                check_readable(db)
            else:
                migrate(db, create=create)
        except BaseException:
            db.close()
            raise
        self._live: dict[str, Hold] = {}  # in-flight holds: the keeper renews their leases
        self._unsettled: dict[str, tuple[int, float]] = {}  # hold id -> use, settles deferred by an outage
        self._live_lock = threading.Lock()
        self.conversations = ConversationStore(db)
        self.hierarchy = Hierarchy(db)
        self.spend_alerts = SpendAlerts(db)
        self.conversation_items = ConversationItems(self.conversations)
        self._keeper = LeaseKeeper(self, self.lease_seconds) if keep_leases else None

    # -- keys -------------------------------------------------------------------------------------------
    def add_key(self, key: ApiKey, secret_hash: str) -> None:
        def work(s: Session) -> None:
            if s.execute("SELECT 1 FROM api_keys WHERE name = ? AND revoked_at IS NULL",
                         (key.name,)).fetchone() is not None:
                raise ClientError(f"an active key named '{key.name}' exists; pick another --name, or "
                                  f"`trtkit keys revoke {key.name}` first to give the name a new secret")
            if key.project is not None and s.execute("SELECT 1 FROM scopes WHERE level = 'project' AND name = ?",
                                                     (key.project,)).fetchone() is None:
                raise ClientError(f"no project '{key.project}'; create it with `trtkit project create {key.project} "
                                  f"--team TEAM` first")
            s.execute('INSERT INTO api_keys (key_id, name, secret_hash, "user", budget_tokens, budget_cost, period, '
                      "rpm, tpm, models, created_at, revoked_at, can_budget_conversations, project, alert_at, "
                      "max_concurrent) VALUES (?,?,?,?,?,?,?,?,?,?,?,NULL,?,?,?,?)",
                      (key.key_id, key.name, secret_hash, key.user, key.budget_tokens, key.budget_cost, key.period,
                       key.rpm, key.tpm, json.dumps(list(key.models)), key.created_at,
                       int(key.can_budget_conversations), key.project, json.dumps(list(key.alert_at)),
                       key.max_concurrent))
        self.db.transact(work)

    def find_key(self, key_id: str) -> tuple[ApiKey, str] | None:
        """The key and its secret's hash, with its chain (project, team, organisation) read in the same query."""
        row = self.db.read(lambda s: s.execute(_KEY_WITH_CHAIN, (key_id,)).fetchone())
        if row is None:
            return None
        width = len(SCOPE_COLUMNS)
        chain = tuple(scope_of(row[at:at + width]) for at in range(_KEY_WIDTH, len(row), width)
                      if row[at] is not None)
        return replace(_key_of(row), chain=chain), row[2]

    def list_keys(self) -> list[ApiKey]:
        rows = self.db.read(lambda s: s.execute(_KEY_SELECT + " ORDER BY created_at").fetchall())
        return [_key_of(r) for r in rows]

    def revoke_key(self, name_or_id: str) -> bool:
        return bool(self.db.transact(lambda s: s.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE (name = ? OR key_id = ?) AND revoked_at IS NULL",
            (time.time(), name_or_id, name_or_id)).rowcount))

    # -- admission --------------------------------------------------------------------------------------
    def reserve(self, tokens: int, cost: float, budgets: list[BudgetLimit],
                rate: RateLimit | Sequence[RateLimit] | None, slot: SlotLimit | None = None) -> Hold:
        """All holds or none, in one transaction sent in one flight; raises Refused naming the limit that
        said no. ``rate``: one rate window, or several (a key's and each level's above it). ``slot``: one of the
        key's concurrent slots (``slots.py``), taken in the same transaction. Holds are transient (the ledger is
        the record), so their commits need not wait for the disk."""
        rates = holds.merged_rates([rate] if isinstance(rate, RateLimit) else (rate or ()))
        hold = Hold(os.urandom(16).hex(), tokens, cost, holds.merged_budgets(budgets), rates, slot=slot)
        impossible = holds.never_fits(tokens, cost, hold.budgets, rates)
        if impossible is not None:
            raise self.db.read(lambda s: holds.refusal(s, tokens, cost, hold.budgets, rates, slot))
        # Live before its row exists: a renewal that runs while the admission waits for the database covers it.
        with self._live_lock:
            self._live[hold.id] = hold
        now = time.time()
        try:
            results = self.db.batch(holds.reserve_statements(hold, self.owner, now, now + self.lease_seconds,
                                                             self.db.dialect.name))
        except LimitReached:
            self._forget(hold)
            raise self.db.read(lambda s: holds.refusal(s, tokens, cost, hold.budgets, rates, slot)) from None
        except BaseException:
            self._forget(hold)
            raise
        if rates:
            hold.rate_states = holds.rate_states(results, hold, self.db.dialect.name)
        return hold

    def settle(self, hold: Hold, used_tokens: int, used_cost: float) -> None:
        """Never raises StoreUnavailable (the request is done; its ledger row is the record): a settle the
        database never received is kept, its lease renewed, and retried by the keeper until it lands."""
        try:
            results = self.db.batch(holds.settle_statements(hold, used_tokens, used_cost, self.db.dialect.name))
        except StoreUnavailable as exc:
            if getattr(exc, "commit_unknown", False):  # it may have landed: applying it again could count twice
                self._forget(hold)
                log.error("settle of hold %s may be lost (%s); its lease frees it if so", hold.id, exc)
            else:
                with self._live_lock:
                    self._unsettled[hold.id] = (used_tokens, used_cost)
                log.warning("settle of hold %s deferred until the store answers: %s", hold.id, exc)
            return
        self._forget(hold)
        if not holds.settled_a_live_hold(results, self.db.dialect.name):
            log.warning("hold %s had expired and was freed before its request finished; its use is added now "
                        "(raise gateway.lease_seconds if this repeats)", hold.id)

    def _forget(self, hold: Hold) -> None:
        with self._live_lock:
            self._live.pop(hold.id, None)
            self._unsettled.pop(hold.id, None)

    def retry_settles(self) -> int:
        """Apply settles deferred by an outage; returns how many are still waiting."""
        with self._live_lock:  # claimed by this call (two callers must not apply one settle twice)
            waiting = [(self._live[i], use) for i, use in self._unsettled.items() if i in self._live]
            self._unsettled.clear()
        for hold, (used_tokens, used_cost) in waiting:
            self.settle(hold, used_tokens, used_cost)
        with self._live_lock:
            return len(self._unsettled)

    # -- leases -----------------------------------------------------------------------------------------
    def renew(self) -> int:
        """Push the lease of every in-flight hold of this store one lease ahead; returns how many."""
        with self._live_lock:
            ids = list(self._live)
        # The new expiry is read inside the transaction: a renewal that waited for the database (a queue of
        # commits, a lock) must not write a lease that has already run out.
        return int(self.db.transact(lambda s: leases.extend(s, "reservations", ids, time.time() + self.lease_seconds),
                                    durable=False))

    def release_expired(self, now: float | None = None) -> int:
        """Free every hold (of any replica) whose lease ran out, except this store's own in-flight ones (their
        requests are running here: only their settle ends them, however late a renewal was); returns how many.
        Safe to run anywhere, any number of times at once: each hold is freed exactly once."""
        when = time.time() if now is None else now
        with self._live_lock:
            mine = set(self._live)
        return int(self.db.transact(lambda s: holds.free_expired(s, when, mine), durable=False))

    def expire_conversations(self) -> int:
        """Sweep the stored conversations idle past their TTL (any replica's: each is claimed once)."""
        return self.conversations.expire()

    def prune_rate_windows(self, now: float | None = None) -> int:
        cutoff = int((time.time() if now is None else now) - RATE_WINDOW_KEEP_S)
        return int(self.db.transact(lambda s: s.execute("DELETE FROM rate_windows WHERE window_start < ?",
                                                        (cutoff,)).rowcount, durable=False))

    def in_flight(self) -> int:
        with self._live_lock:
            return len(self._live)

    def account(self, account: str, period_start: float) -> tuple[int, int, float, float] | None:
        """(used_tokens, reserved_tokens, used_cost, reserved_cost), for reports and tests."""
        row = self.db.read(lambda s: s.execute(holds._BUDGET_STATE, (account, period_start)).fetchone())
        return None if row is None else (int(row[0]), int(row[1]), float(row[2]), float(row[3]))

    def reservations(self) -> int:
        """Holds in the store now, of every replica (0 once all requests settled or their leases were swept)."""
        return int(self.db.read(lambda s: s.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]))

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()
        self.db.close()


_KEY_COLUMNS = ('key_id, name, secret_hash, "user", budget_tokens, budget_cost, period, rpm, tpm, models, created_at, '
                'revoked_at, can_budget_conversations, project, alert_at, max_concurrent')
_KEY_WIDTH = 16
_KEY_SELECT = f"SELECT {_KEY_COLUMNS} FROM api_keys"
# One round trip per request: the key and the three levels above it (absent levels come back as NULLs).
_KEY_WITH_CHAIN = (
    "SELECT " + ", ".join([f"k.{c.strip()}" for c in _KEY_COLUMNS.split(",")]
                          + [f"{t}.{c}" for t in ("p", "t", "o") for c in SCOPE_COLUMNS])
    + " FROM api_keys k LEFT JOIN scopes p ON p.level = 'project' AND p.name = k.project"
    " LEFT JOIN scopes t ON t.level = 'team' AND t.name = p.parent"
    " LEFT JOIN scopes o ON o.level = 'org' AND o.name = t.parent WHERE k.key_id = ?")


def _key_of(row: tuple) -> ApiKey:
    return ApiKey(key_id=row[0], name=row[1], user=row[3],
                  budget_tokens=None if row[4] is None else int(row[4]),
                  budget_cost=None if row[5] is None else float(row[5]), period=row[6],
                  rpm=None if row[7] is None else int(row[7]), tpm=None if row[8] is None else int(row[8]),
                  models=tuple(json.loads(row[9])), created_at=float(row[10]),
                  revoked_at=None if row[11] is None else float(row[11]), can_budget_conversations=bool(row[12]),
                  project=row[13], alert_at=tuple(float(a) for a in json.loads(row[14] or "[]")),
                  max_concurrent=None if row[15] is None else int(row[15]))
