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
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, cast

from trtkit.config.schema import BudgetRule
from trtkit.errors import BudgetExceededError
from trtkit.governance.vocabulary import Caller
from trtkit.store.ledger import Ledger

log = logging.getLogger(__name__)
_LOCK = threading.Lock()  # budget arithmetic is tiny; one lock keeps check-and-reserve atomic


@dataclass(slots=True)
class BudgetScope:
    name: str
    max_tokens: int | None
    max_cost: float | None
    parent: BudgetScope | None = None
    owner: str = ""  # a request's scope: the tenant (Caller.tenant) whose request it is
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
def draw_on(scope: BudgetScope) -> Iterator[BudgetScope]:
    """Calls inside draw on ``scope`` (e.g. a running request's reservation, for its nested calls)."""
    token = _current_scope.set(scope)
    try:
        yield scope
    finally:
        _current_scope.reset(token)


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
    rules_handle: object | None = None  # what the RuleBook needs to settle its part
    request_id: str = ""
    settled: bool = False
    used_tokens: int = 0
    used_cost: float = 0.0


class RuleBook(Protocol):
    """The budgets that are not nested scopes: config rules summed from the ledger (the library), or a
    shared store with atomic conditional updates (the gateway). ``reserve`` raises when a limit would be
    overrun; ``settle`` replaces the hold by what was used."""

    # True when reserve/settle wait on a database across the network: asyncio callers then run them in a
    # worker thread, so one replica's event loop never stops for a round trip
    waits_on_network: bool

    def reserve(self, caller: Caller, tokens: int, cost: float, request_id: str) -> object: ...

    def settle(self, handle: object, used_tokens: int, used_cost: float) -> None: ...


class LedgerRuleBook:
    """``client.budgets`` rules: spending read from the ledger, plus what is in flight in this process."""

    _SCOPE_COLUMN = {"user": "user", "key": "key_id", "session": "session", "global": "user"}
    waits_on_network = False  # in-process sums; the ledger is read only for rules, at admission

    def __init__(self, rules: list[BudgetRule], ledger: Ledger | None) -> None:
        self.rules = rules
        self.ledger = ledger
        self._in_flight: dict[tuple[int, str], tuple[int, float]] = {}

    def reserve(self, caller: Caller, tokens: int, cost: float, request_id: str) -> object:
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
        for key in keys:
            held = self._in_flight.get(key, (0, 0.0))
            self._in_flight[key] = (held[0] + tokens, held[1] + cost)
        return (keys, tokens, cost)

    def settle(self, handle: object, used_tokens: int, used_cost: float) -> None:
        # The ledger row is committed by now, so spending is read from it: only the hold goes.
        keys, tokens, cost = cast(tuple[list[tuple[int, str]], int, float], handle)
        for key in keys:
            held = self._in_flight[key]
            self._in_flight[key] = (held[0] - tokens, held[1] - cost)

    def _spent(self, rule: BudgetRule, subject: str, now: float) -> tuple[int, float]:
        if self.ledger is None:
            return 0, 0.0
        value = None if rule.scope == "global" else subject
        return self.ledger.spent(self._SCOPE_COLUMN[rule.scope], value, period_start(rule.period, now))


class BudgetGuard:
    """The one admission path for budgets: nested scopes (counters here) and a RuleBook, reserved together."""

    def __init__(self, rules: list[BudgetRule], ledger: Ledger | None, rulebook: RuleBook | None = None) -> None:
        self.rulebook: RuleBook = rulebook or LedgerRuleBook(rules, ledger)
        self._request_scopes: dict[str, BudgetScope] = {}

    @property
    def waits_on_network(self) -> bool:
        return self.rulebook.waits_on_network

    def reserve(self, caller: Caller, tokens: int, cost: float, request_id: str = "") -> Reservation:
        """Raise BudgetExceededError if ``tokens``/``cost`` would overrun any budget; else hold them.
        With a request id, the reservation also becomes a scope that nested calls can draw on
        (``scope_of(request_id)``) while the request runs."""
        scope = _current_scope.get()
        scopes = scope.chain() if scope else []
        with _LOCK:
            for s in scopes:
                _check(s.name, s.max_tokens, s.max_cost, s.used_tokens + s.reserved_tokens,
                       s.used_cost + s.reserved_cost, tokens, cost)
            handle = self.rulebook.reserve(caller, tokens, cost, request_id)
            for s in scopes:
                s.reserved_tokens += tokens
                s.reserved_cost += cost
            if request_id:
                self._request_scopes[request_id] = BudgetScope(f"request {request_id}", tokens, cost,
                                                               owner=caller.tenant)
        return Reservation(tokens, cost, scopes, handle, request_id)

    def scope_of(self, request_id: str, tenant: str | None = None) -> BudgetScope | None:
        """The budget a running request's reservation offers to calls it makes (None once it ended). With a
        ``tenant``, only that tenant's request: another tenant's is as good as absent (it may neither draw on it
        nor learn that it runs)."""
        with _LOCK:
            scope = self._request_scopes.get(request_id)
        return None if scope is None or (tenant is not None and scope.owner != tenant) else scope

    def settle(self, reservation: Reservation, used_tokens: int, used_cost: float, *,
               release_rules: bool = True) -> None:
        """Replace the reservation by actual use. Config rules read spending from the ledger, so a caller
        that has not committed the request's row yet passes release_rules=False and calls
        ``release_rules`` after the commit: until then the (larger) reservation still counts."""
        with _LOCK:
            if reservation.settled:
                return
            reservation.settled = True
            reservation.used_tokens, reservation.used_cost = used_tokens, used_cost
            for s in reservation.scopes:
                s.reserved_tokens -= reservation.tokens
                s.reserved_cost -= reservation.cost
                s.used_tokens += used_tokens
                s.used_cost += used_cost
            self._request_scopes.pop(reservation.request_id, None)
        if release_rules:
            self.release_rules(reservation)

    def release_rules(self, reservation: Reservation) -> None:
        with _LOCK:
            handle, reservation.rules_handle = reservation.rules_handle, None
            if handle is not None:
                try:
                    self.rulebook.settle(handle, reservation.used_tokens, reservation.used_cost)
                except Exception:  # a hold left behind would be renewed for ever: give it back whole
                    log.exception("settling a hold of %d tokens failed; releasing it", reservation.tokens)
                    self.rulebook.settle(handle, 0, 0.0)


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
