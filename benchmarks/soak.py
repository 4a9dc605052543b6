"""Soak: 64 concurrent streaming clients for M minutes through a real tritonserver with the CPU reference
engine on the tiny test model (model_configs/tiny-llama.yaml: a random 2-layer Llama with SmolLM2's
tokenizer), mixing ``ensemble`` and ``tensorrt_llm_bls``, random prompt lengths (1-36 words) and
max_tokens (1-64), 10% of requests cancelled after their first 1-3 responses.

    python benchmarks/soak.py [--minutes 5] [--clients 64] [--cancel-fraction 0.1] [--seed 0] [--rss-every 60]

Reports completed, cancelled, failed and lost requests (lost: no answer and no error within the
deadline); the KV blocks in use after the load (``nv_trt_llm_kv_cache_block_metrics``, polled until it
settles); the RSS of tritonserver and of every stub at start (after --warm-up-s seconds (60) of the same load
at full concurrency), every --rss-every seconds (60) and at end, from /proc; p50/p99 latency of
completed requests per minute; health events (process, readiness, stub pids polled every 0.5 s);
the requests tritonserver still counts in flight when it is stopped after the load (from its log).
Targets: 0 failed, 0 lost, 0 KV blocks in use after, RSS growth < 5% per process, server healthy
throughout, nothing in flight at exit.

``--gateway``: the same load through the OpenAI gateway, ``trtkit gateway`` in a process of its own in
front of the tritonserver (it calls the engine model ``tensorrt_llm`` with token ids): streamed requests to
``/v1/chat/completions`` and ``/v1/completions`` on one httpx AsyncClient, a cancelled request closes
its HTTP stream after 1-3 content chunks. The HTTP clients run in a process of their own too (spawned:
``robustness.gateway_soak.ClientsProcess``), so three processes stand apart: the gateway, the clients and this
driver (which only measures). The RSS table adds ``gateway`` (its process alone; until 2026-12-04 the gateway ran
in a thread of this process, and until 2026-12-06 the clients ran in this process), and the samples add
``http-clients`` and ``driver``. A leak is told from a cache or pool filling by the shape of the gateway's samples
(``gateway_rss_trend``): the slope over the last third of the load against the middle third, with the pace per
hour it would come to; a leak keeps its pace, a filling levels off. Extra targets: the gateway's RSS grows < 5% after the warm-up, and its ledger holds exactly
one row per request that completed or was cancelled (polled until it settles).

Real run time: --minutes plus --warm-up-s plus about 60 s (server start, draining) on a shared 2-core machine.
Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_bench  # noqa: E402
from robustness.gateway_soak import ClientsProcess  # noqa: E402
from robustness.gateway_target import GatewayHealthWatch, GatewayProcess, served_model  # noqa: E402
from robustness.server import (  # noqa: E402
    HealthWatch,
    inflight_at_exit,
    kv_blocks,
    memory_breakdown,
    memory_snapshot,
    rss_kb,
    tiny_repository,
)  # noqa: E402
from robustness.soak_run import SoakTally, percentile, run_clients  # noqa: E402
from robustness.triton_target import TritonStreamTarget  # noqa: E402

MODELS = ("ensemble", "tensorrt_llm_bls")
DEADLINE_S = 180.0


GATEWAY_PROCESS = "gateway"
CLIENTS_PROCESS = "http-clients"
DRIVER_PROCESS = "driver"


def snapshot(server_pid: int, gateway_pid: int | None) -> dict[str, int]:
    """RSS of tritonserver and every stub, and of the gateway's own process (not this load generator's)."""
    rows = memory_snapshot(server_pid)
    if gateway_pid is not None:
        rows[GATEWAY_PROCESS] = rss_kb(gateway_pid) or 0
    return rows


class RssSampler:
    """RSS of every process every ``period_s`` during the load, to tell a trend from a one-off step; with the
    gateway, also the clients' process and this driver (each apart), and the gateway's heap (RssAnon)."""

    def __init__(self, server_pid: int, period_s: float = 60.0, gateway_pid: int | None = None,
                 clients: ClientsProcess | None = None) -> None:
        self.server_pid, self.period_s, self.gateway_pid = server_pid, period_s, gateway_pid
        self.clients = clients
        self.samples: list[dict[str, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> RssSampler:
        self.thread.start()
        return self

    def _run(self) -> None:
        import os

        while not self.stop.wait(self.period_s):
            sample = snapshot(self.server_pid, self.gateway_pid)
            if self.gateway_pid is not None:
                sample[f"{GATEWAY_PROCESS}:RssAnon"] = rss_kb(self.gateway_pid, "RssAnon") or 0
                sample[DRIVER_PROCESS] = rss_kb(os.getpid()) or 0
                clients_pid = self.clients.pid if self.clients is not None else None
                if clients_pid is not None:
                    sample[CLIENTS_PROCESS] = rss_kb(clients_pid) or 0
            self.samples.append(sample)

    def close(self) -> list[dict[str, int]]:
        self.stop.set()
        self.thread.join(timeout=10)
        return self.samples


def settled_kv_blocks(metrics_url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """The KV block gauges once no block is used, or as they stand after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    blocks = kv_blocks(metrics_url)
    while blocks.get("used", 1) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        blocks = kv_blocks(metrics_url)
    return blocks


