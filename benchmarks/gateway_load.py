"""The load generators of benchmarks/gateway_overhead.py: the openai SDK through the gateway, the project's
asyncio client direct to Triton, and a bare keep-alive HTTP/1.1 client for the echo rate. They only measure;
the report is drawn by gateway_overhead.py.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from typing import Any

from trtkit.gateway.server import GATEWAY_TRITON_MODEL  # the direct client calls the gateway's model

PROMPTS = ["Explain why the sky is blue.", "Write a short poem about rivers.", "List three uses of copper.",
           "What is a binary search tree?", "Describe the water cycle.", "How do vaccines work?"]

async def _concurrently(n: int, concurrency: int, one) -> float:  # type: ignore[no-untyped-def]
    gate = asyncio.Semaphore(concurrency)

    async def guarded(i: int) -> None:
        async with gate:
            await one(i)

    start = time.perf_counter()
    await asyncio.gather(*(guarded(i) for i in range(n)))
    return time.perf_counter() - start


def openai_client(url: str, secret: str):  # type: ignore[no-untyped-def]
    """One SDK client for the whole run, as an application keeps one: its connections are reused."""
    import openai

    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0)


async def _measured(n: int, concurrency: int, request) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """``n`` requests, ``concurrency`` at a time; ``request(i)`` streams one and returns (TTFT in seconds,
    completion tokens). The figures every path reports."""
    ttfts: list[float] = []
    tokens = 0

    async def one(i: int) -> None:
        nonlocal tokens
        ttft, completion_tokens = await request(i)
        ttfts.append(ttft)
        tokens += completion_tokens

    wall = await _concurrently(n, concurrency, one)
    return {"ttft_ms": statistics.median(ttfts) * 1e3, "tokens_per_s": tokens / wall, "wall_s": wall,
            "ttfts": ttfts, "tokens": tokens}


async def via_gateway(client, n: int, concurrency: int, max_tokens: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    async def request(i: int) -> tuple[float, int]:
        start, first, tokens = time.perf_counter(), 0.0, 0
        stream = await client.completions.create(model="tiny-llama", prompt=PROMPTS[i % len(PROMPTS)],
                                                 max_tokens=max_tokens, temperature=0, stream=True,
                                                 stream_options={"include_usage": True})
        async for chunk in stream:
            if not first and chunk.choices and chunk.choices[0].text:
                first = time.perf_counter() - start
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        return first, tokens

    return await _measured(n, concurrency, request)


async def via_gateway_bare(client: BareStreamClient, n: int, concurrency: int,
                           max_tokens: int) -> dict[str, Any]:
    """The same streamed requests through the gateway from a bare HTTP/1.1 client (SSE read by hand): the
    gateway's share of the SDK path's overhead, without the SDK's own CPU on the shared core."""
    return await _measured(n, concurrency, lambda i: client.stream(PROMPTS[i % len(PROMPTS)], max_tokens))


