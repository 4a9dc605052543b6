"""What the gateway costs in front of an OpenAI-compatible upstream, and LiteLLM's proxy beside it (issue 40):
``benchmarks/gateway_overhead.py --view upstreams``.

Cost targets, which do not depend on where processes run on a 2-core machine: each gateway's own CPU time (from
/proc: user + system of its process tree) per request and per streamed token, in front of one null upstream that
answers at once (benchmarks/null_sse_server.py), so that everything measured is the gateway's.

- trtkit's gateway: ``trtkit gateway CONFIG --backend http://null/v1``, governance on: an API key with a token
  budget and RPM/TPM limits (the store's atomic holds), the runaway guard, the durable ledger (one fsynced row per
  request); the response cache off, so every request reaches the upstream.
- LiteLLM's proxy 1.86.2, in its own virtual environment (``bash benchmarks/setup_litellm.sh``: installed from
  benchmarks/litellm-requirements.txt with ``--require-hashes``; never a trtkit dependency), with a master key and
  RPM/TPM limits on the model, in front of the same null upstream.
- The same client drives both and the upstream directly: a bare keep-alive HTTP/1.1 client reading the SSE by hand
  (gateway_load.BareStreamClient), streamed completions with ``include_usage``.

Phases per target: one request at a time (TTFT, CPU per request at concurrency 1), concurrency 16 with 4 and with
64 tokens per answer (CPU per request; per streamed token from the difference), and concurrency 16 and 64 for the
rate. Targets: trtkit's CPU per request <= 0.1x LiteLLM's and <= 1 ms; TTFT overhead at concurrency 1 <= 2 ms over a
direct request to the null upstream; >= 1,000 streamed requests/s with governance on.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml
from cpu_layout import yield_to_servers
from figures import print_bench
from gateway_load import BareStreamClient, cpu_seconds

from trtkit.gateway.server import free_port

ROOT = Path(__file__).resolve().parent.parent
LITELLM_VENV = Path(os.environ.get("TRTKIT_LITELLM_VENV", ROOT / ".venv-litellm"))
MASTER_KEY = "sk-bench-master"
TARGETS = {"cpu_ratio_vs_litellm": 0.1, "cpu_ms_per_request": 1.0, "ttft_overhead_ms": 2.0, "requests_per_s": 1000.0}


def start(command: list[str], ready_url: str, env: dict[str, str], log: Path, headers: dict[str, str] | None = None,
          timeout_s: float = 180.0) -> subprocess.Popen:
    process = subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{command[0]} exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(ready_url, headers=headers, timeout=5).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{ready_url} not ready in {timeout_s} s: {log.read_text()[-2000:]}")


def trtkit_gateway(work: Path, env: dict[str, str], upstream: str) -> tuple[subprocess.Popen, str, str]:
    """The gateway, governance on; (process, URL, API key)."""
    config = yaml.safe_load((ROOT / "model_configs" / "tiny-llama.yaml").read_text())
    config["client"] = config.get("client", {}) | {"cache": {"enabled": False}}
    config["gateway"] = {"upstream": {"model": "tiny-llama"}}
    path = work / "tiny-llama-upstream.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = [sys.executable, "-m", "trtkit.cli.main"]
    secret = subprocess.run([*cli, "keys", "create", "--name", "bench", "--rpm", "1000000", "--tpm", "1000000000",
                             "--max-concurrent", "100000", "--budget-tokens", "1000000000"], env=env,
                            capture_output=True, text=True,
                            check=True).stdout.strip()
    port = free_port("127.0.0.1")
    process = start([*cli, "gateway", str(path), "--backend", upstream, "--port", str(port)],
                    f"http://127.0.0.1:{port}/health/ready", env, work / "trtkit-gateway.log")
    return process, f"http://127.0.0.1:{port}", secret


def litellm_proxy(work: Path, upstream: str) -> tuple[subprocess.Popen, str] | None:
    """LiteLLM's proxy with a master key and RPM/TPM limits; None when its venv is not set up."""
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.is_file():
        print(f"LiteLLM is not installed at {LITELLM_VENV}: run `bash benchmarks/setup_litellm.sh`", file=sys.stderr)
        return None
    config = {"model_list": [{"model_name": "tiny-llama", "litellm_params": {
        "model": "openai/tiny-llama", "api_base": upstream, "api_key": "none", "rpm": 1_000_000, "tpm": 1_000_000_000}}],
        "general_settings": {"master_key": MASTER_KEY}, "litellm_settings": {"telemetry": False}}
    path = work / "litellm.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port("127.0.0.1")
    env = {"PATH": f"{binary.parent}:/usr/bin:/bin", "HOME": str(work), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR"}
    process = start([str(binary), "--config", str(path), "--host", "127.0.0.1", "--port", str(port),
                     "--num_workers", "1"], f"http://127.0.0.1:{port}/health/liveliness", env,
                    work / "litellm.log", timeout_s=300)
    return process, f"http://127.0.0.1:{port}"


FIRST_FAILURE: dict[str, str] = {}  # target URL -> the first failure seen, for the report


def loop_cpu_seconds(pid: int) -> float:
    """CPU of a process's main thread alone (the event loop of a gateway; its ledger writer and lease keeper
    threads are the rest)."""
    import psutil

    return next((t.user_time + t.system_time for t in psutil.Process(pid).threads() if t.id == pid), 0.0)


async def phase(client: BareStreamClient, n: int, concurrency: int, tokens: int) -> dict[str, float]:
    ttfts: list[float] = []
    failures = 0
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        nonlocal failures
        async with gate:
            try:
                ttft, completion = await client.stream(f"Request {i}: say something.", tokens)
            except (OSError, RuntimeError, asyncio.IncompleteReadError) as exc:
                failures += 1
                FIRST_FAILURE.setdefault(f"{client.host}:{client.port}", repr(exc)[:300])
                return
            ttfts.append(ttft)
            if completion != tokens:
                failures += 1
                FIRST_FAILURE.setdefault(f"{client.host}:{client.port}", f"{completion} tokens of {tokens}")

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - started
    return {"ttft_ms": statistics.median(ttfts) * 1e3 if ttfts else float("nan"), "requests_per_s": n / wall,
            "failures": failures}


async def measure(url: str, secret: str, pid: int | None, n: int) -> dict[str, float]:
    """One target's figures; ``pid``: the process whose CPU is counted (None: the upstream itself, TTFT only)."""
    client = BareStreamClient(url, secret)
    cpu: Callable[[], float] = (lambda: cpu_seconds(pid)) if pid is not None else (lambda: 0.0)
    out: dict[str, float] = {}
    try:
        await phase(client, 64, 16, 4)  # warm: connections, caches, the gateway's first-use paths
        loop: Callable[[], float] = (lambda: loop_cpu_seconds(pid)) if pid is not None else (lambda: 0.0)
        for name, count, concurrency, tokens in (("c1", n // 4, 1, 4), ("c16", n, 16, 4), ("c16_64", n // 4, 16, 64),
                                                 ("c64", n, 64, 4)):
            before, loop_before = cpu(), loop()
            result = await phase(client, count, concurrency, tokens)
            out[f"{name}_cpu_ms_per_request"] = (cpu() - before) * 1e3 / count
            out[f"{name}_loop_cpu_ms_per_request"] = (loop() - loop_before) * 1e3 / count
            out[f"{name}_ttft_ms"], out[f"{name}_requests_per_s"] = result["ttft_ms"], result["requests_per_s"]
            out[f"{name}_failures"] = result["failures"]
    finally:
        client.close()
    out["cpu_ms_per_token"] = (out["c16_64_cpu_ms_per_request"] - out["c16_cpu_ms_per_request"]) / 60
    return out


# where the gateway's event-loop CPU goes, by the code that spends it (self time)
CATEGORIES = (("SQLite calls (store holds, key lookup)", ("sqlite3",)), ("tokenizer calls", ("tokenizers",)),
              ("uvicorn + Starlette", ("/uvicorn/", "/starlette/", "/fastapi/")), ("pydantic", ("pydantic",)),
              ("json", ("/json/", "json.")), ("prometheus_client", ("prometheus_client",)),
              ("trtkit.gateway", ("trtkit/gateway/",)), ("trtkit.governance", ("trtkit/governance/",)),
              ("trtkit.store", ("trtkit/store/",)), ("trtkit.transport (HTTP client, SSE)", ("trtkit/transport/",)),
              ("asyncio / uvloop", ("asyncio", "uvloop")))


def where_the_time_goes(work: Path, env: dict[str, str], upstream: str, secret: str, n: int) -> dict[str, float]:
    """The gateway again, under benchmarks/profiled_gateway.py: its event loop's CPU per request at concurrency
    16, by category (profiled, so about twice the unprofiled figure: compare the shares)."""
    import pstats
    import signal

    out = work / "gateway.prof"
    port = free_port("127.0.0.1")
    process = start([sys.executable, str(ROOT / "benchmarks" / "profiled_gateway.py"), "gateway",
                     str(work / "tiny-llama-upstream.yaml"), "--backend", upstream, "--port", str(port)],
                    f"http://127.0.0.1:{port}/health/ready", env | {"TRTKIT_PROFILE_OUT": str(out)},
                    work / "profiled-gateway.log")
    async def profiled() -> None:
        client = BareStreamClient(f"http://127.0.0.1:{port}", secret)
        try:
            await phase(client, 64, 16, 4)
            process.send_signal(signal.SIGUSR1)
            await asyncio.sleep(0.5)
            await phase(client, n, 16, 4)
            process.send_signal(signal.SIGUSR2)
        finally:
            client.close()

    try:
        asyncio.run(profiled())
        deadline = time.monotonic() + 30
        while not out.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=60)
    stats = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    shares: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, own, _cum, _callers) in stats.items():
        where = f"{filename} {name}"
        label = next((label for label, marks in CATEGORIES if any(m in where for m in marks)), "other")
        shares[label] = shares.get(label, 0.0) + own * 1e3 / n
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


