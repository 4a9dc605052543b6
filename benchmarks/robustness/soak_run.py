"""The soak's load: N streaming clients, each sending one request after another until the end time.

Each request picks a model (ensemble or BLS), a prompt of random length and a random max_tokens; a
fraction is cancelled after its first few responses (the client walks away). A request is
``completed`` (final response), ``cancelled`` (on purpose), ``failed`` (an error or a broken
connection) or ``lost`` (neither an answer nor an error within the deadline).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from robustness.fuzz_cases import scalar
from robustness.triton_target import Outcome, infer_input

WORDS = ("river stone light 你好 世界 🎉 the of model token cache engine north quiet fast blue 日本語 "
         "answer question seven window garden").split()
# a word is at most 7 tokens (🎉, 日本語): 36 words stay within the tiny config's max_input_len of 256, so
# every soak request is valid and a failure is the server's
MAX_PROMPT_WORDS = 36


@dataclass(slots=True, frozen=True)
class SoakRequest:
    model: str
    prompt: str
    max_tokens: int
    cancel_after: int | None


@dataclass(slots=True)
class SoakTally:
    counts: Counter = field(default_factory=Counter)
    latency_by_minute: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)
    rss_samples: list[dict[str, int]] = field(default_factory=list)
    rss_parts: dict[str, dict] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: SoakRequest, outcome: Outcome, minute: int) -> None:
        verdict = {"ok": "completed", "cancelled": "cancelled", "hang": "lost"}.get(outcome.status, "failed")
        with self.lock:
            self.counts[verdict] += 1
            self.counts[f"{request.model}:{verdict}"] += 1
            if verdict == "completed":
                self.latency_by_minute[minute].append(outcome.seconds)
            elif verdict in ("failed", "lost") and len(self.failures) < 10:
                self.failures.append(f"{request.model} {verdict}: {outcome.message[:200]}")


def random_request(rng: random.Random, models: tuple[str, ...], cancel_fraction: float) -> SoakRequest:
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, MAX_PROMPT_WORDS)))
    cancel_after = rng.randint(1, 3) if rng.random() < cancel_fraction else None
    return SoakRequest(rng.choice(models), prompt, rng.randint(1, 64), cancel_after)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def run_clients(make_target: Callable[[], object], *, clients: int, seconds: float, seed: int,
                models: tuple[str, ...], cancel_fraction: float, deadline_s: float,
                requests_per_client: int | None = None) -> SoakTally:
    """Every client sends streamed requests back to back until ``seconds`` have passed (or it has sent
    ``requests_per_client``), then finishes its request in flight; returns when all clients are done."""
    tally = SoakTally()
    start = time.monotonic()
    end = start + seconds

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        target = make_target()
        sent = 0
        try:
            while sent < requests_per_client if requests_per_client is not None else time.monotonic() < end:
                sent += 1
                request = random_request(rng, models, cancel_fraction)
                tensors = [scalar("text_input", "BYTES", request.prompt.encode()),
                           scalar("max_tokens", "INT32", request.max_tokens), scalar("stream", "BOOL", True)]
                try:
                    outcome = target.send_inputs(request.model, [infer_input(t) for t in tensors],  # type: ignore[attr-defined]
                                                 deadline_s, cancel_after=request.cancel_after)
                except Exception as exc:  # the client library failed: a failed request, the client goes on
                    outcome = Outcome("transport", f"{type(exc).__name__}: {exc}")
                tally.add(request, outcome, int((time.monotonic() - start) // 60))
        finally:
            target.close()  # type: ignore[attr-defined]

    threads = [threading.Thread(target=client, args=(i,), name=f"soak-{i}", daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally
