"""Budget holds and rate windows in SQL: the conditional statements admission is made of.

An admission is a list of conditional holds, one per limit: the rate windows of the key and of each level above
it (organisation, team, project), then the budget rows of each. All are taken in one transaction or none is.

Lock order, the same in every transaction, so PostgreSQL never deadlocks on them: a reservation row
first (settle and the sweeper claim it with DELETE; reserve inserts a new one last, which nobody else
can be waiting on), then the key's concurrency slot (``slots.py``), then the rate windows sorted by (subject,
window_start), then budget rows sorted by (account, period_start).

SQLite runs the statements below; PostgreSQL runs the same steps as two functions (``trtkit_reserve``,
``trtkit_settle``: ``pg_admission.py``, created by migration 12), one call each whatever the hold holds: that
halves the client's and the server's CPU per admission (``benchmarks/store_throughput.py``). A change to one is a
change to both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from trtkit.store import leases, slots
from trtkit.store.records import BudgetLimit, Hold, RateLimit, Refused, SlotLimit
from trtkit.store.session import Result, Session, Statement

_BUDGET_STATE = ("SELECT used_tokens, reserved_tokens, used_cost, reserved_cost FROM budget_accounts "
                 "WHERE account = ? AND period_start = ?")
_RATE_STATE = "SELECT requests, tokens FROM rate_windows WHERE key_id = ? AND window_start = ?"
# The guard ``x / (CASE WHEN fits THEN 1 ELSE 0 END)`` fails the statement when a limit would be passed
# (see session.LimitReached), so a whole admission goes in one flight and rolls back whole.
_GUARD = "/ (CASE WHEN {fits} THEN 1 ELSE 0 END)"
_BUDGET_FITS = ("(excluded.max_tokens IS NULL OR budget_accounts.used_tokens + budget_accounts.reserved_tokens"
                " + excluded.reserved_tokens <= excluded.max_tokens)"
                " AND (excluded.max_cost IS NULL OR budget_accounts.used_cost + budget_accounts.reserved_cost"
                " + excluded.reserved_cost <= excluded.max_cost)")
_BUDGET_UPSERT_TAIL = (
    " ON CONFLICT (account, period_start) DO UPDATE SET"
    " reserved_tokens = budget_accounts.reserved_tokens + excluded.reserved_tokens " + _GUARD.format(fits=_BUDGET_FITS) +
    ", reserved_cost = budget_accounts.reserved_cost + excluded.reserved_cost,"
    # Limits are re-applied on every hold: a key's budget edited later takes effect at once.
    " max_tokens = excluded.max_tokens, max_cost = excluded.max_cost")
_BUDGET_ROW = ("(?, CAST(? AS DOUBLE PRECISION), CAST(? AS BIGINT), CAST(? AS DOUBLE PRECISION), "
               "CAST(? AS BIGINT), CAST(? AS DOUBLE PRECISION))")
# Settle and the sweeper hand back a hold only while its reservation row exists: the row is locked first
# (PostgreSQL: FOR UPDATE; SQLite: one writer at a time), so a hold is never given back twice.
_HELD = "CASE WHEN EXISTS (SELECT 1 FROM reservations WHERE id = ?) THEN ? ELSE 0 END"


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


def merged_rates(rates: Iterable[RateLimit]) -> list[RateLimit]:
    """Sorted by (subject, window_start), one per window: the lock order."""
    by_key: dict[tuple[str, int], RateLimit] = {}
    for r in rates:
        seen = by_key.get((r.key_id, r.window_start))
        if seen is not None:
            r = RateLimit(r.key_id, r.window_start, _tighter(seen.rpm, r.rpm), _tighter(seen.tpm, r.tpm))
        by_key[(r.key_id, r.window_start)] = r
    return [by_key[k] for k in sorted(by_key)]


def never_fits(tokens: int, cost: float, budgets: list[BudgetLimit],
               rates: list[RateLimit]) -> BudgetLimit | RateLimit | None:
    """A limit the request passes on its own (checked here: a first hold inserts its row unguarded)."""
    for rate in rates:
        if rate.tpm is not None and tokens > rate.tpm:
            return rate
    for b in budgets:
        if (b.max_tokens is not None and tokens > b.max_tokens) or (b.max_cost is not None and cost > b.max_cost):
            return b
    return None


def reserve_statements(hold: Hold, owner: str, now: float, expires_at: float, dialect: str) -> list[Statement]:
    """The rate windows (one statement each, in lock order), the budgets (one statement, rows in lock order), the
    key's slot, the reservation row: one flight. On PostgreSQL one call of ``trtkit_reserve`` (``pg_admission.py``),
    which runs the same statements server-side (the slot first, in lock order) and answers one row per rate window,
    (requests, tokens), as the rate statements here do (``rate_states``)."""
    if dialect == "postgresql":
        return [("SELECT out_requests, out_tokens FROM trtkit_reserve(?, ?, ?, ?, ?)",
                 (hold.id, owner, now, expires_at, hold_json(hold)))]
    statements: list[Statement] = [_rate_statement(rate, hold.tokens) for rate in hold.rates]
    if hold.budgets:
        params: list[object] = []
        for b in hold.budgets:
            params += [b.account, b.period_start, b.max_tokens, b.max_cost, hold.tokens, hold.cost]
        statements.append(("INSERT INTO budget_accounts (account, period_start, max_tokens, max_cost, "
                           "reserved_tokens, reserved_cost) VALUES " + ", ".join([_BUDGET_ROW] * len(hold.budgets))
                           + _BUDGET_UPSERT_TAIL, params))
    if hold.slot is not None:  # (SQLite has one writer: the order of statements cannot deadlock)
        statements.append(slots.take(hold.slot))
    statements.append(("INSERT INTO reservations (id, owner, created_at, expires_at, body) VALUES (?, ?, ?, ?, ?)",
                       (hold.id, owner, now, expires_at, hold_json(hold))))
    return statements


def _rate_statement(rate: RateLimit, tokens: int) -> Statement:
    fits = []
    params: list[object] = [rate.key_id, rate.window_start, tokens]
    if rate.rpm is not None:
        fits.append("rate_windows.requests + 1 <= ?")
        params.append(rate.rpm)
    if rate.tpm is not None:
        fits.append("rate_windows.tokens + excluded.tokens <= ?")
        params.append(rate.tpm)
    guard = _GUARD.format(fits=" AND ".join(fits) or "1 = 1")
    return ("INSERT INTO rate_windows (key_id, window_start, requests, tokens) VALUES (?, ?, 1, ?) "
            f"ON CONFLICT (key_id, window_start) DO UPDATE SET requests = rate_windows.requests + 1 {guard}, "
            "tokens = rate_windows.tokens + excluded.tokens RETURNING requests, tokens", params)


def rate_states(results: list[Result], hold: Hold, dialect: str) -> list[dict[str, int]]:
    """Each rate window's (requests, tokens) after the admission, in the order of ``hold.rates``."""
    rows = results[0].rows if dialect == "postgresql" else [r.rows[0] for r in results[:len(hold.rates)]]
    return [{"requests": int(requests), "tokens": int(used)} for requests, used in rows]


