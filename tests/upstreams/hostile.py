"""A relaying gateway in front of the hostile upstream (trtkit.testing.hostile_upstream), shared by the attack tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

import pytest

from tests.helpers.gateways import RunningGateway
from trtkit.config.schema import ModelConfig
from trtkit.testing.hostile_upstream import HostileUpstream

MODEL = "tiny-llama"


def hostile_config(base: ModelConfig, **limits: Any) -> ModelConfig:
    """No response cache, no guard (every request reaches the upstream), no retries."""
    client = replace(base.client, cache=replace(base.client.cache, enabled=False),
                     guard=replace(base.client.guard, enabled=False), max_retries=0)
    gateway = replace(base.gateway, upstream=replace(base.gateway.upstream, model="hostile", read_timeout_seconds=30.0))
    if limits:
        gateway = replace(gateway, limits=replace(gateway.limits, **limits))
    return replace(base, client=client, gateway=gateway)


def hostile_pair(folder: str):  # type: ignore[no-untyped-def]
    """A module's two fixtures: ``upstream`` (the hostile upstream, its behaviour set by each test) and ``relay`` (a
    gateway in front of it, its store and ledger under a temp folder named ``folder``)."""

    @pytest.fixture(scope="module", name="upstream")
    def upstream():  # type: ignore[no-untyped-def]
        with HostileUpstream() as server:
            yield server

    @pytest.fixture(scope="module", name="relay")
    def relay(upstream, tiny_config, tmp_path_factory):  # type: ignore[no-untyped-def]
        running = RunningGateway(hostile_config(tiny_config), upstream.url, tmp_path_factory.mktemp(folder))
        yield running
        running.stop()

    return upstream, relay


def post(gateway: RunningGateway, secret: str, body: dict[str, Any], path: str = "/v1/chat/completions",
         headers: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, bytes]:
    """(status, body) of one raw POST."""
    request = urllib.request.Request(f"{gateway.url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"authorization": f"Bearer {secret}",
                                              "content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def chat(max_tokens: int | None = 5, stream: bool = False, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about the sea."}],
                            "stream": stream, **extra}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.split(b"\n\n") if line.startswith(b"data: {")]


def holds(gateway: RunningGateway) -> int:
    return int(gateway.store.reservations())


ROW = "prompt_tokens, completion_tokens, cached_tokens, finish_reason, usage_flags, cost"
