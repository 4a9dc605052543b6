"""Prices behind an HTTP upstream (issue 49): llama-server's own usage (its cached prompt tokens included) is billed at
the config's prices, or the organisation's, exactly as on Triton (tests/gateway/prices.py)."""

from __future__ import annotations

import pytest

from tests.gateway.prices import check_costs, priced
from tests.helpers.gateways import RunningGateway
from tests.upstreams.conftest import MODEL, relay_config

pytestmark = pytest.mark.slow


def test_costs_behind_an_http_upstream_are_prices_times_counts(llama, smollm2_config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gateway = RunningGateway(priced(relay_config(smollm2_config)), llama.api, tmp_path / "relay")
    try:
        check_costs(gateway, MODEL)
    finally:
        gateway.stop()
