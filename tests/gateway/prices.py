"""The cost check both upstreams share (issue 49): a chat asked twice (the second reads its prompt from the cache),
billed at the config's prices, or at an organisation's, exactly: the ledger's cost column and the cost budget's use
are prices x counts, to the cent (and to 1e-9)."""

from __future__ import annotations

import time
from dataclasses import replace

import openai

from trtkit.config.schema import ModelConfig
from trtkit.store.records import ModelPrice, Scope

# large prices per million tokens, so a short chat costs cents: "to the cent" then says something
CONFIG_PRICE = ModelPrice(input_per_million=3000.0, output_per_million=12000.0, cached_input_per_million=750.0)
ORG_PRICE = ModelPrice(input_per_million=1000.0, output_per_million=5000.0, cached_input_per_million=100.0)
MESSAGES = [{"role": "system", "content": "You are a careful assistant who answers briefly and exactly."},
            {"role": "user", "content": "Name three rivers of Europe and the seas they flow into, one per line."}]


def priced(config: ModelConfig) -> ModelConfig:
    pricing = replace(config.client.pricing, input_per_million=CONFIG_PRICE.input_per_million,
                      output_per_million=CONFIG_PRICE.output_per_million,
                      cached_input_per_million=CONFIG_PRICE.cached_input_per_million)
    return replace(config, client=replace(config.client, pricing=pricing))


def expected_cost(row: tuple, price: ModelPrice) -> float:
    prompt, completion, cached = row[:3]
    return ((prompt - cached) * price.input_per_million + cached * price.cached_input_per_million
            + completion * price.output_per_million) / 1e6


def check_costs(gateway, model: str) -> None:  # type: ignore[no-untyped-def]
    """Two chats per key (config prices; an organisation's), the second with cached prompt tokens."""
    tag = f"{time.time_ns() % 10**9}"
    gateway.store.hierarchy.create(Scope("org", f"priced-{tag}", prices={model: ORG_PRICE}))
    gateway.store.hierarchy.create(Scope("team", f"t-{tag}", f"priced-{tag}"))
    gateway.store.hierarchy.create(Scope("project", f"p-{tag}", f"t-{tag}"))
    for price, project in ((CONFIG_PRICE, None), (ORG_PRICE, f"p-{tag}")):
        key, secret = gateway.key(budget_cost=1000.0, project=project)
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
        for stream in (False, True):
            if stream:
                list(client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0,
                                                    stream=True, stream_options={"include_usage": True}))
            else:
                client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0)
        rows = gateway.rows(key, "prompt_tokens, completion_tokens, cached_tokens, cost")
        assert len(rows) == 2 and rows[1][2] > 0, rows  # the second read its prompt from the KV cache
        for row in rows:
            assert abs(row[3] - expected_cost(row, price)) < 1e-9, (row, price)
            assert round(row[3], 2) == round(expected_cost(row, price), 2) and row[3] > 0.01
        used = gateway.store.account(key.account, _month_start())
        assert used is not None and abs(used[2] - sum(r[3] for r in rows)) < 1e-9  # the cost budget drew the same


def _month_start() -> float:
    from trtkit.governance.budgets import period_start

    return period_start("month", time.time())
