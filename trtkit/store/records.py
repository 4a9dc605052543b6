"""The gateway store's records: API keys (secrets only as hashes), budget and rate limits, holds."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class ApiKey:
    key_id: str  # public; appears in `keys list`
    name: str  # the tenant name written to the ledger (key_id column) and metrics
    user: str = ""
    budget_tokens: int | None = None
    budget_cost: float | None = None
    period: str = "month"
    rpm: int | None = None
    tpm: int | None = None
    models: tuple[str, ...] = field(default_factory=tuple)  # empty: every model
    created_at: float = 0.0
    revoked_at: float | None = None
    can_budget_conversations: bool = False  # may give a conversation its own budget (Responses API metadata)
    max_concurrent: int | None = None  # requests in flight at once (None: gateway.limits.max_concurrent_per_key)

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def allows_model(self, model: str) -> bool:
        return not self.models or model in self.models


@dataclass(slots=True, frozen=True)
class BudgetLimit:
    account: str  # "key:<name>", "user:<name>:<period>", "global:*:<period>", ...
    period_start: float
    max_tokens: int | None
    max_cost: float | None


@dataclass(slots=True, frozen=True)
class RateLimit:
    key_id: str
    window_start: int  # unix minute start
    rpm: int | None
    tpm: int | None


@dataclass(slots=True, frozen=True)
class SlotLimit:
    """A key's requests in flight at once: one slot a hold, counted in ``key_slots`` (exact across replicas)."""

    key_id: str
    max_concurrent: int


@dataclass(slots=True)
class Hold:
    """One admitted request's holds; settle() turns them into use."""

    id: str
    tokens: int
    cost: float
    budgets: list[BudgetLimit]
    rate: RateLimit | None
    rate_state: dict[str, int] = field(default_factory=dict)  # requests/tokens used in the window after admission
    body: str = ""  # its reservation row's JSON (holds.hold_json), made once
    slot: SlotLimit | None = None  # one of its key's concurrent slots


class Refused(Exception):
    """A conditional update matched no row. ``limit`` is what refused; ``state`` its counters then:
    (requests, tokens) of a rate window, (used_tokens, reserved_tokens, used_cost, reserved_cost) of a budget,
    (in_flight,) of a key's slots."""

    def __init__(self, limit: BudgetLimit | RateLimit | SlotLimit, what: str, state: tuple) -> None:
        super().__init__(what)
        self.limit, self.what, self.state = limit, what, state
