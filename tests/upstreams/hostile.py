"""A relaying gateway in front of the hostile upstream (trtkit.testing.hostile_upstream), shared by the attack tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

from tests.gateway.conftest import RunningGateway
from trtkit.config.schema import ModelConfig

MODEL = "tiny-llama"


def hostile_config(base: ModelConfig, **limits: Any) -> ModelConfig:
    """No response cache, no guard (every request reaches the upstream), no retries."""
    client = replace(base.client, cache=replace(base.client.cache, enabled=False),
                     guard=replace(base.client.guard, enabled=False), max_retries=0)
    gateway = replace(base.gateway, upstream=replace(base.gateway.upstream, model="hostile", read_timeout_seconds=30.0))
    if limits:
        gateway = replace(gateway, limits=replace(gateway.limits, **limits))
    return replace(base, client=client, gateway=gateway)


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
