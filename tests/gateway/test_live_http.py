"""The gateway over raw HTTP (httpx): disconnects, budgets under concurrency, rate limits, cache, keys, body caps."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from server_gauges import settled_engine

pytestmark = pytest.mark.slow

PROMPT = "Count the waves that reach the shore, one by one, and tell me each number."


def body(prompt: str = PROMPT, max_tokens: int = 4, **extra: object) -> dict:
    return {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}


def auth(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def raw_post_head(port: int, secret: str, declared: int) -> bytes:
    """Announce a huge body, send only its first bytes, and read the answer (a client would stream the rest)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode() + b"{" * 4096)
        return sock.recv(4096)


def wait_for(condition, timeout_s: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# max_seq_len 512 minus the prompt: the longest generation the engine allows here. On the paced server it takes at
# least LONGEST x MIN_STEP_MS (9.6 s), so a client that leaves after its first chunk, or once admitted, leaves a
# running generation on any machine: one try, no retries racing the engine.
LONGEST = 480


def leave_a_long_stream(gateway, server, *, read_first_chunk: bool) -> None:  # type: ignore[no-untyped-def]
    """Open a stream that cannot end before LONGEST tokens and close it (after its first chunk, or right after
    its headers); then a 'cancelled' row bills what was generated and the engine stopped."""
    key, secret = gateway.key()
    before = settled_engine(server.metrics_url, after_iteration=-1)
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        with http.stream("POST", "/v1/completions", headers=auth(secret),  # cannot end before LONGEST tokens
                         json=body(max_tokens=LONGEST, min_tokens=LONGEST) | {"stream": True}) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            if read_first_chunk:
                assert next(line for line in response.iter_lines() if line.startswith("data: "))
    assert wait_for(lambda: gateway.rows(key)), "no ledger row after the disconnect"
    (prompt, completion, _, finish, _), = gateway.rows(key)
    assert prompt > 0
    assert finish == "cancelled" and 1 <= completion < LONGEST
    after = settled_engine(server.metrics_url, after_iteration=before.iteration)
    assert after.iteration - before.iteration < LONGEST, "the engine ran on after the client left"
    assert after.used_blocks <= before.used_blocks, "KV blocks still held after the disconnect"
    assert completion <= after.output_tokens - before.output_tokens  # never more than the engine generated


def test_disconnect_mid_stream_frees_blocks_and_bills_partial_tokens(paced_gateway, paced_server) -> None:
    """The client closes the stream after the first chunk."""
    leave_a_long_stream(paced_gateway, paced_server, read_first_chunk=True)


def test_a_client_gone_before_the_first_token_is_billed_and_stopped(paced_gateway, paced_server) -> None:
    """A stream's headers go out once the request is admitted, before its first token. A client that closes
    right after them is treated as one that left mid-stream: the request runs to its first token, is billed for
    what it generated (a row, 'cancelled'), and the engine stops it."""
    leave_a_long_stream(paced_gateway, paced_server, read_first_chunk=False)


def test_disconnect_mid_non_stream_cancels_and_bills(paced_gateway, paced_server) -> None:
    """The client leaves as soon as the gateway has admitted its request (its in-flight gauge says so)."""
    gateway = paced_gateway

    async def leave_early(secret: str) -> None:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            task = asyncio.create_task(http.post("/v1/completions", headers=auth(secret),
                                                 json=body(max_tokens=LONGEST, min_tokens=LONGEST)))
            deadline = time.monotonic() + 20  # leave as soon as the gateway has admitted the request
            while gateway.local_metric("trtkit_gateway_in_flight_requests") < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            assert gateway.local_metric("trtkit_gateway_in_flight_requests") >= 1, "never admitted"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    key, secret = gateway.key()
    before = settled_engine(paced_server.metrics_url, after_iteration=-1)
    asyncio.run(leave_early(secret))
    assert wait_for(lambda: gateway.rows(key)), "no ledger row after the disconnect"
    (_, completion, _, finish, _), = gateway.rows(key)
    assert finish == "cancelled" and completion < LONGEST
    after = settled_engine(paced_server.metrics_url, after_iteration=before.iteration)
    assert after.iteration - before.iteration < LONGEST, "the engine ran on after the client left"
    assert after.used_blocks <= before.used_blocks, "KV blocks still held after the disconnect"
    assert completion <= after.output_tokens - before.output_tokens  # never more than the engine generated


def chunked_frames(port: int, secret: str, payload: dict) -> list[bytes]:
    """The HTTP chunks of one streamed answer, as the gateway framed them (one frame per ASGI send)."""
    import socket

    data = json.dumps(payload).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        raw = b""
        while not raw.endswith(b"\r\n0\r\n\r\n"):
            more = sock.recv(65536)
            assert more, f"the connection closed before the last chunk: {raw[-200:]!r}"
            raw += more
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    frames = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return frames
        frames.append(rest[:size])
        rest = rest[size + 2:]


def test_a_stream_ends_with_finish_usage_and_done_in_one_frame(gateway) -> None:
    """Text chunks go out one by one; the finish chunk, the usage chunk and [DONE] share the last frame
    (one write for the end of the stream)."""
    _, secret = gateway.key()
    frames = chunked_frames(gateway.port, secret, body(max_tokens=6, stream=True,
                                                        stream_options={"include_usage": True}))
    *texts, last = frames
    assert texts and all(f.startswith(b"data: ") and f.count(b"data: ") == 1 and b'"text":' in f for f in texts)
    events = last.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""] and len(events) == 4, last
    finish, usage = (json.loads(e[len(b"data: "):]) for e in events[:2])
    assert finish["choices"][0]["finish_reason"] in ("stop", "length") and finish["usage"] is None
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] >= 1


