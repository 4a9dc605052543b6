"""Hostile callers and hostile upstreams (issue 44): every attack of the issue, repeated against both gateway modes,
with an innocent tenant beside them.

    python benchmarks/hostile.py [--quick] [--modes triton relay]

Mode ``triton``: `trtkit gateway` (its own process) in front of a real tritonserver on the tiny model. Mode
``relay``: the same gateway in front of an OpenAI-compatible upstream that misbehaves on purpose
(``trtkit.testing.hostile_upstream``, in this process). Per mode: a quiet run (the innocent tenant alone, one
request after another), then the attacks (benchmarks/robustness/hostile_attacks.py: vendor length fields against a
budget, deep JSON, 5,000-digit numbers, 800-deep schemas, junk conversation budgets, 150 MB headers, 190 silent
connections, another key's parent request id, cache hits against RPM, 150 unread streams of one key; in relay mode
also an upstream that ignores max_tokens, a 10 MB event, 100 MB without an event boundary, usage of 10**12 and 2**63,
1,000 usage reports, cached past the prompt, a 50 KB finish_reason, a 2 MB error body) while the innocent tenant
goes on and a probe times the gateway's event loop (``GET /health/live`` every 20 ms).

Figures per mode: the gateway's RSS (start after the quiet run, peak, end after the attacks settled), the event-loop
probe's p99 and max (quiet and attacked), the innocent tenant's p50 / p99 (quiet and attacked), billed against
reserved, budgets overshot, holds left, 5xx answers to client input. Targets: 0 budgets overshot, 0 holds left, 0 5xx
for client input, innocent p99 within 2x of the quiet run, RSS back within 10% of its start. Ends with one
``BENCH {json}`` line. About 3 minutes on 2 cores (``--quick``: about 2).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_bench  # noqa: E402
from robustness.gateway_target import GatewayProcess  # noqa: E402
from robustness.hostile_attacks import Attacker, AttackResult, UpstreamProcess  # noqa: E402
from robustness.hostile_run import budget_figures, innocent, loop_probe, rss_mb, wait_no_holds  # noqa: E402
from robustness.server import tiny_repository  # noqa: E402

MODEL = "tiny-llama"
# a gateway as an operator of a shared one would run it in front of these engines: a key may hold at most half of
# the engine's batch (docs/hardening.md: size the cap below it): the tiny model serves 4 at once (serve.max_batch_size
# under its latency profile); heads within 5 s. The hostile upstream serves 64 at once: the attacks use a dozen keys
# together, and at 16 their holds together (each key within its cap) queued the innocent tenant at the upstream, which
# is capacity planning, not what this run measures (the gateway's own stalls and leaks under attack)
UPSTREAM_CAPACITY = 64
LIMITS = {"triton": {"max_concurrent_per_key": 2, "header_timeout_seconds": 5.0},
          "relay": {"max_concurrent_per_key": 8, "header_timeout_seconds": 5.0}}


def gateway_changes(mode: str) -> dict[str, dict]:
    changes: dict[str, dict] = {"client": {"cache": {"enabled": True}},
                                "gateway": {"limits": LIMITS[mode]}}
    if mode == "relay":
        changes["gateway"]["upstream"] = {"model": "hostile", "read_timeout_seconds": 30.0}
    return changes


def ledger_rows(gateway: GatewayProcess):  # type: ignore[no-untyped-def]
    from trtkit.store.ledger import Ledger

    def rows(key_name: str) -> list[tuple[int, int, str]]:
        ledger = Ledger(gateway.ledger_path)
        try:
            return ledger.query("SELECT prompt_tokens, completion_tokens, finish_reason FROM requests WHERE key_id = ?",
                                [key_name])
        finally:
            ledger.close()
    return rows


def run_mode(mode: str, backend: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    gateway = GatewayProcess(gateway_changes(mode), backend, folder / mode)
    try:
        _, innocent_secret = gateway.new_key("innocent")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
                "temperature": 1.0, "user": "innocent"}
        quiet = measure(gateway, innocent_secret, body, lambda: time.sleep(args.quiet_s))
        rss_start = rss_mb(gateway.pid)
        attacker = Attacker(gateway.url, MODEL, gateway.new_key, relay=mode == "relay")
        results: list[AttackResult] = []
        peak = [rss_start]

        def rounds() -> None:  # rounds of every attack until the attacked run is as long as the quiet one
            ends = time.monotonic() + args.quiet_s
            while not results or time.monotonic() < ends:
                results.extend(attack(attacker, peak, gateway.pid))

        attacked = measure(gateway, innocent_secret, body, rounds)
        attacker.close()
        holds = wait_no_holds(gateway.store)
        time.sleep(2.0)  # the last rows and releases land; then the innocent tenant's pass that reuses the arenas
        measure(gateway, innocent_secret, body, lambda: time.sleep(min(5.0, args.quiet_s)))
        rss_end = rss_mb(gateway.pid)
        billing = budget_figures(gateway.store, ledger_rows(gateway), attacker.budgeted)
    finally:
        gateway.stop()
    return {"quiet": quiet, "attacked": attacked, "attacks": [_attack_row(r) for r in results],
            "rss_mb": {"start": round(rss_start, 1), "peak": round(max(peak), 1), "end": round(rss_end, 1),
                       "end_over_start": round(rss_end / rss_start, 3) if rss_start else 0.0},
            "holds_left": holds, "client_input_5xx": sum(r.server_errors for r in results), **billing}


def measure(gateway: GatewayProcess, secret: str, body: dict, during) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    tenant = innocent(gateway.url, secret, body).start()
    probe = loop_probe(gateway.url).start()
    during()
    return {"innocent": tenant.close(), "loop_probe": probe.close()}


def attack(attacker: Attacker, peak: list[float], pid: int) -> list[AttackResult]:
    calls = [attacker.vendor_length_fields, attacker.hostile_json, attacker.huge_headers, attacker.silent_connections,
             attacker.parent_of_another_key, attacker.cache_hits_against_rpm, attacker.unread_streams]
    results: list[AttackResult] = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_timed, call) for call in calls]
        if attacker.relay:
            futures.append(pool.submit(attacker.upstream_attacks))
        while not all(f.done() for f in futures):
            peak.append(rss_mb(pid))
            time.sleep(0.2)
        for future in futures:
            value = future.result()
            results.extend(value if isinstance(value, list) else [value])
    return results


def _timed(call) -> AttackResult:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    result: AttackResult = call()
    result.seconds = time.monotonic() - started
    return result


def _attack_row(result: AttackResult) -> dict[str, Any]:
    return {"attack": result.name, "statuses": {str(k): v for k, v in sorted(result.statuses.items())},
            "client_input": result.client_input, "server_errors": result.server_errors,
            "seconds": round(result.seconds, 2), "note": result.note}


def judge(figures: dict[str, Any]) -> dict[str, bool]:
    met = {}
    for mode, f in figures.items():
        quiet_p99 = f["quiet"]["innocent"]["p99_ms"]
        met[f"{mode}_budgets_overshot_0"] = f["budgets_overshot"] == 0 and f["rows_billed_past_max_tokens"] == 0
        met[f"{mode}_holds_left_0"] = f["holds_left"] == 0
        met[f"{mode}_client_input_5xx_0"] = f["client_input_5xx"] == 0
        met[f"{mode}_innocent_p99_within_2x_quiet"] = f["attacked"]["innocent"]["p99_ms"] <= 2 * quiet_p99 and \
            f["attacked"]["innocent"]["failures"] == 0
        met[f"{mode}_rss_within_10pct_of_start"] = f["rss_mb"]["end_over_start"] <= 1.10
    return met


def print_table(figures: dict[str, Any]) -> None:
    for mode, f in figures.items():
        print(f"\n== {mode} ==")
        print(f"{'attack':<40}{'statuses':<34}{'5xx(input)':>11}{'s':>7}  note")
        for row in f["attacks"]:
            print(f"{row['attack']:<40}{str(row['statuses']):<34}{row['server_errors']:>11}{row['seconds']:>7.1f}  "
                  f"{row['note']}")
        print(f"\n{'':<24}{'quiet p50':>10}{'quiet p99':>10}{'attacked p50':>13}{'attacked p99':>13}{'max':>9}")
        for what in ("innocent", "loop_probe"):
            q, a = f["quiet"][what], f["attacked"][what]
            print(f"{what + ' (ms)':<24}{q['p50_ms']:>10.1f}{q['p99_ms']:>10.1f}{a['p50_ms']:>13.1f}"
                  f"{a['p99_ms']:>13.1f}{a['max_ms']:>9.1f}")
        r = f["rss_mb"]
        print(f"gateway RSS MB: start {r['start']}, peak {r['peak']}, end {r['end']} ({r['end_over_start']}x)")
        print(f"budgets overshot {f['budgets_overshot']}, rows billed past max_tokens "
              f"{f['rows_billed_past_max_tokens']}, billed/reserved {f['billed_over_reserved']} "
              f"({f['billed_tokens']}/{f['reserved_tokens']}), holds left {f['holds_left']}, "
              f"5xx for client input {f['client_input_5xx']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=("triton", "relay"), default=["triton", "relay"])
    parser.add_argument("--quick", action="store_true", help="shorter quiet runs (10 s instead of 20)")
    args = parser.parse_args()
    args.quiet_s = 10.0 if args.quick else 20.0
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="trtkit-hostile-") as tmp:
        if "relay" in args.modes:
            upstream = UpstreamProcess(capacity=UPSTREAM_CAPACITY)
            try:
                figures["relay"] = run_mode("relay", upstream.url, Path(tmp), args)
            finally:
                upstream.stop()
        if "triton" in args.modes:
            from trtkit.serve import TritonServer

            with TritonServer(tiny_repository(Path(tmp)), start_timeout_s=180) as server:
                figures["triton"] = run_mode("triton", server.grpc_url, Path(tmp), args)
    print_table(figures)
    met = judge(figures)
    print_bench({"benchmark": "hostile", "figures": figures, "limits": LIMITS,
                 "targets": {"budgets_overshot": 0, "holds_left": 0, "client_input_5xx": 0,
                             "innocent_p99_attacked_over_quiet": "<= 2", "rss_end_over_start": "<= 1.10"},
                 "met": met})
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
