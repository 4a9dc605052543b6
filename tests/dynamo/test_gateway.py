"""trtkit's gateway in front of Dynamo's frontend (`trtkit gateway CONFIG --backend http://HOST:PORT/v1`): the
ledger bills what Dynamo reports (cached tokens included), a key's budget holds under a burst, a client that leaves
cancels down to the worker, Dynamo's own error bodies reach callers as OpenAI errors, and the upstream's model name
is checked when the gateway starts."""

from __future__ import annotations

import concurrent.futures
import json
import logging
from dataclasses import replace
from pathlib import Path

import httpx
import openai
import pytest

from tests.dynamo.conftest import MODEL
from tests.dynamo.test_cluster import PREFIX, wait_for, worker_state
from tests.helpers.gateways import RunningGateway
from trtkit.config.schema import ModelConfig
from trtkit.dynamo import DynamoCluster
from trtkit.errors import ConfigError
from trtkit.gateway.server import build_gateway

pytestmark = [pytest.mark.dynamo, pytest.mark.slow]


def governed(config: ModelConfig, *, name: str = MODEL, upstream_model: str | None = None) -> ModelConfig:
    client = replace(config.client, cache=replace(config.client.cache, enabled=False), max_retries=1)
    upstream = replace(config.gateway.upstream, model=upstream_model, read_timeout_seconds=120.0)
    return replace(config, name=name, client=client, gateway=replace(config.gateway, upstream=upstream))


@pytest.fixture(scope="module")
def gateway(dynamo_cluster: DynamoCluster, tiny_config: ModelConfig, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    running = RunningGateway(governed(tiny_config), dynamo_cluster.url, tmp_path_factory.mktemp("gw-dynamo"))
    yield running
    running.stop()


def sdk(gateway: RunningGateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0)


def test_the_ledger_bills_what_dynamo_reports_cached_tokens_included(gateway: RunningGateway,
                                                                       dynamo_cluster: DynamoCluster) -> None:
    key, secret = gateway.key()
    client = sdk(gateway, secret)
    asks = [PREFIX + " one", PREFIX + " two"]
    answers = [client.completions.create(model=MODEL, prompt=p, max_tokens=7, temperature=0) for p in asks]
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count to ten."}],
                                            max_tokens=9, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    streamed = [chunk.usage for chunk in stream if chunk.usage is not None]
    reported = [a.usage for a in answers] + streamed
    rows = gateway.rows(key, "prompt_tokens, completion_tokens, cached_tokens")
    assert rows == [(u.prompt_tokens, u.completion_tokens, u.prompt_tokens_details.cached_tokens
                     if u.prompt_tokens_details else 0) for u in reported]
    assert rows[1][2] > 0  # the repeated prefix was served from the KV cache, and billed as cached
    direct = httpx.post(f"{dynamo_cluster.url}/completions", timeout=60, json={
        "model": MODEL, "prompt": asks[0], "max_tokens": 7, "temperature": 0}).json()
    assert direct["choices"][0]["text"] == answers[0].choices[0].text
    assert direct["usage"]["prompt_tokens"] == rows[0][0] and direct["usage"]["completion_tokens"] == rows[0][1]


def test_a_keys_budget_holds_under_a_burst(gateway: RunningGateway) -> None:
    key, secret = gateway.key(budget_tokens=150)
    client = sdk(gateway, secret)

    def ask(i: int) -> str:
        try:
            client.completions.create(model=MODEL, prompt=f"burst {i}", max_tokens=20, temperature=0)
            return "ok"
        except openai.APIStatusError as exc:
            return str(exc.status_code)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(ask, range(12)))
    billed = sum(p + c for p, c in gateway.rows(key, "prompt_tokens, completion_tokens"))
    assert "ok" in outcomes and set(outcomes) - {"ok"} == {"429"}, outcomes
    assert billed <= 150


