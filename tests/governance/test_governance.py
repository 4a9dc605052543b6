"""Governance that runs before a request leaves: limits, budgets (nested), cache, guard, sessions."""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtkit.config.schema import BudgetRule
from trtkit.conversation.sessions import SessionExpiredError, SessionStore
from trtkit.errors import BudgetExceededError, ClientError, InputTooLongError
from trtkit.governance.budgets import BudgetGuard, budget_scope, period_start
from trtkit.governance.budgets import _current_scope as _scope_var
from trtkit.governance.cache import ResponseCache, cache_key
from trtkit.governance.guard import FINISH_PUNCTUATION, FINISH_REPETITION, FINISH_WHITESPACE, RunawayGuard
from trtkit.governance.limits import clamp_max_tokens, enforce_input_limit
from trtkit.governance.vocabulary import Caller, SamplingParams, Usage, usage_cost
from trtkit.store.ledger import Ledger, LedgerRow


def test_input_limit_rejects_or_truncates() -> None:
    ids = list(range(10))
    assert enforce_input_limit(ids, 10, "reject").token_ids == ids
    with pytest.raises(InputTooLongError, match="client.input_overflow"):
        enforce_input_limit(ids, 8, "reject")
    assert enforce_input_limit(ids, 8, "truncate_left").token_ids == ids[2:]
    right = enforce_input_limit(ids, 8, "truncate_right")
    assert right.token_ids == ids[:8] and right.dropped_tokens == 2


def test_max_tokens_clamped_to_max_seq_len() -> None:
    assert clamp_max_tokens(100, 400, 512) == 100
    assert clamp_max_tokens(500, 400, 512) == 112
    with pytest.raises(InputTooLongError, match="max_seq_len"):
        clamp_max_tokens(5, 512, 512)
    with pytest.raises(ClientError):
        clamp_max_tokens(0, 1, 512)


def test_usage_shape_and_cost() -> None:
    usage = Usage.of(100, 20, cached_tokens=60)
    assert usage.to_openai() == {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                                 "prompt_tokens_details": {"cached_tokens": 60}}
    assert usage_cost(usage, 1.0, 2.0, 0.5) == pytest.approx((40 * 1.0 + 60 * 0.5 + 20 * 2.0) / 1e6)


def test_nested_budget_scopes_draw_on_the_parent() -> None:
    guard = BudgetGuard([], None)
    with budget_scope(max_tokens=100, name="agent") as agent:
        r1 = guard.reserve(Caller(), 60, 0.0)
        with budget_scope(max_tokens=1000, name="tool") as tool:  # a generous child cannot escape its parent
            with pytest.raises(BudgetExceededError, match="agent"):
                guard.reserve(Caller(), 50, 0.0)
            guard.settle(r1, 30, 0.0)  # the first call used less than it reserved
            r2 = guard.reserve(Caller(), 50, 0.0)
            guard.settle(r2, 50, 0.0)
            assert tool.used_tokens == 50
        assert agent.used_tokens == 80 and agent.reserved_tokens == 0
        assert agent.remaining_tokens == 20


def test_budget_scope_follows_threads_of_a_batch() -> None:
    guard = BudgetGuard([], None)
    refused = []

    def call() -> None:
        try:
            guard.settle(guard.reserve(Caller(), 30, 0.0), 30, 0.0)
        except BudgetExceededError:
            refused.append(1)

    with budget_scope(max_tokens=100) as scope, ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(contextvars.copy_context().run, call) for _ in range(8)]:
            f.result()
    assert scope.used_tokens == 90 and len(refused) == 5


def test_config_budgets_sum_the_ledger_per_period(isolated_home) -> None:
    rules = [BudgetRule(scope="user", period="day", max_tokens=100), BudgetRule(scope="global", period="total",
                                                                                max_cost=1.0)]
    with Ledger() as ledger:
        guard = BudgetGuard(rules, ledger)
        now = period_start("day", 1e9 + 5000)
        assert now == 1e9 - 1e9 % 86400
        ledger.record(LedgerRow(__import__("time").time(), "m", "alice", "", "", "r", 70, 10, 0, None, 1.0, "length",
                                0.5))
        with pytest.raises(BudgetExceededError, match="user alice per day"):
            guard.reserve(Caller(user="alice"), 30, 0.0)
        held = guard.reserve(Caller(user="bob"), 90, 0.4)  # bob has his own user budget
        with pytest.raises(BudgetExceededError, match="cost"):  # but the global cost budget is shared
            guard.reserve(Caller(user="carol"), 1, 0.2)
        guard.settle(held, 0, 0.0)
        guard.reserve(Caller(user="carol"), 1, 0.2)