def judge(figures: dict[str, dict[str, float]]) -> dict[str, object]:
    ours, theirs, null = figures["trtkit"], figures.get("litellm"), figures["null"]
    cpu = max(ours["c1_cpu_ms_per_request"], ours["c16_cpu_ms_per_request"])
    ratio = ours["c16_cpu_ms_per_request"] / theirs["c16_cpu_ms_per_request"] if theirs else None
    overhead = ours["c1_ttft_ms"] - null["c1_ttft_ms"]
    rate = max(ours["c16_requests_per_s"], ours["c64_requests_per_s"])
    met = {"cpu_ratio_vs_litellm": bool(ratio is not None and ratio <= TARGETS["cpu_ratio_vs_litellm"]),
           "cpu_ms_per_request": bool(cpu <= TARGETS["cpu_ms_per_request"]),
           "ttft_overhead_ms": bool(overhead <= TARGETS["ttft_overhead_ms"]),
           "requests_per_s": bool(rate >= TARGETS["requests_per_s"])}
    return {"cpu_ratio_vs_litellm": ratio, "cpu_ms_per_request": cpu, "ttft_overhead_ms": overhead,
            "requests_per_s": rate, "met": met}


def report(figures: dict[str, dict[str, float]], verdict: dict[str, object]) -> None:
    names = [n for n in ("null", "trtkit", "litellm") if n in figures]
    rows = [("TTFT at concurrency 1, median ms", "c1_ttft_ms", "{:.2f}"),
            ("CPU ms per request at concurrency 1", "c1_cpu_ms_per_request", "{:.3f}"),
            ("  of which its main thread (the event loop)", "c1_loop_cpu_ms_per_request", "{:.3f}"),
            ("CPU ms per request at concurrency 16 (4 tokens)", "c16_cpu_ms_per_request", "{:.3f}"),
            ("  of which its main thread (the event loop)", "c16_loop_cpu_ms_per_request", "{:.3f}"),
            ("CPU ms per request at concurrency 16 (64 tokens)", "c16_64_cpu_ms_per_request", "{:.3f}"),
            ("CPU ms per streamed token", "cpu_ms_per_token", "{:.4f}"),
            ("streamed requests/s at concurrency 16", "c16_requests_per_s", "{:.0f}"),
            ("streamed requests/s at concurrency 64", "c64_requests_per_s", "{:.0f}"),
            ("failed or short answers (all phases)", "failures", "{:.0f}")]
    print(f"{'':52}" + "".join(f"{n:>14}" for n in names))
    for label, key, fmt in rows:
        cells = []
        for n in names:
            value = figures[n].get(key) if key != "failures" else sum(
                v for k, v in figures[n].items() if k.endswith("_failures"))
            cells.append(f"{fmt.format(value):>14}" if value is not None else f"{'-':>14}")
        print(f"{label:52}" + "".join(cells))
    for where, failure in FIRST_FAILURE.items():
        print(f"first failure at {where}: {failure}")
    met = verdict["met"]
    assert isinstance(met, dict)
    for name, limit in TARGETS.items():
        value = verdict[name]
        shown = "n/a" if value is None else f"{value:.3f}"
        print(f"target {name}: {shown} (limit {limit:g}) -> {'met' if met[name] else 'MISSED'}")


