"""Fuzz: seeded random requests, valid and hostile, against ``ensemble`` and ``tensorrt_llm_bls`` through a
real tritonserver (gRPC streams) serving the tiny test model (model_configs/tiny-llama.yaml, CPU engine).

    python benchmarks/fuzz.py [--requests 10000] [--seed 0] [--workers 4] [--deadline 60]

Cases (benchmarks/robustness/fuzz_cases.py): wrong dtypes and shapes, shapes that lie about the data,
missing and unknown inputs, empty / invalid-UTF-8 / 1 MB prompts, NaN, inf, negative and huge sampling
values, junk stop and bad words, out-of-range end and pad ids, batch tensors with mismatched lengths,
pairs of these, and valid requests. Every request must be answered within the deadline with a result or
an error naming the input it broke. Counted failures: hangs, INTERNAL errors, errors that name no broken
input, valid requests refused, invalid requests accepted, answers ending in U+FFFD, client-side failures;
and server or stub crashes (health, process and stub pids polled every 0.5 s). Targets: 0 hangs, 0
crashes, 0 INTERNAL, the server healthy throughout; the other failure counts are reported with target 0.

``--gateway``: the same run through the OpenAI gateway (started in a thread of this process in front of
the tritonserver), with raw HTTP requests to ``/v1/chat/completions`` and ``/v1/completions``
(benchmarks/robustness/gateway_cases.py): bad JSON, invalid UTF-8, wrong types, missing and unknown
fields, 1 MB and over-the-cap bodies, NaN / inf / negative / huge sampling values, junk stop, unsupported
fields (n, echo, functions) and bad values of the supported ones (logit_bias, response_format, tool_choice),
bad API keys and models. A correct answer is a 2xx result or a 4xx whose
JSON error names the field (never a 5xx, never a hang); the gateway's ``/health/ready`` is polled beside
Triton's.

Real run time on a shared 2-core machine: about 10 s to start, then roughly 30-60 requests/s
(10,000 requests: 3-6 minutes); ``--gateway`` about 6 requests/s on that machine under load (500 requests:
85 s; long answers of valid cases dominate). Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from figures import print_bench  # noqa: E402
from robustness.fuzz_cases import CaseGenerator, specs_from_config  # noqa: E402
from robustness.fuzz_run import FAILURES, FuzzReport, run_cases  # noqa: E402
from robustness.gateway_cases import GatewayCaseGenerator  # noqa: E402
from robustness.gateway_target import (  # noqa: E402
    GatewayHealthWatch,
    GatewayHttpTarget,
    GatewayThread,
    served_model,
)
from robustness.server import HealthWatch, tiny_config, tiny_repository  # noqa: E402
from robustness.triton_target import TritonStreamTarget  # noqa: E402

MODELS = ("ensemble", "tensorrt_llm_bls")


def fuzz_server(server, *, requests: int, seed: int, workers: int, deadline_s: float,
                progress: bool = False) -> tuple[FuzzReport, list[str], float]:
    """Run the fuzz against a started TritonServer; returns the report, the health events and the seconds."""
    target = TritonStreamTarget(server.grpc_url)
    specs = specs_from_config(target.client.get_model_config("ensemble", as_json=True)["config"])
    target.close()
    watch = HealthWatch(server).start()
    start = time.monotonic()

    def tick(done: int) -> None:
        if progress and done % 500 == 0:
            print(f"  {done}/{requests} after {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)

    cases = CaseGenerator(seed, specs, MODELS).cases(requests)
    report = run_cases(cases, lambda: TritonStreamTarget(server.grpc_url), workers=workers, deadline_s=deadline_s,
                       on_progress=tick)
    seconds = time.monotonic() - start
    events = watch.close() + watch.check()  # one last look after the final request
    return report, events, seconds


def fuzz_gateway(server, gateway: GatewayThread, *, requests: int, seed: int, workers: int, deadline_s: float,
                 progress: bool = False) -> tuple[FuzzReport, list[str], float]:
    """Run the gateway fuzz against a started gateway in front of ``server``: report, health events, seconds."""
    _, secret = gateway.new_key("fuzz")
    model = served_model(gateway.url, secret)
    watch = GatewayHealthWatch(server, gateway_url=gateway.url, gateway_thread=gateway.thread).start()
    start = time.monotonic()

    def tick(done: int) -> None:
        if progress and done % 100 == 0:
            print(f"  {done}/{requests} after {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)

    cases = GatewayCaseGenerator(seed, model, gateway.config.gateway.max_body_bytes).cases(requests)
    report = run_cases(cases, lambda: GatewayHttpTarget(gateway.url, secret), workers=workers,
                       deadline_s=deadline_s, on_progress=tick)
    seconds = time.monotonic() - start
    return report, watch.close() + watch.check(), seconds


def print_table(report: FuzzReport) -> None:
    columns = ["answered", "refused", "refused_alias", *FAILURES]
    print(f"{'kind':<16}{'sent':>7}" + "".join(f"{c:>{len(c) + 2}}" for c in columns))
    for kind, counts in sorted(report.by_kind.items()):
        print(f"{kind:<16}{sum(counts.values()):>7}" + "".join(f"{counts[c]:>{len(c) + 2}}" for c in columns))
    totals = report.totals()
    print(f"{'total':<16}{report.num_cases:>7}" + "".join(f"{totals[c]:>{len(c) + 2}}" for c in columns))
    for verdict, lines in report.examples.items():
        print(f"\n{verdict}:")
        for line in lines:
            print(f"  {line}")


def summary(report: FuzzReport, events: list[str], seconds: float, args: argparse.Namespace) -> dict:
    totals = report.totals()
    crashes = [e for e in events if "exited" in e or "gone" in e]
    figures = {"target": "gateway" if args.gateway else "triton", "requests": report.num_cases, "seed": args.seed, "seconds": round(seconds, 1),
               "requests_per_s": round(report.num_cases / seconds, 1) if seconds else 0.0,
               "slowest_answer_s": round(report.slowest_s, 2), "answered": totals["answered"],
               "refused_naming_input": totals["refused"],
               "refused_naming_engine_alias": totals["refused_alias"], **{f: totals[f] for f in FAILURES},
               "crashes": len(crashes), "unhealthy_polls": sum(1 for e in events if "not ready" in e),
               "health_events": events[:20]}
    targets = {"hang": 0, "crashes": 0, "internal": 0, "unhealthy_polls": 0, "unnamed_error": 0,
               "rejected_valid": 0, "accepted_invalid": 0, "broken_output": 0, "transport": 0}
    met = {name: figures[name] <= limit for name, limit in targets.items()}
    return {"benchmark": "fuzz", "figures": figures, "targets": targets, "met": met}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4, help="requests in flight at once")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds a request may take before it is a hang")
    parser.add_argument("--gateway", action="store_true", help="fuzz the OpenAI gateway (HTTP) instead of Triton")
    args = parser.parse_args()

    from trtkit.serve import TritonServer

    with tempfile.TemporaryDirectory(prefix="trtkit-fuzz-") as tmp:
        repo = tiny_repository(Path(tmp))
        with TritonServer(repo, start_timeout_s=180) as server:  # the log stays under $TRTKIT_HOME for a post-mortem
            print(f"tritonserver log: {server.log_path}", file=sys.stderr)
            run = dict(requests=args.requests, seed=args.seed, workers=args.workers, deadline_s=args.deadline,
                       progress=True)
            if args.gateway:
                gateway = GatewayThread(tiny_config(), server.grpc_url, Path(tmp) / "gateway")
                try:
                    report, events, seconds = fuzz_gateway(server, gateway, **run)  # type: ignore[arg-type]
                finally:
                    gateway.stop()
            else:
                report, events, seconds = fuzz_server(server, **run)  # type: ignore[arg-type]
    print_table(report)
    result = summary(report, events, seconds, args)
    print(f"\n{report.num_cases} requests in {seconds:.0f} s; health events: {len(events)}")
    print_bench(result)
    return 0 if all(result["met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
