"""The load of benchmarks/cpu_peers.py: one seeded workload of token-id prompts with forced output lengths, sent to
any OpenAI-compatible server as streamed /v1/completions, ``concurrency`` at a time, and the figures every stack
reports (useful tokens/s, TTFT, ITL, what each request generated). It only measures; cpu_peers.py draws the report.

Each server gets the same requests; what differs is only how each is told to generate exactly max_tokens tokens:
``min_tokens`` = max_tokens (trtkit's gateway and vLLM: the end token is banned until then) and ``ignore_eos``
(vLLM and llama-server). Tokens are counted from each stream's usage (``stream_options.include_usage``), which all
three servers send, and a request whose count differs from what it asked for is reported, never counted beyond
what it asked for.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

FIRST_ID, VOCAB = 100, 49152  # prompt ids drawn above SmolLM2's special and byte tokens


@dataclass(frozen=True, slots=True)
class Request:
    index: int
    prompt: list[int]
    max_tokens: int


@dataclass(slots=True)
class Result:
    """One streamed request as the client saw it (seconds on the client's monotonic clock)."""

    request: Request
    sent: float
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk that carried text
    text: str = ""
    completion_tokens: int | None = None  # from the stream's usage
    error: str | None = None
    retry: bool = False  # the connection closed before any answer: worth one more try
    retried: bool = False  # this result is that second try

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


def make_workload(count: int, prompt_range: tuple[int, int], output_range: tuple[int, int], seed: int) -> list[Request]:
    """``count`` requests: prompts of uniformly drawn length and random ids, outputs of uniformly drawn length."""
    rng = random.Random(seed)
    return [Request(index, [rng.randrange(FIRST_ID, VOCAB) for _ in range(rng.randint(*prompt_range))],
                    rng.randint(*output_range)) for index in range(count)]


@dataclass(frozen=True, slots=True)
class Server:
    """An OpenAI-compatible endpoint and how it is told to force lengths."""

    name: str
    base_url: str  # .../v1
    model: str
    api_key: str = "unused"
    min_tokens: bool = True  # sends min_tokens = max_tokens
    ignore_eos: bool = False  # sends ignore_eos: true (trtkit's gateway refuses unknown fields)
    pids: tuple[int, ...] = ()  # the stack's processes (their children are counted too)

    def body(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": request.prompt, "max_tokens": request.max_tokens,
                                "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}
        if self.min_tokens:
            body["min_tokens"] = request.max_tokens
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body


async def stream_one(client: Any, server: Server, request: Request) -> Result:
    """One streamed completion; an error is recorded on the result, never raised (the run goes on). A kept-alive
    connection that the server closed before answering (llama-server does) is retried once on a new one: the
    server never saw that request, and the wait counts in its TTFT all the same."""
    sent = time.monotonic()
    result = await _stream_attempt(client, server, request, sent)
    if result.retry:
        result = await _stream_attempt(client, server, request, sent)
        result.retried = True
    return result


async def _stream_attempt(client: Any, server: Server, request: Request, sent: float) -> Result:
    import httpx

    result = Result(request, sent)
    try:
        async with client.stream("POST", f"{server.base_url}/completions", json=server.body(request),
                                 headers={"authorization": f"Bearer {server.api_key}"}) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                _take_event(result, json.loads(line[5:]), time.monotonic())
    except httpx.RemoteProtocolError as error:
        result.error = f"{type(error).__name__}: {error}"
        result.retry = not result.chunk_times and not result.retried
    except Exception as error:  # a failed request is a figure of the run, not the end of it
        result.error = f"{type(error).__name__}: {error}"
    return result


def _take_event(result: Result, event: dict[str, Any], now: float) -> None:
    if event.get("usage"):
        result.completion_tokens = event["usage"].get("completion_tokens")
    for choice in event.get("choices") or []:
        text = choice.get("text") or ""
        if text:
            result.chunk_times.append(now)
            result.text += text


async def run_load(server: Server, workload: list[Request], concurrency: int, timeout_s: float = 900.0,
                   ) -> tuple[list[Result], float]:
    """Every request of ``workload``, ``concurrency`` in flight (a new one as soon as one ends): (results in
    workload order, wall seconds from the first send to the last end)."""
    import httpx

    pending = list(reversed(workload))
    results: dict[int, Result] = {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        async def worker() -> None:
            while pending:
                request = pending.pop()
                results[request.index] = await stream_one(client, server, request)

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.monotonic() - start
    return [results[r.index] for r in workload], wall


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summarize(results: list[Result], wall: float) -> dict[str, Any]:
    """The figures of one run: useful tokens (generated, up to what each request asked for) per second, TTFT and
    ITL percentiles (ms), and the requests that failed or generated another count than they asked for."""
    counted = [min(r.completion_tokens or 0, r.request.max_tokens) for r in results if r.error is None]
    ttfts = [r.ttft for r in results if r.ttft is not None]
    gaps = [gap for r in results for gap in r.gaps]
    per_request_tpot = [(r.chunk_times[-1] - r.chunk_times[0]) / (r.request.max_tokens - 1)
                        for r in results if r.error is None and len(r.chunk_times) > 1]
    return {
        "requests": len(results), "wall_s": round(wall, 2), "useful_tokens": sum(counted),
        "useful_tok_s": round(sum(counted) / wall, 2) if wall > 0 else 0.0,
        "ttft_p50_ms": _ms(percentile(ttfts, 0.5)), "ttft_p90_ms": _ms(percentile(ttfts, 0.9)),
        "itl_p50_ms": _ms(percentile(gaps, 0.5)), "itl_p90_ms": _ms(percentile(gaps, 0.9)),
        "tpot_p50_ms": _ms(statistics.median(per_request_tpot) if per_request_tpot else None),
        "failed": [f"#{r.request.index}: {r.error}" for r in results if r.error is not None][:5],
        "retried": sum(r.retried for r in results),
        "wrong_counts": [f"#{r.request.index}: {r.completion_tokens} of {r.request.max_tokens}" for r in results
                         if r.error is None and r.completion_tokens != r.request.max_tokens][:5],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 1)
