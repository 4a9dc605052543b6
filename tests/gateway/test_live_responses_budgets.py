"""A conversation's budget through the Responses API: set in metadata by a key allowed to, or from a
``client.budgets`` rule of scope session; held in the store like every budget, so a burst on one chain cannot
overshoot it. An admitted turn spends at most what it reserved (prompt + max_output_tokens), so the bounds below
hold whatever the machine's speed."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import openai
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config
from trtkit.config.schema import BudgetRule
from trtkit.store.conversations import budget_account

pytestmark = pytest.mark.slow

MODEL = "tiny-llama"
MAX_OUTPUT = 4
BURST = 20


@pytest.fixture(scope="module")
def rules_gateway(live_server, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Every conversation gets 400 tokens in all (a client.budgets rule of scope session)."""
    base = gateway_config(tiny_config, cache=False)
    config = replace(base, client=replace(base.client, budgets=[BudgetRule("session", "total", 400, None)]))
    running = RunningGateway(config, live_server.grpc_url, tmp_path_factory.mktemp("gw-session-rule"))
    yield running
    running.stop()


def turn_cost(gateway: RunningGateway, messages: list[dict[str, str]]) -> int:
    """What a turn reserves: its prompt (the whole chain) plus max_output_tokens."""
    counter = gateway.gateway.client.governor.counter
    return counter.count_prompt(counter.chat_prompt(messages)) + MAX_OUTPUT


def test_a_burst_of_20_turns_on_one_chain_never_overshoots_its_budget(gateway) -> None:
    key, secret = gateway.key(can_budget_conversations=True)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
    first = client.responses.create(model=MODEL, input="Start", max_output_tokens=MAX_OUTPUT, temperature=0,
                                    metadata={"trtkit_budget_tokens": "100000"})
    conversation = first.model_extra["trtkit"]["conversation"]
    each = turn_cost(gateway, [{"role": "user", "content": "Start"}, {"role": "assistant", "content": first.output_text},
                               {"role": "user", "content": "Next"}])
    budget = first.usage.total_tokens + 3 * each + each // 2  # room for three more turns, not four

    async def burst() -> list[object]:
        aclient = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
        turns = [aclient.responses.create(model=MODEL, input="Next", previous_response_id=first.id, temperature=0,
                                          max_output_tokens=MAX_OUTPUT, metadata={"trtkit_budget_tokens": str(budget)})
                 for _ in range(BURST)]
        try:
            return await asyncio.gather(*turns, return_exceptions=True)
        finally:
            await aclient.close()

    outcomes = asyncio.run(burst())
    answered = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
    assert len(answered) + len(refused) == BURST and 1 <= len(answered) < BURST, outcomes
    assert all(f"conversation:{conversation}" in r.body["message"] for r in refused)  # type: ignore[attr-defined]
    used, reserved, _cost, _reserved_cost = gateway.store.account(budget_account(conversation), 0.0)
    spent = sum(t for (t,) in gateway.rows(key, "prompt_tokens + completion_tokens"))
    assert reserved == 0 and used == spent <= first.usage.total_tokens + len(answered) * each <= budget


def test_a_session_rule_is_every_conversations_default_budget(rules_gateway) -> None:
    key, secret = rules_gateway.key()
    client = openai.OpenAI(base_url=f"{rules_gateway.url}/v1", api_key=secret, max_retries=0)
    previous, turns = None, 0
    with pytest.raises(openai.RateLimitError, match="budget 'session:conv_[0-9a-f]+:total' allows 400 tokens"):
        while True:
            response = client.responses.create(model=MODEL, input="Tell me more.", previous_response_id=previous,
                                               max_output_tokens=MAX_OUTPUT, temperature=0, truncation="auto")
            previous, turns = response.id, turns + 1
    rows = rules_gateway.rows(key, "session, prompt_tokens + completion_tokens, finish_reason")
    conversation = response.model_extra["trtkit"]["conversation"]
    assert turns >= 2 and {r[0] for r in rows} == {conversation}
    assert sum(r[1] for r in rows) <= 400 and rows[-1][2] == "refused:budget"
    other = client.responses.create(model=MODEL, input="A new conversation", max_output_tokens=MAX_OUTPUT)
    assert other.model_extra["trtkit"]["conversation"] != conversation  # a budget of its own
