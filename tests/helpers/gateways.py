"""Gateways for tests: ``RunningGateway`` runs trtkit's gateway (the CLI's uvicorn stack) in a thread of this process,
with its own store and ledger in a folder, over any backend (a Triton gRPC URL or an OpenAI-compatible one);
``gateway_config`` switches the response cache and runaway guard; ``kv_used_blocks`` reads a tritonserver's KV gauge."""

from __future__ import annotations

import re
import secrets
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from trtkit.config.schema import ModelConfig
from trtkit.gateway import build_gateway
from trtkit.gateway.keys import ApiKey, hash_secret, new_secret
from trtkit.gateway.server import free_port, run_in_loop, uvicorn_config
from trtkit.store import open_gateway_store
from trtkit.store.ledger import Ledger

# A request that names no max_tokens gets all the room its prompt leaves: the tiny random model then generates to its
# context, seconds a request. The fuzzers send many such requests (what they prove is the answers' shapes and codes,
# not long generations), so their gateway bounds the default (gateway.default_max_tokens).
FUZZ_DEFAULT_MAX_TOKENS = 8


class RunningGateway:
    def __init__(self, config: ModelConfig, backend: str, folder: Path, store_url: str | None = None,
                 telemetry: object = None) -> None:
        import uvicorn

        folder.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.ledger_path = folder / "usage.db"
        self.store = open_gateway_store(store_url or folder / "gateway.db")
        self.gateway = build_gateway(config, backend, store=self.store, ledger=Ledger(self.ledger_path),
                                     telemetry=telemetry)  # type: ignore[arg-type]
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        uv_config = uvicorn_config(self.gateway.app, "127.0.0.1", self.port)  # the CLI's stack (uvloop, httptools)
        self.server = uvicorn.Server(uv_config)
        self.thread = threading.Thread(target=lambda: run_in_loop(self._serve(), uv_config.get_loop_factory()),
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "gateway did not start"
            time.sleep(0.02)

    async def _serve(self) -> None:
        try:
            await self.server.serve()
        finally:
            await self.gateway.aclose()

    def key(self, **limits: object) -> tuple[ApiKey, str]:
        key_id, secret = new_secret()
        key = ApiKey(key_id, limits.pop("name", f"k-{secrets.token_hex(3)}"), created_at=time.time(), **limits)  # type: ignore[arg-type]
        self.store.add_key(key, hash_secret(secret))
        return key, secret

    def rows(self, key: ApiKey, columns: str = "prompt_tokens, completion_tokens, cached_tokens, finish_reason, "
                                                "cache_hit") -> list[tuple]:
        ledger = Ledger(self.ledger_path)
        try:
            return ledger.query(f"SELECT {columns} FROM requests WHERE key_id = ? ORDER BY id", [key.name])
        finally:
            ledger.close()

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        found = re.findall(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, flags=re.M)
        return float(found[0]) if found else 0.0

    def local_metric(self, name: str, **labels: str) -> float:
        """Read a metric in-process (the gateway runs in this process): no HTTP round trip."""
        return float(self.gateway.client.governor.metrics.registry.get_sample_value(name, labels) or 0.0)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def gateway_config(base: ModelConfig, *, cache: bool, guard: bool = False) -> ModelConfig:
    client = replace(base.client, cache=replace(base.client.cache, enabled=cache),
                     guard=replace(base.client.guard, enabled=guard, ngram_size=2, max_ngram_repeats=3))
    return replace(base, client=client)


def kv_used_blocks(server) -> float:  # type: ignore[no-untyped-def]
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        text = r.read().decode()
    found = re.findall(r'^nv_trt_llm_kv_cache_block_metrics\{[^}]*kv_cache_block_type="used"[^}]*\} ([0-9.e+-]+)$',
                       text, flags=re.M)
    return sum(float(v) for v in found)