# The tiny model's config with prompts over max_input_len (256 tokens) cut from the left, not refused: the soak's
# prompts (up to 36 words, up to 7 tokens a word) plus the chat template may pass it, and a prompt the gateway
# refuses with a 400 would count as failed.
GATEWAY_CONFIG_CHANGES = {"client": {"input_overflow": "truncate_left"}}


def triton_load(server):  # type: ignore[no-untyped-def]
    """(run(seconds, seed, requests_per_client) -> SoakTally, health watch) straight to Triton over gRPC."""
    make_target = lambda: TritonStreamTarget(server.grpc_url)  # noqa: E731

    def run(args: argparse.Namespace, seconds: float, seed: int, per_client: int | None) -> SoakTally:
        return run_clients(make_target, clients=args.clients, seconds=seconds, seed=seed, models=tuple(args.models),
                           cancel_fraction=args.cancel_fraction, deadline_s=DEADLINE_S, requests_per_client=per_client)

    return run, HealthWatch(server)


def gateway_load(server, gateway: GatewayProcess, secret: str, on_start=None):  # type: ignore[no-untyped-def]
    """The same through the gateway (HTTP streams on one AsyncClient), from a process of its own; ``on_start``
    gets that process once it runs (the RSS sampler reads it)."""
    model = served_model(gateway.url, secret)

    def run(args: argparse.Namespace, seconds: float, seed: int, per_client: int | None) -> SoakTally:
        clients = ClientsProcess(gateway.url, secret, model, clients=args.clients, seconds=seconds, seed=seed,
                                 cancel_fraction=args.cancel_fraction, deadline_s=DEADLINE_S,
                                 requests_per_client=per_client)
        if on_start is not None:
            on_start(clients)
        return clients.tally(timeout_s=seconds + DEADLINE_S + 120)

    return run, GatewayHealthWatch(server, gateway_url=gateway.url, gateway_thread=gateway)


def settled_ledger_rows(gateway: GatewayProcess, key_name: str, expected: int, timeout_s: float = 30.0) -> Counter:
    """The ledger's rows for ``key_name`` by finish_reason, once the served ones (all but ``refused:*``) reach
    ``expected`` or ``timeout_s`` passes (a cancelled request is written when its engine request has
    stopped, a moment after the client left)."""
    deadline = time.monotonic() + timeout_s

    def rows() -> Counter:
        return Counter(str(reason) for reason, _ in gateway.ledger_rows(key_name))

    while served_rows(rows()) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1.0)  # one more look: a row too many would show up now
    return rows()


def served_rows(by_reason: Counter) -> int:
    return sum(n for reason, n in by_reason.items() if not reason.startswith("refused:"))