def test_a_client_that_leaves_the_gateway_cancels_down_to_the_worker(gateway: RunningGateway,
                                                                     dynamo_cluster: DynamoCluster) -> None:
    key, secret = gateway.key()
    before = [worker_state(dynamo_cluster, i)["cancelled"] for i in range(2)]
    body = {"model": MODEL, "prompt": "Once upon a time " + PREFIX, "max_tokens": 200, "temperature": 0,
            "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/completions", json=body, timeout=120,
                      headers={"authorization": f"Bearer {secret}"}) as response:
        lines = response.iter_lines()
        while not next(lines).startswith("data: "):
            pass
        worker = next(i for i in range(2) if worker_state(dynamo_cluster, i)["requests_active"] > 0)
    wait_for(lambda: worker_state(dynamo_cluster, worker)["cancelled"] > before[worker], "the worker cancelled it")
    assert worker_state(dynamo_cluster, worker)["blocks_used"] == 0
    wait_for(lambda: len(gateway.rows(key)) == 1, "the gateway recorded the request")
    prompt, completion, _, finish, _ = gateway.rows(key)[0]
    assert 0 < completion < 200 and prompt > 0  # billed for what arrived before the client left


def test_dynamo_error_bodies_reach_callers_as_openai_errors(gateway: RunningGateway,
                                                           dynamo_cluster: DynamoCluster) -> None:
    direct = httpx.post(f"{dynamo_cluster.url}/completions", timeout=60,
                        json={"model": MODEL, "prompt": "hi", "max_tokens": 3, "min_p": 0.5})
    assert direct.status_code == 400 and set(direct.json()) == {"message", "type", "code"}  # Dynamo's own shape
    _, secret = gateway.key()
    through = httpx.post(f"{gateway.url}/v1/completions", timeout=60, headers={"authorization": f"Bearer {secret}"},
                         json={"model": MODEL, "prompt": "hi", "max_tokens": 3, "min_p": 0.5})
    assert through.status_code == 400
    error = through.json()["error"]
    assert error["type"] == "invalid_request_error" and "min_p" in error["message"]


def test_the_gateway_checks_the_upstreams_model_name_at_start(dynamo_cluster: DynamoCluster,
                                                              tiny_config: ModelConfig, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match=r"serves 'tiny-llama'.*gateway.upstream.model"):
        build_gateway(governed(tiny_config, upstream_model="llama-70b"), dynamo_cluster.url)
    with caplog.at_level(logging.WARNING, logger="trtkit.gateway.upstream_model"):
        running = RunningGateway(governed(tiny_config, name="my-service"), dynamo_cluster.url, tmp_path / "gw")
    try:
        assert "serves one model, 'tiny-llama'" in caplog.text
        _, secret = running.key()
        answer = sdk(running, secret).completions.create(model="my-service", prompt="hi", max_tokens=3)
        assert answer.model == "my-service" and answer.usage.completion_tokens == 3
    finally:
        running.stop()


def test_a_worker_killed_under_the_gateway(gateway: RunningGateway, dynamo_cluster: DynamoCluster) -> None:
    """Its streams end with an OpenAI error event through the gateway, billed for what arrived; new requests are
    answered at once, while the frontend may still pick the dead worker (the gateway retries its 503s)."""
    key, secret = gateway.key()
    body = {"model": MODEL, "prompt": "A tale " + PREFIX, "max_tokens": 200, "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", f"{gateway.url}/v1/completions", json=body, timeout=120,
                          headers={"authorization": f"Bearer {secret}"}) as response:
            lines = response.iter_lines()
            while not next(lines).startswith("data: "):
                pass
            victim = next(i for i in range(2) if worker_state(dynamo_cluster, i)["requests_active"] > 0)
            dynamo_cluster.kill_worker(victim)
            events = [line for line in lines if line.startswith("data: {")]
        error = json.loads(events[-1][6:])["error"]
        assert error["type"] == "server_error" and "Service temporarily unavailable" in error["message"]
        client = sdk(gateway, secret)
        answers = [client.completions.create(model=MODEL, prompt=f"still there {i}", max_tokens=3) for i in range(4)]
        assert all(a.usage.completion_tokens == 3 for a in answers)
        wait_for(lambda: len(gateway.rows(key)) == 5, "the gateway recorded every request")
        assert gateway.rows(key, "completion_tokens")[0][0] > 0  # the broken stream: billed for what arrived
    finally:
        for index in [i for i, w in enumerate(dynamo_cluster.workers) if w.popen.poll() is not None]:
            dynamo_cluster.restart_worker(index)
