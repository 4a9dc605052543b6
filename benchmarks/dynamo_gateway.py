"""What trtkit's gateway adds in front of NVIDIA Dynamo (issue 47): gateway -> Dynamo frontend -> mocker workers,
beside the same frontend called directly, in one run.

A local Dynamo cluster (trtkit/dynamo: Dynamo 1.6.1's own frontend with the KV router and two mocker workers, a
simulated engine with a real KV-block model, from .venv-dynamo) serves tiny-llama; trtkit's gateway runs in front of
it with governance on (an API key with a token budget and RPM/TPM limits, the runaway guard, the durable ledger;
the response cache off), exactly as benchmarks/upstream_cost.py runs it in front of its null upstream. The same bare
keep-alive client (gateway_load.BareStreamClient) sends streamed completions with ``include_usage`` to both.

Figures: the gateway's own CPU per request (user + system of its process, from /proc) at concurrency 16 and one at
a time, and the TTFT it adds (median TTFT through the gateway minus median TTFT of the frontend called directly) at
concurrency 16 and at 1. Targets: the ones the gateway has in front of any HTTP upstream
(benchmarks/results/gateway_upstreams.md): CPU per request <= 1 ms; TTFT overhead <= 2 ms.

    python benchmarks/dynamo_gateway.py            # 1,200 requests a phase
    python benchmarks/dynamo_gateway.py --quick    # 300: about a minute
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from cpu_layout import yield_to_servers
from figures import print_bench
from gateway_load import BareStreamClient, cpu_seconds
from upstream_cost import FIRST_FAILURE, phase, start, trtkit_gateway

from trtkit.dynamo import ClusterSpec, DynamoCluster
from trtkit.gateway.server import free_port
from trtkit.refengine.config import EngineConfig
from trtkit.sources.resolve import resolve_model_dir

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"cpu_ms_per_request": 1.0, "ttft_overhead_ms": 2.0}
MOCKER_SPEEDUP = 1000.0  # the mocker's simulated step times, 1000x faster: the frontend and the gateway dominate


async def measure(url: str, secret: str, pid: int, n: int) -> dict[str, float]:
    client = BareStreamClient(url, secret)
    out: dict[str, float] = {}
    try:
        await phase(client, 64, 16, 4)  # warm: connections, caches, first-use paths
        for name, count, concurrency in (("c1", max(50, n // 4), 1), ("c16", n, 16)):
            before = cpu_seconds(pid)
            result = await phase(client, count, concurrency, 4)
            out[f"{name}_cpu_ms_per_request"] = (cpu_seconds(pid) - before) * 1e3 / count
            out[f"{name}_ttft_ms"], out[f"{name}_requests_per_s"] = result["ttft_ms"], result["requests_per_s"]
            out[f"{name}_failures"] = result["failures"]
    finally:
        client.close()
    return out


def main(requests: int) -> int:
    spec = ClusterSpec("tiny-llama", resolve_model_dir("generated:tiny-llama"), num_workers=2, mocker=True,
                       engine_config=EngineConfig(tokens_per_block=16), mocker_speedup_ratio=MOCKER_SPEEDUP)
    with tempfile.TemporaryDirectory(prefix="trtkit-dynamo-bench-") as tmp, DynamoCluster(spec) as cluster:
        work = Path(tmp)
        env = os.environ.copy() | {"TRTKIT_HOME": str(work / "home")}
        gateway, gateway_url, secret = trtkit_gateway(work, env, cluster.url)
        null_port = free_port("127.0.0.1")  # the reference: the same gateway in front of an upstream that costs nothing
        null = start([sys.executable, str(ROOT / "benchmarks" / "null_sse_server.py"), str(null_port), "--tokens", "4"],
                     f"http://127.0.0.1:{null_port}/v1/models", env, work / "null.log")
        (work / "home-null").mkdir()
        null_gateway, null_gateway_url, null_secret = trtkit_gateway(
            work, env | {"TRTKIT_HOME": str(work / "home-null")}, f"http://127.0.0.1:{null_port}/v1")
        frontend = cluster.services[-1].popen.pid
        try:
            yield_to_servers(os.getpid())
            direct = asyncio.run(measure(cluster.url.removesuffix("/v1"), "none", frontend, requests))
            through = asyncio.run(measure(gateway_url, secret, gateway.pid, requests))
            through_frontend = asyncio.run(measure(gateway_url, secret, frontend, max(100, requests // 4)))
            null_direct = asyncio.run(measure(f"http://127.0.0.1:{null_port}", "none", null.pid, requests))
            null_through = asyncio.run(measure(null_gateway_url, null_secret, null_gateway.pid, requests))
        finally:
            for process in (gateway, null_gateway, null):
                process.terminate()
                process.wait(timeout=60)
    figures = {"direct": direct, "gateway": through,
               "frontend_cpu_ms_per_request_behind_gateway": through_frontend["c16_cpu_ms_per_request"],
               "null_direct": null_direct, "gateway_before_null": null_through}
    cpu = max(through["c1_cpu_ms_per_request"], through["c16_cpu_ms_per_request"])
    overhead = {c: through[f"{c}_ttft_ms"] - direct[f"{c}_ttft_ms"] for c in ("c1", "c16")}
    met = {"cpu_ms_per_request": bool(cpu <= TARGETS["cpu_ms_per_request"]),
           "ttft_overhead_ms": bool(overhead["c16"] <= TARGETS["ttft_overhead_ms"])}
    rows = [("TTFT at concurrency 1, median ms", "c1_ttft_ms", "{:.2f}"),
            ("TTFT at concurrency 16, median ms", "c16_ttft_ms", "{:.2f}"),
            ("CPU ms per request, concurrency 1 (the process named)", "c1_cpu_ms_per_request", "{:.3f}"),
            ("CPU ms per request, concurrency 16 (the process named)", "c16_cpu_ms_per_request", "{:.3f}"),
            ("streamed requests/s at concurrency 16", "c16_requests_per_s", "{:.0f}"),
            ("failed or short answers", "c16_failures", "{:.0f}")]
    print(f"{'':56}{'frontend':>14}{'gateway':>14}")
    for label, key, fmt in rows:
        print(f"{label:56}{fmt.format(direct[key]):>14}{fmt.format(through[key]):>14}")
    print(f"{'the same gateway in front of a null upstream (same run):':56}{'null':>14}{'gateway':>14}")
    for label, key, fmt in rows[:5]:
        print(f"{label:56}{fmt.format(null_direct[key]):>14}{fmt.format(null_through[key]):>14}")
    print(f"Dynamo frontend's own CPU ms per request behind the gateway (c16): "
          f"{figures['frontend_cpu_ms_per_request_behind_gateway']:.3f}")
    for where, failure in FIRST_FAILURE.items():
        print(f"first failure at {where}: {failure}")
    print(f"target cpu_ms_per_request: {cpu:.3f} (limit 1) -> {'met' if met['cpu_ms_per_request'] else 'MISSED'}")
    print(f"target ttft_overhead_ms (c16): {overhead['c16']:.3f} (limit 2; c1: {overhead['c1']:.3f}) -> "
          f"{'met' if met['ttft_overhead_ms'] else 'MISSED'}")
    before_null = null_through["c16_ttft_ms"] - null_direct["c16_ttft_ms"]
    print(f"TTFT the gateway adds at concurrency 16: {overhead['c16']:.2f} ms before Dynamo, {before_null:.2f} ms before "
          f"the null upstream in the same run (its own queueing at 16 in flight on this machine)")
    print_bench({"view": "dynamo", "figures": figures, "targets": TARGETS, "cpu_ms_per_request": cpu,
                 "ttft_overhead_ms": overhead["c16"], "ttft_overhead_ms_c1": overhead["c1"],
                 "ttft_overhead_ms_c16_before_null": before_null, "met": met,
                 "dynamo": "1.6.1", "workers": "2 mockers", "provisional": True})
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main(300 if "--quick" in sys.argv else 1200))
