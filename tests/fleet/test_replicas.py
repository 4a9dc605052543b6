"""Issue 13 acceptance: gateway replicas (separate OS processes) on one store stay exact together.

Three replicas on one PostgreSQL database, and the same suite on SQLite with one replica. Each burst
is 150 concurrent requests spread round-robin over the replicas. Every admitted generation runs to
exactly ``max_tokens`` (``min_tokens`` = ``max_tokens``), so a request spends exactly what it reserved
and the counts below are exact whatever the machine's speed; every wait is a polled condition. The replicas
serve the paced tritonserver, whose engine steps last at least MIN_STEP_MS, so a long stream is still running
when the test acts on it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers.replicas import Replica, replica_config, send_together, start_replicas
from tests.helpers.stores import add_key, new_database, query
from tests.helpers.waits import wait_for
from trtkit.gateway.keys import ApiKey

pytestmark = pytest.mark.slow

PROMPT = "Count the waves that reach the shore, one by one, and tell me each number."
MAX_TOKENS = 6
BURST = 150
LEASE_SECONDS = 2.0  # short, so a killed replica's hold is freed within seconds


@dataclass
class Fleet:
    replicas: list[Replica]
    store_url: str
    config: Path
    backend: str
    folder: Path

    def key(self, **limits: object) -> tuple[ApiKey, str]:
        return add_key(self.store_url, **limits)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        return query(self.store_url, sql, params)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.process.poll() is None]


@pytest.fixture(scope="module", params=[pytest.param(("sqlite", 1), id="sqlite-1-replica"),
                                        pytest.param(("postgresql", 3), id="postgresql-3-replicas",
                                                     marks=pytest.mark.postgres)])
def fleet(request: pytest.FixtureRequest, paced_server, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    backend_name, count = request.param
    folder = tmp_path_factory.mktemp(f"fleet-{backend_name}")
    if backend_name == "sqlite":
        store_url = f"sqlite:///{folder / 'governance.db'}"
    else:
        store_url = new_database(request.getfixturevalue("postgres_cluster"), "fleet")
    # One database holds keys, budgets, windows, holds and the ledger (SQLite: one file, one replica).
    config = replica_config(folder, store_url, store_url, LEASE_SECONDS)
    # the paced server (tests/conftest.py): a generation of N tokens takes at least N x MIN_STEP_MS on any machine
    replicas = start_replicas(count, config, paced_server.grpc_url, folder)
    running = Fleet(replicas, store_url, config, paced_server.grpc_url, folder)
    yield running
    for replica in running.replicas:
        replica.stop()


def body(**extra: object) -> dict:
    return {"model": "tiny-llama", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "min_tokens": MAX_TOKENS,
            "temperature": 0, **extra}


def burst(fleet: Fleet, secret: str) -> tuple[list[httpx.Response], list[httpx.Response]]:
    responses = send_together([(r.url, secret) for r in fleet.live()], BURST, body())
    admitted = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    assert all(r.status_code == 429 for r in refused), {r.status_code: r.text for r in refused}
    return admitted, refused


def assert_one_ledger_row_each(fleet: Fleet, key: ApiKey, admitted: list[httpx.Response]) -> None:
    """Every completed request has exactly one ledger row, under its own request id (the ledger commits
    in groups: polled until the rows are there, then counted)."""
    ids = [r.json()["id"].split("-", 1)[1] for r in admitted]
    assert len(set(ids)) == len(ids)

    def rows() -> Counter:
        found = fleet.query("SELECT request_id FROM requests WHERE key_id = ? AND finish_reason = 'length'",
                            (key.name,))
        return Counter(r[0] for r in found)

    wait_for(lambda: set(ids) <= set(rows()),
             what=lambda: f"a ledger row for every completed request (ids {sorted(ids)[:3]}, rows {sorted(rows())[:3]}, "
                              f"all {fleet.query('SELECT key_id, finish_reason, COUNT(*) FROM requests GROUP BY 1, 2')}"
                              f", key {key.name})")
    counted = rows()
    assert set(counted) == set(ids), "a ledger row without a completed request"
    assert all(n == 1 for n in counted.values()), {i: n for i, n in counted.items() if n != 1}


def per_request_tokens(fleet: Fleet) -> int:
    """What one request reserves and, running to max_tokens, spends: prompt + max_tokens."""
    _, secret = fleet.key()
    response = httpx.post(f"{fleet.replicas[0].url}/v1/completions", json=body(),
                          headers={"authorization": f"Bearer {secret}"}, timeout=300)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["completion_tokens"] == MAX_TOKENS
    return int(usage["prompt_tokens"]) + MAX_TOKENS


def test_token_budget_for_20_requests_admits_20_across_replicas(fleet: Fleet) -> None:
    per_request = per_request_tokens(fleet)
    budget = 20 * per_request
    key, secret = fleet.key(budget_tokens=budget, period="month")
    admitted, refused = burst(fleet, secret)
    # Each request spends exactly what it reserved, so exactly 20 fit; never one more.
    assert len(admitted) == 20 and len(refused) == BURST - 20
    assert all(r.json()["error"]["code"] == "insufficient_quota" for r in refused)
    spent = sum(r.json()["usage"]["total_tokens"] for r in admitted)
    assert spent <= budget
    assert_one_ledger_row_each(fleet, key, admitted)
    ledger_spend = fleet.query("SELECT SUM(prompt_tokens + completion_tokens) FROM requests WHERE key_id = ? "
                               "AND finish_reason = 'length'", (key.name,))[0][0]
    assert ledger_spend == spent <= budget
    accounts = fleet.query("SELECT used_tokens, reserved_tokens FROM budget_accounts WHERE account = ?",
                           (f"key:{key.name}",))
    assert accounts == [(spent, 0)]  # settled to real use, nothing left held


def test_rpm_30_holds_across_replicas_not_times_three(fleet: Fleet) -> None:
    key, secret = fleet.key(rpm=30)
    before = time.time()
    admitted, refused = burst(fleet, secret)
    after = time.time()
    # A burst may straddle a minute boundary: then each of the (at most two) windows allows 30.
    windows = math.floor(after / 60) - math.floor(before / 60) + 1
    counts = [n for (n,) in fleet.query("SELECT requests FROM rate_windows WHERE key_id = ?", (key.key_id,))]
    assert counts and all(n <= 30 for n in counts) and len(counts) <= windows
    assert len(admitted) == sum(counts) <= 30 * windows
    assert len(admitted) >= 30  # 150 requests over at most two windows fill at least one of them
    assert all(r.json()["error"]["code"] == "rate_limit_exceeded" for r in refused)
    assert_one_ledger_row_each(fleet, key, admitted)


def test_kill_9_mid_stream_leaves_no_stranded_reservation(fleet: Fleet) -> None:
    key, secret = fleet.key(budget_tokens=100_000)
    account = f"key:{key.name}"
    victim = fleet.replicas[-1]
    # 400 tokens take at least 400 x MIN_STEP_MS (8 s) on the paced server: still running at the kill, whatever
    # the database query before it costs on this machine
    with httpx.Client(timeout=300) as http:
        with http.stream("POST", f"{victim.url}/v1/completions", headers={"authorization": f"Bearer {secret}"},
                         json=body(max_tokens=400, min_tokens=400, stream=True)) as response:
            assert response.status_code == 200, response.read()
            lines = response.iter_lines()
            assert any(line.startswith("data: ") for line in lines)  # mid-stream: the hold is taken
            held = fleet.query("SELECT reserved_tokens FROM budget_accounts WHERE account = ?", (account,))
            assert held and held[0][0] > 0
            victim.kill()
    if not fleet.live():  # SQLite, one replica: the next replica to start is the one that sweeps
        fleet.replicas.append(Replica(fleet.config, fleet.backend, fleet.folder / "replica-restarted.log",
                                      fleet.folder / "home"))
        fleet.replicas[-1].wait_ready()

    def freed() -> bool:
        held_now = fleet.query("SELECT reserved_tokens, reserved_cost FROM budget_accounts WHERE account = ?",
                               (account,))
        return held_now == [(0, 0.0)] and not fleet.query("SELECT id FROM reservations")

    wait_for(freed, timeout_s=120, what="the killed replica's hold to be freed after its lease")
    # the survivors still serve, and the key's budget is whole again
    response = httpx.post(f"{fleet.live()[0].url}/v1/completions", json=body(),
                          headers={"authorization": f"Bearer {secret}"}, timeout=300)
    assert response.status_code == 200, response.text


def test_database_down_every_replica_answers_503_and_recovers_by_itself(fleet: Fleet,
                                                                        request: pytest.FixtureRequest) -> None:
    if not fleet.store_url.startswith("postgresql"):
        pytest.skip("an embedded SQLite file has no server to lose")
    cluster = request.getfixturevalue("postgres_cluster")
    _, secret = fleet.key(budget_tokens=100_000, rpm=1000)
    headers = {"authorization": f"Bearer {secret}"}

    def statuses() -> list[httpx.Response]:
        return [httpx.post(f"{r.url}/v1/completions", json=body(), headers=headers, timeout=300) for r in fleet.live()]

    assert [r.status_code for r in statuses()] == [200] * len(fleet.live())
    cluster.stop(mode="immediate")  # a crash
    try:
        down = statuses()
        assert [r.status_code for r in down] == [503] * len(fleet.live())  # refused, never admitted unmetered
        assert all(r.json()["error"]["code"] == "store_unavailable" for r in down)
    finally:
        cluster.start()
    # back: every replica serves again without a restart (the first tries may still meet a dead connection)
    wait_for(lambda: [r.status_code for r in statuses()] == [200] * len(fleet.live()), timeout_s=120,
             what="every replica to serve again after the database came back")
