"""Where a decode step and a prefill step of the CPU reference engine spend their time.

Runs the bundled SmolLM2-135M (fp32 unless --dtype bfloat16) through the real engine (scheduler, model
runner, model, sampling) and splits each step's wall time into buckets by wrapping the engine's own
callables with timers:

    layer GEMMs      the q/k/v, o, gate/up and down projections of every layer
    attention        rotary embedding, K/V cache writes, K/V gathers and the attention itself
    other layer ops  embedding, RMS norms, SiLU-gating, residual adds (forward minus the rest)
    lm_head          the final vocabulary projection
    runner prep      building the flattened batch (token ids, positions, slots, block tables)
    sampling         logit processing and the token choice
    scheduling       the scheduler and per-request bookkeeping (step minus everything above)

Decode: batch 1, 4, 16 at contexts 128, 512, 2048. The K/V of the context is placed in the cache
directly (its content does not change the cost), so no prefill of 16 x 2048 tokens is needed.
Prefill: every (batch, prompt length) pair that fits one step's max_num_tokens=2048.

    python benchmarks/engine_profile.py                # about 2 minutes on 2 idle cores
    python benchmarks/engine_profile.py --quick        # batch 1 and 16, contexts 128 and 2048, about 30 s
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from figures import print_bench  # noqa: E402

import trtkit.refengine.llm_engine as llm_engine_module  # noqa: E402
from trtkit.refengine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from trtkit.refengine.cpu_features import usable_cores  # noqa: E402
from trtkit.refengine.sequence import Sequence, SequenceStatus  # noqa: E402
from trtkit.sources.resolve import resolve_model_dir  # noqa: E402

BUCKETS = ("layer GEMMs", "attention", "other layer ops", "lm_head", "runner prep", "sampling", "scheduling")


class Clock:
    """Accumulates seconds per bucket; wrap() times a callable into one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, bucket: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[bucket] += time.perf_counter() - start
        return timed


def instrument(engine: LLMEngine, clock: Clock) -> None:
    model = engine.runner.model
    for layer in model.weights.layers:
        for name in ("qkv", "o_proj", "gate_up", "down"):
            setattr(layer, name, clock.wrap("gemm", getattr(layer, name)))
    model._attention = clock.wrap("attention+qkv", model._attention)  # type: ignore[method-assign]
    model._lm_head = clock.wrap("lm_head", model._lm_head)  # type: ignore[method-assign]
    model.forward = clock.wrap("forward", model.forward)  # type: ignore[method-assign]
    engine.runner.prepare = clock.wrap("prep", engine.runner.prepare)  # type: ignore[method-assign]
    llm_engine_module.choose_tokens_isolated = clock.wrap("sampling", llm_engine_module.choose_tokens_isolated)  # type: ignore[attr-defined]


def buckets_of(raw: dict[str, float], qkv: float, step: float) -> dict[str, float]:
    gemm, attention_qkv = raw["gemm"], raw["attention+qkv"]
    forward, prep, sampling, lm_head = raw["forward"], raw["prep"], raw["sampling"], raw["lm_head"]
    attention = attention_qkv - qkv
    return {"layer GEMMs": gemm, "attention": attention, "other layer ops": forward - gemm - attention - lm_head,
            "lm_head": lm_head, "runner prep": prep, "sampling": sampling,
            "scheduling": step - prep - forward - sampling}


def engine_for(model_dir: Path, dtype: str, max_batch: int, max_context: int) -> LLMEngine:
    threads = torch.get_num_threads()  # what main() chose; the engine would otherwise take every core
    config = EngineConfig(max_batch_size=max_batch, max_num_tokens=2048, max_input_len=min(max_context, 2048),
                          max_seq_len=max_context + 64, tokens_per_block=16,
                          max_tokens_in_paged_kv_cache=max_batch * (max_context + 64),
                          enable_kv_cache_reuse=False, scheduler_policy="max_utilization", dtype=dtype,  # type: ignore[arg-type]
                          num_threads=threads)
    return LLMEngine.from_pretrained(model_dir, config)


def place_decoding(engine: LLMEngine, batch: int, context: int, seed: int) -> None:
    """batch running requests whose first `context` tokens already sit in the cache (next step decodes)."""
    generator = torch.Generator().manual_seed(seed)
    for index in range(batch):
        prompt = torch.randint(3, engine.spec.vocab_size, (context + 1,), generator=generator).tolist()
        seq = Sequence(f"r{index}", prompt, len(prompt), SamplingParams(max_tokens=32, end_id=-1), None)
        engine.block_manager.append_slots(seq, context + 1)
        seq.num_computed_tokens = context
        seq.status = SequenceStatus.RUNNING
        engine.scheduler.running.append(seq)
        engine.sequences[seq.request_id] = seq


