"""Governance around one request: everything that happens before it leaves and after it returns.

Before: count the prompt with the model's tokenizer, apply the hard input limit, clamp max_tokens
to max_seq_len, answer from the response cache, reserve prompt + max_tokens in every budget.
After: confirm the counts against the server's, settle the budgets, write the ledger row, fill
the cache and the metrics. The upstreams (``upstream.py``) only move bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from trtkit.config.schema import ModelConfig
from trtkit.errors import BudgetExceededError, InputTooLongError
from trtkit.governance.billing import DOUBTFUL, Billing, Outcome, Reserved, bill
from trtkit.governance.budgets import BudgetGuard, Reservation
from trtkit.governance.cache import ResponseCache, cache_key
from trtkit.governance.guard import RunawayGuard
from trtkit.governance.limits import clamp_max_tokens, enforce_input_limit
from trtkit.governance.metrics import ClientMetrics, UpstreamMetrics
from trtkit.governance.output_cap import OutputMeter
from trtkit.governance.prices import PriceBook
from trtkit.governance.tokens import TokenCounter
from trtkit.governance.vocabulary import Caller, GenerationResult, SamplingParams, Usage
from trtkit.store.ledger import Ledger, LedgerRow, open_ledger

log = logging.getLogger(__name__)

LedgerChoice = Ledger | bool | None  # a ledger; True: the one at client.store; False or None: record nothing


@dataclass(slots=True)
class PreparedRequest:
    request_id: str
    prompt: str
    prompt_tokens: int  # counted locally, exactly as the server's preprocessing will
    params: SamplingParams  # max_tokens resolved and clamped
    caller: Caller
    cache_key: str | None
    reservation: Reservation | None
    started: float = field(default_factory=time.perf_counter)
    truncated_tokens: int = 0
    prompt_ids: list[int] = field(default_factory=list)  # what the token path sends the engine model
    # the caller's own request, for an upstream that relays it (``Capabilities.relays_body``: the gateway hands an
    # OpenAI upstream the body its caller sent); governance never reads it, but it keys the response cache
    payload: Any = None


class Governor:
    def __init__(self, config: ModelConfig, counter: TokenCounter, ledger: Ledger | None,
                 metrics: ClientMetrics | None = None, budgets: BudgetGuard | None = None) -> None:
        self.config = config
        self.counter = counter
        self.ledger = ledger
        self.metrics = metrics or ClientMetrics()
        c = config.client
        self.budgets = budgets or BudgetGuard(list(c.budgets), ledger)
        # None: a request without max_tokens gets all the room its prompt leaves (the gateway's default).
        self.default_max_tokens: int | None = c.default_max_tokens
        self.max_tokens_overflow = "clamp"  # or "reject": max_tokens beyond the context is an error
        self.cache = ResponseCache(c.cache.ttl_seconds, c.cache.max_entries) if c.cache.enabled else None
        self.max_input_tokens = c.max_input_tokens or config.build.max_input_len
        self.model = config.name
        self.prices = PriceBook(config.name, c.pricing)

    def prepare(self, prompt: str, params: SamplingParams, caller: Caller, *, record_hit: bool = True,
                request_id: str | None = None, payload: Any = None) -> PreparedRequest | GenerationResult:
        """A request ready to send, or a GenerationResult straight from the cache, recorded as 0 tokens
        (asyncio callers pass record_hit=False and await ``arecord_hit`` instead). ``payload``: what the upstream
        relays as the caller sent it (``PreparedRequest.payload``); every field of it may change the answer."""
        started = time.perf_counter()
        prompt, ids, truncated = self._fit_input(prompt)
        max_tokens = self._max_tokens(params.max_tokens, len(ids))
        params = params.with_max_tokens(max_tokens)
        key = None
        if self.cache is not None and params.is_deterministic and params.cacheable and not params.return_log_probs:
            identity = params.identity() if payload is None else params.identity() | {"payload": payload}
            key = cache_key(caller.tenant, self.model, ids, identity)  # the engine's input: every form
            hit = self.cache.get(key)
            if hit is not None:
                request_id = request_id or uuid.uuid4().hex
                self._admit_hit(caller, request_id)
                result = self._cache_hit(hit.text, hit.finish_reason, started, truncated, request_id)
                if record_hit and self.ledger is not None:
                    self.ledger.record(self._hit_row(result, caller))
                return result
        # n choices may each bill the prompt and max_tokens (an upstream reports what it counted)
        reserve_tokens = (len(ids) + max_tokens) * params.n
        request_id = request_id or uuid.uuid4().hex
        try:
            reservation = self.budgets.reserve(caller, reserve_tokens,
                                               self._cost(Usage.of(len(ids), max_tokens), caller) * params.n,
                                               request_id)
        except BudgetExceededError:
            self.metrics.budget_rejections.labels(self.model).inc()
            raise
        return PreparedRequest(request_id, prompt, len(ids), params, caller, key, reservation, started, truncated,
                               list(ids), payload)

    def _admit_hit(self, caller: Caller, request_id: str) -> None:
        """A cache hit is a request like any other to the limits that count requests (a key's RPM): admitted
        through the one admission path with nothing to hold, and settled at once."""
        try:
            reservation = self.budgets.reserve(caller, 0, 0.0, request_id)
        except BudgetExceededError:
            self.metrics.budget_rejections.labels(self.model).inc()
            raise
        self.budgets.settle(reservation, 0, 0.0)

    def _max_tokens(self, requested: int | None, prompt_tokens: int) -> int:
        max_seq_len = self.config.build.max_seq_len
        if requested is None:
            requested = self.default_max_tokens or max_seq_len
        elif self.max_tokens_overflow == "reject" and prompt_tokens + requested > max_seq_len:
            raise InputTooLongError(
                f"max_tokens {requested} plus the prompt's {prompt_tokens} tokens exceeds the context of "
                f"{max_seq_len} tokens (build.max_seq_len); ask for at most {max(0, max_seq_len - prompt_tokens)}")
        return clamp_max_tokens(requested, prompt_tokens, max_seq_len)

    def output_meter(self, request: PreparedRequest) -> OutputMeter:
        """The meter that cuts an upstream's output at the request's reservation (``output_cap``)."""
        return OutputMeter(reserved_of(request).completion, self.counter)

    def upstream_metrics(self) -> UpstreamMetrics:
        """The counters an upstream bumps itself (its retries, how it ended a request early), in these metrics."""
        return UpstreamMetrics(self.metrics, self.model)

    def new_guard(self) -> RunawayGuard | None:
        g = self.config.client.guard
        return RunawayGuard(g.ngram_size, g.max_ngram_repeats, g.max_punctuation_run,
                            g.max_whitespace_run) if g.enabled else None

    def complete(self, request: PreparedRequest, outcome: Outcome) -> GenerationResult:
        """Settle budgets, write the ledger row (durable on return), cache and count; the final usage."""
        result, row = self.finish(request, outcome)
        try:
            if row is not None and self.ledger is not None:
                self.ledger.record(row)
        finally:
            self._release_rules(request)
        return result

    def submit(self, request: PreparedRequest, outcome: Outcome) -> tuple[GenerationResult, Future[None] | None]:
        """complete() in two halves: queue the ledger row now, ``wait_committed`` later (the caller
        overlaps the commit's fsync with closing the gRPC stream). Durable before the result is shown."""
        result, row = self.finish(request, outcome)
        return result, (self.ledger.submit([row]) if row is not None and self.ledger is not None else None)

    def complete_detached(self, request: PreparedRequest, outcome: Outcome) -> None:
        """complete() without waiting for the commit: for a cancelled asyncio task, which must not block its
        event loop (and every other request on it) on an fsync. Holds are released once the row is durable."""
        _result, committed = self.submit(request, outcome)
        if committed is None:
            self._release_rules(request)
        else:
            committed.add_done_callback(lambda _done: self._release_rules(request))

    def wait_committed(self, request: PreparedRequest, committed: Future[None] | None) -> None:
        try:
            if committed is not None:
                committed.result()
        finally:
            self._release_rules(request)

    async def acomplete(self, request: PreparedRequest, outcome: Outcome) -> GenerationResult:
        """complete() for asyncio: waits for the ledger commit without blocking the event loop, and for a
        budget store across the network (settle, release) in a worker thread."""
        remote = self.budgets.waits_on_network
        result, row = await asyncio.to_thread(self.finish, request, outcome) if remote else self.finish(request, outcome)
        try:
            if row is not None and self.ledger is not None:
                await self.ledger.arecord([row])
        finally:
            if remote:
                await asyncio.to_thread(self._release_rules, request)
            else:
                self._release_rules(request)
        return result

    def finish(self, request: PreparedRequest, outcome: Outcome) -> tuple[GenerationResult, LedgerRow | None]:
        """Everything but the ledger write (and releasing config-rule reservations, which waits for it)."""
        billing = self._bill(request, outcome)
        usage = billing.usage
        latency = time.perf_counter() - request.started
        ttft = None if outcome.first_token_at is None else outcome.first_token_at - request.started
        cost = self._cost(usage, request.caller)
        if request.reservation is not None:  # config rules stay held until the row is committed
            self.budgets.settle(request.reservation, usage.total_tokens, cost, release_rules=False)
        row = self._row(request.caller, request.request_id, billing, ttft, latency, outcome.finish_reason, cost)
        if request.cache_key and self.cache is not None and outcome.finish_reason in ("end_id", "stop", "length"):
            self.cache.put(request.cache_key, outcome.text, usage.completion_tokens, outcome.finish_reason)
        m = self.metrics
        m.prompt_tokens.labels(self.model).inc(usage.prompt_tokens)
        m.completion_tokens.labels(self.model).inc(usage.completion_tokens)
        m.cached_tokens.labels(self.model).inc(usage.cached_tokens)
        m.requests.labels(self.model, outcome.finish_reason).inc()
        if outcome.finish_reason.startswith("guard_"):
            m.guard_stops.labels(self.model, outcome.finish_reason).inc()
        return GenerationResult(request.request_id, outcome.text, usage, outcome.finish_reason, False, ttft, latency,
                                cost, request.truncated_tokens, outcome.log_probs), row

    def _bill(self, request: PreparedRequest, outcome: Outcome) -> Billing:
        """The bill; should billing itself fail, the prompt as counted, flagged, so that the request still gets
        its row and its hold is still settled."""
        try:
            return bill(request.prompt_tokens, outcome, self.counter, self.metrics, self.model, reserved_of(request))
        except Exception:
            log.exception("billing request %s failed; billing the prompt as counted", request.request_id)
            return Billing(Usage.of(request.prompt_tokens, 0), None, True, (DOUBTFUL,))

    def _release_rules(self, request: PreparedRequest) -> None:
        if request.reservation is not None:
            self.budgets.release_rules(request.reservation)

    def release(self, request: PreparedRequest) -> None:
        """The request failed before the server did any work: free its reservation, record nothing."""
        if request.reservation is not None:
            self.budgets.settle(request.reservation, 0, 0.0)

    def _fit_input(self, prompt: str) -> tuple[str, list[int], int]:
        ids = self.counter.prompt_ids(prompt)
        policy = self.config.client.input_overflow
        try:
            fitted = enforce_input_limit(ids, self.max_input_tokens, policy)
        except InputTooLongError:
            self.metrics.input_rejections.labels(self.model).inc()
            raise
        if not fitted.dropped_tokens:
            return prompt, ids, 0
        # Cut the user's text (not the template around it), then re-count: decode/encode may not round-trip.
        content = self.counter.content_ids(prompt)
        overhead = len(ids) - len(content)
        keep = self.max_input_tokens - overhead
        while True:
            kept = content[len(content) - keep:] if policy == "truncate_left" else content[:keep]
            text = self.counter.cut(prompt, kept)
            ids = self.counter.prompt_ids(text)
            if len(ids) <= self.max_input_tokens:
                return text, ids, len(content) - len(kept)
            keep -= 1

    async def arecord_refusal(self, caller: Caller, request_id: str, reason: str) -> None:
        """A request refused before it was sent (budget, rate limit, too long): a 0-token row naming why."""
        if self.ledger is not None:
            await self.ledger.arecord([LedgerRow(time.time(), self.model, caller.user, caller.key_id, caller.session,
                                                 request_id, 0, 0, 0, None, 0.0, f"refused:{reason}", 0.0,
                                                 org=caller.org, team=caller.team, project=caller.project,
                                                 dialect=caller.dialect)])

    async def arecord_hit(self, result: GenerationResult, caller: Caller) -> None:
        if self.ledger is not None:
            await self.ledger.arecord([self._hit_row(result, caller)])

    def _cache_hit(self, text: str, finish_reason: str, started: float, truncated: int,
                   request_id: str | None = None) -> GenerationResult:
        latency = time.perf_counter() - started
        self.metrics.cache_hits.labels(self.model).inc()
        return GenerationResult(request_id or uuid.uuid4().hex, text, Usage(), finish_reason, True, latency, latency, 0.0,
                                truncated)

    def _hit_row(self, result: GenerationResult, caller: Caller) -> LedgerRow:
        return LedgerRow(time.time(), self.model, caller.user, caller.key_id, caller.session, result.request_id,
                         0, 0, 0, result.latency_s * 1e3, result.latency_s * 1e3, result.finish_reason, 0.0, True,
                         org=caller.org, team=caller.team, project=caller.project, dialect=caller.dialect)

    def _cost(self, usage: Usage, caller: Caller | None = None) -> float:
        return self.prices.cost(usage, caller)

    def _row(self, caller: Caller, request_id: str, billing: Billing, ttft: float | None, latency: float,
             finish_reason: str, cost: float) -> LedgerRow | None:
        if self.ledger is None:
            return None
        usage, local = billing.usage, billing.local
        return LedgerRow(time.time(), self.model, caller.user, caller.key_id, caller.session, request_id,
                         usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                         None if ttft is None else ttft * 1e3, latency * 1e3, finish_reason, cost, False,
                         None if local is None else local[0], None if local is None else local[1],
                         billing.counted_locally, caller.org, caller.team, caller.project, ",".join(billing.flags),
                         caller.dialect)


def reserved_of(request: PreparedRequest) -> Reserved:
    """What the request reserved at admission (``prepare``): nothing is billed beyond it."""
    p = request.params
    max_tokens = p.max_tokens or 0
    return Reserved(max_tokens * p.n, (request.prompt_tokens + max_tokens) * p.n, p.n)


def open_governor(config: ModelConfig, *, ledger: LedgerChoice = True, counter: TokenCounter | None = None,
                  metrics: ClientMetrics | None = None, budgets: BudgetGuard | None = None) -> Governor:
    """A governor from a config: ``ledger=True`` opens the ledger at ``client.store`` (default:
    TRTKIT_HOME/usage.db); ``client.metrics_port`` serves its own counters when none are given."""
    store = open_ledger(config.client.store) if ledger is True else (ledger or None)
    governor = Governor(config, counter or TokenCounter.from_config(config), store, metrics, budgets)
    if config.client.metrics_port is not None and metrics is None:
        governor.metrics.serve(config.client.metrics_port)
    return governor


def with_caller_session(caller: Caller, session_id: str) -> Caller:
    return replace(caller, session=session_id)
