"""Spend alerts as an outbox in the store (migration 11): the store decides who sends, and nothing is lost.

A budget passing a threshold (50%, 80%, 100% of its limit) becomes one row of ``spend_alerts``, unique per
(account, period_start, threshold): whichever replica sees it first inserts it (``INSERT ... ON CONFLICT DO
NOTHING``), the others find it there, so there is exactly one alert per threshold per period across replicas. Any
replica's sender then claims due rows with a conditional update (``claimed_until`` in the past: one claimant at a
time), sends each, and marks it sent, or schedules its next attempt with backoff. A row stays until it is sent,
so a failing webhook loses nothing while any gateway is up; a sender that dies mid-send leaves a claim that runs
out, and another replica sends the row again (receivers deduplicate by its ``id``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trtkit.store.db import Database, Session
from trtkit.store.records import BudgetLimit

_ACCOUNT = "SELECT used_tokens, used_cost, max_tokens, max_cost FROM budget_accounts WHERE account = ? AND period_start = ?"
_INSERT = ("INSERT INTO spend_alerts (id, account, period_start, threshold, body, created_at, next_attempt_at) "
           "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (account, period_start, threshold) DO NOTHING")


@dataclass(slots=True, frozen=True)
class PendingAlert:
    id: str
    body: str  # the webhook's JSON body, fixed when the alert was made
    attempts: int


def crossed(used: float, limit: float, thresholds: Sequence[float]) -> list[float]:
    """The thresholds (fractions of ``limit``) that ``used`` has reached."""
    return [t for t in thresholds if limit > 0 and used >= t * limit - 1e-9]


def alert_body(alert_id: str, budget: BudgetLimit, threshold: float, used: tuple[int, float], now: float) -> dict:
    level, _, name = budget.account.partition(":")
    by_tokens = budget.max_tokens is not None
    return {"type": "trtkit.spend_alert", "id": alert_id, "level": level, "name": name, "account": budget.account,
            "period_start": budget.period_start, "threshold_percent": round(threshold * 100, 6),
            "limit": {"tokens": budget.max_tokens} if by_tokens else {"cost": budget.max_cost},
            "used": {"tokens": used[0], "cost": used[1]}, "created_at": now}


class SpendAlerts:
    def __init__(self, db: Database) -> None:
        self.db = db

    def note(self, budgets: Sequence[BudgetLimit], thresholds: Mapping[str, Sequence[float]],
             now: float | None = None) -> int:
        """Make the alerts these budgets have earned (each account's thresholds, fractions of its limit, read
        against what the store says it used); returns how many rows this call inserted (0 when another replica,
        or an earlier call, made them first)."""
        when = time.time() if now is None else now

        def work(s: Session) -> int:
            made = 0
            for budget in budgets:
                wanted = thresholds.get(budget.account)
                if wanted:
                    made += self._note_one(s, budget, wanted, when)
            return made
        return int(self.db.transact(work, durable=True))

    def _note_one(self, s: Session, budget: BudgetLimit, thresholds: Sequence[float], now: float) -> int:
        row = s.execute(_ACCOUNT, (budget.account, budget.period_start)).fetchone()
        if row is None:
            return 0
        used_tokens, used_cost = int(row[0]), float(row[1])
        limit = BudgetLimit(budget.account, budget.period_start, None if row[2] is None else int(row[2]),
                            None if row[3] is None else float(row[3]))
        used, ceiling = (used_tokens, limit.max_tokens) if limit.max_tokens is not None else (used_cost, limit.max_cost)
        made = 0
        for threshold in crossed(used, ceiling or 0, thresholds):
            alert_id = uuid.uuid4().hex
            body = json.dumps(alert_body(alert_id, limit, threshold, (used_tokens, used_cost), now))
            made += s.execute(_INSERT, (alert_id, limit.account, limit.period_start, threshold, body, now,
                                        now)).rowcount
        return made

    def claim_due(self, now: float, claim_seconds: float, limit: int = 16) -> list[PendingAlert]:
        """Rows due for an attempt, each claimed for ``claim_seconds`` by a conditional update: a row another
        sender claimed meanwhile is skipped, so two senders never hold one row at once."""
        def work(s: Session) -> list[PendingAlert]:
            rows = s.execute("SELECT id, body, attempts FROM spend_alerts WHERE sent_at IS NULL AND next_attempt_at "
                             "<= ? AND claimed_until < ? ORDER BY next_attempt_at LIMIT ?", (now, now, limit)).fetchall()
            claimed = []
            for alert_id, body, attempts in rows:
                if s.execute("UPDATE spend_alerts SET claimed_until = ? WHERE id = ? AND sent_at IS NULL AND "
                             "claimed_until < ?", (now + claim_seconds, alert_id, now)).rowcount == 1:
                    claimed.append(PendingAlert(alert_id, body, int(attempts)))
            return claimed
        return list(self.db.transact(work, durable=False))

    def mark_sent(self, alert_id: str, now: float) -> None:
        self.db.transact(lambda s: s.execute("UPDATE spend_alerts SET sent_at = ?, attempts = attempts + 1, "
                                             "claimed_until = 0, last_error = NULL WHERE id = ?", (now, alert_id)))

    def mark_failed(self, alert_id: str, error: str, next_attempt_at: float) -> None:
        self.db.transact(lambda s: s.execute("UPDATE spend_alerts SET attempts = attempts + 1, claimed_until = 0, "
                                             "next_attempt_at = ?, last_error = ? WHERE id = ?",
                                             (next_attempt_at, error[:500], alert_id)))

    def pending(self) -> int:
        """Alerts not sent yet (any replica's)."""
        return int(self.db.read(lambda s: s.execute("SELECT COUNT(*) FROM spend_alerts WHERE sent_at IS NULL")
                                .fetchone()[0]))
