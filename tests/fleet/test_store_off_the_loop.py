"""Where a gateway waits on its store (``gateway.store_calls``): in worker threads for a database across the
network (on the loop, every admission, settle and key lookup would stop every other request of that replica
for a round trip), on the event loop for SQLite and a loopback PostgreSQL, where a thread hop costs more."""

from __future__ import annotations

import threading
from dataclasses import replace

import httpx
import pytest

from tests.helpers.gateways import RunningGateway

pytestmark = pytest.mark.slow


def record_threads(gateway: RunningGateway) -> list[tuple[str, bool]]:
    """(store call, ran on the gateway's event-loop thread) for every key lookup, admission and settle."""
    calls: list[tuple[str, bool]] = []
    for name in ("find_key", "reserve", "settle"):
        original = getattr(gateway.store, name)

        def recording(*args, _original=original, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            calls.append((_name, threading.current_thread() is gateway.thread))
            return _original(*args, **kwargs)

        setattr(gateway.store, name, recording)
    return calls


@pytest.mark.parametrize(("backend", "store_calls", "on_loop"), [
    pytest.param("postgresql", "threads", False, marks=pytest.mark.postgres),
    pytest.param("postgresql", "auto", True, marks=pytest.mark.postgres),  # the test cluster is on loopback
    ("sqlite", "auto", True)])
def test_store_calls_run_where_gateway_store_calls_says(backend: str, store_calls: str, on_loop: bool, live_server,
                                                        tiny_config, tmp_path, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("postgres_db") if backend == "postgresql" else None
    config = replace(tiny_config, gateway=replace(tiny_config.gateway, store_calls=store_calls))
    gateway = RunningGateway(config, live_server.grpc_url, tmp_path / "gw", store_url=url)
    try:
        _, secret = gateway.key(budget_tokens=100_000)
        calls = record_threads(gateway)
        for stream in (False, True):
            response = httpx.post(f"{gateway.url}/v1/completions", timeout=60,
                                  headers={"authorization": f"Bearer {secret}"},
                                  json={"model": "tiny-llama", "prompt": f"Hello {stream}", "max_tokens": 4,
                                        "stream": stream})
            assert response.status_code == 200, response.text
        assert sorted({name for name, _ in calls}) == ["find_key", "reserve", "settle"]
        assert {loop for _, loop in calls} == {on_loop}, calls
    finally:
        gateway.stop()


def test_auto_sends_only_a_remote_postgresql_to_threads() -> None:
    from trtkit.config.store_url import parse_store_url
    from trtkit.gateway.admission import waits_on_network

    class Store:  # what waits_on_network reads of a store: its URL
        def __init__(self, url: str) -> None:
            self.url = parse_store_url(url, "gateway.store")

    assert waits_on_network(Store("postgresql://u:p@db.internal:5432/trtkit"))  # type: ignore[arg-type]
    assert waits_on_network(Store("postgresql://u:p@10.0.0.7/trtkit"))  # type: ignore[arg-type]
    for local in ("postgresql://u:p@127.0.0.1:5432/trtkit", "postgresql://u:p@localhost/trtkit",
                  "postgresql://u:p@[::1]:5432/trtkit", "sqlite:///tmp/gateway.db"):
        assert not waits_on_network(Store(local)), local  # type: ignore[arg-type]
    assert not waits_on_network(Store("postgresql://u:p@db.internal/trtkit"), "loop")  # type: ignore[arg-type]
    assert waits_on_network(Store("sqlite:///tmp/gateway.db"), "threads")  # type: ignore[arg-type]