def test_fifty_concurrent_requests_never_overshoot_a_budget(gateway) -> None:
    counter = gateway.gateway.client.governor.counter
    need = counter.count_prompt(PROMPT) + 4
    key, secret = gateway.key(budget_tokens=10 * need)

    async def flood() -> list[int]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=120,
                                     limits=httpx.Limits(max_connections=50)) as http:
            replies = await asyncio.gather(*(http.post("/v1/completions", headers=auth(secret), json=body())
                                             for _ in range(50)))
        return [r.status_code for r in replies]

    statuses = asyncio.run(flood())
    assert statuses.count(200) <= 10 and statuses.count(200) + statuses.count(429) == 50
    assert statuses.count(200) >= 1
    rows = gateway.rows(key)
    spent = sum(r[0] + r[1] for r in rows)
    assert spent <= 10 * need
    assert sum(r[3] == "refused:budget" for r in rows) == statuses.count(429)
    period = gateway.store.account(f"key:{key.name}", __import__("trtkit.governance.budgets", fromlist=["x"])
                                   .period_start("month", time.time()))
    assert period is not None and period[0] == spent and period[1] == 0  # used == billed, nothing left held


def test_tpm_limit_with_headers(gateway) -> None:
    counter = gateway.gateway.client.governor.counter
    need = counter.count_prompt(PROMPT) + 4
    key, secret = gateway.key(tpm=2 * need + 1)
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        first = http.post("/v1/completions", headers=auth(secret), json=body())
        second = http.post("/v1/completions", headers=auth(secret), json=body())
        third = http.post("/v1/completions", headers=auth(secret), json=body())
    assert first.status_code == second.status_code == 200
    assert first.headers["x-ratelimit-limit-tokens"] == str(2 * need + 1)
    assert int(first.headers["x-ratelimit-remaining-tokens"]) == need + 1
    assert third.status_code == 429 and third.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(third.headers["retry-after"]) >= 1 and third.headers["x-ratelimit-remaining-tokens"] == "1"


def test_cache_never_crosses_tenants_and_hits_cost_nothing(cached_gateway) -> None:
    key_a, secret_a = cached_gateway.key()
    key_b, secret_b = cached_gateway.key()
    with httpx.Client(base_url=cached_gateway.url, timeout=60) as http:
        a1 = http.post("/v1/completions", headers=auth(secret_a), json=body(max_tokens=6)).json()
        a2 = http.post("/v1/completions", headers=auth(secret_a), json=body(max_tokens=6)).json()
        b1 = http.post("/v1/completions", headers=auth(secret_b), json=body(max_tokens=6)).json()
    assert a1["trtkit"]["cache_hit"] is False and a2["trtkit"]["cache_hit"] is True
    assert b1["trtkit"]["cache_hit"] is False  # same prompt, other tenant: no hit
    assert a2["choices"][0]["text"] == a1["choices"][0]["text"] and a2["usage"]["total_tokens"] == 0
    assert [r[4] for r in cached_gateway.rows(key_a)] == [0, 1]
    assert cached_gateway.rows(key_a)[1][:2] == (0, 0)


