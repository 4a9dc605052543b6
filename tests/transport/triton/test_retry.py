"""Retry with backoff on UNAVAILABLE, before the first token only; the budget is released."""

from __future__ import annotations

import socket

import pytest

from tests.governance.conftest import client_config
from trtkit import ServerUnavailableError
from trtkit.governance import ClientMetrics, budget_scope
from trtkit.upstreams import connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unavailable_server_is_retried_then_reported(tiny_config) -> None:
    metrics = ClientMetrics()
    config = client_config(tiny_config, max_retries=2)
    with connect(f"127.0.0.1:{free_port()}", config=config, metrics=metrics) as client:
        with budget_scope(max_tokens=1000) as scope, pytest.raises(ServerUnavailableError, match="3 attempts"):
            client.generate("hello")
    assert metrics.value("trtkit_client_retries_total", model="tiny-llama") == 2
    assert scope.reserved_tokens == 0 and scope.used_tokens == 0  # nothing was spent
