"""The bench's own overhead: how many streamed responses per second `trtkit bench` can take in, and how
closely its TTFT matches a timestamp taken inside the engine model.

    python benchmarks/bench_self.py [--requests 400] [--max-tokens 64] [--concurrency 32] [--quick]

A real tritonserver serves an *echo streaming* repository: one decoupled Python model with the
ensemble's request tensors (text_input, max_tokens, stream, min_tokens, return_num_*_tokens) that
answers each request with ``max_tokens`` one-token responses as fast as the stub can send them, and
notes, per request id, the ``time.perf_counter()`` at which it sent the first one. On Linux
perf_counter is CLOCK_MONOTONIC, shared by every process of the machine, so the model's stamp and the
bench's clock can be compared directly.

Part 1 (throughput): the bench itself (``trtkit.bench.session.run_bench``: gRPC backend, metrics
sampling, records, reconciliation, files, plots, report) at ``--concurrency`` in-flight requests.
Figure: streamed responses received per second over the measured window. Target: >= 1,000/s.
Part 2 (TTFT accuracy): the same, at concurrency 4, with the model pacing its tokens 2 ms apart. For
each request, the engine's first-token time is ``model stamp - bench send time``; the figure is the
median of (bench TTFT - engine first-token time): what the bench's measurement adds to the truth, i.e.
the way back from the model through Triton and gRPC to the bench's event loop. Target: <= 2 ms.
Each part starts its own server (the pacing is a model parameter). Run time (server starts included), on a
shared 2-core machine: --quick 37 s at load average 6; the default run 60 s at load average 16.
Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import print_bench  # noqa: E402

ECHO_STREAM_MODEL = '''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.stamps = open(params["stamp_file"]["string_value"], "a", buffering=1)
        self.pace_s = float(params["pace_ms"]["string_value"]) / 1000.0

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = _scalar(request, "text_input", b"")
            n = int(_scalar(request, "max_tokens", 16))
            prompt_tokens = np.array([[len(text.split())]], dtype=np.int32)
            first = None
            for i in range(1, n + 1):
                last = i == n
                outputs = [pb_utils.Tensor("text_output", np.array([[b" tok"]], dtype=object)),
                           pb_utils.Tensor("num_input_tokens", prompt_tokens),
                           pb_utils.Tensor("num_output_tokens", np.array([[i]], dtype=np.int32)),
                           pb_utils.Tensor("finish_reason", np.array([[b"length" if last else b""]], dtype=object))]
                if first is None:
                    first = time.perf_counter()
                sender.send(pb_utils.InferenceResponse(outputs),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)
                if self.pace_s and not last:
                    time.sleep(self.pace_s)
            self.stamps.write(json.dumps({"id": request.request_id(), "first": first}) + "\\n")
        return None

    def finalize(self):
        self.stamps.close()
'''


def write_repository(repo: Path, stamp_file: Path, pace_ms: float) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name="echo_stream", backend="python", max_batch_size=0)
    config.model_transaction_policy.decoupled = True
    for name, dtype, optional in (("text_input", mc.TYPE_STRING, False), ("max_tokens", mc.TYPE_INT32, False),
                                  ("stream", mc.TYPE_BOOL, True), ("min_tokens", mc.TYPE_INT32, True),
                                  ("temperature", mc.TYPE_FP32, True),
                                  ("exclude_input_in_output", mc.TYPE_BOOL, True),
                                  ("return_num_input_tokens", mc.TYPE_BOOL, True),
                                  ("return_num_output_tokens", mc.TYPE_BOOL, True)):
        config.input.add(name=name, data_type=dtype, dims=[-1, -1], optional=optional)
    for name, dtype in (("text_output", mc.TYPE_STRING), ("num_input_tokens", mc.TYPE_INT32),
                        ("num_output_tokens", mc.TYPE_INT32), ("finish_reason", mc.TYPE_STRING)):
        config.output.add(name=name, data_type=dtype, dims=[-1, -1])
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    config.parameters["stamp_file"].string_value = str(stamp_file)
    config.parameters["pace_ms"].string_value = str(pace_ms)
    model_dir = repo / "echo_stream"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text(ECHO_STREAM_MODEL)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


def run_part(work: Path, name: str, *, pace_ms: float, concurrency: int, requests: int, max_tokens: int) -> dict:
    from trtkit.bench.outputs.files import read_run
    from trtkit.bench.session import run_bench
    from trtkit.bench.spec import BenchSpec, parse_endpoint, parse_points
    from trtkit.bench.workloads import LengthDist, WorkloadSpec
    from trtkit.governance.tokens import TokenCounter
    from trtkit.serve import TritonServer
    from trtkit.sources.bundled import bundled_gguf_path
    from trtkit.sources.gguf import gguf_to_hf

    repo, stamps = work / f"repo-{name}", work / f"stamps-{name}.jsonl"
    write_repository(repo, stamps, pace_ms)
    counter = TokenCounter(gguf_to_hf(bundled_gguf_path("smollm2-135m"), Path(os.environ.get(
        "TRTKIT_CACHE", ROOT / ".trtkit-cache"))))
    with TritonServer(repo, start_timeout_s=120, log_path=work / f"tritonserver-{name}.log") as server:
        spec = BenchSpec(parse_endpoint(f"grpc://{server.grpc_url}"), "echo_stream",
                         parse_points(str(concurrency), None), requests_per_point=requests, warmup_requests=8)
        workload = WorkloadSpec("synthetic", LengthDist("fixed", 32), LengthDist("fixed", max_tokens))
        folder = run_bench(spec, workload, counter, work / f"run-{name}", metrics_url=server.metrics_url,
                           entry_model="echo_stream")
    run = read_run(folder)
    (summary,) = run.summaries
    first_by_id = {row["id"]: row["first"] for row in map(json.loads, stamps.read_text().splitlines())}
    measured = [r for r in run.records if not r.warmup and r.ok and r.ttft_s is not None]
    if not measured:
        failed = next((r.error for r in run.records if r.error), "no response carried text")
        raise SystemExit(f"bench_self: no request succeeded ({failed}); see {work}/tritonserver-{name}.log")
    origin = float(run.meta["origin_perf_counter"])  # perf_counter at the run's start
    added_ms = [(r.ttft_s - (first_by_id[r.request_id] - origin - r.start_s)) * 1000 for r in measured]
    responses = sum(len(r.chunk_offsets_s) for r in measured)
    return {"responses_per_s": responses / summary["duration_s"], "requests": len(measured),
            "responses": responses, "errors": summary["errors"], "ttft_p50_ms": summary["ttft_ms"]["p50"],
            "ttft_added_p50_ms": statistics.median(added_ms), "ttft_added_p90_ms": _pct(added_ms, 90),
            "server_matches": all(summary["server"]["matches"].values()) if summary["server"]["matches"] else None}


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a smoke check")
    args = parser.parse_args()
    requests = 120 if args.quick else args.requests
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-self-") as tmp:
        work = Path(tmp)
        throughput = run_part(work, "throughput", pace_ms=0.0, concurrency=args.concurrency, requests=requests,
                              max_tokens=args.max_tokens)
        accuracy = run_part(work, "ttft", pace_ms=2.0, concurrency=4, requests=max(40, requests // 4),
                            max_tokens=16)
    rows = [(f"streamed responses/s (c={args.concurrency})", f"{throughput['responses_per_s']:.0f}", ">= 1000"),
            ("TTFT added over the engine's stamp, median (c=4)", f"{accuracy['ttft_added_p50_ms']:.3f} ms", "<= 2 ms"),
            ("  p90", f"{accuracy['ttft_added_p90_ms']:.3f} ms", ""),
            ("  same, at the throughput point (median)", f"{throughput['ttft_added_p50_ms']:.3f} ms", ""),
            ("server counters equal the bench's", f"{throughput['server_matches']} / {accuracy['server_matches']}",
             "True"),
            ("load average at start (1 min)", f"{load:.2f}", ""), ("CPUs", str(os.cpu_count()), "")]
    width = max(len(r[0]) for r in rows)
    for label, value, target in rows:
        print(f"{label:<{width}}  {value:>12}  {target}")
    met_rate = throughput["responses_per_s"] >= 1000
    met_ttft = accuracy["ttft_added_p50_ms"] <= 2.0
    print_bench({
        "bench": "bench_self", "responses_per_s": round(throughput["responses_per_s"], 1),
        "ttft_added_p50_ms": round(accuracy["ttft_added_p50_ms"], 3),
        "ttft_added_p90_ms": round(accuracy["ttft_added_p90_ms"], 3),
        "ttft_added_p50_ms_at_throughput": round(throughput["ttft_added_p50_ms"], 3),
        "server_counts_match": bool(throughput["server_matches"] and accuracy["server_matches"]),
        "targets": {"responses_per_s": 1000, "ttft_added_p50_ms": 2.0},
        "met": {"responses_per_s": met_rate, "ttft_added_p50_ms": met_ttft},
        "load_avg_1m": round(load, 2), "cpus": os.cpu_count(), "requests": requests,
        "max_tokens": args.max_tokens, "concurrency": args.concurrency})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