def test_cache_ttl_lru_and_tenant_scope() -> None:
    now = [0.0]
    cache = ResponseCache(ttl_seconds=10, max_entries=2, clock=lambda: now[0])
    params = SamplingParams(max_tokens=8).identity()
    a = cache_key("tenant-a", "m", "hi", params)
    assert a != cache_key("tenant-b", "m", "hi", params)
    assert a != cache_key("tenant-a", "m", "hi", SamplingParams(max_tokens=9).identity())
    cache.put(a, "hello", 3, "length")
    assert cache.get(a).text == "hello"
    now[0] = 11
    assert cache.get(a) is None
    for i in range(3):
        cache.put(str(i), "x", 1, "length")
    assert cache.get("0") is None and len(cache) == 2
    assert SamplingParams().is_deterministic and SamplingParams(temperature=0.7, seed=3).is_deterministic
    assert not SamplingParams(temperature=0.7).is_deterministic


def test_guard_stops_repetition_and_punctuation_runs() -> None:
    guard = RunawayGuard(ngram_size=3, max_ngram_repeats=3, max_punctuation_run=8)
    assert guard.feed(["a", " b", " c", " d", " e", " f"]) is None
    assert guard.feed([" a", " b", " c", " a", " b", " c"]) is None  # " a b c" seen twice so far
    assert guard.feed([" a", " b", " c"]) == FINISH_REPETITION
    assert guard.feed(["x"]) == FINISH_REPETITION  # stays tripped
    punct = RunawayGuard(max_punctuation_run=8)
    assert punct.feed(["Wow", "!!!", " "]) is None
    assert punct.feed(["ok"]) is None  # a word resets the run
    assert punct.feed(["!", " !", " !", " !", "!!", "!", "!"]) == FINISH_PUNCTUATION
    blank = RunawayGuard(max_whitespace_run=20)
    assert blank.feed(['{"a":', " " * 12, "\n\t", "1"]) is None  # a character resets the run
    assert blank.feed(["\n", " " * 10, "\r\n", "\t" * 8]) == FINISH_WHITESPACE
    indented = RunawayGuard(max_whitespace_run=20)
    assert indented.feed(["def f():", "\n" + " " * 12, "return 1"] * 5) is None


def test_session_ttl_heartbeat_and_expiry() -> None:
    now = [0.0]
    store = SessionStore(ttl_seconds=30, clock=lambda: now[0])
    session = store.create("s1")
    session.add("user", "hello")
    now[0] = 25
    store.heartbeat("s1")
    now[0] = 50  # 25 s since the heartbeat: still alive
    assert store.get("s1").turns[0].content == "hello"
    idle = store.create("s2")
    idle.add("user", "forgotten")
    now[0] = 81
    assert store.expire_idle() == ["s1", "s2"] and "s1" not in store
    assert idle.turns == []  # the context is dropped, not just unlisted
    with pytest.raises(SessionExpiredError, match="start a new session"):
        store.get("s1")


def test_session_store_is_thread_safe() -> None:
    store = SessionStore(ttl_seconds=30)
    threads = [threading.Thread(target=lambda: [store.create() for _ in range(100)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store) == 400


def test_params_identity_is_stable() -> None:
    p = SamplingParams(max_tokens=4, stop_words=("a",))
    assert p.identity() == {"max_tokens": 4, "temperature": 0.0, "stop_words": ["a"], "return_log_probs": False}
    assert replace(p, seed=1).identity()["seed"] == 1


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 60), st.integers(0, 60)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_nested_scopes_never_overrun_and_always_balance(calls: list[tuple[int, int, int]]) -> None:
    """Property: whatever nested calls do, no scope's used + reserved exceeds its limit, and after
    every call settles nothing stays reserved; a child's use is always also its ancestors' use."""
    guard = BudgetGuard([], None)
    with budget_scope(max_tokens=200, name="root") as root, budget_scope(max_tokens=150, name="child") as child, \
            budget_scope(max_tokens=500, name="grandchild") as grandchild:
        scopes = [root, child, grandchild]
        for depth, reserve, used in calls:
            token = _scope_var.set(scopes[depth])
            try:
                held = guard.reserve(Caller(), reserve, 0.0)
            except BudgetExceededError:
                continue
            finally:
                _scope_var.reset(token)
            for s in scopes[: depth + 1]:
                assert s.used_tokens + s.reserved_tokens <= s.max_tokens  # type: ignore[operator]
            guard.settle(held, min(used, reserve), 0.0)
        assert all(s.reserved_tokens == 0 for s in scopes)
        assert root.used_tokens >= child.used_tokens >= grandchild.used_tokens
        assert root.used_tokens <= 200 and child.used_tokens <= 150
