"""The report of benchmarks/gateway_overhead.py: the judged (split) layout's rows with their targets, the echo rows,
the unpinned layout's rows judged beside them (``unpinned_*`` in ``met``), and the BENCH line. It only draws what the load generators measured.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

from cpu_layout import Split
from figures import print_bench, straddle_note, verdict_at_least, verdict_at_most

TTFT_TARGET_MS, TPS_TARGET, ECHO_TARGET_RPS = 3.0, 0.95, 500.0


def layout_rows(f: dict, args, judged: bool) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    c = args.concurrency
    target = (lambda text: text) if judged else (lambda text: "(not judged)")
    return [("TTFT one request at a time: direct / via gateway, median ms",
             f"{f['direct_alone_ttft_ms']:.1f} / {f['gateway_alone_ttft_ms']:.1f}", ""),
            ("  so the gateway's own TTFT overhead, ms", f"{f['alone_ttft_overhead_ms']:.1f}", "(no queueing)"),
            ("  the openai SDK alone, against a server that answers at once, TTFT median ms",
             f"{f['sdk_floor_ttft_ms']:.1f}", "(where the time goes)"),
            ("direct gRPC client TTFT, median ms", f"{f['direct_ttft_ms']:.1f}", ""),
            ("openai SDK via gateway TTFT, median ms", f"{f['gateway_ttft_ms']:.1f}", ""),
            ("gateway TTFT overhead, ms", f"{f['ttft_overhead_ms']:.1f}", target(f"<= {TTFT_TARGET_MS:g}")),
            ("  bare HTTP/1.1 client via gateway TTFT, median ms", f"{f['bare_ttft_ms']:.1f}", "(where the time goes)"),
            ("  so the gateway's share / the SDK's share of the overhead, ms",
             f"{f['bare_ttft_overhead_ms']:.1f} / {f['ttft_overhead_ms'] - f['bare_ttft_overhead_ms']:.1f}", ""),
            (f"direct tokens/s at concurrency {c}", f"{f['direct_tokens_per_s']:.0f}", ""),
            (f"gateway tokens/s at concurrency {c}", f"{f['gateway_tokens_per_s']:.0f}", ""),
            ("gateway / direct tokens/s", f"{f['tokens_per_s_ratio']:.1%}", target(f">= {TPS_TARGET:.0%}")),
            ("  bare HTTP/1.1 client via gateway / direct tokens/s", f"{f['bare_tokens_per_s_ratio']:.1%}",
             "(where the time goes)"),
            (f"CPU ms per token at {c}: gateway process / openai SDK (load generator)",
             f"{f['c16_gateway_cpu_ms_per_token']:.2f} / {f['c16_sdk_cpu_ms_per_token']:.2f}", ""),
            (f"CPU ms per token at {c}: direct client", f"{f['c16_direct_client_cpu_ms_per_token']:.2f}", ""),
            ("  bare tritonclient.grpc.aio streams, same requests (gRPC's own floor)",
             f"{f['c16_grpc_floor_cpu_ms_per_token']:.2f}", "(where the time goes)"),
            (f"CPU ms per token at {c}, bare client path: gateway process / bare client",
             f"{f['c16_bare_gateway_cpu_ms_per_token']:.2f} / {f['c16_bare_client_cpu_ms_per_token']:.2f}", ""),
            (f"CPU ms per token at {c}: Triton, gateway path / direct path",
             f"{f['c16_triton_cpu_ms_per_token_gateway']:.2f} / {f['c16_triton_cpu_ms_per_token_direct']:.2f}", "")]


def echo_rows(f: dict) -> list[tuple[str, str, str]]:
    ceiling = 2000 / max(1e-6, f["echo_gateway_cpu_ms"] + f["echo_triton_cpu_ms"] + f["echo_loadgen_cpu_ms"])
    return [("gateway on echo repository, requests/s", f"{f['echo_requests_per_s']:.0f}", f">= {ECHO_TARGET_RPS:g}"),
            ("  of which answered 200", f"{f['echo_ok']}/{f['echo_requests']}", ""),
            ("asyncio client direct on echo repository, requests/s", f"{f['echo_direct_requests_per_s']:.0f}",
             "(where the time goes)"),
            ("echo path CPU ms per request: gateway process", f"{f['echo_gateway_cpu_ms']:.2f}", ""),
            ("echo path CPU ms per request: Triton (server + Python stubs)", f"{f['echo_triton_cpu_ms']:.2f}", ""),
            ("echo path CPU ms per request: load generator (bare HTTP/1.1)", f"{f['echo_loadgen_cpu_ms']:.2f}", ""),
            ("  so the 2-core ceiling, requests/s = 2000 / sum", f"{ceiling:.0f}", "")]


def layout_verdicts(f: dict) -> dict:
    """The targets judged on one layout's figures (the point figure judges; the interval says whether it can tell)."""
    return {"ttft_overhead": verdict_at_most(f["ttft_overhead_ms"], f["ttft_overhead_interval_ms"], TTFT_TARGET_MS),
            "tokens_per_s_ratio": verdict_at_least(f["tokens_per_s_ratio"], f["tokens_per_s_ratio_interval"],
                                                   TPS_TARGET)}


