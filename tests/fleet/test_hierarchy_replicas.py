"""Issue 49 acceptance: three gateway replicas (separate OS processes) on one PostgreSQL hold budgets at every level of
the organisation -> team -> project -> key hierarchy together, and send each spend alert exactly once.

Every admitted generation runs to exactly ``max_tokens`` (``min_tokens`` = ``max_tokens``) on the paced server, so
a request spends exactly what it reserved and the counts are exact whatever the machine's speed. The webhook is a
server in this process; every wait is a polled condition.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.replicas import Replica, replica_config, send_together, start_replicas
from tests.helpers.stores import add_key, new_database, query
from tests.helpers.waits import wait_for
from trtkit.gateway.alerts import SIGNATURE_HEADER, verify_signature
from trtkit.gateway.keys import ApiKey
from trtkit.store import open_gateway_store
from trtkit.store.records import Scope

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

PROMPT = "Count the waves that reach the shore, one by one, and tell me each number."
MAX_TOKENS = 6
BURST = 60
SECRET = "whsec-" + secrets.token_hex(16)
SECRET_ENV = "TRTKIT_TEST_ALERT_SECRET"
WEBHOOK_TIMEOUT_S = 30.0  # a hung webhook holds a sender this long: a request waiting on it would show it


class Webhook(ThreadingHTTPServer):
    """Receives alerts. ``mode``: 'ok'; 'fail' (HTTP 500 for the next ``failures`` posts); 'hang' (answer nothing
    until ``release`` is set)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode, self.failures = "ok", 0
        self.posts: list[tuple[dict, bytes, str]] = []  # (alert, raw body, signature) of every attempt
        self.accepted: list[dict] = []
        self.hanging = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"


class _Handler(BaseHTTPRequestHandler):
    server: Webhook

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["content-length"]))
        hook = self.server
        with hook.lock:
            hook.posts.append((json.loads(body), body, self.headers.get(SIGNATURE_HEADER, "")))
            mode = hook.mode
            if mode == "fail" and hook.failures > 0:
                hook.failures -= 1
                status = 500
            else:
                status = 200
        if mode == "hang":
            hook.hanging.set()
            hook.release.wait(120)
            return
        if status == 200:
            with hook.lock:
                hook.accepted.append(json.loads(body))
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class Fleet:
    def __init__(self, replicas: list[Replica], store_url: str, webhook: Webhook) -> None:
        self.replicas, self.store_url, self.webhook = replicas, store_url, webhook

    def tree(self, **levels: dict) -> str:
        """A fresh org -> team(s) -> project(s) with the given limits; returns the suffix of its names."""
        tag = secrets.token_hex(3)
        store = open_gateway_store(self.store_url, keep_leases=False)
        try:
            store.hierarchy.create(Scope("org", f"o-{tag}", **levels.get("org", {})))
            for team in ("t1", "t2"):
                store.hierarchy.create(Scope("team", f"{team}-{tag}", f"o-{tag}", **levels.get(team, {})))
                store.hierarchy.create(Scope("project", f"p{team[1]}-{tag}", f"{team}-{tag}"))
        finally:
            store.close()
        return tag

    def key(self, project: str | None = None) -> tuple[ApiKey, str]:
        return add_key(self.store_url, "k", project=project)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        return query(self.store_url, sql, params)

    def metric(self, name: str) -> float:
        total = 0.0
        for replica in self.replicas:
            for line in httpx.get(f"{replica.url}/metrics", timeout=30).text.splitlines():
                if line.startswith(name + " "):
                    total += float(line.split()[1])
        return total


