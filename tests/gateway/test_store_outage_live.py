"""A gateway on the real throwaway PostgreSQL: the database stopped with pg_ctl -> 503 store_unavailable
(nothing admitted unmetered); started again -> 200, with no restart of the gateway."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.gateways import RunningGateway, gateway_config

pytestmark = pytest.mark.slow


def test_store_down_answers_503_and_recovers_by_itself(live_server, tiny_config, tmp_path, postgres_cluster,
                                                        postgres_db: str) -> None:
    running = RunningGateway(gateway_config(tiny_config, cache=False), live_server.grpc_url, tmp_path / "gw",
                             store_url=postgres_db)
    try:
        key, secret = running.key(budget_tokens=10_000)
        body = {"model": "tiny-llama", "prompt": "Count to three.", "max_tokens": 4, "temperature": 0}
        headers = {"authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=running.url, timeout=60) as http:
            assert http.post("/v1/completions", json=body, headers=headers).status_code == 200
            postgres_cluster.stop()
            try:
                down = http.post("/v1/completions", json=body, headers=headers)
            finally:
                postgres_cluster.start()
            assert down.status_code == 503, down.text
            error = down.json()["error"]
            assert error["code"] == "store_unavailable" and error["type"] == "server_error"
            assert "unavailable" in error["message"] and "127.0.0.1" not in error["message"]
            assert down.headers["retry-after"] == "1"
            back = http.post("/v1/completions", json=body, headers=headers)
            assert back.status_code == 200, back.text
        assert [r[3] for r in running.rows(key)] == ["length", "length"]  # two admitted, two rows, none for the 503
        used, held, _, _ = running.store.account(f"key:{key.name}", _period(key))  # type: ignore[misc]
        assert held == 0 and used == sum(r[0] + r[1] for r in running.rows(key))
    finally:
        running.stop()


def _period(key) -> float:  # type: ignore[no-untyped-def]
    import time

    from trtkit.governance.budgets import period_start

    return period_start(key.period, time.time())
