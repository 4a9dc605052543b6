"""Budgets and RPM/TPM in front of llama-server stay exact under a concurrent burst: one gateway on SQLite, and
three gateway replicas (separate `trtkit gateway --backend http://...` processes, tests/helpers/replicas.py) sharing one
PostgreSQL database. Every admitted generation runs to exactly max_tokens (``ignore_eos``) and its prompt is counted
before admission exactly as llama-server counts it, so a request spends exactly what it reserved."""

from __future__ import annotations

import math
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.llama import ALIAS
from tests.helpers.replicas import send_together, start_replicas
from tests.helpers.stores import add_key, new_database, query
from tests.helpers.waits import wait_for
from tests.upstreams.conftest import MODEL, SMOLLM2_CONFIG
from trtkit.gateway.keys import ApiKey

pytestmark = pytest.mark.slow

MAX_TOKENS = 4
BODY = {"model": MODEL, "prompt": "Count the waves that reach the shore.", "max_tokens": MAX_TOKENS,
        "temperature": 0, "ignore_eos": True}


def burst(urls: list[str], secret: str, count: int) -> tuple[list[httpx.Response], list[httpx.Response]]:
    responses = send_together([(url, secret) for url in urls], count, BODY, timeout_s=600.0)
    admitted = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    assert all(r.status_code == 429 for r in refused), {r.status_code: r.text for r in refused}
    return admitted, refused


def per_request(url: str, secret: str) -> int:
    """What one request reserves and spends: prompt + max_tokens (checked: llama-server generates max_tokens)."""
    usage = httpx.post(f"{url}/v1/completions", json=BODY, headers={"authorization": f"Bearer {secret}"},
                       timeout=600).json()["usage"]
    assert usage["completion_tokens"] == MAX_TOKENS
    return int(usage["prompt_tokens"]) + MAX_TOKENS


def test_a_budget_holds_under_a_concurrent_burst(relay) -> None:
    _, probe = relay.key()
    cost = per_request(relay.url, probe)
    key, secret = relay.key(budget_tokens=3 * cost)
    admitted, refused = burst([relay.url], secret, 10)
    assert len(admitted) == 3 and len(refused) == 7
    assert all(r.json()["error"]["code"] == "insufficient_quota" for r in refused)
    assert sum(r.json()["usage"]["total_tokens"] for r in admitted) == 3 * cost
    rows = relay.rows(key, "prompt_tokens + completion_tokens, finish_reason")
    assert sorted(rows) == [(0, "refused:budget")] * 7 + [(cost, "length")] * 3


@pytest.fixture(scope="module")
def fleet(llama, postgres_cluster, smollm2_dir, tmp_path_factory):  # type: ignore[no-untyped-def]
    folder: Path = tmp_path_factory.mktemp("relay-fleet")
    store_url = new_database(postgres_cluster, "relay")
    config = yaml.safe_load(SMOLLM2_CONFIG.read_text())
    config["client"] |= {"store": store_url, "cache": {"enabled": False}, "guard": {"enabled": False}}
    config["gateway"] = {"store": store_url, "lease_seconds": 5, "upstream": {"model": ALIAS}}
    (folder / "fleet.yaml").write_text(yaml.safe_dump(config))
    replicas = start_replicas(3, folder / "fleet.yaml", llama.api, folder)
    yield replicas, store_url
    for replica in replicas:
        replica.stop()


def fleet_key(store_url: str, **limits: object) -> tuple[ApiKey, str]:
    return add_key(store_url, "relay", **limits)


def windows_of(key: ApiKey, store_url: str, column: str) -> list[int]:
    return [n for (n,) in query(store_url, f"SELECT {column} FROM rate_windows WHERE key_id = ?", (key.key_id,))]


def test_rpm_and_tpm_are_exact_across_three_replicas(fleet) -> None:  # type: ignore[no-untyped-def]
    replicas, store_url = fleet
    urls = [r.url for r in replicas]
    _, probe = fleet_key(store_url)
    cost = per_request(urls[0], probe)
    for limits, column, limit in (({"rpm": 5}, "requests", 5), ({"tpm": 3 * cost}, "tokens", 3 * cost)):
        key, secret = fleet_key(store_url, **limits)
        before = time.time()
        admitted, refused = burst(urls, secret, 12)
        windows = math.floor(time.time() / 60) - math.floor(before / 60) + 1  # a burst may straddle a minute
        used = windows_of(key, store_url, column)
        assert used and all(n <= limit for n in used) and len(used) <= windows
        per_window = 1 if column == "requests" else cost
        assert len(admitted) * per_window == sum(used) and len(admitted) >= limit // per_window
        assert all(r.json()["error"]["code"] == "rate_limit_exceeded" for r in refused)


def test_a_budget_holds_across_three_replicas(fleet) -> None:  # type: ignore[no-untyped-def]
    replicas, store_url = fleet
    urls = [r.url for r in replicas]
    _, probe = fleet_key(store_url)
    cost = per_request(urls[0], probe)
    key, secret = fleet_key(store_url, budget_tokens=4 * cost)
    admitted, refused = burst(urls, secret, 12)
    assert len(admitted) == 4 and all(r.json()["error"]["code"] == "insufficient_quota" for r in refused)
    accounts = query(store_url, "SELECT used_tokens, reserved_tokens FROM budget_accounts WHERE account = ?",
                     (f"key:{key.name}",))
    assert accounts == [(4 * cost, 0)]  # settled to the upstream's usage, nothing left held

    def billed() -> list[tuple]:
        return query(store_url, "SELECT prompt_tokens + completion_tokens FROM requests WHERE key_id = ? AND "
                                "finish_reason = 'length'", (key.name,))

    wait_for(lambda: len(billed()) == 4, 60, "a ledger row per admitted request")
    assert billed() == [(cost,)] * 4

