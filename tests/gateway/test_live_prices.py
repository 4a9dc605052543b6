"""Prices on the Triton path (issue 49): a chat's cost, with cached prompt tokens, is the config's prices (or its
organisation's) times its counts; a model with no price is billed 0 and named in one warning."""

from __future__ import annotations

import logging
from dataclasses import replace

import openai
import pytest

from tests.gateway.prices import check_costs, priced
from tests.helpers.gateways import RunningGateway, gateway_config

pytestmark = pytest.mark.slow


def test_costs_on_triton_are_prices_times_counts(live_server, tiny_config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gateway = RunningGateway(priced(gateway_config(tiny_config, cache=False)), live_server.grpc_url, tmp_path / "gw")
    try:
        check_costs(gateway, tiny_config.name)
    finally:
        gateway.stop()


def test_a_model_with_no_price_is_billed_zero_with_one_warning(gateway, caplog) -> None:  # type: ignore[no-untyped-def]
    import trtkit.governance.prices as prices

    assert gateway.config.client.pricing.input_per_million is None  # tiny-llama.yaml sets no price
    prices._warned.discard(gateway.config.name)
    key, secret = gateway.key()
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)
    with caplog.at_level(logging.WARNING, logger="trtkit.governance.prices"):
        for _ in range(3):
            client.completions.create(model=gateway.config.name, prompt="Hello there", max_tokens=2)
    assert [r[0] for r in gateway.rows(key, "cost")] == [0.0, 0.0, 0.0]
    warnings = [r.getMessage() for r in caplog.records if r.name == "trtkit.governance.prices"]
    assert len(warnings) == 1 and "model 'tiny-llama' has no price" in warnings[0]


def test_a_partial_price_is_refused_with_its_field_path(tiny_config) -> None:  # type: ignore[no-untyped-def]
    from trtkit.config.loader import to_plain
    from trtkit.config.rules import broken_rules
    from trtkit.config.schema import ModelConfig

    half = replace(tiny_config, client=replace(tiny_config.client, pricing=replace(
        tiny_config.client.pricing, input_per_million=1.0)))
    assert isinstance(half, ModelConfig) and to_plain(half)["client"]["pricing"]["output_per_million"] is None
    assert any(p.startswith("client.pricing.output_per_million: is required") for p in broken_rules(half))