def soak(server, args: argparse.Namespace, gateway: GatewayProcess | None = None) -> dict:
    key_name = ""
    samples_box: list[RssSampler] = []

    def clients_started(clients: ClientsProcess) -> None:
        if samples_box:
            samples_box[0].clients = clients

    if gateway is None:
        load, watch = triton_load(server)
    else:
        _, warm_secret = gateway.new_key("soak-warm-up")
        key_name, secret = gateway.new_key("soak")
        load, watch = gateway_load(server, gateway, secret, on_start=clients_started)
        load_warm, _ = gateway_load(server, gateway, warm_secret)
    # warm-up at full concurrency: buffers, threads and arenas sized by the peak load are there before the
    # start RSS is taken, so growth measures what the load leaves behind, not what it needs
    warm = (load if gateway is None else load_warm)(args, args.warm_up_s, args.seed + 1, None if args.warm_up_s else 2)
    gateway_pid = None if gateway is None else gateway.pid
    rss_start, parts_start = snapshot(server.pid, gateway_pid), memory_breakdown(server.pid)
    kv_start = settled_kv_blocks(server.metrics_url)
    watch.start()
    samples = RssSampler(server.pid, args.rss_every, gateway_pid).start()
    samples_box.append(samples)
    gateway_anon_start = rss_kb(gateway_pid, "RssAnon") if gateway_pid is not None else None
    started = time.monotonic()
    tally = load(args, args.minutes * 60, args.seed, None)
    seconds = time.monotonic() - started
    events = watch.close() + watch.check()
    tally.rss_samples = samples.close()
    kv_end = settled_kv_blocks(server.metrics_url)
    rss_end, parts_end = snapshot(server.pid, gateway_pid), memory_breakdown(server.pid)
    tally.rss_parts = {"start": parts_start, "end": parts_end}
    tally.counts.update({f"warm_up_{k}": v for k, v in warm.counts.items() if ":" not in k})
    result = report(tally, seconds, events, kv_start, kv_end, rss_start, rss_end, args)
    if gateway is not None:
        expected = tally.counts["completed"] + tally.counts["cancelled"]
        by_reason = settled_ledger_rows(gateway, key_name, expected)
        rows = served_rows(by_reason)
        result["figures"].update(target="gateway", ledger_rows=rows, ledger_rows_expected=expected,
                                 ledger_rows_by_finish_reason=dict(by_reason))
        result["targets"]["ledger_rows"] = "completed + cancelled"
        result["met"]["ledger_rows"] = rows == expected
        growth = result["figures"]["rss"][GATEWAY_PROCESS]["growth_pct"]
        result["figures"]["gateway_rss_trend"] = rss_trend(rss_start[GATEWAY_PROCESS], tally.rss_samples,
                                                           rss_end[GATEWAY_PROCESS], GATEWAY_PROCESS, args.rss_every)
        result["figures"]["gateway_rss_anon_kb"] = {"start": gateway_anon_start,
                                                    "end": rss_kb(gateway.pid, "RssAnon")}
        result["targets"]["gateway_rss_growth_pct"] = "< 5"
        result["met"]["gateway_rss_growth_lt_5pct"] = growth is not None and growth < 5.0
    return result


def rss_trend(start_kb: int, samples: list[dict[str, int]], end_kb: int, name: str, period_s: float) -> dict:
    """Whether a process's memory levels off or keeps growing, from its samples during the load: the slope (kB per
    minute) of the middle third against the last third (the step from the start to the first sample is left out:
    the load settling). A leak keeps its pace; a cache or pool filling slows as it fills. A slope of a few kB per
    minute is a trend all the same: the projection per hour says what it would come to."""
    series = [s[name] for s in samples if s.get(name)]
    if len(series) < 6:
        return {"series_kb": [start_kb, *series, end_kb], "shape": "too few samples (--rss-every) to tell"}
    third = len(series) // 3
    middle, last = series[third:2 * third + 1], series[2 * third:]

    def per_minute(part: list[int]) -> float:
        return (part[-1] - part[0]) / ((len(part) - 1) * period_s / 60)

    middle_slope, last_slope = per_minute(middle), per_minute(last)
    if last_slope <= 0:
        shape = "flat or shrinking at the end"
    elif last_slope < 0.5 * middle_slope:
        shape = "levels off (a cache or pool filling)"
    else:
        shape = "keeps growing at the end of the run (a leak, or a filling not yet full)"
    return {"series_kb": [start_kb, *series, end_kb], "middle_kb_per_min": round(middle_slope, 1),
            "last_kb_per_min": round(last_slope, 1), "first_step_kb": series[0] - start_kb,
            "projected_pct_per_hour": round(100 * 60 * last_slope / start_kb, 2), "shape": shape}


def rss_growth(start: dict[str, int], end: dict[str, int]) -> dict[str, dict]:
    rows = {}
    for name in sorted(set(start) | set(end)):
        before, after = start.get(name), end.get(name)
        growth = round(100.0 * (after - before) / before, 2) if before and after else None
        rows[name] = {"start_kb": before, "end_kb": after, "growth_pct": growth}
    return rows


def report(tally: SoakTally, seconds: float, events: list[str], kv_start: dict, kv_end: dict,
           rss_start: dict, rss_end: dict, args: argparse.Namespace) -> dict:
    c = tally.counts
    minutes = [{"minute": m + 1, "completed": len(v), "p50_s": round(percentile(v, 50), 3),
                "p99_s": round(percentile(v, 99), 3)} for m, v in sorted(tally.latency_by_minute.items())]
    rss = rss_growth(rss_start, rss_end)
    growths = [row["growth_pct"] for row in rss.values() if row["growth_pct"] is not None]
    figures = {"minutes": args.minutes, "clients": args.clients, "seconds": round(seconds, 1),
               "completed": c["completed"], "cancelled": c["cancelled"], "failed": c["failed"], "lost": c["lost"],
               "by_model": {k: v for k, v in c.items() if ":" in k},
               "warm_up": {k: v for k, v in c.items() if k.startswith("warm_up_")}, "kv_blocks_before": kv_start,
               "kv_blocks_after": kv_end, "kv_blocks_used_after": kv_end.get("used"),
               "max_rss_growth_pct": max(growths) if growths else None,
               "processes_gone": sorted(set(rss_start) - set(rss_end)), "rss": rss,
               "rss_kb_samples": tally.rss_samples,
               "rss_parts_kb": tally.rss_parts, "latency_by_minute": minutes,
               "health_events": events[:20], "failures": tally.failures}
    met = {"failed": c["failed"] == 0, "lost": c["lost"] == 0, "kv_blocks_used_after": kv_end.get("used") == 0,
           "rss_growth_lt_5pct": bool(growths) and max(growths) < 5.0 and not figures["processes_gone"],
           "healthy": not events}
    targets = {"failed": 0, "lost": 0, "kv_blocks_used_after": 0, "max_rss_growth_pct": "< 5", "health_events": 0}
    return {"benchmark": "soak", "figures": figures, "targets": targets, "met": met}


