"""What ``benchmarks/hostile.py`` measures around the attacks: an innocent tenant's requests one after another, a
probe of the gateway's event loop (``GET /health/live`` every 20 ms: its latency is how long the loop was held),
the gateway process's RSS, and afterwards what the attacks left behind (budgets, holds, bills)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from robustness.hostile_attacks import Budgeted
from robustness.server import rss_kb


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


@dataclass(slots=True)
class Sampler:
    """A background loop of one measured call; ``latencies_s`` of each, while running."""

    call: Any  # () -> None, raising on failure
    period_s: float
    latencies_s: list[float] = field(default_factory=list)
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                self.call()
                self.latencies_s.append(time.perf_counter() - started)
            except Exception:
                self.failures += 1
            self.stop.wait(max(0.0, self.period_s - (time.perf_counter() - started)))

    def close(self) -> dict[str, float]:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(60)
        v = self.latencies_s
        return {"count": len(v), "failures": self.failures, "p50_ms": percentile(v, 50) * 1e3,
                "p99_ms": percentile(v, 99) * 1e3, "max_ms": max(v, default=0.0) * 1e3}


def innocent(url: str, secret: str, body: dict[str, Any]) -> Sampler:
    client = httpx.Client(base_url=url, timeout=120)

    def one() -> None:
        response = client.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {secret}"})
        if response.status_code != 200:
            raise RuntimeError(f"innocent request answered {response.status_code}: {response.text[:200]}")

    return Sampler(one, 0.0)


def loop_probe(url: str) -> Sampler:
    client = httpx.Client(base_url=url, timeout=120)
    return Sampler(lambda: client.get("/health/live").raise_for_status(), 0.02)


def rss_mb(pid: int) -> float:
    return (rss_kb(pid) or 0) / 1024


def wait_no_holds(store: Any, timeout_s: float = 60.0) -> int:
    """Holds still in the store once every request settled (polled: settles finish after the answers)."""
    deadline = time.monotonic() + timeout_s
    while store.reservations() and time.monotonic() < deadline:
        time.sleep(0.2)
    return int(store.reservations())


def budget_figures(store: Any, ledger_rows: Any, budgeted: list[Budgeted]) -> dict[str, Any]:
    """Budgets overshot (used past the budget), and billed against reserved for every served row of those keys:
    rows whose completion passed their max_tokens, and the total billed over the total reserved."""
    from trtkit.governance.budgets import period_start

    overshot, over_billed, billed, reserved = 0, 0, 0, 0
    for key in budgeted:
        state = store.account(f"key:{key.name}", period_start("month", time.time()))
        overshot += state is not None and state[0] > key.budget
        for prompt, completion, reason in ledger_rows(key.name):
            if reason.startswith("refused"):
                continue
            billed += prompt + completion
            reserved += prompt + key.max_tokens
            over_billed += completion > key.max_tokens
    return {"budgets_overshot": overshot, "rows_billed_past_max_tokens": over_billed, "billed_tokens": billed,
            "reserved_tokens": reserved, "billed_over_reserved": round(billed / reserved, 3) if reserved else 0.0}