@pytest.fixture(scope="module")
def fleet(paced_server, postgres_cluster, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("hierarchy-fleet")
    store_url = new_database(postgres_cluster, "hierarchy")
    webhook = Webhook()
    threading.Thread(target=webhook.serve_forever, daemon=True).start()
    config_path = replica_config(folder, store_url, store_url, 5.0)
    config = yaml.safe_load(config_path.read_text())
    config["gateway"]["alerts"] = {"webhook_url": webhook.url, "secret_env": SECRET_ENV, "retry_seconds": 0.2,
                                   "max_retry_seconds": 0.5, "timeout_seconds": WEBHOOK_TIMEOUT_S}
    config_path.write_text(yaml.safe_dump(config))
    os.environ[SECRET_ENV] = SECRET  # the replicas inherit it
    replicas = start_replicas(3, config_path, paced_server.grpc_url, folder)
    yield Fleet(replicas, store_url, webhook)
    webhook.release.set()
    for replica in replicas:
        replica.stop()
    webhook.shutdown()
    os.environ.pop(SECRET_ENV, None)


def body(**extra: object) -> dict:
    return {"model": "tiny-llama", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "min_tokens": MAX_TOKENS,
            "temperature": 0, **extra}


def per_request_tokens(fleet: Fleet) -> int:
    _, secret = fleet.key()
    response = httpx.post(f"{fleet.replicas[0].url}/v1/completions", json=body(),
                          headers={"authorization": f"Bearer {secret}"}, timeout=300)
    assert response.status_code == 200, response.text
    return int(response.json()["usage"]["prompt_tokens"]) + MAX_TOKENS


def assert_one_ledger_row_each(fleet: Fleet, keys: list[ApiKey], admitted: list[httpx.Response]) -> None:
    ids = [r.json()["id"].split("-", 1)[1] for r in admitted]
    names = tuple(k.name for k in keys)

    def rows() -> Counter:
        found = fleet.query("SELECT request_id FROM requests WHERE key_id IN (?, ?) AND finish_reason = 'length'",
                            names)
        return Counter(r[0] for r in found)

    wait_for(lambda: set(ids) <= set(rows()), what="a ledger row for every completed request")
    assert set(rows()) == set(ids) and all(n == 1 for n in rows().values())


def hammer(fleet: Fleet, level: str, name: str, budget: int, keys: list[tuple[ApiKey, str]]) -> None:
    """Two keys, each on its own replicas, against one budget: exactly what fits, never more; refusals name it."""
    urls = [r.url for r in fleet.replicas]
    targets = [(urls[0], keys[0][1]), (urls[1], keys[1][1]), (urls[2], keys[0][1]), (urls[2], keys[1][1])]
    responses = send_together(targets, BURST, body())
    admitted = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    per_request = admitted[0].json()["usage"]["total_tokens"]
    assert len(admitted) == budget // per_request and refused  # exactly what fits
    billed = sum(r.json()["usage"]["total_tokens"] for r in admitted)
    assert billed <= budget
    assert all(r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota" for r in refused)
    assert all(r.json()["error"]["message"].startswith(f"{level} '{name}': budget of {budget} tokens per month")
               for r in refused), refused[0].text
    assert_one_ledger_row_each(fleet, [k for k, _ in keys], admitted)
    used = fleet.query("SELECT used_tokens, reserved_tokens FROM budget_accounts WHERE account = ?",
                       (f"{level}:{name}",))
    assert used == [(billed, 0)]
    ledger = fleet.query(f"SELECT SUM(prompt_tokens + completion_tokens), COUNT(*) FROM requests WHERE {level} = ? "
                         "AND finish_reason = 'length'", (name,))
    assert ledger == [(billed, len(admitted))]  # the ledger names the level each request ran under


def test_two_keys_of_one_team_on_different_replicas_never_pass_the_team_budget(fleet: Fleet) -> None:
    budget = 12 * per_request_tokens(fleet)
    tag = fleet.tree(t1={"budget_tokens": budget})
    keys = [fleet.key(f"p1-{tag}"), fleet.key(f"p1-{tag}")]
    hammer(fleet, "team", f"t1-{tag}", budget, keys)


def test_keys_in_two_teams_never_pass_the_organisation_budget(fleet: Fleet) -> None:
    budget = 10 * per_request_tokens(fleet)
    tag = fleet.tree(org={"budget_tokens": budget})
    keys = [fleet.key(f"p1-{tag}"), fleet.key(f"p2-{tag}")]
    hammer(fleet, "org", f"o-{tag}", budget, keys)


def _alerts_for(fleet: Fleet, account: str) -> list[dict]:
    return [a for a in fleet.webhook.accepted if a["account"] == account]


def test_a_threshold_crossed_on_three_replicas_sends_one_signed_webhook(fleet: Fleet) -> None:
    per_request = per_request_tokens(fleet)
    tag = fleet.tree(t1={"budget_tokens": 20 * per_request, "alert_at": (0.5,)})
    keys = [fleet.key(f"p1-{tag}") for _ in range(3)]
    targets = [(r.url, secret) for r, (_, secret) in zip(fleet.replicas, keys, strict=True)]
    responses = send_together(targets, 15, body())  # 15 of 20 fit: 75%, past 50% on every replica at once
    assert all(r.status_code == 200 for r in responses)
    account = f"team:t1-{tag}"
    wait_for(lambda: fleet.query("SELECT COUNT(*) FROM spend_alerts WHERE account = ? AND sent_at IS NOT NULL",
                                 (account,)) == [(1,)], what="the alert to be sent")
    assert len(fleet.query("SELECT id FROM spend_alerts WHERE account = ?", (account,))) == 1
    (alert,) = _alerts_for(fleet, account)
    assert alert["level"] == "team" and alert["name"] == f"t1-{tag}" and alert["threshold_percent"] == 50
    assert alert["limit"] == {"tokens": 20 * per_request} and alert["used"]["tokens"] >= 10 * per_request
    raw, signature = next((raw, sig) for a, raw, sig in fleet.webhook.posts if a["account"] == account)
    assert verify_signature(SECRET.encode(), signature, raw)
    assert not verify_signature(b"another secret", signature, raw)
    assert not verify_signature(SECRET.encode(), signature, raw.replace(b"team", b"tea_"))
    assert [a["account"] for a, _, _ in fleet.webhook.posts].count(account) == 1  # one post: nothing retried


def test_a_webhook_that_fails_twice_then_answers_gets_the_alert_once(fleet: Fleet) -> None:
    per_request = per_request_tokens(fleet)
    tag = fleet.tree(t1={"budget_tokens": 4 * per_request, "alert_at": (0.5,)})
    _, secret = fleet.key(f"p1-{tag}")
    failures_before = fleet.metric("trtkit_gateway_spend_alert_failures_total")
    with fleet.webhook.lock:
        fleet.webhook.mode, fleet.webhook.failures = "fail", 2
    try:
        for _ in range(2):
            response = httpx.post(f"{fleet.replicas[1].url}/v1/completions", json=body(),
                                  headers={"authorization": f"Bearer {secret}"}, timeout=300)
            assert response.status_code == 200
        account = f"team:t1-{tag}"
        wait_for(lambda: len(_alerts_for(fleet, account)) == 1, what="the alert, after two failed attempts")
    finally:
        with fleet.webhook.lock:
            fleet.webhook.mode = "ok"
    attempts = [a for a, _, _ in fleet.webhook.posts if a["account"] == account]
    assert len(attempts) == 3 and len({a["id"] for a in attempts}) == 1  # one alert, three attempts
    # the webhook records the post before its answer reaches the sender, which then writes the row: wait for it
    row = lambda: fleet.query("SELECT attempts, last_error FROM spend_alerts WHERE account = ?", (account,))  # noqa: E731
    wait_for(lambda: row() == [(3, None)], what=lambda: f"the alert's row after its delivery: {row()}")
    assert fleet.metric("trtkit_gateway_spend_alert_failures_total") - failures_before == 2  # logged and counted


def test_a_webhook_that_never_answers_does_not_slow_requests(fleet: Fleet) -> None:
    _, secret = fleet.key()
    url = f"{fleet.replicas[0].url}/v1/completions"
    headers = {"authorization": f"Bearer {secret}"}

    def timed(n: int) -> list[float]:
        took = []
        for _ in range(n):
            started = time.perf_counter()
            response = httpx.post(url, json=body(), headers=headers, timeout=300)
            took.append(time.perf_counter() - started)
            assert response.status_code == 200
        return took

    before = timed(8)
    per_request = per_request_tokens(fleet)
    tag = fleet.tree(t1={"budget_tokens": 2 * per_request, "alert_at": (0.5,)})
    _, alerting = fleet.key(f"p1-{tag}")
    with fleet.webhook.lock:
        fleet.webhook.mode = "hang"
    try:
        response = httpx.post(url, json=body(), headers={"authorization": f"Bearer {alerting}"}, timeout=300)
        assert response.status_code == 200  # the request that passes the threshold is not held either
        assert fleet.webhook.hanging.wait(60), "the sender never reached the webhook"
        during = timed(8)  # a sender of this replica is stuck in the POST now
    finally:
        fleet.webhook.release.set()
        with fleet.webhook.lock:
            fleet.webhook.mode = "ok"
    print(f"request latency, median: {statistics.median(before) * 1e3:.1f} ms with the webhook answering, "
          f"{statistics.median(during) * 1e3:.1f} ms while it hangs (max {max(during) * 1e3:.1f} ms)")
    # a request that waited on the webhook would take its whole timeout (30 s); none took a sixth of it
    assert max(during) < WEBHOOK_TIMEOUT_S / 6


def test_the_cli_reports_usage_by_level(fleet: Fleet, tmp_path: Path) -> None:
    from trtkit.cli.main import main

    per_request = per_request_tokens(fleet)
    tag = fleet.tree()
    _, secret = fleet.key(f"p2-{tag}")
    response = httpx.post(f"{fleet.replicas[2].url}/v1/completions", json=body(),
                          headers={"authorization": f"Bearer {secret}"}, timeout=300)
    assert response.status_code == 200
    wait_for(lambda: fleet.query("SELECT COUNT(*) FROM requests WHERE team = ?", (f"t2-{tag}",)) == [(1,)],
             what="the ledger row")
    out = tmp_path / "out.json"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["usage", "--by", "team", "--json", "--store", fleet.store_url]) == 0
    out.write_text(buffer.getvalue())
    rows = {r["team"]: r for r in json.loads(out.read_text())}
    assert rows[f"t2-{tag}"]["total_tokens"] == per_request and rows[f"t2-{tag}"]["requests"] == 1