def report(figures: dict[str, dict], args, split: Split | None) -> None:  # type: ignore[no-untyped-def]
    judged = "split" if "split" in figures else "shared"
    titles = {"split": f"split layout (judged): {split.describe() if split else ''}",
              "shared": "shared cores, unpinned (every process on every core; judged" +
                        (" beside the split layout)" if judged != "shared" else ")")}
    blocks = [(titles[judged], layout_rows(figures[judged], args, True)), ("echo repository, unpinned",
                                                                           echo_rows(figures["echo"]))]
    if judged != "shared" and "shared" in figures:
        blocks.append((titles["shared"], layout_rows(figures["shared"], args, True)))
    width = max(len(row[0]) for _, rows in blocks for row in rows)
    print(f"{'measure'.ljust(width)}  {'value':>10}  target")
    for title, rows in blocks:
        print(f"-- {title}")
        for name, value, target in rows:
            print(f"{name.ljust(width)}  {value:>10}  {target}")
    f, echo = figures[judged], figures["echo"]
    verdicts = layout_verdicts(f)
    met = {name: verdict["met"] for name, verdict in verdicts.items()}
    met["echo_requests_per_s"] = echo["echo_requests_per_s"] >= ECHO_TARGET_RPS
    layouts = {judged: verdicts}
    if judged != "shared" and "shared" in figures:
        layouts["shared"] = layout_verdicts(figures["shared"])
        met |= {f"unpinned_{name}": verdict["met"] for name, verdict in layouts["shared"].items()}
    for layout, found in layouts.items():
        where = "" if layout == judged else ", unpinned"
        print(straddle_note(f"TTFT overhead at {args.concurrency}{where} <= {TTFT_TARGET_MS:g} ms", found["ttft_overhead"],
                            lambda v: f"{v:.1f} ms"))
        print(straddle_note(f"tokens/s at {args.concurrency}{where} >= {TPS_TARGET:.0%} of direct",
                            found["tokens_per_s_ratio"], lambda v: f"{v:.1%}"))
    payload = {"benchmark": "gateway_overhead", "layout": judged,
               "placement": split.describe() if judged == "split" and split else "unpinned",
               "figures": f | echo, "verdicts": verdicts, "targets": {"ttft_overhead_ms": TTFT_TARGET_MS, "tokens_per_s_ratio": TPS_TARGET,
                                                "echo_requests_per_s": ECHO_TARGET_RPS}, "met": met}
    if judged != "shared" and "shared" in figures:
        payload["shared_layout"] = figures["shared"]
        payload["unpinned_verdicts"] = layouts["shared"]
    print_bench(payload)  # with the machine's load: the host may be shared