def print_tables(result: dict) -> None:
    f = result["figures"]
    print(f"{f['clients']} streaming clients for {f['seconds']:.0f} s: completed {f['completed']}, cancelled "
          f"{f['cancelled']}, failed {f['failed']}, lost {f['lost']}; by model {f['by_model']}")
    if "ledger_rows" in f:
        print(f"gateway ledger rows of served requests: {f['ledger_rows']} (completed + cancelled: "
              f"{f['ledger_rows_expected']}); all rows by finish_reason: {f['ledger_rows_by_finish_reason']}; "
              f"'{GATEWAY_PROCESS}' is the RSS of the gateway's own process")
        trend = f["gateway_rss_trend"]
        slopes = (f"{trend['first_step_kb']:+} kB to the first sample, then {trend['middle_kb_per_min']:+} kB/min in "
                  f"the middle third and {trend['last_kb_per_min']:+} kB/min in the last ("
                  f"{trend['projected_pct_per_hour']:+}%/hour at that pace)" if "last_kb_per_min" in trend else "")
        print(f"gateway RSS after the warm-up: {slopes}: {trend['shape']}; heap (RssAnon) "
              f"{f['gateway_rss_anon_kb']['start']} -> {f['gateway_rss_anon_kb']['end']} kB")
    print(f"KV blocks before {f['kv_blocks_before']}, after {f['kv_blocks_after']}")
    print(f"requests tritonserver still counted in flight at exit: {f['server_inflight_at_exit'] or 'none'}")
    print(f"\n{'minute':>6}{'completed':>11}{'p50 s':>9}{'p99 s':>9}")
    for row in f["latency_by_minute"]:
        print(f"{row['minute']:>6}{row['completed']:>11}{row['p50_s']:>9.3f}{row['p99_s']:>9.3f}")
    print(f"\n{'process':<40}{'RSS start kB':>14}{'RSS end kB':>12}{'growth %':>10}")
    for name, row in f["rss"].items():
        print(f"{name:<40}{row['start_kb'] or 0:>14}{row['end_kb'] or 0:>12}{row['growth_pct']!s:>10}")
    for moment, parts in f["rss_parts_kb"].items():
        print(f"heap / shared memory at {moment}: {parts}")
    for i, sample in enumerate(f["rss_kb_samples"], start=1):
        print(f"RSS sample {i}: {sample}")
    for line in f["failures"] + f["health_events"]:
        print(f"  {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--cancel-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rss-every", type=float, default=60.0, help="seconds between RSS samples during the load")
    parser.add_argument("--warm-up-s", type=float, default=60.0,
                        help="seconds of the full load before the start RSS is taken (0: 2 requests per client)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS),
                        help="Triton models the clients call (default both); to find which one a trend belongs to")
    parser.add_argument("--gateway", action="store_true", help="drive the load through the OpenAI gateway")
    args = parser.parse_args()

    from trtkit.serve import TritonServer

    with tempfile.TemporaryDirectory(prefix="trtkit-soak-") as tmp:
        repo = tiny_repository(Path(tmp))
        with TritonServer(repo, start_timeout_s=180) as server:  # the log stays under $TRTKIT_HOME for a post-mortem
            print(f"tritonserver log: {server.log_path}", file=sys.stderr)
            gateway = (GatewayProcess(GATEWAY_CONFIG_CHANGES, server.grpc_url, Path(tmp) / "gateway") if args.gateway
                       else None)
            try:
                result = soak(server, args, gateway)
            finally:
                if gateway is not None:
                    gateway.stop()
        inflight = inflight_at_exit(server.log_path)
    result["figures"]["server_inflight_at_exit"] = inflight
    result["targets"]["server_inflight_at_exit"] = 0
    result["met"]["server_inflight_at_exit"] = not inflight
    print_tables(result)
    print_bench(result)
    return 0 if all(result["met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
