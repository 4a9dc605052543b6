"""Two trtkit workers behind Dynamo's real frontend with its KV router (tests/dynamo/conftest.py): routing by
prefix on the workers' own KV events, cached tokens, streamed and non-streamed alike, a disconnect that frees the
worker's blocks, a worker killed mid-answer, and nothing listening beyond loopback."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.dynamo.conftest import BLOCK, MODEL
from trtkit.dynamo import DynamoCluster
from trtkit.dynamo.worker_metrics import parse_samples

pytestmark = [pytest.mark.dynamo, pytest.mark.slow]
PREFIX = " ".join(f"w{i}" for i in range(60))  # several KV blocks of one long shared prefix


def completion(cluster: DynamoCluster, prompt: str, max_tokens: int = 6, **fields: object) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **fields}
    response = httpx.post(f"{cluster.url}/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def worker_state(cluster: DynamoCluster, index: int) -> dict[str, float]:
    text = cluster.worker_metrics(index)
    state = {f"blocks_{k}": v for k, v in parse_samples(text, "trtkit_worker_kv_blocks").items()}
    state |= {f"requests_{k}": v for k, v in parse_samples(text, "trtkit_worker_requests").items()}
    state |= parse_samples(text, "trtkit_worker_requests_total")
    return state


def totals(cluster: DynamoCluster) -> list[float]:
    return [worker_state(cluster, i)["completed"] + worker_state(cluster, i)["cancelled"]
            for i in range(len(cluster.workers))]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def served_by(cluster: DynamoCluster, send: Callable[[], dict]) -> tuple[int, dict]:
    """(the worker that answered, the answer): the one whose finished-request count moved."""
    before = totals(cluster)
    answer = send()
    after = totals(cluster)
    moved = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b > a]
    assert len(moved) == 1, (before, after)
    return moved[0], answer


def stored_events_applied(cluster: DynamoCluster) -> tuple[float, float]:
    """The KV "stored" events Dynamo's router has applied so far: (ok, not ok)."""
    applied = [line for line in cluster.frontend_metrics().splitlines()
               if line.startswith("dynamo_component_kv_cache_events_applied{") and 'event_type="stored"' in line]
    return (sum(float(line.rsplit(" ", 1)[1]) for line in applied if 'status="ok"' in line),
            sum(float(line.rsplit(" ", 1)[1]) for line in applied if 'status="ok"' not in line))


def stored_events_published(cluster: DynamoCluster) -> list[float]:
    """Each worker's KV "stored" events published so far."""
    return [parse_samples(cluster.worker_metrics(i), "trtkit_worker_kv_events_total").get("stored", 0.0)
            for i in range(len(cluster.workers))]


def test_a_repeated_prefix_goes_to_the_worker_that_holds_it(dynamo_cluster: DynamoCluster) -> None:
    # a prefix no other test of the session's cluster sent (tests/dynamo/test_gateway.py sends PREFIX too): its first
    # request finds nothing cached, whatever ran before
    prefix = f"route-{uuid.uuid4().hex[:8]} {PREFIX}"
    applied_before, published_before = stored_events_applied(dynamo_cluster), stored_events_published(dynamo_cluster)
    holder, first = served_by(dynamo_cluster, lambda: completion(dynamo_cluster, prefix + " first"))
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    for ask in ("second", "third", "fourth"):
        worker, answer = served_by(dynamo_cluster, lambda a=ask: completion(dynamo_cluster, f"{prefix} {a}"))
        assert worker == holder
        cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0 and cached % BLOCK == 0 and cached < answer["usage"]["prompt_tokens"]
    # the router saw the workers' own KV events: stored blocks applied, none rejected (counted from this test's start:
    # the cluster is the session's)
    ok, rejected = (now - then for now, then in zip(stored_events_applied(dynamo_cluster), applied_before, strict=True))
    assert ok >= len(PREFIX.split()) // BLOCK and rejected == 0
    assert stored_events_published(dynamo_cluster)[holder] - published_before[holder] >= ok / 2