def main(requests: int = 2000, profile: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="trtkit-upstream-bench-") as tmp:
        work = Path(tmp)
        env = os.environ.copy() | {"TRTKIT_HOME": str(work / "home")}
        if "TRTKIT_CACHE" not in env and (ROOT / ".trtkit-cache").is_dir():
            env["TRTKIT_CACHE"] = str(ROOT / ".trtkit-cache")
        port = free_port("127.0.0.1")
        upstream = f"http://127.0.0.1:{port}/v1"
        processes = [start([sys.executable, str(ROOT / "benchmarks" / "null_sse_server.py"), str(port), "--tokens", "4"],
                           f"{upstream}/models", env, work / "null.log")]
        try:
            gateway, gateway_url, secret = trtkit_gateway(work, env, upstream)
            processes.append(gateway)
            proxy = litellm_proxy(work, upstream)
            if proxy is not None:
                processes.append(proxy[0])
            yield_to_servers(os.getpid())  # the load generator takes the CPU the servers leave
            figures = {"null": asyncio.run(measure(f"http://127.0.0.1:{port}", "none", processes[0].pid, requests)),
                       "trtkit": asyncio.run(measure(gateway_url, secret, gateway.pid, requests))}
            if proxy is not None:  # ~35 ms of CPU a request: a fifth of the requests measure it as well
                figures["litellm"] = asyncio.run(measure(proxy[1], MASTER_KEY, proxy[0].pid, max(200, requests // 5)))
            profiled = where_the_time_goes(work, env, upstream, secret, requests) if profile else None
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=60)
    verdict = judge(figures)
    report(figures, verdict)
    if profiled is not None:
        print("where trtkit's gateway spends its event loop's CPU at concurrency 16, profiled ms per request "
              "(self time; the profiler about doubles it):")
        for label, ms in profiled.items():
            print(f"  {label:48} {ms:.3f}")
    print_bench({"view": "upstreams", "figures": figures, "targets": TARGETS, **verdict,
                 "litellm": "1.86.2" if "litellm" in figures else None, "profiled_ms_per_request": profiled})


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, "--profile" in sys.argv)
