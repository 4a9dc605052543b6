"""Gateway overhead: the OpenAI SDK through `trtkit gateway` against the project's gRPC client direct to
Triton, on the same workload in one run, and the gateway's request rate on the echo repository.

    python benchmarks/gateway_overhead.py [--requests 128] [--concurrency 16] [--max-tokens 32]
                                          [--echo-requests 2000] [--alone 16] [--max-batch 64] [--quick]

Starts two tritonservers (the tiny model; the echo model, whose engine work is negligible) and two
`trtkit gateway` processes with governance on: an API key with RPM, TPM and a token budget, the
store's atomic holds, the runaway guard, the durable ledger (one fsynced row per request).
The direct client calls the same Triton model as the gateway, the engine model ``tensorrt_llm`` with the
prompt's token ids (the token path, trtkit/client/token_wire.py), so the differences below are the
gateway's (HTTP, auth, the store, SSE) and the OpenAI SDK's, not one Triton path against another.
The echo repository's engine computes in bf16 where the CPU has native support (AVX512-BF16 or AMX):
its lm_head over the 49k-token vocabulary is the largest cost left in Triton per echo request.
Both repositories are deployed with ``--max-batch`` (default 64) as the engine's batch limit, above the
concurrency of every phase: TTFT then measures the paths, not a queue behind the batch limit (with the
tiny config's latency profile, 4, twelve of sixteen requests wait for a whole generation, and TTFT at
concurrency 16 becomes a multiple of any throughput difference). ``--max-batch 4`` runs that case.

0. `--alone` streamed requests one at a time each way: TTFT without queueing (the gateway's own latency).
1. Same streamed greedy requests, `--concurrency` at a time, alternating rounds of
   (a) `openai.AsyncOpenAI` -> gateway -> Triton and (b) `AsyncTritonLLMClient` -> Triton.
   Targets: median TTFT overhead (a - b) <= 3 ms; tokens/s of (a) >= 95% of (b).
2. (c) bare HTTP/1.1 keep-alive client -> gateway -> echo repository, max_tokens 1, 64 connections: requests/s.
   Target: >= 500 requests/s on 2 cores. Also printed: the CPU milliseconds each echo request costs in
   the gateway process, in Triton (server and Python stubs) and in this load generator. All three share
   the 2 cores, so 2000 / (their sum) bounds the rate whatever the gateway does.
The load generator shares the machine's cores with the servers; at concurrency 16 the engine keeps both
cores busy, so any CPU the gateway and the SDK take is taken from it: the CPU-per-token rows say by whom.
Real run time on the quiet 2-core machine: about 40 s including two server starts (measured, 2026-12-04);
``--quick`` about 25 s. The figures at concurrency 16 move by tens of ms between runs on that VM: compare
paths within one run only.
Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trtkit.gateway.server import GATEWAY_TRITON_MODEL  # noqa: E402  (the direct client calls the gateway's model)

PROMPTS = ["Explain why the sky is blue.", "Write a short poem about rivers.", "List three uses of copper.",
           "What is a binary search tree?", "Describe the water cycle.", "How do vaccines work?"]
TTFT_TARGET_MS, TPS_TARGET, ECHO_TARGET_RPS = 3.0, 0.95, 500.0
ROUNDS = 4  # alternating rounds per path at --concurrency


def bench_config(work: Path, max_batch: int = 64) -> Path:
    """tiny-llama.yaml with the response cache off (every request of every path reaches the engine) and the
    engine's batch limit at ``max_batch``."""
    import yaml

    data = yaml.safe_load((ROOT / "model_configs" / "tiny-llama.yaml").read_text())
    data.setdefault("client", {})["cache"] = {"enabled": False}
    data["build"]["max_batch_size"] = max_batch
    data["serve"]["max_batch_size"] = max_batch
    path = work / "tiny-llama-nocache.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_servers(work: Path, max_batch: int):  # type: ignore[no-untyped-def]
    from tests.repository.echo_model import build_echo_model
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer
    from trtkit.sources.resolve import resolve_model_dir

    config = load_config(bench_config(work, max_batch))
    tiny_dir = resolve_model_dir(config.model.source)
    build_echo_model(tiny_dir, work / "echo-model")
    tiny = deploy_repository(config, tiny_dir, work / "repo", target="cpu").out_dir
    echo = deploy_repository(echo_config(config), work / "echo-model", work / "echo-repo", target="cpu").out_dir
    return config, (TritonServer(tiny, start_timeout_s=150, log_path=work / "tiny.log"),
                    TritonServer(echo, start_timeout_s=150, log_path=work / "echo.log"))


