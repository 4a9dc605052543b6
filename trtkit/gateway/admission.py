"""Admission against the shared store: the gateway's RuleBook for the client's BudgetGuard.

The Governor's one admission path (``BudgetGuard.reserve`` → ``settle`` → ``release_rules``) calls
this RuleBook, which turns a request into holds in the store: the RPM/TPM windows and the budgets for their periods
of the key and of every level above it (its project, team and organisation: ``ApiKey.chain``), a stored
conversation's own budget, every ``client.budgets`` rule that applies (user, key, session, global), and one of the
key's concurrent slots (``store/slots.py``).
All are taken in one transaction with conditional updates, or none is. Nothing else touches a budget. A refusal
names the level and the limit that refused (``team 'ml': budget of 5000 tokens per month``).
"""

from __future__ import annotations

import contextvars
import ipaddress
import math
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from trtkit.config.schema import BudgetRule
from trtkit.errors import BudgetExceededError
from trtkit.gateway.errors import ConcurrencyLimitedError, RateLimitedError
from trtkit.gateway.keys import ApiKey
from trtkit.governance.budgets import period_start
from trtkit.governance.vocabulary import Caller
from trtkit.store import BudgetLimit, GatewayStore, Hold, RateLimit, Refused
from trtkit.store.conversations import budget_account
from trtkit.store.records import LEVELS, SlotLimit

# The key of the request being admitted (set by the serving layer; asyncio tasks copy it).
current_key: contextvars.ContextVar[ApiKey | None] = contextvars.ContextVar("trtkit_gateway_key", default=None)
# A stored conversation's own token budget, (conversation id, tokens), while one of its turns is admitted (set by
# the Responses API's serving class): held in the store like every other budget, in the same transaction.
conversation_budget: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "trtkit_conversation_budget", default=None)


AlertHook = Callable[[list[BudgetLimit], dict[str, tuple[float, ...]]], None]


