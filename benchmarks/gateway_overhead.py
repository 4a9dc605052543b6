"""Gateway overhead: the OpenAI SDK through `trtkit gateway` against the project's gRPC client direct to
Triton, on the same workload in one run, and the gateway's request rate on the echo repository.

    python benchmarks/gateway_overhead.py [--layout both|split|shared] [--requests 128] [--concurrency 16]
        [--max-tokens 32] [--echo-requests 2000] [--alone 16] [--max-batch 64] [--quick]
    python benchmarks/gateway_overhead.py --view upstreams [--echo-requests 2000]   (issue 40's cost view:
        benchmarks/upstream_cost.py, the gateway and LiteLLM's proxy in front of one null upstream)

Starts tritonservers (the tiny model; the echo model, whose engine work is negligible) and `trtkit gateway`
processes with governance on: an API key with RPM, TPM and a token budget, the store's atomic holds, the
runaway guard, the durable ledger (one fsynced row per request).
The direct client calls the same Triton model as the gateway, the engine model ``tensorrt_llm`` with the
prompt's token ids (the token path, trtkit/transport/triton/token_path.py), so the differences below are the
gateway's (HTTP, auth, the store, SSE) and the OpenAI SDK's, not one Triton path against another.
Both tiny repositories are deployed with ``--max-batch`` (default 64) as the engine's batch limit, above the
concurrency of every phase: TTFT then measures the paths, not a queue behind the batch limit.

Two CPU layouts of the tiny model (``--layout both``, the default, runs both, and both are judged against the same
targets, side by side: the split one is the GPU host's separation, the shared one is what a user running the CPU
engine unpinned gets):
- split (judged): the tiny repository's engine has one torch thread (``serve.cpu_threads: 1``) and its
  tritonserver (server, Python stubs, every thread) is pinned to the first core; the gateway, the openai SDK
  and the direct client run on the other cores (benchmarks/cpu_layout.py). On a GPU host the engine computes
  on the GPU, so the CPU of the frontends (Triton's, the gateway's, the client's) never slows the engine's
  compute; pinning gives the CPU engine that separation. It is the same work for both paths: one server, one
  engine configuration, one placement; the paths differ only in the gateway + SDK against the direct client,
  and both run on the frontend cores. Triton's own frontend shares the engine's core on both paths alike.
- shared (judged beside it, as ``unpinned_*``; the layout of every run before 2026-12-06): nothing pinned, the engine's torch
  threads on every core. At concurrency 16 the engine keeps both cores busy, so each CPU-ms the gateway and the
  SDK take is taken from the engine (and a 2-thread OpenMP region stalls while one thread is preempted): the
  figures then measure CPU contention more than the gateway.

Phases run one at a time, each with only its own servers up (an idle tiny tritonserver tree takes ~1% of a core):
the echo phase first, then the shared layout, then the split one. This process is the load generator of every
path. It freezes its heap before the first phase (its imports made its full collections 100-140 ms long,
pausing whichever path was measuring) and, once the tiny servers are up, lowers its priority (nice 10,
``cpu_layout.yield_to_servers``; servers started later would inherit it): on the core it shares with the
gateway it takes what the servers leave, as a remote client would not compete with the gateway at all. Each
client is made once and kept, as an application keeps its client: one ``openai.AsyncOpenAI`` (its connection
pool reused), one direct client.

Per layout:
0. `--alone` streamed requests one at a time each way: TTFT without queueing (the gateway's own latency).
   Also (where the time goes): the openai SDK one request at a time against benchmarks/null_sse_server.py, a
   server on the gateway's cores that answers at once: the SDK's own client-side latency (building the request,
   httpx, parsing the first chunk) and a loopback round trip, which no gateway can remove from the SDK path.
1. Same streamed greedy requests, `--concurrency` at a time, alternating rounds of
   (a) `openai.AsyncOpenAI` -> gateway -> Triton and (b) the governed `trtkit.AsyncClient` -> Triton.
   Targets: median TTFT overhead (a - b) <= 3 ms; tokens/s of (a) >= 95% of (b). ``--rounds`` (default 12)
   alternating rounds of ``--requests / --rounds`` requests each way; the 95% intervals are bootstraps over the
   paired rounds, given only with 10 rounds or more (``--quick``'s 4 give none, and the report says so).
   Also alternating, not judged (where the time goes): (a') a bare HTTP/1.1 client (kept-alive connections,
   SSE read by hand, ~0.05 ms of CPU per token against the SDK's ~0.25) -> gateway -> Triton. (a') - (b) is
   the gateway's share of the overhead; (a) - (a') the SDK's own CPU on the shared core. And (b') the direct
   client's engine requests on bare ``tritonclient.grpc.aio`` streams (no governance, no detokenization): its
   CPU per token is what receiving tokens over gRPC costs any Python process, the floor under (a) and (b).
And, unpinned, before the layouts:
2. (c) bare HTTP/1.1 keep-alive client -> gateway -> echo repository, max_tokens 1, 64 connections: requests/s.
   Target: >= 500 requests/s on 2 cores. Also printed: the CPU milliseconds each echo request costs in
   the gateway process, in Triton (server and Python stubs) and in this load generator. All three share
   the 2 cores, so 2000 / (their sum) bounds the rate whatever the gateway does.
The echo repository's engine computes in bf16 where the CPU has native support (AVX512-BF16 or AMX).
Real run time on the 2-core machine: 50-52 s with both layouts, including five server starts; ``--layout split``:
31-40 s (measured 2026-12-06 05:32-05:55, benchmarks/results/gateway_overhead.md). The figures at concurrency 16
move between runs on that VM: compare paths within one run only.
Ends with one ``BENCH {json}`` line: ``figures`` and ``met`` for the judged layout (and the echo path),
``shared_layout`` with the shared layout's figures when it ran.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpu_layout import Split, pin_process, pin_tree, split_cores, usable_cores, yield_to_servers  # noqa: E402
from gateway_load import (  # noqa: E402
    BareGrpcStreams,
    BareStreamClient,
    cpu_seconds,
    direct,
    direct_echo_rate,
    echo_rate,
    openai_client,
    paired_round_intervals,
    pooled_rate,
    pooled_ttft_ms,
    via_bare_grpc,
    via_gateway,
    via_gateway_bare,
)
from gateway_report import report  # noqa: E402

from trtkit.gateway.server import GATEWAY_TRITON_MODEL  # noqa: E402  (the direct client calls the gateway's model)
from trtkit.heap import freeze_startup_heap  # noqa: E402

ROUNDS = 12  # alternating rounds per path at --concurrency (--rounds): enough for a 95% interval over rounds


def bench_config(work: Path, max_batch: int = 64, cpu_threads: int = 0, name: str = "tiny-llama-nocache") -> Path:
    """tiny-llama.yaml with the response cache off (every request of every path reaches the engine), the
    engine's batch limit at ``max_batch`` and its torch threads at ``cpu_threads`` (0: every usable core)."""
    import yaml

    data = yaml.safe_load((ROOT / "model_configs" / "tiny-llama.yaml").read_text())
    data.setdefault("client", {})["cache"] = {"enabled": False}
    data["build"]["max_batch_size"] = max_batch
    data["serve"]["max_batch_size"] = max_batch
    data["serve"]["cpu_threads"] = cpu_threads
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@dataclass(slots=True)
class Stack:
    """One tiny-model tritonserver and the gateway in front of it, in one CPU layout."""

    layout: str  # "split" or "shared"
    server: object  # trtkit.serve.TritonServer, started
    gateway: subprocess.Popen
    gateway_url: str
    null_url: str  # benchmarks/null_sse_server.py: answers at once (the openai SDK's own latency)
    split: Split | None = None