async def direct(client, n: int, concurrency: int, max_tokens: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from trtkit.governance import SamplingParams

    async def request(i: int) -> tuple[float, int]:
        start, first, tokens = time.perf_counter(), 0.0, 0
        async for chunk in client.stream(PROMPTS[i % len(PROMPTS)], SamplingParams(max_tokens=max_tokens)):
            if not first and chunk.text:
                first = time.perf_counter() - start
            if chunk.result is not None:
                tokens = chunk.result.usage.completion_tokens
        return first, tokens

    return await _measured(n, concurrency, request)


class BareGrpcStreams:
    """The direct client's engine requests (same prompt ids, same inputs) on bare ``tritonclient.grpc.aio``
    streams: no governance, no detokenization, one call per request. What receiving the tokens over gRPC
    costs any Python process: the floor under the direct client and the gateway (where the time goes)."""

    def __init__(self, url: str, counter, tokens_per_block: int) -> None:  # type: ignore[no-untyped-def]
        import tritonclient.grpc.aio as aiogrpc

        self.client = aiogrpc.InferenceServerClient(url)
        self.counter, self.tokens_per_block = counter, tokens_per_block
        self.wire = None

    async def stream(self, prompt: str, max_tokens: int) -> tuple[float, int]:
        from trtkit.governance import SamplingParams
        from trtkit.transport.triton.token_path import TokenPath

        if self.wire is None:
            metadata = await self.client.get_model_metadata(GATEWAY_TRITON_MODEL, as_json=True)
            self.wire = TokenPath(metadata, self.counter, self.tokens_per_block)
        inputs, outputs = self.wire.request(self.counter.prompt_ids(prompt), SamplingParams(max_tokens=max_tokens),
                                            stream=True)
        message = {"model_name": GATEWAY_TRITON_MODEL, "inputs": inputs, "outputs": outputs,
                   "request_id": uuid.uuid4().hex}

        async def requests():  # type: ignore[no-untyped-def]
            yield message

        start, ttft, tokens = time.perf_counter(), 0.0, 0
        async for result, error in self.client.stream_infer(requests()):
            if error is not None:
                raise error
            response = result.get_response()
            ids = result.as_numpy("output_ids")
            if ids is not None and ids.size:
                tokens += int(ids.size)
                ttft = ttft or time.perf_counter() - start
            if response.parameters["triton_final_response"].bool_param:
                break
        return ttft, tokens

    async def close(self) -> None:
        await self.client.close()


async def via_bare_grpc(streams: BareGrpcStreams, n: int, concurrency: int, max_tokens: int) -> dict[str, Any]:
    return await _measured(n, concurrency, lambda i: streams.stream(PROMPTS[i % len(PROMPTS)], max_tokens))


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children (Triton's Python stubs), from /proc via psutil."""
    import psutil

    proc = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [proc, *proc.children(recursive=True)])


class KeepAliveConnection:
    """A bare HTTP/1.1 keep-alive client for the echo path: httpx costs ~10 ms of CPU per request here, more
    than the gateway itself, and on 2 cores the load generator's CPU is taken from the servers."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, request: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        status = int(head.split(" ", 2)[1])
        length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n") if line.startswith("content-length:")),
                      None)
        if length is None:
            raise RuntimeError(f"the gateway answered without Content-Length: {head!r}")
        await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class BareStreamClient:
    """Streamed completions over kept-alive HTTP/1.1 connections (a pool, as the SDK keeps), reading the
    chunked SSE body by hand: first text event -> TTFT, the usage event -> completion tokens."""

    def __init__(self, url: str, secret: str) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = (f"POST /v1/completions HTTP/1.1\r\nhost: {parts.netloc}\r\nauthorization: Bearer {secret}\r\n"
                     f"content-type: application/json\r\n")
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def stream(self, prompt: str, max_tokens: int) -> tuple[float, int]:
        body = json.dumps({"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}}).encode()
        start = time.perf_counter()
        reader, writer = self.idle.pop() if self.idle else await asyncio.open_connection(self.host, self.port)
        writer.write(f"{self.head}content-length: {len(body)}\r\n\r\n".encode() + body)
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        if " 200 " not in head.split("\r\n", 1)[0] or "transfer-encoding: chunked" not in head:
            raise RuntimeError(f"the gateway answered {head!r}")
        ttft, completion_tokens = 0.0, 0
        while (size := int((await reader.readuntil(b"\r\n")).strip(), 16)) > 0:
            data = await reader.readexactly(size + 2)
            for event in data[:-2].split(b"\n\n"):
                if not event.startswith(b"data: {"):
                    continue
                chunk = json.loads(event[6:])
                if not ttft and chunk["choices"] and chunk["choices"][0].get("text"):
                    ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    completion_tokens = chunk["usage"]["completion_tokens"]
        await reader.readexactly(2)  # the last chunk's CRLF: the connection is ready for the next request
        self.idle.append((reader, writer))
        return ttft, completion_tokens

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


def echo_request(url: str, secret: str) -> tuple[str, int, bytes]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    body = json.dumps({"model": "tiny-llama", "prompt": "Hi", "max_tokens": 1, "temperature": 0}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nhost: {parts.netloc}\r\nauthorization: Bearer {secret}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n")
    return parts.hostname or "127.0.0.1", parts.port or 80, head.encode() + body


async def echo_rate(url: str, secret: str, n: int, gateway_pid: int, triton_pid: int,
                    connections: int = 64) -> dict[str, float]:
    """Requests/s, and the CPU milliseconds each request cost in the gateway, in Triton and in this load
    generator: on 2 cores the rate cannot pass 2000 / (their sum), whatever the gateway does."""
    host, port, request = echo_request(url, secret)
    codes: list[int] = []
    errors: list[str] = []

    async def worker(count: int) -> None:
        connection = KeepAliveConnection(host, port)
        try:
            for _ in range(count):
                try:
                    codes.append(await connection.post(request))
                except (OSError, RuntimeError, asyncio.IncompleteReadError) as exc:  # counted: the table shows it
                    codes.append(0)
                    errors.append(repr(exc))
                    await connection.close()
                    connection = KeepAliveConnection(host, port)
        finally:
            await connection.close()

    async def run(total: int) -> float:
        start = time.perf_counter()
        await asyncio.gather(*(worker(total // connections + (i < total % connections)) for i in range(connections)))
        return time.perf_counter() - start

    await run(connections)  # warm the gateway
    codes.clear()
    cpu0 = cpu_seconds(gateway_pid), cpu_seconds(triton_pid), time.process_time()
    wall = await run(n)
    cpu1 = cpu_seconds(gateway_pid), cpu_seconds(triton_pid), time.process_time()
    if errors:
        print(f"echo path: {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    gateway_ms, triton_ms, loadgen_ms = ((b - a) * 1e3 / n for a, b in zip(cpu0, cpu1, strict=True))
    return {"requests_per_s": codes.count(200) / wall, "ok": codes.count(200), "requests": n,
            "gateway_cpu_ms": gateway_ms, "triton_cpu_ms": triton_ms, "loadgen_cpu_ms": loadgen_ms}


async def direct_echo_rate(config, url: str, n: int) -> float:  # type: ignore[no-untyped-def]
    """The same echo requests through the asyncio client alone (same governance, no HTTP): what Triton and
    the governance cost without the gateway, to show where the time goes."""
    from trtkit.governance import SamplingParams
    from trtkit.upstreams import connect_async

    async with connect_async(url, config=config, ledger=True, model_name=GATEWAY_TRITON_MODEL) as client:
        await _concurrently(64, 64, lambda i: client.generate("Hi", SamplingParams(max_tokens=1)))
        wall = await _concurrently(n, 64, lambda i: client.generate("Hi", SamplingParams(max_tokens=1)))
    return n / wall


def pooled_ttft_ms(rounds: list[dict]) -> float:
    """The median TTFT over every request of every round (one slow round moves it less than a mean of medians)."""
    return statistics.median(t for r in rounds for t in r["ttfts"]) * 1e3


def pooled_rate(rounds: list[dict]) -> float:
    return sum(r["tokens"] for r in rounds) / sum(r["wall_s"] for r in rounds)


MIN_ROUNDS_FOR_INTERVAL = 10  # below this a bootstrap over rounds has too few distinct resamples to mean 95%


def paired_round_intervals(path: list[dict], direct: list[dict]) -> dict[str, tuple[float, float] | None]:
    """95% bootstrap intervals of the TTFT overhead and the tokens/s ratio, resampling round indices: round i
    of a path and round i of the direct client ran back to back, so a slow minute of the VM stays paired. None
    with fewer than MIN_ROUNDS_FOR_INTERVAL rounds (4 rounds have 35 distinct resamples: no 95% interval)."""
    from figures import bootstrap_interval

    if len(direct) < MIN_ROUNDS_FOR_INTERVAL:
        return {"ttft_overhead_ms": None, "tokens_per_s_ratio": None}

    def pick(rounds: list[dict], idx) -> list[dict]:  # type: ignore[no-untyped-def]
        return [rounds[i] for i in idx]

    return {"ttft_overhead_ms": bootstrap_interval(
                lambda idx: pooled_ttft_ms(pick(path, idx)) - pooled_ttft_ms(pick(direct, idx)), len(direct)),
            "tokens_per_s_ratio": bootstrap_interval(
                lambda idx: pooled_rate(pick(path, idx)) / pooled_rate(pick(direct, idx)), len(direct))}