class StoreRuleBook:
    """``max_concurrent_per_key``: requests of one key in flight at once, unless the key sets its own
    (``gateway.limits.max_concurrent_per_key``; None: no cap), held in the store as one more conditional update.
    ``on_settle``: spend alerts (``alerts.py``), told after each settle which budget accounts it drew on."""

    def __init__(self, store: GatewayStore, rules: list[BudgetRule], *, waits_on_network: bool = False,
                 on_settle: AlertHook | None = None, alert_at: tuple[float, ...] = (),
                 max_concurrent_per_key: int | None = None) -> None:
        self.store = store
        self.rules = rules
        self.waits_on_network = waits_on_network
        self.max_concurrent_per_key = max_concurrent_per_key
        self.rate_headers: dict[str, dict[str, str]] = {}  # request id -> x-ratelimit-* of its admission
        # spend alerts (gateway.alerts): told which budget accounts a settled request drew on, with each account's
        # thresholds (its own --alert-at, else ``alert_at``, the config's); must not block
        self.on_settle = on_settle
        self.alert_at = alert_at
        self._alerting: dict[str, dict[str, tuple[float, ...]]] = {}
        # this replica's own holds in flight per key: a lower bound of the store's count, so a key already at its
        # cap here is refused before its prompt is counted (a burst of 150 costs the door, not the loop's time)
        self._local_slots: dict[str, int] = {}
        self._local_holds: set[str] = set()  # the holds counted there (each given back once, however settled)
        self._local_lock = threading.Lock()

    def reserve(self, caller: Caller, tokens: int, cost: float, request_id: str) -> object:
        key = current_key.get()
        now = time.time()
        rates = _rate_limits(key, now)
        slot = self._slot(key)
        try:
            hold = self.store.reserve(tokens, cost, self._budgets(caller, key, now), rates, slot)
        except Refused as refused:
            raise _refusal(refused, tokens, cost, now, key) from None
        if slot is not None:
            with self._local_lock:
                self._local_slots[slot.key_id] = self._local_slots.get(slot.key_id, 0) + 1
                self._local_holds.add(hold.id)
        if hold.rates and request_id:
            self.rate_headers[request_id] = tightest_rate_headers(hold.rates, hold.rate_states, now)
        if self.on_settle is not None and key is not None:
            thresholds = self._thresholds(key)
            if thresholds:
                self._alerting[hold.id] = thresholds
        return hold

    def settle(self, handle: object, used_tokens: int, used_cost: float) -> None:
        assert isinstance(handle, Hold)
        try:
            self.store.settle(handle, used_tokens, used_cost)
        finally:
            with self._local_lock:
                if handle.slot is not None and handle.id in self._local_holds:
                    self._local_holds.discard(handle.id)
                    self._local_slots[handle.slot.key_id] -= 1
        thresholds = self._alerting.pop(handle.id, None) if self.on_settle is not None else None
        if thresholds and used_tokens and self.on_settle is not None:
            self.on_settle(handle.budgets, thresholds)  # spend alerts look at these accounts, off the request's path

    def refuse_at_cap(self, key: ApiKey | None) -> None:
        """Raise ConcurrencyLimitedError when this replica alone holds the key's cap already (the store would refuse
        the key too: its count is at least this replica's); cheap, so called before any work on the request."""
        slot = self._slot(key)
        if slot is not None and self._local_slots.get(slot.key_id, 0) >= slot.max_concurrent:
            raise _refusal(Refused(slot, "concurrency", (self._local_slots.get(slot.key_id, 0),)), 0, 0.0,
                           time.time(), key)

    def _slot(self, key: ApiKey | None) -> SlotLimit | None:
        cap = None if key is None else key.max_concurrent or self.max_concurrent_per_key
        return None if cap is None or key is None else SlotLimit(key.key_id, cap)

    def _thresholds(self, key: ApiKey) -> dict[str, tuple[float, ...]]:
        """Each budget account of the key and its levels, with the thresholds it alerts at."""
        found = {}
        if key.budget_tokens is not None or key.budget_cost is not None:
            found[key.account] = key.alert_at or self.alert_at
        for scope in key.chain:
            if scope.budget_tokens is not None or scope.budget_cost is not None:
                found[scope.account] = scope.alert_at or self.alert_at
        return {account: at for account, at in found.items() if at}

    def _budgets(self, caller: Caller, key: ApiKey | None, now: float) -> list[BudgetLimit]:
        limits = []
        if key is not None and (key.budget_tokens is not None or key.budget_cost is not None):
            limits.append(BudgetLimit(key.account, period_start(key.period, now), key.budget_tokens,
                                      key.budget_cost))
        for scope in key.chain if key is not None else ():
            if scope.budget_tokens is not None or scope.budget_cost is not None:
                limits.append(BudgetLimit(scope.account, period_start(scope.period, now), scope.budget_tokens,
                                          scope.budget_cost))
        conversation = conversation_budget.get()
        if conversation is not None:
            limits.append(BudgetLimit(budget_account(conversation[0]), 0.0, conversation[1], None))
        for rule in self.rules:
            subject = "*" if rule.scope == "global" else caller.field(rule.scope)
            limits.append(BudgetLimit(f"{rule.scope}:{subject}:{rule.period}", period_start(rule.period, now),
                                      rule.max_tokens, rule.max_cost))
        return limits


def waits_on_network(store: GatewayStore, store_calls: str = "auto") -> bool:
    """Whether the gateway waits on ``store`` in worker threads (``gateway.store_calls``). auto: only for a
    PostgreSQL host across the network. On this 2-core machine a thread hop costs ~0.4 ms of CPU per echo
    request, more than a loopback round trip (~0.2 ms) or a SQLite call (~0.1 ms), but a remote database's
    round trip on the event loop would stop every other request of the replica."""
    if store_calls != "auto":
        return store_calls == "threads"
    if store.url.backend == "sqlite":
        return False
    host = urlsplit(store.url.dsn or "").hostname or ""
    return not (host in ("", "localhost") or _is_loopback(host))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _rate_limits(key: ApiKey | None, now: float) -> list[RateLimit]:
    """The key's RPM/TPM window and each level's above it, for this minute."""
    if key is None:
        return []
    window = int(now // 60) * 60
    rates = [RateLimit(key.key_id, window, key.rpm, key.tpm)] if key.rpm is not None or key.tpm is not None else []
    rates += [RateLimit(scope.account, window, scope.rpm, scope.tpm) for scope in key.chain
              if scope.rpm is not None or scope.tpm is not None]
    return rates


def tightest_rate_headers(rates: list[RateLimit], states: list[dict[str, int]], now: float) -> dict[str, str]:
    """x-ratelimit-* of the window with the least room left, per kind (requests, tokens)."""
    headers: dict[str, str] = {}
    for kind, limit_of in (("requests", lambda r: r.rpm), ("tokens", lambda r: r.tpm)):
        limited = [(limit_of(r) - st.get(kind, 0), r, st) for r, st in zip(rates, states, strict=False)
                   if limit_of(r) is not None]
        if limited:
            _room, rate, state = min(limited, key=lambda item: item[0])
            headers |= {k: v for k, v in rate_headers(rate, state, now).items() if kind in k}
    return headers


def rate_headers(rate: RateLimit, used: dict[str, int], now: float) -> dict[str, str]:
    """The x-ratelimit-* headers OpenAI clients read."""
    reset = f"{max(0.0, rate.window_start + 60 - now):.3f}s"
    headers = {}
    for kind, limit in (("requests", rate.rpm), ("tokens", rate.tpm)):
        if limit is not None:
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used.get(kind, 0)))
            headers[f"x-ratelimit-reset-{kind}"] = reset
    return headers


