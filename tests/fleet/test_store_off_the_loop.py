"""A gateway waits on a PostgreSQL store in worker threads, never on its event loop (a fleet's database is a
network round trip away: on the loop, every admission, settle and key lookup would stop every other request
of that replica for it). SQLite, a local file, is called on the loop, where a thread hop would cost more."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.gateway.conftest import RunningGateway

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


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def test_store_calls_leave_the_loop_only_for_a_network_database(backend: str, live_server, tiny_config,
                                                                tmp_path, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("postgres_db") if backend == "postgresql" else None
    gateway = RunningGateway(tiny_config, live_server.grpc_url, tmp_path / "gw", store_url=url)
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
        assert {on_loop for _, on_loop in calls} == {backend == "sqlite"}, calls
    finally:
        gateway.stop()
