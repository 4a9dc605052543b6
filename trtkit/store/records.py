"""The gateway store's records: API keys (secrets only as hashes), the organisation -> team -> project levels
above them, budget and rate limits, holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

LEVELS = ("org", "team", "project")  # from the top; a key hangs under a project (or under nothing)
PARENT_LEVEL = {"team": "org", "project": "team"}


@dataclass(slots=True, frozen=True)
class ModelPrice:
    """Prices per million tokens of one model (an organisation's override of the config's)."""

    input_per_million: float
    output_per_million: float
    cached_input_per_million: float


@dataclass(slots=True, frozen=True)
class Scope:
    """One level above the keys: an organisation, a team or a project. Each may carry a token or cost budget per
    period, RPM/TPM limits, allowed models and spend-alert thresholds; an organisation also its own prices."""

    level: str  # org | team | project
    name: str
    parent: str | None = None  # a team's organisation, a project's team; None for an organisation
    budget_tokens: int | None = None
    budget_cost: float | None = None
    period: str = "month"
    rpm: int | None = None
    tpm: int | None = None
    models: tuple[str, ...] = ()  # empty: every model
    alert_at: tuple[float, ...] = ()  # fractions of a budget (0.5, 0.8, 1.0) that send a spend alert once a period
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)  # model -> price (organisations)
    created_at: float = 0.0

    @property
    def account(self) -> str:
        """Its budget account and rate-window subject in the store: ``team:ml``."""
        return f"{self.level}:{self.name}"

    def allows_model(self, model: str) -> bool:
        return not self.models or model in self.models


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
    project: str | None = None  # the project it is attached to (trtkit keys attach)
    alert_at: tuple[float, ...] = ()  # spend-alert thresholds on its own budget
    max_concurrent: int | None = None  # requests in flight at once (None: gateway.limits.max_concurrent_per_key)
    # its project, team and organisation, nearest first, as the store found them with the key (find_key)
    chain: tuple[Scope, ...] = field(default=(), compare=False)

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def account(self) -> str:
        return f"key:{self.name}"

    def allows_model(self, model: str) -> bool:
        return self.refuses_model(model) is None

    def refuses_model(self, model: str) -> str | None:
        """Which level does not allow ``model`` ("key 'a'", "team 'ml'"), or None when every level does."""
        if self.models and model not in self.models:
            return f"key '{self.name}'"
        for scope in self.chain:
            if not scope.allows_model(model):
                return f"{scope.level} '{scope.name}'"
        return None

    def level_names(self) -> dict[str, str]:
        """{"org": ..., "team": ..., "project": ...} of its chain (missing levels absent)."""
        return {scope.level: scope.name for scope in self.chain}


@dataclass(slots=True, frozen=True)
class BudgetLimit:
    account: str  # "key:<name>", "team:<name>", "user:<name>:<period>", "global:*:<period>", ...
    period_start: float
    max_tokens: int | None
    max_cost: float | None


@dataclass(slots=True, frozen=True)
class RateLimit:
    key_id: str  # the window's subject: a key's id, or a level's account ("team:ml")
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
    budgets: list[BudgetLimit]  # sorted by (account, period_start): the lock order
    rates: list[RateLimit]  # sorted by (subject, window_start): the lock order
    # requests/tokens used in each window after admission, in the order of ``rates``
    rate_states: list[dict[str, int]] = field(default_factory=list)
    body: str = ""  # its reservation row's JSON (holds.hold_json), made once
    slot: SlotLimit | None = None  # one of its key's concurrent slots

    @property
    def rate(self) -> RateLimit | None:
        return self.rates[0] if self.rates else None

    @property
    def rate_state(self) -> dict[str, int]:
        """The first window's state (a key-only admission has one window)."""
        return self.rate_states[0] if self.rate_states else {}


class Refused(Exception):
    """A conditional update matched no row. ``limit`` is what refused; ``state`` its counters then:
    (requests, tokens) of a rate window, (used_tokens, reserved_tokens, used_cost, reserved_cost) of a budget,
    (in_flight,) of a key's slots."""

    def __init__(self, limit: BudgetLimit | RateLimit | SlotLimit, what: str, state: tuple) -> None:
        super().__init__(what)
        self.limit, self.what, self.state = limit, what, state