def timed_steps(engine: LLMEngine, clock: Clock, steps: int) -> tuple[dict[str, float], float]:
    """Median step seconds and the bucket split of the median step."""
    samples = []
    for _ in range(steps):
        clock.seconds.clear()
        start = time.perf_counter()
        engine.step()
        samples.append((time.perf_counter() - start, dict(clock.seconds)))
    samples.sort(key=lambda sample: sample[0])
    step, raw = samples[len(samples) // 2]
    return buckets_of(defaultdict(float, raw), raw.get("qkv", 0.0), step), step


def profile_decode(model_dir: Path, dtype: str, batch: int, context: int, steps: int) -> dict[str, Any]:
    engine = engine_for(model_dir, dtype, batch, context)
    clock = Clock()
    instrument(engine, clock)
    for layer in engine.runner.model.weights.layers:  # qkv also goes to its own bucket
        layer.qkv = clock.wrap("qkv", layer.qkv)
    place_decoding(engine, batch, context, seed=batch * 10_000 + context)
    engine.step()  # warm-up
    buckets, step = timed_steps(engine, clock, steps)
    return {"kind": "decode", "batch": batch, "context": context, "step_ms": step * 1e3, "buckets": buckets}


def profile_prefill(model_dir: Path, dtype: str, batch: int, context: int, steps: int) -> dict[str, Any]:
    engine = engine_for(model_dir, dtype, batch, context)
    clock = Clock()
    instrument(engine, clock)
    for layer in engine.runner.model.weights.layers:
        layer.qkv = clock.wrap("qkv", layer.qkv)
    generator = torch.Generator().manual_seed(context)
    samples = []
    for _ in range(steps + 1):  # the first is a warm-up
        prompts = [torch.randint(3, engine.spec.vocab_size, (context,), generator=generator).tolist()
                   for _ in range(batch)]
        ids = [engine.add_request(p, SamplingParams(max_tokens=1, end_id=-1)) for p in prompts]
        clock.seconds.clear()
        start = time.perf_counter()
        engine.step()  # the whole batch fits one step: prefill plus the first token
        samples.append((time.perf_counter() - start, dict(clock.seconds)))
        for request_id in ids:
            engine.cancel(request_id)
        engine.step()
    samples = sorted(samples[1:], key=lambda sample: sample[0])
    step, raw = samples[len(samples) // 2]
    return {"kind": "prefill", "batch": batch, "context": context, "step_ms": step * 1e3,
            "buckets": buckets_of(defaultdict(float, raw), raw.get("qkv", 0.0), step)}


def print_table(rows: list[dict[str, Any]]) -> None:
    header = f"{'step':8} {'batch':>5} {'context':>7} {'step ms':>9} " + " ".join(f"{b:>15}" for b in BUCKETS)
    print(header)
    for row in rows:
        shares = " ".join(f"{row['buckets'][b] * 1e3:8.1f} ({row['buckets'][b] * 1e3 / row['step_ms']:4.0%})"
                          for b in BUCKETS)
        print(f"{row['kind']:8} {row['batch']:5d} {row['context']:7d} {row['step_ms']:9.1f} {shares}")
    print("(each bucket: milliseconds of the median step, and its share of the step)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 1 and 16, contexts 128 and 2048 only")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: every usable core)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per cell (the median is shown)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads or usable_cores())
    model_dir = resolve_model_dir("bundled:smollm2-135m")
    batches, contexts = ((1, 16), (128, 2048)) if args.quick else ((1, 4, 16), (128, 512, 2048))
    rows = [profile_decode(model_dir, args.dtype, b, c, args.steps) for b in batches for c in contexts]
    rows += [profile_prefill(model_dir, args.dtype, b, c, max(args.steps // 2, 1))
             for b in batches for c in contexts if b * c <= 2048]
    threads = torch.get_num_threads()
    print(f"\nSmolLM2-135M, {args.dtype}, {threads} torch threads, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print_table(rows)
    decode16 = {r["context"]: r["step_ms"] for r in rows if r["kind"] == "decode" and r["batch"] == 16}
    growth = decode16[max(decode16)] / decode16[min(decode16)]
    print(f"\ndecode step at batch 16: {decode16[min(decode16)]:.1f} ms at context {min(decode16)}, "
          f"{decode16[max(decode16)]:.1f} ms at {max(decode16)} ({growth:.2f}x)")
    figures = {"dtype": args.dtype, "threads": threads, "quick": args.quick,
               "rows": [{**r, "step_ms": round(r["step_ms"], 2),
                         "buckets": {k: round(v * 1e3, 2) for k, v in r["buckets"].items()}} for r in rows],
               "decode_b16_growth": round(growth, 3), "targets": {}, "met": {}}  # a profile: nothing is judged
    print_bench(figures)


if __name__ == "__main__":
    main()