def test_runaway_guard_stops_the_engine_at_the_boundary(cached_gateway) -> None:
    _, secret = cached_gateway.key()
    with httpx.Client(base_url=cached_gateway.url, timeout=60) as http:
        reply = http.post("/v1/completions", headers=auth(secret),
                          json=body("Hello Hello Hello Hello", max_tokens=200, temperature=0.0)).json()
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["trtkit"]["finish_reason"] == "guard_repetition"
    assert 0 < reply["usage"]["completion_tokens"] < 200


def test_revoked_key_is_refused_at_once(gateway) -> None:
    key, secret = gateway.key()
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        assert http.post("/v1/completions", headers=auth(secret), json=body()).status_code == 200
        assert gateway.store.revoke_key(key.name)
        refused = http.post("/v1/completions", headers=auth(secret), json=body())
        missing = http.post("/v1/completions", json=body())
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    assert missing.status_code == 401


def test_bad_bodies_get_400_naming_the_field_and_big_ones_413_fast(gateway) -> None:
    _, secret = gateway.key()
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        bad_json = http.post("/v1/completions", headers=auth(secret) | {"content-type": "application/json"},
                             content=b"{not json")
        bad_type = http.post("/v1/completions", headers=auth(secret), json=body(max_tokens="many"))
        unknown = http.post("/v1/completions", headers=auth(secret), json=body(temprature=0.5))
        out_of_range = http.post("/v1/completions", headers=auth(secret), json=body(top_p=3.0))
        started = time.monotonic()
        one_mb = http.post("/v1/completions", headers=auth(secret), json=body("x" * 1_000_000))
        hundred_mb = raw_post_head(gateway.port, secret, 100 * 2**20)
        elapsed = time.monotonic() - started
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]["message"]
    assert bad_type.status_code == 400 and bad_type.json()["error"]["param"] == "max_tokens"
    assert unknown.status_code == 400 and "temprature" in unknown.json()["error"]["message"]
    assert out_of_range.status_code == 400 and out_of_range.json()["error"]["param"] == "top_p"
    assert one_mb.status_code == 413 and hundred_mb.startswith(b"HTTP/1.1 413")
    assert elapsed < 30  # refused from the header, not after reading (generous: the machine is shared)


def test_nested_calls_draw_on_the_parents_reservation(gateway) -> None:
    from trtkit.governance.vocabulary import Caller

    key, secret = gateway.key()
    budgets = gateway.gateway.client.governor.budgets
    need = gateway.gateway.client.governor.counter.count_prompt(PROMPT) + 4
    # A parent request in flight holds 2.5 children's worth (made directly: an engine call ends too soon to
    # keep a real one open while the children run).
    parent = budgets.reserve(Caller(key_id=key.name), int(2.5 * need), 0.0, "parent-1")
    header = {"x-trtkit-parent-request-id": "chatcmpl-parent-1"}
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        first = http.post("/v1/completions", headers=auth(secret) | header, json=body())
        second = http.post("/v1/completions", headers=auth(secret) | header, json=body())
        third = http.post("/v1/completions", headers=auth(secret) | header, json=body())
        budgets.settle(parent, 0, 0.0)
        orphan = http.post("/v1/completions", headers=auth(secret) | header, json=body())
    assert first.status_code == second.status_code == 200
    assert third.status_code == 429 and "request parent-1" in third.json()["error"]["message"]
    assert orphan.status_code == 400 and orphan.json()["error"]["param"] == "x-trtkit-parent-request-id"


def test_health_models_and_metrics(gateway) -> None:
    _, secret = gateway.key()
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        assert http.get("/health/live").status_code == 200
        assert http.get("/health/ready").json() == {"status": "ready"}
        assert http.get("/v1/models").status_code == 401
        assert http.get("/v1/models", headers=auth(secret)).json()["data"][0]["id"] == "tiny-llama"
        http.post("/v1/completions", headers=auth(secret), json=body())
        text = http.get("/metrics").text
    for family in ("trtkit_gateway_requests_total", "trtkit_gateway_ttft_seconds_bucket",
                   "trtkit_gateway_latency_seconds_bucket", "trtkit_gateway_in_flight_requests",
                   "trtkit_gateway_refusals_total", "trtkit_client_prompt_tokens_total",
                   "trtkit_client_completion_tokens_total", "trtkit_client_cached_prompt_tokens_total"):
        assert family in text, family
    assert secret not in text


def test_no_auth_only_on_loopback(gateway, tiny_config) -> None:
    from trtkit.errors import ConfigError
    from trtkit.gateway import build_gateway

    with pytest.raises(ConfigError, match="--no-auth"):
        build_gateway(tiny_config, "127.0.0.1:1", no_auth=True, bind="0.0.0.0")
