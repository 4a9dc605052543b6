"""A gateway as the upstream of a gateway: the outer one (``--backend http://inner/v1``, the inner's key from an
environment variable) in front of the inner one (Triton mode, on the shared tiny tritonserver). Each layer writes
one ledger row per request, and both bill exactly what the engine counted. Nested calls draw on a running parent's
reservation in front of an OpenAI-compatible upstream too (the inner gateway over the paced tritonserver, so the
parent surely runs while its children do)."""

from __future__ import annotations

import openai
import pytest

from tests.helpers.gateways import RunningGateway
from tests.upstreams.conftest import relay_config, sdk
from trtkit.gateway.server import free_port

pytestmark = pytest.mark.slow

INNER_KEY_ENV = "TRTKIT_TEST_INNER_KEY"
PROMPT = "Once upon a time in a small village by the sea there lived an old fisherman."
ROW = "prompt_tokens, completion_tokens, cached_tokens, finish_reason"


@pytest.fixture
def chain(live_server, tiny_config, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    inner = RunningGateway(relay_config(tiny_config), live_server.grpc_url, tmp_path / "inner")
    inner_key, inner_secret = inner.key(name="outer-gateway")
    monkeypatch.setenv(INNER_KEY_ENV, inner_secret)
    outer = RunningGateway(relay_config(tiny_config, api_key_env=INNER_KEY_ENV, model="tiny-llama"),
                           f"{inner.url}/v1", tmp_path / "outer")
    yield outer, inner, inner_key
    outer.stop()
    inner.stop()


def test_a_chain_of_two_gateways_bills_once_per_layer_and_exactly(chain) -> None:
    outer, inner, inner_key = chain
    key, secret = outer.key()
    client = sdk(outer, secret)
    chat = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": PROMPT}],
                                          max_tokens=9, temperature=0)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": PROMPT}],
                                                 max_tokens=6, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=5, temperature=0)
    usages = [chat.usage, chunks[-1].usage, text.usage]
    expected = [(u.prompt_tokens, u.completion_tokens, u.prompt_tokens_details.cached_tokens) for u in usages]
    outer_rows, inner_rows = outer.rows(key, ROW), inner.rows(inner_key, ROW)
    assert [r[:3] for r in outer_rows] == [r[:3] for r in inner_rows] == expected  # one row per layer, equal
    assert [r[1] for r in outer_rows] == [9, 6, 5]  # the tiny engine runs to max_tokens
    assert [r[3] for r in inner_rows] == ["length"] * 3 and [r[3] for r in outer_rows] == ["length"] * 3
    local = outer.rows(key, "local_prompt_tokens, counted_locally")
    assert [r[0] for r in local] == [u.prompt_tokens for u in usages] and {r[1] for r in local} == {0}
    assert chat.trtkit["request_id"] == chat.id.split("-", 1)[1]  # type: ignore[attr-defined]  # the outer's own id


def test_an_upstream_5xx_is_a_502_before_the_first_byte(tiny_config, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The inner gateway's Triton is not there: it answers 503, and the outer one a 502 naming the upstream."""
    inner = RunningGateway(relay_config(tiny_config), f"127.0.0.1:{free_port('127.0.0.1')}", tmp_path / "inner")
    _, inner_secret = inner.key()
    monkeypatch.setenv(INNER_KEY_ENV, inner_secret)
    outer = RunningGateway(relay_config(tiny_config, api_key_env=INNER_KEY_ENV, model="tiny-llama"),
                           f"{inner.url}/v1", tmp_path / "outer")
    try:
        key, secret = outer.key(budget_tokens=10_000)
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as failed:
                list(sdk(outer, secret).completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=4,  # type: ignore[call-overload]
                                                           stream=stream))
            assert failed.value.status_code == 502 and failed.value.code == "upstream_error"
            # the inner one's 503, or (its stream's headers already out) its error event: a 502 either way
            assert "(503)" in failed.value.message or "unavailable" in failed.value.message
        assert outer.rows(key) == []
    finally:
        outer.stop()
        inner.stop()


@pytest.fixture
def paced_chain(paced_server, tiny_config, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The chain over the paced tritonserver: every engine step lasts at least MIN_STEP_MS (tests/conftest.py)."""
    inner = RunningGateway(relay_config(tiny_config), paced_server.grpc_url, tmp_path / "inner")
    _, inner_secret = inner.key(name="outer-gateway")
    monkeypatch.setenv(INNER_KEY_ENV, inner_secret)
    outer = RunningGateway(relay_config(tiny_config, api_key_env=INNER_KEY_ENV, model="tiny-llama"),
                           f"{inner.url}/v1", tmp_path / "outer")
    yield outer
    outer.stop()
    inner.stop()


def test_nested_calls_draw_on_a_running_parent_over_an_openai_upstream(paced_chain) -> None:  # type: ignore[no-untyped-def]
    """Issue 51 items 3 and 4: the parent (400 tokens it must generate) lasts at least 8 s on the paced engine, so its
    children surely run while it does: a condition the test sets up, not a race with llama-server's speed. The child's
    draw is measured on the parent's reservation: its billed tokens, exactly; a child needing more than is left of the
    parent is refused, naming the parent."""
    outer = paced_chain
    key, secret = outer.key()
    client = sdk(outer, secret)
    parent = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=400, temperature=0, stream=True,
                                            extra_body={"min_tokens": 400})
    first = next(iter(parent))
    header = {"x-trtkit-parent-request-id": first.id}
    budgets = outer.gateway.client.governor.budgets
    scope = budgets.scope_of(first.id.split("-", 1)[1])
    try:
        assert scope is not None and scope.used_tokens == 0 and scope.max_tokens > 400
        child = client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=3, extra_headers=header)
        assert child.usage.completion_tokens == 3
        assert (scope.used_tokens, scope.reserved_tokens) == (child.usage.total_tokens, 0)  # the child's draw
        assert budgets.scope_of(first.id.split("-", 1)[1]) is scope  # the parent still runs
        with pytest.raises(openai.RateLimitError, match=f"request {first.id.split('-', 1)[1]}"):
            client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=scope.remaining_tokens,
                                      extra_headers=header)
        assert scope.used_tokens == child.usage.total_tokens  # a refused child draws nothing
    finally:
        parent.close()