def start_stack(layout: str, server, env: dict[str, str], work: Path, split: Split | None,  # type: ignore[no-untyped-def]
                phase: contextlib.ExitStack) -> Stack:
    """One layout's server and gateway, up until ``phase`` closes (pinned in the split layout)."""
    gateway, url = phase.enter_context(serving(server, env, work / f"tiny-llama-{layout}.yaml"))
    null, null_url = phase.enter_context(null_server())
    if layout == "split":
        assert split is not None
        pin_tree(server.pid, split.engine)
        pin_tree(gateway.pid, split.frontends)
        pin_tree(null.pid, split.frontends)  # where the gateway runs
    return Stack(layout, server, gateway, url, null_url, split if layout == "split" else None)


def start_servers(work: Path, max_batch: int, layouts: list[str], split: Split | None):  # type: ignore[no-untyped-def]
    """The config, {layout: TritonServer} for the tiny model, and the echo TritonServer (not started)."""
    from tests.helpers.echo_model import build_echo_model
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer
    from trtkit.sources.resolve import resolve_model_dir

    config = load_config(bench_config(work, max_batch))
    tiny_dir = resolve_model_dir(config.model.source)
    servers = {}
    for layout in layouts:
        threads = len(split.engine) if layout == "split" and split is not None else 0
        layout_config = load_config(bench_config(work, max_batch, threads, f"tiny-llama-{layout}"))
        repo = deploy_repository(layout_config, tiny_dir, work / f"repo-{layout}", target="cpu").out_dir
        servers[layout] = TritonServer(repo, start_timeout_s=150, log_path=work / f"tiny-{layout}.log")
    build_echo_model(tiny_dir, work / "echo-model")
    echo = deploy_repository(echo_config(config), work / "echo-model", work / "echo-repo", target="cpu").out_dir
    return config, servers, TritonServer(echo, start_timeout_s=150, log_path=work / "echo.log")


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
                          "--budget-tokens", "1000000000", "--max-concurrent", "100000"], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