def _level_of(subject: str, key: ApiKey | None) -> tuple[str, str, str] | None:
    """(level, name, period) of a window subject or budget account that is a key or a level; else None."""
    level, _, name = subject.partition(":")
    if key is not None and subject in (key.key_id, key.account):
        return "key", key.name, key.period
    for scope in key.chain if key is not None else ():
        if (level, name) == (scope.level, scope.name):
            return level, name, scope.period
    return (level, name, "period") if level in LEVELS else None


def _refusal(refused: Refused, tokens: int, cost: float, now: float, key: ApiKey | None = None) -> Exception:
    limit = refused.limit
    if isinstance(limit, SlotLimit):
        who = f"key '{key.name}'" if key is not None else "this key"
        return ConcurrencyLimitedError(
            f"concurrency limit of {who}: {refused.state[0]} requests in flight, its limit is {limit.max_concurrent} "
            f"(the key's max_concurrent, else gateway.limits.max_concurrent_per_key); retry when one has ended",
            1, {"retry-after": "1"})
    if isinstance(limit, RateLimit):
        retry_after = max(1, math.ceil(limit.window_start + 60 - now))
        used = {"requests": refused.state[0], "tokens": refused.state[1]}
        headers = rate_headers(limit, used, now) | {"retry-after": str(retry_after)}
        found = _level_of(limit.key_id, key)
        who = f"{found[0]} '{found[1]}'" if found else "this key"
        if refused.what == "requests":
            message = f"rate limit of {who}: {limit.rpm} requests per minute; retry in {retry_after} s"
        else:
            message = (f"rate limit of {who}: {limit.tpm} tokens per minute, {used['tokens']} used, this "
                       f"request needs up to {tokens} (prompt + max_tokens); lower max_tokens or retry in "
                       f"{retry_after} s")
        return RateLimitedError(message, retry_after, headers)
    used_tokens, reserved_tokens, used_cost, reserved_cost = refused.state
    found = _level_of(limit.account, key)
    held_tokens, held_cost = used_tokens + reserved_tokens, used_cost + reserved_cost
    by_tokens = limit.max_tokens is not None and held_tokens + tokens > limit.max_tokens
    if found is not None:  # a key or a level: named, with the limit and its period
        who = f"{found[0]} '{found[1]}'"
        what = f"{limit.max_tokens} tokens" if by_tokens else f"cost {limit.max_cost:g}"
        held = f"{held_tokens}" if by_tokens else f"{held_cost:g}"
        needs = f"needs up to {tokens} (prompt + max_tokens)" if by_tokens else f"may cost {cost:g}"
        return BudgetExceededError(f"{who}: budget of {what} per {found[2]}, {held} used or reserved, this request "
                                   f"{needs}; lower max_tokens or raise the {found[0]}'s budget")
    if by_tokens:
        return BudgetExceededError(
            f"budget '{limit.account}' allows {limit.max_tokens} tokens, {held_tokens} used or "
            f"reserved, this request needs up to {tokens} (prompt + max_tokens); lower max_tokens or raise the budget")
    return BudgetExceededError(
        f"budget '{limit.account}' allows cost {limit.max_cost:g}, {held_cost:g} used or reserved, "
        f"this request may cost {cost:g}; lower max_tokens or raise the budget")