def refusal(session: Session, tokens: int, cost: float, budgets: list[BudgetLimit],
            rates: list[RateLimit], slot: SlotLimit | None = None) -> Refused:
    """Which limit said no, with its counters now (read after the rolled-back admission)."""
    if slot is not None:
        taken = slots.in_flight(session, slot)
        if taken + 1 > slot.max_concurrent:
            return Refused(slot, "concurrency", (taken,))
    for rate in rates:
        row = session.execute(_RATE_STATE, (rate.key_id, rate.window_start)).fetchone()
        used = (int(row[0]), int(row[1])) if row else (0, 0)
        if rate.rpm is not None and used[0] + 1 > rate.rpm:
            return Refused(rate, "requests", used)
        if rate.tpm is not None and used[1] + tokens > rate.tpm:
            return Refused(rate, "tokens", used)
    states = []
    for b in budgets:
        row = session.execute(_BUDGET_STATE, (b.account, b.period_start)).fetchone()
        state = (int(row[0]), int(row[1]), float(row[2]), float(row[3])) if row else (0, 0, 0.0, 0.0)
        states.append((b, state))
        if (b.max_tokens is not None and state[0] + state[1] + tokens > b.max_tokens) or \
                (b.max_cost is not None and state[2] + state[3] + cost > b.max_cost):
            return Refused(b, "budget", state)
    # Freed meanwhile (a settle between the refusal and this read): still refused, naming the nearest limit.
    if states:
        return Refused(states[0][0], "budget", states[0][1])
    if not rates:
        assert slot is not None
        return Refused(slot, "concurrency", (slots.in_flight(session, slot),))
    rate = rates[0]
    row = session.execute(_RATE_STATE, (rate.key_id, rate.window_start)).fetchone()
    return Refused(rate, "requests" if rate.rpm is not None else "tokens", tuple(row) if row else (0, 0))


