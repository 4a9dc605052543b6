"""Budget holds and rate windows in SQL: the conditional statements admission is made of.

Lock order, the same in every transaction, so PostgreSQL never deadlocks on them: a reservation row
first (settle and the sweeper claim it with DELETE; reserve inserts a new one last, which nobody else
can be waiting on), then the rate window, then budget rows sorted by (account, period_start).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from trtkit.store.db import Session
from trtkit.store.records import BudgetLimit, Hold, RateLimit, Refused

_BUDGET_STATE = ("SELECT used_tokens, reserved_tokens, used_cost, reserved_cost FROM budget_accounts "
                 "WHERE account = ? AND period_start = ?")
_RATE_STATE = "SELECT requests, tokens FROM rate_windows WHERE key_id = ? AND window_start = ?"
_BUDGET_UPSERT_TAIL = (
    " ON CONFLICT (account, period_start) DO UPDATE SET"
    " reserved_tokens = budget_accounts.reserved_tokens + excluded.reserved_tokens,"
    " reserved_cost = budget_accounts.reserved_cost + excluded.reserved_cost,"
    # Limits are re-applied on every hold: a key's budget edited later takes effect at once.
    " max_tokens = excluded.max_tokens, max_cost = excluded.max_cost"
    " WHERE (excluded.max_tokens IS NULL OR budget_accounts.used_tokens + budget_accounts.reserved_tokens"
    " + excluded.reserved_tokens <= excluded.max_tokens)"
    " AND (excluded.max_cost IS NULL OR budget_accounts.used_cost + budget_accounts.reserved_cost"
    " + excluded.reserved_cost <= excluded.max_cost)"
    " RETURNING account, period_start")
_BUDGET_ROW = ("(?, CAST(? AS DOUBLE PRECISION), CAST(? AS BIGINT), CAST(? AS DOUBLE PRECISION), "
               "CAST(? AS BIGINT), CAST(? AS DOUBLE PRECISION))")


def merged_budgets(budgets: Iterable[BudgetLimit]) -> list[BudgetLimit]:
    """Sorted by (account, period_start), one per account: two rules naming one account hold the tighter limit."""
    by_key: dict[tuple[str, float], BudgetLimit] = {}
    for b in budgets:
        seen = by_key.get((b.account, b.period_start))
        if seen is not None:
            b = BudgetLimit(b.account, b.period_start, _tighter(seen.max_tokens, b.max_tokens),
                            _tighter(seen.max_cost, b.max_cost))
        by_key[(b.account, b.period_start)] = b
    return [by_key[k] for k in sorted(by_key)]


def _tighter(a: float | None, b: float | None):  # type: ignore[no-untyped-def]
    return b if a is None else a if b is None else min(a, b)


def never_fits(session: Session, tokens: int, cost: float, budgets: list[BudgetLimit],
               rate: RateLimit | None) -> Refused | None:
    """A request larger than a limit on its own: refused without taking a hold (the upserts below only
    check limits against rows that exist, so a first hold relies on this check)."""
    if rate is not None and rate.tpm is not None and tokens > rate.tpm:
        row = session.execute(_RATE_STATE, (rate.key_id, rate.window_start)).fetchone()
        return Refused(rate, "tokens", tuple(row) if row else (0, 0))
    for b in budgets:
        if (b.max_tokens is not None and tokens > b.max_tokens) or (b.max_cost is not None and cost > b.max_cost):
            row = session.execute(_BUDGET_STATE, (b.account, b.period_start)).fetchone()
            return Refused(b, "budget", tuple(row) if row else (0, 0, 0.0, 0.0))
    return None


def take_rate(session: Session, rate: RateLimit, tokens: int) -> dict[str, int]:
    conditions = []
    params: list[object] = [rate.key_id, rate.window_start, tokens]
    if rate.rpm is not None:
        conditions.append("rate_windows.requests + 1 <= ?")
        params.append(rate.rpm)
    if rate.tpm is not None:
        conditions.append("rate_windows.tokens + excluded.tokens <= ?")
        params.append(rate.tpm)
    row = session.execute(
        "INSERT INTO rate_windows (key_id, window_start, requests, tokens) VALUES (?, ?, 1, ?) "
        "ON CONFLICT (key_id, window_start) DO UPDATE SET requests = rate_windows.requests + 1, "
        "tokens = rate_windows.tokens + excluded.tokens WHERE " + " AND ".join(conditions) +
        " RETURNING requests, tokens", params).fetchone()
    if row is None:
        used = tuple(session.execute(_RATE_STATE, (rate.key_id, rate.window_start)).fetchone())
        what = "requests" if rate.rpm is not None and used[0] + 1 > rate.rpm else "tokens"
        raise Refused(rate, what, used)
    return {"requests": int(row[0]), "tokens": int(row[1])}


def take_budgets(session: Session, budgets: list[BudgetLimit], tokens: int, cost: float) -> None:
    """All budgets in one statement; any one short refuses the lot (the caller's transaction rolls back)."""
    params: list[object] = []
    for b in budgets:
        params += [b.account, b.period_start, b.max_tokens, b.max_cost, tokens, cost]
    sql = ("INSERT INTO budget_accounts (account, period_start, max_tokens, max_cost, reserved_tokens, "
           "reserved_cost) VALUES " + ", ".join([_BUDGET_ROW] * len(budgets)) + _BUDGET_UPSERT_TAIL)
    taken = {(str(r[0]), float(r[1])) for r in session.execute(sql, params).fetchall()}
    for b in budgets:
        if (b.account, float(b.period_start)) not in taken:
            raise Refused(b, "budget", tuple(session.execute(_BUDGET_STATE, (b.account, b.period_start)).fetchone()))


def insert_reservation(session: Session, hold: Hold, owner: str, now: float, expires_at: float) -> None:
    session.execute("INSERT INTO reservations (id, owner, created_at, expires_at, body) VALUES (?, ?, ?, ?, ?)",
                    (hold.id, owner, now, expires_at, json.dumps(hold_body(hold))))


def settle_hold(session: Session, hold: Hold, used_tokens: int, used_cost: float) -> bool:
    """Turn a hold into use. If a sweeper already freed it (its lease ran out), only the use is added.
    Returns whether the hold was still there."""
    claimed = session.execute("DELETE FROM reservations WHERE id = ?", (hold.id,)).rowcount == 1
    held_tokens, held_cost = (hold.tokens, hold.cost) if claimed else (0, 0.0)
    if hold.rate is not None:  # TPM counts what was used, once known
        r = hold.rate
        session.execute("UPDATE rate_windows SET tokens = tokens - ? WHERE key_id = ? AND window_start = ?",
                        (held_tokens - used_tokens, r.key_id, r.window_start))
    for b in merged_budgets(hold.budgets):
        session.execute(
            "UPDATE budget_accounts SET reserved_tokens = reserved_tokens - ?, reserved_cost = reserved_cost - ?, "
            "used_tokens = used_tokens + ?, used_cost = used_cost + ? WHERE account = ? AND period_start = ?",
            (held_tokens, held_cost, used_tokens, used_cost, b.account, b.period_start))
    return claimed


def free_expired(session: Session, now: float) -> int:
    """Delete every reservation whose lease ran out and give back what it held, in one transaction. The
    DELETE is the claim: a second sweeper (or a late settle) finds the row gone and frees nothing twice."""
    rows = session.execute("DELETE FROM reservations WHERE expires_at < ? RETURNING body", (now,)).fetchall()
    rate_back: dict[tuple[str, int], int] = {}
    budget_back: dict[tuple[str, float], tuple[int, float]] = {}
    for (body,) in rows:
        b = json.loads(body)
        if b["rate"]:
            key = (b["rate"][0], int(b["rate"][1]))
            rate_back[key] = rate_back.get(key, 0) + int(b["tokens"])
        for account, period_start, _max_tokens, _max_cost in b["budgets"]:
            tokens, cost = budget_back.get((account, float(period_start)), (0, 0.0))
            budget_back[(account, float(period_start))] = (tokens + int(b["tokens"]), cost + float(b["cost"]))
    for (key_id, window_start), tokens in sorted(rate_back.items()):
        session.execute("UPDATE rate_windows SET tokens = tokens - ? WHERE key_id = ? AND window_start = ?",
                        (tokens, key_id, window_start))
    for (account, period_start), (tokens, cost) in sorted(budget_back.items()):
        session.execute("UPDATE budget_accounts SET reserved_tokens = reserved_tokens - ?, "
                        "reserved_cost = reserved_cost - ? WHERE account = ? AND period_start = ?",
                        (tokens, cost, account, period_start))
    return len(rows)


def hold_body(hold: Hold) -> dict:
    rate = hold.rate
    return {"tokens": hold.tokens, "cost": hold.cost,
            "budgets": [[b.account, b.period_start, b.max_tokens, b.max_cost] for b in hold.budgets],
            "rate": [rate.key_id, rate.window_start, rate.rpm, rate.tpm] if rate else None}