def echo_config(config):  # type: ignore[no-untyped-def]
    """The echo repository's engine in bf16 where the CPU computes it natively: the 49k-token lm_head of the
    tiny model is the largest cost left in Triton per echo request, and the echo engine is there to cost little."""
    from dataclasses import replace

    from trtkit.refengine.cpu_features import native_bf16_flags

    return replace(config, serve=replace(config.serve, cpu_dtype="bf16")) if native_bf16_flags() else config


def start_gateway(backend: str, env: dict[str, str], config_path: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    from trtkit.gateway.server import free_port

    port = free_port("127.0.0.1")
    process = subprocess.Popen([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                                "gateway", str(config_path), "--backend", backend,
                                "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the gateway did not become ready")


def create_key(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", "from trtkit.cli.main import main; raise SystemExit(main())",
                          "keys", "create", "--name", "bench", "--rpm", "1000000", "--tpm", "1000000000",
                          "--budget-tokens", "1000000000"], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


async def _concurrently(n: int, concurrency: int, one) -> float:  # type: ignore[no-untyped-def]
    gate = asyncio.Semaphore(concurrency)

    async def guarded(i: int) -> None:
        async with gate:
            await one(i)

    start = time.perf_counter()
    await asyncio.gather(*(guarded(i) for i in range(n)))
    return time.perf_counter() - start


async def via_gateway(url: str, secret: str, n: int, concurrency: int, max_tokens: int) -> dict[str, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0)
    ttfts: list[float] = []
    tokens = 0

    async def one(i: int) -> None:
        nonlocal tokens
        start = time.perf_counter()
        first = None
        stream = await client.completions.create(model="tiny-llama", prompt=PROMPTS[i % len(PROMPTS)],
                                                 max_tokens=max_tokens, temperature=0, stream=True,
                                                 stream_options={"include_usage": True})
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].text:
                first = time.perf_counter() - start
            if chunk.usage is not None:
                tokens += chunk.usage.completion_tokens
        ttfts.append(first or 0.0)

    wall = await _concurrently(n, concurrency, one)
    await client.close()
    return {"ttft_ms": statistics.median(ttfts) * 1e3, "tokens_per_s": tokens / wall, "wall_s": wall,
            "ttfts": ttfts, "tokens": tokens}


async def direct(client, n: int, concurrency: int, max_tokens: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from trtkit.client import SamplingParams

    ttfts: list[float] = []
    tokens = 0

    async def one(i: int) -> None:
        nonlocal tokens
        start = time.perf_counter()
        first = None
        async for chunk in client.stream(PROMPTS[i % len(PROMPTS)], SamplingParams(max_tokens=max_tokens)):
            if first is None and chunk.text:
                first = time.perf_counter() - start
            if chunk.result is not None:
                tokens += chunk.result.usage.completion_tokens
        ttfts.append(first or 0.0)

    wall = await _concurrently(n, concurrency, one)
    return {"ttft_ms": statistics.median(ttfts) * 1e3, "tokens_per_s": tokens / wall, "wall_s": wall,
            "ttfts": ttfts, "tokens": tokens}


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
    from trtkit.client import AsyncTritonLLMClient, SamplingParams

    async with AsyncTritonLLMClient(url, config=config, ledger=True, model_name=GATEWAY_TRITON_MODEL) as client:
        await _concurrently(64, 64, lambda i: client.generate("Hi", SamplingParams(max_tokens=1)))
        wall = await _concurrently(n, 64, lambda i: client.generate("Hi", SamplingParams(max_tokens=1)))
    return n / wall


def pooled_ttft_ms(rounds: list[dict]) -> float:
    """The median TTFT over every request of every round (one slow round moves it less than a mean of medians)."""
    return statistics.median(t for r in rounds for t in r["ttfts"]) * 1e3


def pooled_rate(rounds: list[dict]) -> float:
    return sum(r["tokens"] for r in rounds) / sum(r["wall_s"] for r in rounds)


async def paths(config, tiny_url: str, gw_url: str, echo_url: str, echo_gw_url: str, secret: str,  # type: ignore[no-untyped-def]
                args, pids: tuple[int, int], tiny_pids: tuple[int, int]) -> dict:
    from trtkit.client import AsyncTritonLLMClient

    rounds: dict[str, list[dict[str, float]]] = {"gateway": [], "direct": []}
    async with AsyncTritonLLMClient(tiny_url, config=config, ledger=True, model_name=GATEWAY_TRITON_MODEL) as client:
        await direct(client, args.concurrency, args.concurrency, 4)  # warm both paths
        await via_gateway(gw_url, secret, args.concurrency, args.concurrency, 4)
        # one at a time first: the gateway's own latency, without queueing behind the engine's batch
        alone = {"gateway": await via_gateway(gw_url, secret, args.alone, 1, 4),
                 "direct": await direct(client, args.alone, 1, 4)}
        print("gateway vs direct ...", file=sys.stderr)
        per_round = args.requests // ROUNDS
        cpu = {"gateway": [0.0, 0.0, 0.0], "direct": [0.0, 0.0, 0.0]}  # gateway process, this process, Triton
        for _ in range(ROUNDS):  # alternate, so drift in the shared machine hits both paths alike
            for name, run in (("gateway", lambda: via_gateway(gw_url, secret, per_round, args.concurrency,
                                                              args.max_tokens)),
                              ("direct", lambda: direct(client, per_round, args.concurrency, args.max_tokens))):
                before = cpu_seconds(tiny_pids[0]), time.process_time(), cpu_seconds(tiny_pids[1])
                rounds[name].append(await run())
                after = cpu_seconds(tiny_pids[0]), time.process_time(), cpu_seconds(tiny_pids[1])
                cpu[name] = [c + b - a for c, a, b in zip(cpu[name], before, after, strict=True)]
    print("echo repository path ...", file=sys.stderr)
    echo = await echo_rate(echo_gw_url, secret, args.echo_requests, *pids)
    echo_direct = await direct_echo_rate(config, echo_url, args.echo_requests)
    return {"gateway_ttft_ms": pooled_ttft_ms(rounds["gateway"]), "direct_ttft_ms": pooled_ttft_ms(rounds["direct"]),
            "gateway_alone_ttft_ms": alone["gateway"]["ttft_ms"], "direct_alone_ttft_ms": alone["direct"]["ttft_ms"],
            "gateway_tokens_per_s": pooled_rate(rounds["gateway"]), "direct_tokens_per_s": pooled_rate(rounds["direct"]),
            "echo_requests_per_s": echo["requests_per_s"], "echo_direct_requests_per_s": echo_direct, "echo_ok": echo["ok"], "echo_requests": echo["requests"],
            "echo_gateway_cpu_ms": echo["gateway_cpu_ms"], "echo_triton_cpu_ms": echo["triton_cpu_ms"],
            "echo_loadgen_cpu_ms": echo["loadgen_cpu_ms"]} | per_token_cpu(cpu, rounds)


def per_token_cpu(cpu: dict[str, list[float]], rounds: dict[str, list[dict]]) -> dict[str, float]:
    """CPU ms per streamed token at --concurrency, by process: where the gateway path's extra time goes."""
    out = {}
    for name in ("gateway", "direct"):
        tokens = max(1, sum(r["tokens"] for r in rounds[name]))
        gateway_s, client_s, triton_s = cpu[name]
        if name == "gateway":
            out["c16_gateway_cpu_ms_per_token"] = gateway_s * 1e3 / tokens
            out["c16_sdk_cpu_ms_per_token"] = client_s * 1e3 / tokens
        else:
            out["c16_direct_client_cpu_ms_per_token"] = client_s * 1e3 / tokens
        out[f"c16_triton_cpu_ms_per_token_{name}"] = triton_s * 1e3 / tokens
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=128, help=f"per path, in {ROUNDS} alternating rounds")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--echo-requests", type=int, default=2000)
    parser.add_argument("--alone", type=int, default=16, help="requests sent one at a time (TTFT without queueing)")
    parser.add_argument("--max-batch", type=int, default=64, help="the engine's batch limit in both repositories")
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.echo_requests = 32, 300
    with tempfile.TemporaryDirectory(prefix="trtkit-gateway-bench-") as tmp:
        work = Path(tmp)
        env = os.environ.copy() | {"TRTKIT_HOME": str(work / "home")}
        if "TRTKIT_CACHE" not in env and (ROOT / ".trtkit-cache").is_dir():  # reuse converted models
            env["TRTKIT_CACHE"] = os.environ["TRTKIT_CACHE"] = str(ROOT / ".trtkit-cache")
        os.environ["TRTKIT_HOME"] = env["TRTKIT_HOME"]
        config, (tiny, echo) = start_servers(work, args.max_batch)
        with tiny, echo:
            secret = create_key(env)
            gw, gw_url = start_gateway(tiny.grpc_url, env, work / "tiny-llama-nocache.yaml")
            echo_gw, echo_url = start_gateway(echo.grpc_url, env, work / "tiny-llama-nocache.yaml")
            try:
                figures = asyncio.run(paths(config, tiny.grpc_url, gw_url, echo.grpc_url, echo_url, secret, args,
                                            (echo_gw.pid, echo.pid), (gw.pid, tiny.pid)))
            finally:
                for process in (gw, echo_gw):
                    process.terminate()
                    process.wait(timeout=60)
    report(figures, args)


def cpu_sum(f: dict) -> float:
    return max(1e-6, f["echo_gateway_cpu_ms"] + f["echo_triton_cpu_ms"] + f["echo_loadgen_cpu_ms"])


def report(f: dict, args) -> None:  # type: ignore[no-untyped-def]
    ttft_overhead = f["gateway_ttft_ms"] - f["direct_ttft_ms"]
    tps_ratio = f["gateway_tokens_per_s"] / f["direct_tokens_per_s"]
    alone = f["gateway_alone_ttft_ms"] - f["direct_alone_ttft_ms"]
    rows = [("TTFT one request at a time: direct / via gateway, median ms",
             f"{f['direct_alone_ttft_ms']:.1f} / {f['gateway_alone_ttft_ms']:.1f}", ""),
            ("  so the gateway's own TTFT overhead, ms", f"{alone:.1f}", "(no queueing)"),
            ("direct gRPC client TTFT, median ms", f"{f['direct_ttft_ms']:.1f}", ""),
            ("openai SDK via gateway TTFT, median ms", f"{f['gateway_ttft_ms']:.1f}", ""),
            ("gateway TTFT overhead, ms", f"{ttft_overhead:.1f}", f"<= {TTFT_TARGET_MS:g}"),
            (f"direct tokens/s at concurrency {args.concurrency}", f"{f['direct_tokens_per_s']:.0f}", ""),
            (f"gateway tokens/s at concurrency {args.concurrency}", f"{f['gateway_tokens_per_s']:.0f}", ""),
            ("gateway / direct tokens/s", f"{tps_ratio:.1%}", f">= {TPS_TARGET:.0%}"),
            (f"CPU ms per token at {args.concurrency}: gateway process / openai SDK (load generator)",
             f"{f['c16_gateway_cpu_ms_per_token']:.2f} / {f['c16_sdk_cpu_ms_per_token']:.2f}", ""),
            (f"CPU ms per token at {args.concurrency}: direct client", f"{f['c16_direct_client_cpu_ms_per_token']:.2f}", ""),
            (f"CPU ms per token at {args.concurrency}: Triton, gateway path / direct path",
             f"{f['c16_triton_cpu_ms_per_token_gateway']:.2f} / {f['c16_triton_cpu_ms_per_token_direct']:.2f}", ""),
            ("gateway on echo repository, requests/s", f"{f['echo_requests_per_s']:.0f}", f">= {ECHO_TARGET_RPS:g}"),
            ("  of which answered 200", f"{f['echo_ok']}/{f['echo_requests']}", ""),
            ("asyncio client direct on echo repository, requests/s", f"{f['echo_direct_requests_per_s']:.0f}",
             "(where the time goes)"),
            ("echo path CPU ms per request: gateway process", f"{f['echo_gateway_cpu_ms']:.2f}", ""),
            ("echo path CPU ms per request: Triton (server + Python stubs)", f"{f['echo_triton_cpu_ms']:.2f}", ""),
            ("echo path CPU ms per request: load generator (bare HTTP/1.1)", f"{f['echo_loadgen_cpu_ms']:.2f}", ""),
            ("  so the 2-core ceiling, requests/s = 2000 / sum", f"{2000 / cpu_sum(f):.0f}", "")]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  {'value':>10}  target")
    for name, value, target in rows:
        print(f"{name.ljust(width)}  {value:>10}  {target}")
    met = {"ttft_overhead": ttft_overhead <= TTFT_TARGET_MS, "tokens_per_s_ratio": tps_ratio >= TPS_TARGET,
           "echo_requests_per_s": f["echo_requests_per_s"] >= ECHO_TARGET_RPS}
    print("BENCH " + json.dumps({"figures": f | {"ttft_overhead_ms": ttft_overhead, "tokens_per_s_ratio": tps_ratio,
                                                "alone_ttft_overhead_ms": alone},
                                 "targets": {"ttft_overhead_ms": TTFT_TARGET_MS, "tokens_per_s_ratio": TPS_TARGET,
                                             "echo_requests_per_s": ECHO_TARGET_RPS}, "met": met}))


if __name__ == "__main__":
    main()
