"""Check: streams cancelled mid-generation through the ``ensemble`` are released and stop the engine.

    python benchmarks/ensemble_cancel.py [--streams 3] [--max-tokens 200]

Deploys the tiny test model's CPU repository (model_configs/tiny-llama.yaml), opens --streams gRPC
streams to ``ensemble`` with max_tokens = min_tokens = --max-tokens (they cannot end early on their own),
cancels each after its first response (``stop_stream(cancel_requests=True)``), then reads:

- the engine steps taken (``nv_trt_llm_general_metrics`` iteration counter): the streams run batched,
  so one that runs to its end takes at least max_tokens steps; fewer prove the engine stopped them all;
- the ensemble requests tritonserver released (``nv_inference_count{model="ensemble"}``: an ensemble
  request is counted only when its last reference goes), and the KV blocks still in use;
- the requests tritonserver still counts in flight when stopped (its log), and how long it took to stop.

Why it exists: with tritonserver 2.51 (pytriton 0.7.0) every cancelled ensemble stream stayed in flight
forever (server memory grew, SIGTERM waited out --exit-timeout-secs). Triton never cancels the running
engine step (core#263, server#6739); it cancels the postprocessing steps it schedules afterwards, and the
dynamic batcher's queue answered those with a CANCELLED error. From then on 2.51's
``EnsembleContext::PrepareSteps`` skipped ``UpdateEnsembleState`` for the engine's remaining responses,
so ``inflight_step_counter_`` never reached 0 and the request was never released (fixed upstream in
core#466, ensemble_scheduler.cc "Always process completed steps via UpdateEnsembleState"). trtkit's
repository gives postprocessing no dynamic batching, and its adapter answers a cancelled step with a
success and stops the engine by the engine's request key (trtkit/triton_models/adapters/postprocessing.py).
Before that change this check read: 214 engine steps (all 3 ran their 200 tokens), 0 of 3 released,
{'ensemble': 3} in flight at exit, 8.8 s to stop; after it: 32 steps, 3 of 3 released, none, 2.4 s.

Real run time: about 30 s on a shared 2-core machine. Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import queue
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from figures import print_bench  # noqa: E402
from robustness.server import inflight_at_exit, tiny_repository  # noqa: E402
from server_gauges import model_requests_released, settled_engine, wait_for_released  # noqa: E402


def _inputs(max_tokens: int) -> list:
    import tritonclient.grpc as grpcclient

    arrays = {"text_input": np.array([[b"Tell me a long story about the sea."]], dtype=np.object_),
              "max_tokens": np.array([[max_tokens]], dtype=np.int32),
              "min_tokens": np.array([[max_tokens]], dtype=np.int32),
              "stream": np.array([[True]], dtype=np.bool_)}
    items = []
    for name, array in arrays.items():
        kind = {np.object_: "BYTES", np.int32: "INT32", np.bool_: "BOOL"}[array.dtype.type]
        item = grpcclient.InferInput(name, list(array.shape), kind)
        item.set_data_from_numpy(array)
        items.append(item)
    return items


def cancel_streams(server, streams: int, max_tokens: int) -> dict:
    import tritonclient.grpc as grpcclient

    url = server.metrics_url
    before = settled_engine(url, after_iteration=-1)
    released_before = model_requests_released(url, "ensemble")
    clients = []
    for _ in range(streams):
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(server.grpc_url)
        client.start_stream(callback=lambda result, error, box=results: box.put((result, error)))
        client.async_stream_infer("ensemble", _inputs(max_tokens))
        clients.append((client, results))
    errors = [error for _client, results in clients for _result, error in [results.get(timeout=120)] if error]
    for client, _results in clients:
        client.stop_stream(cancel_requests=True)
        client.close()
    after = settled_engine(url, after_iteration=before.iteration, timeout_s=120)
    released = wait_for_released(url, "ensemble", released_before + streams, timeout_s=30)
    return {"streams": streams, "max_tokens": max_tokens, "first_response_errors": [str(e) for e in errors],
            "engine_steps": after.iteration - before.iteration, "released": released - released_before,
            "kv_blocks_used_after": after.used_blocks}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=200)
    args = parser.parse_args()
    from trtkit.serve import TritonServer

    with tempfile.TemporaryDirectory(prefix="ensemble-cancel-") as work:
        repo = tiny_repository(Path(work))
        server = TritonServer(repo, start_timeout_s=180, log_path=Path(work) / "tritonserver.log")
        with server:
            figures = cancel_streams(server, args.streams, args.max_tokens)
            stop_started = time.monotonic()
        figures["stop_s"] = round(time.monotonic() - stop_started, 2)
        figures["inflight_at_exit"] = inflight_at_exit(server.log_path)
    steps_limit = args.max_tokens  # a stream that ran to its end took at least this many (batched) steps
    met = {"engine_stopped_early": figures["engine_steps"] < steps_limit,
           "all_released": figures["released"] == args.streams, "kv_blocks_freed": figures["kv_blocks_used_after"] == 0,
           "nothing_in_flight_at_exit": not figures["inflight_at_exit"], "no_errors": not figures["first_response_errors"]}
    print(f"{'streams cancelled':<34}{args.streams}")
    print(f"{'engine steps (uncancelled >= ' + str(args.max_tokens) + ')':<34}{figures['engine_steps']:.0f}")
    print(f"{'released by tritonserver':<34}{figures['released']:.0f}")
    print(f"{'KV blocks in use after':<34}{figures['kv_blocks_used_after']:.0f}")
    print(f"{'in flight at exit':<34}{figures['inflight_at_exit'] or 'none'}")
    print(f"{'server stop took (s)':<34}{figures['stop_s']}")
    targets = {"engine_steps_below": steps_limit, "released": args.streams, "kv_blocks_used_after": 0,
               "inflight_at_exit": 0}
    print_bench({"benchmark": "ensemble_cancel", "figures": figures, "targets": targets, "met": met})
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