def settle_statements(hold: Hold, used_tokens: int, used_cost: float, dialect: str) -> list[Statement]:
    """Turn a hold into use in one flight: lock its reservation row, give back what it held only if the row
    is still there (a sweeper may have freed it when its lease ran out), add the use, delete the row.
    On PostgreSQL one call of ``trtkit_settle`` (``pg_admission.py``) runs the same steps server-side."""
    if dialect == "postgresql":
        return [("SELECT trtkit_settle(?, ?, ?, ?)", (hold.id, hold_json(hold), used_tokens, float(used_cost)))]
    statements: list[Statement] = [("SELECT id FROM reservations WHERE id = ?", (hold.id,))]
    if hold.slot is not None:
        statements.append(slots.give_back(hold))
    for r in hold.rates:  # TPM counts what was used, once known
        statements.append((f"UPDATE rate_windows SET tokens = tokens - {_HELD} + ? WHERE key_id = ? AND "
                           "window_start = ?", (hold.id, hold.tokens, used_tokens, r.key_id, r.window_start)))
    for b in hold.budgets:
        statements.append((f"UPDATE budget_accounts SET reserved_tokens = reserved_tokens - {_HELD}, "
                           f"reserved_cost = reserved_cost - {_HELD}, used_tokens = used_tokens + ?, "
                           "used_cost = used_cost + ? WHERE account = ? AND period_start = ?",
                           (hold.id, hold.tokens, hold.id, hold.cost, used_tokens, used_cost, b.account,
                            b.period_start)))
    statements.append(("DELETE FROM reservations WHERE id = ?", (hold.id,)))
    return statements


def settled_a_live_hold(results: list[Result], dialect: str) -> bool:
    """Whether the settle found its hold still reserved (not freed meanwhile by a sweeper)."""
    if dialect == "postgresql":
        return int(results[0].rows[0][0]) == 1
    return results[-1].rowcount == 1


def free_expired(session: Session, now: float, in_flight: set[str]) -> int:
    """Delete every reservation whose lease ran out, but this store's ``in_flight`` ones, and give back what it
    held, in one transaction (``leases.claim_expired``: each hold is freed exactly once, whoever sweeps)."""
    rows = leases.claim_expired(session, "reservations", now, "body", spared=in_flight)
    rate_back: dict[tuple[str, int], int] = {}
    budget_back: dict[tuple[str, float], tuple[int, float]] = {}
    slots_back: dict[str, int] = {}
    for (body,) in rows:
        b = json.loads(body)
        slot = slots.slot_of(b)
        if slot is not None:
            slots_back[slot.key_id] = slots_back.get(slot.key_id, 0) + 1
        for rate in _body_rates(b):
            key = (rate[0], int(rate[1]))
            rate_back[key] = rate_back.get(key, 0) + int(b["tokens"])
        for account, period_start, _max_tokens, _max_cost in b["budgets"]:
            tokens, cost = budget_back.get((account, float(period_start)), (0, 0.0))
            budget_back[(account, float(period_start))] = (tokens + int(b["tokens"]), cost + float(b["cost"]))
    slots.give_back_expired(session, slots_back)
    for (key_id, window_start), tokens in sorted(rate_back.items()):
        session.execute("UPDATE rate_windows SET tokens = tokens - ? WHERE key_id = ? AND window_start = ?",
                        (tokens, key_id, window_start))
    for (account, period_start), (tokens, cost) in sorted(budget_back.items()):
        session.execute("UPDATE budget_accounts SET reserved_tokens = reserved_tokens - ?, "
                        "reserved_cost = reserved_cost - ? WHERE account = ? AND period_start = ?",
                        (tokens, cost, account, period_start))
    return len(rows)


def hold_json(hold: Hold) -> str:
    """The reservation row's body, made once per hold (admission and settle both send it)."""
    if not hold.body:
        hold.body = json.dumps(hold_body(hold))
    return hold.body


def hold_body(hold: Hold) -> dict:
    body = {"tokens": hold.tokens, "cost": hold.cost,
            "budgets": [[b.account, b.period_start, b.max_tokens, b.max_cost] for b in hold.budgets],
            "rates": [[r.key_id, r.window_start, r.rpm, r.tpm] for r in hold.rates]}
    if hold.slot is not None:
        body["slot"] = [hold.slot.key_id, hold.slot.max_concurrent]
    return body


def _body_rates(body: dict) -> list[list]:
    """A reservation body's rate windows: ``rates``, or the single ``rate`` of a hold made before migration 11."""
    if "rates" in body:
        return list(body["rates"])
    return [body["rate"]] if body.get("rate") else []
