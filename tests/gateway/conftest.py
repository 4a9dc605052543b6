"""Gateway fixtures: gateways (tests/helpers/gateways.py), each in a thread, on the shared live tritonserver (`live_server`, tests/conftest.py).

Each gateway has its own store and ledger under a session temp folder; tests create their own keys.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.gateways import FUZZ_DEFAULT_MAX_TOKENS, RunningGateway, gateway_config


@pytest.fixture(scope="session")
def gateway(live_server, tiny_config, tmp_path_factory):  # noqa: F811
    """No response cache, no guard: every request reaches the engine."""
    running = RunningGateway(gateway_config(tiny_config, cache=False), live_server.grpc_url,
                             tmp_path_factory.mktemp("gw-plain"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def fuzz_gateway(live_server, tiny_config, tmp_path_factory):  # noqa: F811
    """As ``gateway``, with gateway.default_max_tokens = FUZZ_DEFAULT_MAX_TOKENS: for the fuzz tests."""
    config = gateway_config(tiny_config, cache=False)
    config = replace(config, gateway=replace(config.gateway, default_max_tokens=FUZZ_DEFAULT_MAX_TOKENS))
    running = RunningGateway(config, live_server.grpc_url, tmp_path_factory.mktemp("gw-fuzz"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def paced_gateway(paced_server, tiny_config, tmp_path_factory):  # noqa: F811
    """As ``gateway``, in front of the paced server (tests/conftest.py: every engine step lasts at least
    MIN_STEP_MS), for tests that must act while a generation surely still runs."""
    running = RunningGateway(gateway_config(tiny_config, cache=False), paced_server.grpc_url,
                             tmp_path_factory.mktemp("gw-paced"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def cached_gateway(live_server, tiny_config, tmp_path_factory):  # noqa: F811
    """Response cache and runaway guard on (guard: a 2-gram seen 3 times stops the stream)."""
    running = RunningGateway(gateway_config(tiny_config, cache=True, guard=True), live_server.grpc_url,
                             tmp_path_factory.mktemp("gw-cached"))
    yield running
    running.stop()


