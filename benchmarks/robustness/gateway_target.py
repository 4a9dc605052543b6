"""The gateway as a fuzz / soak target: started in a thread of this process in front of a tritonserver,
sent raw HTTP requests (httpx) under a deadline, and watched for health beside Triton.

An answer becomes the same :class:`~robustness.triton_target.Outcome` as a gRPC answer, so the judge in
``fuzz_run`` is shared: a 5xx is an ``internal error``; a 4xx carries its JSON error's ``param`` and
message (the judge looks for a field name there); a 4xx whose body is not OpenAI's JSON error is unnamed.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from robustness.gateway_cases import GatewayCase
from robustness.server import HealthWatch
from robustness.triton_target import Outcome


@dataclass(slots=True)
class HttpOutcome(Outcome):
    """An HTTP answer: internal when the gateway said so (a 5xx or a ``server_error``), never by wording
    (a 400 quoting "Unterminated string" is a refusal, not a dying stub)."""

    server_side: bool = False

    @property
    def is_internal(self) -> bool:
        return self.status == "error" and self.server_side


class GatewayThread:
    """``build_gateway`` served by uvicorn in a daemon thread (its own event loop); a store and ledger in ``folder``;
    the response cache off, so every request reaches the engine."""

    def __init__(self, config, backend: str, folder: Path) -> None:  # type: ignore[no-untyped-def]
        import uvicorn

        from trtkit.gateway import build_gateway
        from trtkit.gateway.server import free_port
        from trtkit.store import open_gateway_store
        from trtkit.store.ledger import Ledger

        folder.mkdir(parents=True, exist_ok=True)
        config = replace(config, client=replace(config.client, cache=replace(config.client.cache, enabled=False)))
        self.config, self.ledger_path = config, folder / "usage.db"
        self.store = open_gateway_store(folder / "gateway.db")
        self.gateway = build_gateway(config, backend, store=self.store, ledger=Ledger(self.ledger_path))
        self.url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
        self.server = uvicorn.Server(uvicorn.Config(self.gateway.app, host="127.0.0.1",  # type: ignore[arg-type]
                                                    port=int(self.url.rsplit(":", 1)[1]), log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="gateway", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)

    async def _serve(self) -> None:
        try:
            await self.server.serve()
        finally:
            await self.gateway.aclose()

    def new_key(self, name: str, max_concurrent: int | None = 1024, **limits: object) -> tuple[str, str]:
        """(key name as the ledger records it, secret). The load of one key runs past the default per-key cap
        (gateway.limits.max_concurrent_per_key): its keys get a cap of their own, above any load here (None: the
        gateway's). ``limits``: more of ApiKey's fields (budget_tokens, rpm, ...)."""
        from trtkit.gateway.keys import ApiKey, hash_secret, new_secret

        key_id, secret = new_secret()
        self.store.add_key(ApiKey(key_id, f"{name}-{secrets.token_hex(3)}", created_at=time.time(),  # type: ignore[arg-type]
                                  max_concurrent=max_concurrent, **limits), hash_secret(secret))
        found = self.store.find_key(key_id)
        assert found is not None
        return found[0].name, secret

    def ledger_rows(self, key_name: str) -> list[tuple]:
        from trtkit.store.ledger import Ledger

        ledger = Ledger(self.ledger_path)
        try:
            return ledger.query("SELECT finish_reason, completion_tokens FROM requests WHERE key_id = ? ORDER BY id",
                                [key_name])
        finally:
            ledger.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


class GatewayProcess:
    """`trtkit gateway` in a process of its own, so that its RSS is the gateway's alone and not also its load
    generator's. Its store and ledger are SQLite files in ``folder``; this process adds keys to the one and reads
    rows from the other (SQLite in WAL mode is shared between processes). ``config_changes`` go into the YAML it
    reads (model_configs/tiny-llama.yaml plus them, section by section)."""

    def __init__(self, config_changes: dict[str, dict], backend: str, folder: Path) -> None:
        import os
        import subprocess
        import sys

        import yaml

        from trtkit.gateway.server import free_port
        from trtkit.store import open_gateway_store

        folder.mkdir(parents=True, exist_ok=True)
        root = Path(__file__).resolve().parents[2]
        data = yaml.safe_load((root / "model_configs" / "tiny-llama.yaml").read_text())
        changes = {"client": {"cache": {"enabled": False}, "store": f"sqlite:///{folder / 'usage.db'}"},
                   "gateway": {"store": f"sqlite:///{folder / 'gateway.db'}"}}
        for section, fields in [*changes.items(), *config_changes.items()]:
            data.setdefault(section, {}).update(fields)
        config_path = folder / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(data))
        self.ledger_path = folder / "usage.db"
        port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                                         "gateway", str(config_path), "--backend", backend, "--port", str(port)],
                                        env=os.environ.copy())
        self.pid = self.process.pid
        deadline = time.monotonic() + 120
        while not gateway_ready(self.url):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.process.kill()
                raise RuntimeError("the gateway process did not become ready")
            time.sleep(0.2)
        self.store = open_gateway_store(folder / "gateway.db")

    def is_alive(self) -> bool:
        return self.process.poll() is None

    new_key = GatewayThread.new_key
    ledger_rows = GatewayThread.ledger_rows

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.store.close()


def served_model(url: str, secret: str) -> str:
    response = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    return str(response.json()["data"][0]["id"])


def gateway_ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass(slots=True)
class GatewayHealthWatch(HealthWatch):
    """Triton's watch (process, readiness, stubs) plus the gateway's ``/health/ready`` and its thread or process
    (anything with ``is_alive()``)."""

    gateway_url: str = ""
    gateway_thread: threading.Thread | GatewayProcess | None = None

    def check(self) -> list[str]:
        problems = HealthWatch.check(self)
        if self.gateway_thread is not None and not self.gateway_thread.is_alive():
            return [*problems, "gateway exited"]
        if not gateway_ready(self.gateway_url):
            problems.append("gateway not ready")
        return problems


class GatewayHttpTarget:
    """One httpx client per worker thread; every request carries a valid key unless the case sets its own."""

    name = "gateway-http"

    def __init__(self, url: str, secret: str) -> None:
        self.url, self.secret = url, secret
        self.client = httpx.Client(base_url=url)

    def send(self, case: GatewayCase, deadline_s: float) -> Outcome:
        headers = {"Authorization": f"Bearer {self.secret}", "Content-Type": "application/json", **case.headers}
        headers = {k: v for k, v in headers.items() if v}
        start = time.monotonic()
        try:
            with self.client.stream("POST", case.path, content=case.body, headers=headers,
                                    timeout=httpx.Timeout(deadline_s)) as response:
                outcome = _read(response, start + deadline_s)
        except httpx.TimeoutException as exc:
            outcome = Outcome("hang", f"{type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            outcome = Outcome("transport", f"{type(exc).__name__}: {exc}")
        outcome.seconds = time.monotonic() - start
        return outcome

    def close(self) -> None:
        self.client.close()


def _read(response: httpx.Response, deadline: float) -> Outcome:
    if response.status_code >= 400:
        return error_outcome(response.status_code, response.read())
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        body = json.loads(response.read())
        choice = body["choices"][0]
        return HttpOutcome("ok", texts=[_answer(choice["message"]) if "message" in choice else choice["text"]],
                       finals={"finish_reason": choice.get("finish_reason")})
    outcome = HttpOutcome("ok")
    for line in response.iter_lines():
        if time.monotonic() > deadline:
            return HttpOutcome("hang", "the stream went past the deadline", outcome.texts)
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            return error_outcome(200, line[6:].encode(), outcome.texts)
        for choice in event.get("choices", []):
            piece = _answer(choice["delta"]) if "delta" in choice else choice.get("text")
            if piece:
                outcome.texts.append(piece)
            if choice.get("finish_reason"):
                outcome.finals["finish_reason"] = choice["finish_reason"]
    if "finish_reason" not in outcome.finals:
        return HttpOutcome("transport", "the stream ended without a finish_reason", outcome.texts)
    return outcome


def _answer(message: dict) -> str:
    """A chat message's (or delta's) answer: its text, or the arguments of the tools it calls."""
    calls = message.get("tool_calls") or []
    return message.get("content") or "".join((call.get("function") or {}).get("arguments") or "" for call in calls)


def error_outcome(status: int, body: bytes, texts: list[str] | None = None) -> Outcome:
    """An error answer: 5xx (or an error event in a stream that carries a server_error) reads as internal."""
    try:
        error = json.loads(body)["error"]
        message = f"HTTP {status} param={error.get('param')}: {error['message']}"
        server_side = status >= 500 or error.get("type") == "server_error"
    except (ValueError, KeyError, TypeError):
        message, server_side = f"HTTP {status} with no JSON error body: {body[:120]!r}", status >= 500
    return HttpOutcome("error", message, list(texts or []), server_side=server_side)
