"""Gateway replicas as separate OS processes (`trtkit gateway CONFIG --backend ... --port P`) on one store, bursts of
requests released together, and SDK clients for each replica (the stores they share: tests/helpers/stores.py).

Each replica is its own Python process with its own store connections and lease keeper, exactly as a
fleet runs them; `kill()` is a real SIGKILL, so nothing of the replica's clean-up code runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from trtkit.gateway.server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = REPO_ROOT / "model_configs" / "tiny-llama.yaml"
SHARED_CACHE = Path(os.environ.get("TRTKIT_TEST_CACHE", REPO_ROOT / ".trtkit-cache"))


def replica_config(folder: Path, store_url: str, ledger_url: str, lease_seconds: float) -> Path:
    """tiny-llama.yaml with the shared store, the shared ledger and a short lease, and no response cache.

    The suite counts spending: a cache hit is admitted at 0 tokens, so on a machine slow enough that the
    first requests of a burst finish before the last are admitted, identical greedy requests would hit the
    cache and more than the budget's share would be admitted (correctly). The cache has its own tests."""
    config = yaml.safe_load(TINY_CONFIG.read_text())
    client = config.setdefault("client", {})
    client["store"] = ledger_url
    client["cache"] = {"enabled": False}
    config["gateway"] = {"store": store_url, "lease_seconds": lease_seconds}
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Replica:
    def __init__(self, config: Path, backend: str, log_path: Path, home: Path) -> None:
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k != "TRTKIT_GATEWAY_STORE"}  # the config names the store
        env.update(TRTKIT_HOME=str(home), TRTKIT_CACHE=str(SHARED_CACHE), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1")
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trtkit.cli.main", "gateway", str(config), "--backend", backend,
             "--port", str(self.port)], stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"replica exited with {self.process.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/health/live", timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"replica on port {self.port} not ready in {timeout_s} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL: the replica's holds stay in the store until some lease keeper frees them."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._log.close()


def start_replicas(count: int, config: Path, backend: str, folder: Path) -> list[Replica]:
    replicas = [Replica(config, backend, folder / f"replica-{i}.log", folder / "home") for i in range(count)]
    try:
        for replica in replicas:
            replica.wait_ready()
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas


def send_together(targets: list[tuple[str, str]], count: int, body: dict, timeout_s: float = 300.0) -> list[httpx.Response]:
    """``count`` completions released together, round-robin over (replica URL, secret) pairs."""
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits) as http:
            start = asyncio.Event()

            async def one(i: int) -> httpx.Response:
                url, secret = targets[i % len(targets)]
                await start.wait()
                return await http.post(f"{url}/v1/completions", json=body,
                                       headers={"authorization": f"Bearer {secret}"})

            tasks = [asyncio.create_task(one(i)) for i in range(count)]
            await asyncio.sleep(0)  # every task waits on the event: they are released together
            start.set()
            return list(await asyncio.gather(*tasks))

    return asyncio.run(run())


def sdks(replicas: list[Replica], secret: str):  # type: ignore[no-untyped-def]
    """One OpenAI SDK client per replica, all with the same key."""
    import openai

    return [openai.OpenAI(base_url=f"{r.url}/v1", api_key=secret, max_retries=0) for r in replicas]