def test_streamed_and_not_streamed_agree_in_text_and_counts(dynamo_cluster: DynamoCluster) -> None:
    prompt = "Tell me about rivers and the sea."
    whole = completion(dynamo_cluster, prompt, max_tokens=24)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    text, usage, finish = "", None, None
    with httpx.stream("POST", f"{dynamo_cluster.url}/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or ():
                text += choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
            usage = event.get("usage") or usage
    assert text == whole["choices"][0]["text"] and finish == whole["choices"][0]["finish_reason"] == "length"
    assert usage["completion_tokens"] == whole["usage"]["completion_tokens"] == 24
    assert usage["prompt_tokens"] == whole["usage"]["prompt_tokens"]


def test_chat_reports_exact_counts_and_the_end_of_sequence(dynamo_cluster: DynamoCluster) -> None:
    """A chat answer through the frontend's template; stop reasons map to OpenAI's, counts add up."""
    response = httpx.post(f"{dynamo_cluster.url}/chat/completions", timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0})
    answer = response.json()
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert answer["choices"][0]["finish_reason"] in ("stop", "length")
    assert usage["completion_tokens"] == 5 or answer["choices"][0]["finish_reason"] == "stop"


def test_a_client_that_leaves_frees_the_workers_kv_blocks(dynamo_cluster: DynamoCluster) -> None:
    body = {"model": MODEL, "prompt": "A long story: " + PREFIX, "max_tokens": 400, "temperature": 0,
            "stream": True}
    cancelled_before = [worker_state(dynamo_cluster, i)["cancelled"] for i in range(2)]
    with httpx.stream("POST", f"{dynamo_cluster.url}/completions", json=body, timeout=120) as response:
        lines = response.iter_lines()
        while not next(lines).startswith("data: "):
            pass  # the first tokens arrived: the request runs, its blocks are taken
        busy = [i for i in range(2) if worker_state(dynamo_cluster, i)["blocks_used"] > 0]
        assert len(busy) == 1
    worker = busy[0]
    wait_for(lambda: worker_state(dynamo_cluster, worker)["cancelled"] > cancelled_before[worker],
             "the worker cancelled the request")
    state = worker_state(dynamo_cluster, worker)
    assert state["blocks_used"] == 0 and state["requests_active"] == 0


def test_nothing_listens_beyond_loopback(dynamo_cluster: DynamoCluster) -> None:
    """Dynamo's publishers connect to the broker (which binds 127.0.0.1): no socket of the cluster is a wildcard."""
    pids = {p.popen.pid for p in dynamo_cluster.services + dynamo_cluster.workers}
    inodes = {path.readlink().name[len("socket:["):-1] for pid in pids for path in Path(f"/proc/{pid}/fd").iterdir()
              if path.readlink().name.startswith("socket:[")}
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                listening.append(fields[1])
    assert len(listening) >= 2 + 2 * len(dynamo_cluster.workers)  # the broker's two, the frontend, the workers'
    assert all(address.startswith("0100007F:") for address in listening), listening


def test_a_killed_worker_fails_its_requests_clearly_and_the_other_serves(dynamo_cluster: DynamoCluster) -> None:
    """Its streams end with an OpenAI-shaped error. Dynamo's file discovery keeps the dead worker's entry until its
    lease runs out (about 5 s): until then the frontend may still pick it for a new request, which gets a 503 (the
    gateway retries those: test_gateway.py), after it every request goes to the survivor."""
    body = {"model": MODEL, "prompt": "Another long story: " + PREFIX, "max_tokens": 400, "temperature": 0,
            "stream": True}
    try:
        with httpx.stream("POST", f"{dynamo_cluster.url}/completions", json=body, timeout=120) as response:
            lines = response.iter_lines()
            while not next(lines).startswith("data: "):
                pass
            victim = next(i for i in range(2) if worker_state(dynamo_cluster, i)["requests_active"] > 0)
            dynamo_cluster.kill_worker(victim)
            events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        error = events[-1]["error"]  # OpenAI's shape, as the last event
        assert error["message"] and error["type"] and error["code"] == 503
        wait_for(lambda: dynamo_cluster.registered_workers() == 1, "the dead worker's lease ran out", 60)
        survivor = 1 - victim
        before = worker_state(dynamo_cluster, survivor)["completed"]
        answers = [completion(dynamo_cluster, f"after the loss {i}") for i in range(3)]
        assert all(a["choices"][0]["finish_reason"] == "length" for a in answers)
        assert worker_state(dynamo_cluster, survivor)["completed"] == before + 3
    finally:
        dead = [i for i, w in enumerate(dynamo_cluster.workers) if w.popen.poll() is not None]
        for index in dead:
            dynamo_cluster.restart_worker(index)