async def layout_paths(config, stack: Stack, secret: str, args) -> dict:  # type: ignore[no-untyped-def]
    """Both paths on one tiny-model server: one at a time, then alternating rounds at --concurrency; the
    bare HTTP client through the gateway alternates with them (where the time goes, not judged)."""
    from trtkit.upstreams import connect_async

    url, gw_url = stack.server.grpc_url, stack.gateway_url  # type: ignore[attr-defined]
    triton_pid = stack.server.pid  # type: ignore[attr-defined]
    if stack.split is not None:  # this process (the SDK and the direct client) on the frontend cores
        pin_process(os.getpid(), stack.split.frontends)
    rounds: dict[str, list[dict]] = {"gateway": [], "direct": [], "bare": [], "grpc": []}
    sdk, bare = openai_client(gw_url, secret), BareStreamClient(gw_url, secret)
    null_sdk = openai_client(stack.null_url, "unused")
    grpc_floor = None
    try:
        async with connect_async(url, config=config, ledger=True, model_name=GATEWAY_TRITON_MODEL) as client:
            grpc_floor = BareGrpcStreams(url, client.governor.counter, config.build.tokens_per_block)
            paths = {"gateway": lambda n, c, m: via_gateway(sdk, n, c, m),
                     "direct": lambda n, c, m: direct(client, n, c, m),
                     "bare": lambda n, c, m: via_gateway_bare(bare, n, c, m),
                     "grpc": lambda n, c, m: via_bare_grpc(grpc_floor, n, c, m)}
            for run in paths.values():  # warm every path (and open the clients' connections)
                await run(args.concurrency, args.concurrency, 4)
            # one at a time first: the gateway's own latency, without queueing behind the engine's batch
            alone = {name: await paths[name](args.alone, 1, 4) for name in ("gateway", "direct")}
            await via_gateway(null_sdk, 4, 1, 4)  # warm
            alone["sdk_floor"] = await via_gateway(null_sdk, args.alone, 1, 4)
            print(f"{stack.layout} layout: gateway vs direct ...", file=sys.stderr)
            per_round = args.requests // args.rounds
            cpu = {name: [0.0, 0.0, 0.0] for name in paths}  # gateway process, this process, Triton
            for _ in range(args.rounds):  # alternate, so drift in the shared machine hits every path alike
                for name, run in paths.items():
                    before = cpu_seconds(stack.gateway.pid), time.process_time(), cpu_seconds(triton_pid)
                    rounds[name].append(await run(per_round, args.concurrency, args.max_tokens))
                    after = cpu_seconds(stack.gateway.pid), time.process_time(), cpu_seconds(triton_pid)
                    cpu[name] = [c + b - a for c, a, b in zip(cpu[name], before, after, strict=True)]
    finally:
        await sdk.close()
        await null_sdk.close()
        bare.close()
        if grpc_floor is not None:
            await grpc_floor.close()
        if stack.split is not None:
            pin_process(os.getpid(), set(usable_cores()))
    f = {"gateway_ttft_ms": pooled_ttft_ms(rounds["gateway"]), "direct_ttft_ms": pooled_ttft_ms(rounds["direct"]),
         "bare_ttft_ms": pooled_ttft_ms(rounds["bare"]),
         "gateway_alone_ttft_ms": alone["gateway"]["ttft_ms"], "direct_alone_ttft_ms": alone["direct"]["ttft_ms"],
         "sdk_floor_ttft_ms": alone["sdk_floor"]["ttft_ms"],
         "gateway_tokens_per_s": pooled_rate(rounds["gateway"]), "direct_tokens_per_s": pooled_rate(rounds["direct"]),
         "bare_tokens_per_s": pooled_rate(rounds["bare"])}
    f |= {"ttft_overhead_ms": f["gateway_ttft_ms"] - f["direct_ttft_ms"],
          "bare_ttft_overhead_ms": f["bare_ttft_ms"] - f["direct_ttft_ms"],
          "tokens_per_s_ratio": f["gateway_tokens_per_s"] / f["direct_tokens_per_s"],
          "bare_tokens_per_s_ratio": f["bare_tokens_per_s"] / f["direct_tokens_per_s"],
          "alone_ttft_overhead_ms": f["gateway_alone_ttft_ms"] - f["direct_alone_ttft_ms"]}
    f |= {f"{name}_round_tokens_per_s": [round(r["tokens"] / r["wall_s"]) for r in rounds[name]] for name in rounds}
    intervals = paired_round_intervals(rounds["gateway"], rounds["direct"])
    f |= {"ttft_overhead_interval_ms": _listed(intervals["ttft_overhead_ms"]),
          "tokens_per_s_ratio_interval": _listed(intervals["tokens_per_s_ratio"]), "rounds": args.rounds}
    return f | per_token_cpu(cpu, rounds)


