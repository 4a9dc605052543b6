"""Token and cost budgets, enforced before a request is sent.

Two kinds, checked together:
- config rules (``client.budgets``): per user, key, session or global, per hour/day/month/total,
  summed from the ledger plus what is in flight in this process;
- nested scopes: ``with budget_scope(max_tokens=...)`` opens a budget that every call inside it,
  and every nested scope, draws on. It travels in a ContextVar like a deadline, so a chain of
  calls (an agent calling a tool calling the model) cannot multiply tokens unseen.

A request reserves prompt + max_tokens (the most it can cost) in every applicable budget; on
completion the reservation is replaced by what was actually used.
"""

from __future__ import annotations

import calendar
import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from trtkit.client.caller import Caller
from trtkit.client.ledger import Ledger
from trtkit.config.schema import BudgetRule
from trtkit.errors import BudgetExceededError

_LOCK = threading.Lock()  # budget arithmetic is tiny; one lock keeps check-and-reserve atomic


@dataclass(slots=True)
class BudgetScope:
    name: str
    max_tokens: int | None
    max_cost: float | None
    parent: BudgetScope | None = None
    used_tokens: int = 0
    used_cost: float = 0.0
    reserved_tokens: int = 0
    reserved_cost: float = 0.0

    def chain(self) -> list[BudgetScope]:
        scopes, scope = [], self
        while scope is not None:
            scopes.append(scope)
            scope = scope.parent  # type: ignore[assignment]
        return scopes

    @property
    def remaining_tokens(self) -> int | None:
        return None if self.max_tokens is None else self.max_tokens - self.used_tokens - self.reserved_tokens


_current_scope: contextvars.ContextVar[BudgetScope | None] = contextvars.ContextVar("trtkit_budget", default=None)


@contextmanager
def budget_scope(max_tokens: int | None = None, max_cost: float | None = None,
                 name: str = "budget") -> Iterator[BudgetScope]:
    """Open a nested budget; it draws on the enclosing one, if any."""
    scope = BudgetScope(name, max_tokens, max_cost, parent=_current_scope.get())
    token = _current_scope.set(scope)
    try:
        yield scope
    finally:
        _current_scope.reset(token)


def current_scope() -> BudgetScope | None:
    return _current_scope.get()


def period_start(period: str, now: float) -> float:
    t = time.gmtime(now)
    if period == "hour":
        return calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, 0, 0))
    if period == "day":
        return calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
    if period == "month":
        return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
    return 0.0


@dataclass(slots=True)
class Reservation:
    tokens: int
    cost: float
    scopes: list[BudgetScope]
    rule_keys: list[tuple[int, str]] = field(default_factory=list)
    settled: bool = False


class BudgetGuard:
    """Checks config rules against the ledger and nested scopes against their counters."""

    _SCOPE_COLUMN = {"user": "user", "key": "key_id", "session": "session", "global": "user"}

    def __init__(self, rules: list[BudgetRule], ledger: Ledger | None) -> None:
        self.rules = rules
        self.ledger = ledger
        self._in_flight: dict[tuple[int, str], tuple[int, float]] = {}

    def reserve(self, caller: Caller, tokens: int, cost: float) -> Reservation:
        """Raise BudgetExceededError if ``tokens``/``cost`` would overrun any budget; else hold them."""
        scope = _current_scope.get()
        scopes = scope.chain() if scope else []
        with _LOCK:
            for s in scopes:
                _check(s.name, s.max_tokens, s.max_cost, s.used_tokens + s.reserved_tokens,
                       s.used_cost + s.reserved_cost, tokens, cost)
            rule_keys = self._check_rules(caller, tokens, cost)
            for s in scopes:
                s.reserved_tokens += tokens
                s.reserved_cost += cost
            for key in rule_keys:
                held = self._in_flight.get(key, (0, 0.0))
                self._in_flight[key] = (held[0] + tokens, held[1] + cost)
        return Reservation(tokens, cost, scopes, rule_keys)

    def settle(self, reservation: Reservation, used_tokens: int, used_cost: float, *,
               release_rules: bool = True) -> None:
        """Replace the reservation by actual use. Config rules read spending from the ledger, so a caller
        that has not committed the request's row yet passes release_rules=False and calls
        ``release_rules`` after the commit: until then the (larger) reservation still counts."""
        with _LOCK:
            if reservation.settled:
                return
            reservation.settled = True
            for s in reservation.scopes:
                s.reserved_tokens -= reservation.tokens
                s.reserved_cost -= reservation.cost
                s.used_tokens += used_tokens
                s.used_cost += used_cost
        if release_rules:
            self.release_rules(reservation)

    def release_rules(self, reservation: Reservation) -> None:
        with _LOCK:
            for key in reservation.rule_keys:
                held = self._in_flight[key]
                self._in_flight[key] = (held[0] - reservation.tokens, held[1] - reservation.cost)
            reservation.rule_keys = []

    def _check_rules(self, caller: Caller, tokens: int, cost: float) -> list[tuple[int, str]]:
        keys = []
        now = time.time()
        for index, rule in enumerate(self.rules):
            subject = "" if rule.scope == "global" else caller.field(rule.scope)
            key = (index, subject)
            spent_tokens, spent_cost = self._spent(rule, subject, now)
            held = self._in_flight.get(key, (0, 0.0))
            _check(f"{rule.scope} {subject or '*'} per {rule.period}", rule.max_tokens, rule.max_cost,
                   spent_tokens + held[0], spent_cost + held[1], tokens, cost)
            keys.append(key)
        return keys

    def _spent(self, rule: BudgetRule, subject: str, now: float) -> tuple[int, float]:
        if self.ledger is None:
            return 0, 0.0
        value = None if rule.scope == "global" else subject
        return self.ledger.spent(self._SCOPE_COLUMN[rule.scope], value, period_start(rule.period, now))


def _check(name: str, max_tokens: int | None, max_cost: float | None, spent_tokens: int, spent_cost: float,
           tokens: int, cost: float) -> None:
    if max_tokens is not None and spent_tokens + tokens > max_tokens:
        raise BudgetExceededError(
            f"budget '{name}' allows {max_tokens} tokens, {spent_tokens} used or reserved, this request needs up "
            f"to {tokens} (prompt + max_tokens); lower max_tokens, shorten the prompt or raise the budget")
    if max_cost is not None and spent_cost + cost > max_cost:
        raise BudgetExceededError(
            f"budget '{name}' allows cost {max_cost:g}, {spent_cost:g} used or reserved, this request may cost "
            f"{cost:g}; lower max_tokens or raise the budget")
