"""Where a decode step's time goes: trtkit's CPU engine beside vLLM-CPU's, at the same batch, context and precision.

trtkit's split comes from benchmarks/engine_profile.py's instrumentation (its engine's own callables wrapped with
timers); vLLM's from benchmarks/vllm_step_profile.py, run in vLLM's venv (benchmarks/setup_vllm.sh), which wraps its
model runner's forward pass, vocabulary projection and sampler and reads its op times from torch's profiler. The
buckets are the same on both sides: layer GEMMs (the layers' projections), attention (rotary embedding, the cache
write and attention itself), other layer ops (norms, activation, residual adds: the rest of the forward pass),
lm_head, sampling, and scheduling (everything else in the step: scheduler, input preparation, output processing,
Python). Each side runs alone, one after the other, with ``--threads`` threads; the machine's load is printed beside.

The split is measured on the machine this runs on; on a CPU without AMX (as the 2-core Zen 4 here) the bf16 products
run on AVX512-BF16 dot products (trtkit's panels and oneDNN alike) or, without those, on fp32 units. A machine with
AMX gives another split: this script measures it where it runs, and no figure here stands for one.

    python benchmarks/step_split.py                       # fp32 and bf16, contexts 128 and 512: about 10 minutes
    python benchmarks/step_split.py --quick               # bf16, context 332: a few minutes (vLLM's start)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from engine_profile import BUCKETS, profile_decode  # noqa: E402
from figures import print_bench  # noqa: E402
from peer_servers import vllm_env, vllm_venv  # noqa: E402

from trtkit.refengine.cpu_features import cpu_flags  # noqa: E402
from trtkit.sources.resolve import resolve_model_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def trtkit_split(model_dir: Path, dtype: str, batch: int, context: int, steps: int) -> dict[str, Any]:
    """engine_profile's decode split, on a thread of its own whose intra-op threads are bound one per core, as the
    serving loop binds them (and as vLLM binds its own): like with like, and this process's main thread (which
    starts vLLM's subprocess after) stays unbound."""
    import threading

    import engine_profile

    result: dict[str, Any] = {}

    def bound_engine(*args: Any) -> Any:
        engine = make_engine(*args)
        engine.bind_compute_threads()
        return engine

    def run() -> None:
        try:
            result["row"] = profile_decode(model_dir, dtype, batch, context, steps)
        except BaseException as error:  # re-raised on the calling thread
            result["error"] = error

    make_engine = engine_profile.engine_for
    engine_profile.engine_for = bound_engine  # type: ignore[assignment]
    try:
        worker = threading.Thread(target=run, name="step-split-trtkit")
        worker.start()
        worker.join()
    finally:
        engine_profile.engine_for = make_engine  # type: ignore[assignment]
    if "error" in result:
        raise result["error"]
    row = result["row"]
    return {"step_ms": round(row["step_ms"], 2), "buckets_ms": {k: round(v * 1e3, 2) for k, v in row["buckets"].items()}}


def vllm_split(model_dir: Path, dtype: str, batch: int, context: int, steps: int, threads: int) -> dict[str, Any]:
    venv = vllm_venv()
    done = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "benchmarks" / "vllm_step_profile.py"), "--model",
                           str(model_dir), "--dtype", dtype, "--batch", str(batch), "--context", str(context),
                           "--steps", str(steps)], env=vllm_env(venv, threads, kv_gib=2), capture_output=True,
                          text=True, timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"vllm_step_profile.py failed ({done.returncode}): {done.stderr[-3000:]}")
    figures = json.loads(lines[-1])
    buckets = figures["buckets_ms"]
    # vLLM has no separate input-preparation bucket: its runner's preparation is part of its scheduling bucket
    return {"step_ms": figures["step_ms"], "buckets_ms": {**buckets, "runner prep": None}}


def print_rows(label: str, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\n{label}")
    print(f"{'engine':8} {'step ms':>8} " + " ".join(f"{b:>17}" for b in BUCKETS))
    for name, row in rows.items():
        cells = []
        for bucket in BUCKETS:
            value = row["buckets_ms"].get(bucket)
            cells.append(f"{'-':>17}" if value is None else f"{value:8.1f} ({value / row['step_ms']:4.0%})  ")
        print(f"{name:8} {row['step_ms']:8.1f} " + " ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="bf16 at context 332 only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir("bundled:smollm2-135m")
    precisions, contexts = (["bf16"], [332]) if args.quick else (["fp32", "bf16"], [128, 512])
    amx = "amx_bf16" in cpu_flags()
    results: dict[str, Any] = {}
    for precision in precisions:
        for context in contexts:
            before = os.getloadavg()[0]
            rows = {"trtkit": trtkit_split(model_dir, DTYPES[precision], args.batch, context, args.steps),
                    "vLLM": vllm_split(model_dir, DTYPES[precision], args.batch, context, args.steps, args.threads)}
            label = (f"{precision}, batch {args.batch}, context {context}, {args.threads} threads, load "
                     f"{before:.2f} -> {os.getloadavg()[0]:.2f}")
            print_rows(label, rows)
            results[f"{precision}_ctx{context}"] = rows
    print(f"\n(each bucket: ms of the step and its share; vLLM's input preparation is inside its scheduling bucket)"
          f"\nAMX on this CPU: {'yes' if amx else 'no: the AMX split is not measured here'}")
    print_bench({"benchmark": "step_split", "threads": args.threads, "batch": args.batch, "amx": amx,
                 "results": results, "targets": {}, "met": {}})


if __name__ == "__main__":
    main()