def _listed(interval: tuple[float, float] | None) -> list[float] | None:
    return None if interval is None else list(interval)


async def echo_paths(config, echo_url: str, echo_gw_url: str, secret: str, args,  # type: ignore[no-untyped-def]
                     pids: tuple[int, int]) -> dict:
    print("echo repository path ...", file=sys.stderr)
    echo = await echo_rate(echo_gw_url, secret, args.echo_requests, *pids)
    echo_direct = await direct_echo_rate(config, echo_url, args.echo_requests)
    return {"echo_requests_per_s": echo["requests_per_s"], "echo_direct_requests_per_s": echo_direct,
            "echo_ok": echo["ok"], "echo_requests": echo["requests"], "echo_gateway_cpu_ms": echo["gateway_cpu_ms"],
            "echo_triton_cpu_ms": echo["triton_cpu_ms"], "echo_loadgen_cpu_ms": echo["loadgen_cpu_ms"]}


def per_token_cpu(cpu: dict[str, list[float]], rounds: dict[str, list[dict]]) -> dict[str, float]:
    """CPU ms per streamed token at --concurrency, by process: where the gateway path's extra time goes."""
    out: dict[str, float] = {}
    for name in ("gateway", "direct", "bare", "grpc"):
        tokens = max(1, sum(r["tokens"] for r in rounds[name]))
        gateway_ms, client_ms, triton_ms = (seconds * 1e3 / tokens for seconds in cpu[name])
        if name == "gateway":
            out |= {"c16_gateway_cpu_ms_per_token": gateway_ms, "c16_sdk_cpu_ms_per_token": client_ms}
        elif name == "bare":
            out |= {"c16_bare_gateway_cpu_ms_per_token": gateway_ms, "c16_bare_client_cpu_ms_per_token": client_ms}
        elif name == "grpc":
            out["c16_grpc_floor_cpu_ms_per_token"] = client_ms
            continue  # its Triton work is the direct path's
        else:
            out["c16_direct_client_cpu_ms_per_token"] = client_ms
        out[f"c16_triton_cpu_ms_per_token_{name}"] = triton_ms
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", choices=("both", "split", "shared"), default="both",
                        help="CPU layout(s) of the tiny model's phases; split is judged when it runs")
    parser.add_argument("--requests", type=int, default=32 * ROUNDS, help="per path, over --rounds alternating rounds")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="alternating rounds per path; with fewer than 10 no 95%% interval is given")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--echo-requests", type=int, default=2000)
    parser.add_argument("--alone", type=int, default=16, help="requests sent one at a time (TTFT without queueing)")
    parser.add_argument("--max-batch", type=int, default=64, help="the engine's batch limit in the repositories")
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--view", choices=("triton", "upstreams"), default="triton",
                        help="triton: the gateway against the direct client on the tiny model's Triton (the views "
                             "above); upstreams: the gateway's own CPU per request and token in front of a null "
                             "OpenAI-compatible upstream, LiteLLM's proxy beside it (benchmarks/upstream_cost.py)")
    parser.add_argument("--profile", action="store_true", help="--view upstreams: also where trtkit's gateway "
                        "spends its CPU (benchmarks/profiled_gateway.py)")
    args = parser.parse_args()
    if args.view == "upstreams":
        from upstream_cost import main as upstream_view

        upstream_view(args.echo_requests if not args.quick else 400, profile=args.profile)
        return
    if args.quick:  # a check of the script: 4 rounds give no interval, and it says so
        args.requests, args.echo_requests, args.rounds = 32, 300, 4
    split = split_cores(1) if args.layout != "shared" else None
    layouts = [name for name in ("shared", "split") if args.layout in ("both", name)]
    if "split" in layouts and split is None:
        print("one usable core: no split layout; the shared one is judged", file=sys.stderr)
        layouts = ["shared"]
    with tempfile.TemporaryDirectory(prefix="trtkit-gateway-bench-") as tmp:
        work = Path(tmp)
        env = os.environ.copy() | {"TRTKIT_HOME": str(work / "home")}
        if "TRTKIT_CACHE" not in env and (ROOT / ".trtkit-cache").is_dir():  # reuse converted models
            env["TRTKIT_CACHE"] = os.environ["TRTKIT_CACHE"] = str(ROOT / ".trtkit-cache")
        os.environ["TRTKIT_HOME"] = env["TRTKIT_HOME"]
        config, servers, echo = start_servers(work, args.max_batch, layouts, split)
        secret = create_key(env)
        # this process imported the repository tools (torch among them): its full collections took 100-140 ms,
        # pausing whichever path was measuring; the servers freeze their own heaps alike
        freeze_startup_heap()
        # One phase at a time, each with the machine to itself (an idle tiny tritonserver tree takes ~1% of a core).
        # The echo phase first: its servers start before this process lowers its priority (children inherit it).
        with serving(echo, env, work / "tiny-llama-nocache.yaml") as (echo_gw, echo_url):
            figures = {"echo": asyncio.run(echo_paths(config, echo.grpc_url, echo_url, secret, args,
                                                       (echo_gw.pid, echo.pid)))}
        with contextlib.ExitStack() as running:
            phases = {layout: running.enter_context(contextlib.ExitStack()) for layout in servers}
            stacks = {layout: start_stack(layout, server, env, work, split, phases[layout])
                      for layout, server in servers.items()}
            yield_to_servers(os.getpid())  # the load generators take the CPU the servers leave
            for layout, stack in stacks.items():
                figures[layout] = asyncio.run(layout_paths(config, stack, secret, args))
                phases[layout].close()  # the next layout runs without this one idling beside it
    report(figures, args, split)


@contextlib.contextmanager
def null_server():  # type: ignore[no-untyped-def]
    """benchmarks/null_sse_server.py on a free port: (process, URL); stopped after."""
    import socket

    from trtkit.gateway.server import free_port

    port = free_port("127.0.0.1")
    process = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "null_sse_server.py"), str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit("the null SSE server did not start") from None
                time.sleep(0.05)
        yield process, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def serving(server, env: dict[str, str], config_path: Path):  # type: ignore[no-untyped-def]
    """A started tritonserver and its gateway for one phase: (gateway process, gateway URL); both stop after."""
    with server:
        gateway, url = start_gateway(server.grpc_url, env, config_path)
        try:
            yield gateway, url
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)


if __name__ == "__main__":
    main()
