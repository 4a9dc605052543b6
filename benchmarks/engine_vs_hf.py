"""CPU reference engine vs Hugging Face transformers on the bundled SmolLM2-135M, in one run.

Workload (default): 64 requests, prompts of 16-512 tokens, outputs drawn from {16, 32, 64, 128, 256},
greedy, 16 requests in flight. Compared: our engine (paged KV, in-flight batching), transformers
`generate` one request at a time, `generate` on static left-padded batches of 16, and transformers'
continuous batching manager (the engine behind `generate_batch`, given per-request max_new_tokens).
Useful tokens are the output tokens each request asked for (a static batch computes more: every row
runs to the longest request's length). Also measured: KV-cache waste over the engine run against
reserving max_seq_len per sequence, and time to first token with a shared 512-token system prompt
with KV reuse on vs off.

    python benchmarks/engine_vs_hf.py            # the issue's workload (several minutes on 2 cores)
    python benchmarks/engine_vs_hf.py --quick    # a small smoke run
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trtkit.refengine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from trtkit.sources.resolve import resolve_model_dir  # noqa: E402

OUTPUT_LENGTHS = (16, 32, 64, 128, 256)
TARGETS = {"vs_static_batch": 2.0, "vs_continuous_batching": 4.0, "kv_waste_max": 0.04, "prefix_ttft_ratio": 3.0}


@dataclass(slots=True)
class Request:
    prompt: list[int]
    max_tokens: int


@dataclass(slots=True)
class RunResult:
    name: str
    seconds: float
    useful_tokens: int
    computed_tokens: int
    num_requests: int
    note: str = ""
    ttfts: list[float] = field(default_factory=list)

    @property
    def useful_per_s(self) -> float:
        return self.useful_tokens / self.seconds


def make_workload(count: int, prompt_range: tuple[int, int], seed: int) -> list[Request]:
    rng = random.Random(seed)
    return [Request([rng.randrange(3, 49152) for _ in range(rng.randint(*prompt_range))], rng.choice(OUTPUT_LENGTHS))
            for _ in range(count)]


def engine_config(concurrency: int, max_input: int, *, reuse: bool = True, block: int = 16) -> EngineConfig:
    max_seq = max_input + max(OUTPUT_LENGTHS)
    kv_bytes = concurrency * max_seq * 30 * 2 * 3 * 64 * 4 + (64 << 20)  # worst case of every slot, plus slack
    return EngineConfig(max_batch_size=concurrency, max_num_tokens=max(2048, max_input), max_input_len=max_input,
                        max_seq_len=max_seq, tokens_per_block=block, kv_cache_bytes=kv_bytes,
                        enable_kv_cache_reuse=reuse, scheduler_policy="guaranteed_no_evict")


@dataclass(slots=True)
class WasteTrace:
    max_seq_len: int
    paged: list[float] = field(default_factory=list)
    paged_block32: list[float] = field(default_factory=list)
    reserve_max: list[float] = field(default_factory=list)

    def record(self, engine: LLMEngine) -> None:
        lengths = [s.num_computed_tokens for s in engine.scheduler.running]
        if not lengths:
            return
        allocated, filled = engine.kv_slot_usage()
        self.paged.append(1 - filled / allocated)
        slots32 = sum(-(-n // 32) * 32 for n in lengths)
        self.paged_block32.append(1 - sum(lengths) / slots32)
        self.reserve_max.append(1 - sum(lengths) / (len(lengths) * self.max_seq_len))


def run_engine(model_dir: Path, workload: list[Request], concurrency: int, max_input: int,
               ) -> tuple[RunResult, WasteTrace]:
    engine = LLMEngine.from_pretrained(model_dir, engine_config(concurrency, max_input))
    engine.generate([[5] * 64] * 2, SamplingParams(max_tokens=4, end_id=-1))  # warm-up
    trace = WasteTrace(engine.config.max_seq_len)
    pending = deque(workload)
    in_flight: set[str] = set()
    ttfts: list[float] = []
    start = time.perf_counter()
    while pending or in_flight:
        while pending and len(in_flight) < concurrency:  # the client keeps `concurrency` requests in flight
            request = pending.popleft()
            in_flight.add(engine.add_request(request.prompt, SamplingParams(max_tokens=request.max_tokens, end_id=-1)))
        for output in engine.step():
            if output.finished:
                in_flight.discard(output.request_id)
                assert output.first_token_time is not None
                ttfts.append(output.first_token_time - output.arrival_time)
        trace.record(engine)
    seconds = time.perf_counter() - start
    useful = sum(r.max_tokens for r in workload)
    computed = engine.stats().scheduled_tokens
    return RunResult("trtkit CPU engine", seconds, useful, computed, len(workload), ttfts=ttfts), trace


def load_hf(model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def run_hf_one_at_a_time(model, workload: list[Request], note: str) -> RunResult:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    with torch.inference_mode():
        for r in workload:
            model.generate(torch.tensor([r.prompt]), max_new_tokens=r.max_tokens, min_new_tokens=r.max_tokens,
                           do_sample=False, pad_token_id=0)
    seconds = time.perf_counter() - start
    useful = sum(r.max_tokens for r in workload)
    return RunResult("HF generate, one at a time", seconds, useful, useful, len(workload), note)


def run_hf_static(model, workload: list[Request], batch: int, note: str = "") -> RunResult:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    computed = 0
    with torch.inference_mode():
        for first in range(0, len(workload), batch):
            group = workload[first:first + batch]
            width, steps = max(len(r.prompt) for r in group), max(r.max_tokens for r in group)
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros(len(group), width, dtype=torch.long)
            for row, r in enumerate(group):  # left padding
                ids[row, width - len(r.prompt):] = torch.tensor(r.prompt)
                mask[row, width - len(r.prompt):] = 1
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps,
                           do_sample=False, pad_token_id=0)
            computed += len(group) * steps
    seconds = time.perf_counter() - start
    return RunResult("HF generate, static left-padded batch", seconds, sum(r.max_tokens for r in workload), computed,
                     len(workload), note)


def run_hf_continuous(model, workload: list[Request], concurrency: int, note: str = "") -> RunResult:  # type: ignore[no-untyped-def]
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=max(OUTPUT_LENGTHS), eos_token_id=None, pad_token_id=0)
    cb = ContinuousBatchingConfig(max_requests_per_batch=concurrency)
    model.set_attn_implementation("paged|sdpa")
    generated = 0
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb, block=True,
                                                   timeout=5) as manager:
        start = time.perf_counter()
        ids = [manager.add_request(r.prompt, max_new_tokens=r.max_tokens) for r in workload]
        done = 0
        while done < len(ids):
            result = manager.get_result(timeout=1)
            if result is not None and result.is_finished():
                done += 1
                generated += len(result.generated_tokens)
        seconds = time.perf_counter() - start
    model.set_attn_implementation("sdpa")
    useful = min(generated, sum(r.max_tokens for r in workload))
    return RunResult("HF continuous batching (generate_batch manager)", seconds, useful, generated, len(workload), note)


def prefix_ttft(model_dir: Path, *, reuse: bool, num_requests: int, system_len: int = 512) -> float:
    """Mean time to first token of requests sharing a system prompt, sent one after another (first excluded)."""
    rng = random.Random(7)
    system = [rng.randrange(3, 49152) for _ in range(system_len)]
    engine = LLMEngine.from_pretrained(model_dir, engine_config(4, system_len + 32, reuse=reuse))
    ttfts = []
    for i in range(num_requests):
        prompt = system + [rng.randrange(3, 49152) for _ in range(16)]
        output = engine.generate([prompt], SamplingParams(max_tokens=2, end_id=-1))[0]
        assert output.first_token_time is not None
        if i:
            ttfts.append(output.first_token_time - output.arrival_time)
            assert (output.num_reused_tokens > 0) == reuse
    return statistics.mean(ttfts)


def progress(result: RunResult) -> RunResult:
    print(f"[{result.name}] {result.num_requests} requests in {result.seconds:.1f}s: "
          f"{result.useful_per_s:.1f} useful tok/s", file=sys.stderr, flush=True)
    return result


def stratified(workload: list[Request], count: int) -> list[Request]:
    """A subset with every output length represented, for the slow one-at-a-time baseline."""
    by_length = sorted(workload, key=lambda r: (r.max_tokens, len(r.prompt)))
    step = max(len(by_length) // count, 1)
    return by_length[step // 2::step][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="16 requests, concurrency 8, prompts 16-128")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads for every mode; 0: all cores, or 1 when the machine is already busy "
                             "(two threads fighting other processes for two cores run several times slower)")
    parser.add_argument("--hf-requests", type=int, default=0,
                        help="run the static and continuous HF baselines on the first N requests only (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one-at-a-time", type=int, default=5, help="requests in the one-at-a-time subset")
    parser.add_argument("--skip-hf", action="store_true", help="engine figures only")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    if args.threads == 0:
        args.threads = 1 if os.getloadavg()[0] > cores else cores
    args.load_average = round(os.getloadavg()[0], 2)
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    count, concurrency, prompt_range = (16, 8, (16, 128)) if args.quick else (64, 16, (16, 512))
    model_dir = resolve_model_dir("bundled:smollm2-135m")
    workload = make_workload(count, prompt_range, args.seed)

    engine_result, waste = run_engine(model_dir, workload, concurrency, prompt_range[1])
    progress(engine_result)
    results = [engine_result]
    ttft_on = prefix_ttft(model_dir, reuse=True, num_requests=4 if args.quick else 6)
    ttft_off = prefix_ttft(model_dir, reuse=False, num_requests=4 if args.quick else 6)
    print(f"[prefix TTFT] reuse on {ttft_on:.3f}s, off {ttft_off:.3f}s", file=sys.stderr, flush=True)
    if not args.skip_hf:
        model = load_hf(model_dir)
        subset = stratified(workload, min(args.one_at_a_time, count))
        results.append(progress(run_hf_one_at_a_time(model, subset, f"subset of {len(subset)} (stratified by length)")))
        hf_workload = workload[:args.hf_requests] if args.hf_requests else workload
        note = f"first {len(hf_workload)} requests" if len(hf_workload) < count else ""
        results.append(progress(run_hf_static(model, hf_workload, concurrency, note)))
        results.append(progress(run_hf_continuous(model, hf_workload, concurrency, note)))
    report(results, waste, ttft_on, ttft_off, args, count, concurrency, prompt_range)


def report(results: list[RunResult], waste: WasteTrace, ttft_on: float, ttft_off: float, args: argparse.Namespace,
           count: int, concurrency: int, prompt_range: tuple[int, int]) -> None:
    ours = results[0]
    print(f"\nWorkload: {count} requests, prompts {prompt_range[0]}-{prompt_range[1]} tokens, outputs from "
          f"{OUTPUT_LENGTHS}, greedy, concurrency {concurrency}, {args.threads} torch threads, fp32, "
          f"load average at start {args.load_average} on {os.cpu_count()} cores\n")
    print(f"{'mode':50} {'requests':>8} {'seconds':>8} {'useful tok':>10} {'useful tok/s':>12} {'ours is':>8}  note")
    for r in results:
        ratio = ours.useful_per_s / r.useful_per_s
        print(f"{r.name:50} {r.num_requests:8d} {r.seconds:8.1f} {r.useful_tokens:10d} {r.useful_per_s:12.1f} "
              f"{ratio:7.2f}x  {r.note}")
    paged, paged32, reserve = (statistics.mean(x) for x in (waste.paged, waste.paged_block32, waste.reserve_max))
    print(f"\nKV waste (allocated but unfilled slots / allocated, mean over {len(waste.paged)} steps): paged with "
          f"tokens_per_block=16 {paged:.1%}; same trace at 32 {paged32:.1%}; reserving max_seq_len={waste.max_seq_len} "
          f"per sequence {reserve:.1%}")
    print(f"Shared 512-token system prompt, TTFT: reuse on {ttft_on * 1e3:.0f} ms, off {ttft_off * 1e3:.0f} ms "
          f"({ttft_off / ttft_on:.1f}x lower with reuse)")
    figures: dict[str, object] = {
        "workload": {"requests": count, "concurrency": concurrency, "prompt_range": list(prompt_range),
                     "quick": args.quick, "threads": args.threads,
                     "load_average_at_start": args.load_average, "hf_requests": args.hf_requests or count},
        "engine_useful_tok_s": round(ours.useful_per_s, 2),
        "kv_waste": round(paged, 4), "kv_waste_block32": round(paged32, 4), "kv_waste_reserve_max": round(reserve, 4),
        "prefix_ttft_ms": {"reuse_on": round(ttft_on * 1e3, 1), "reuse_off": round(ttft_off * 1e3, 1)},
        "prefix_ttft_ratio": round(ttft_off / ttft_on, 2), "targets": TARGETS,
    }
    met = {"kv_waste": paged <= TARGETS["kv_waste_max"], "prefix_ttft": ttft_off / ttft_on >= TARGETS["prefix_ttft_ratio"]}
    by_name = {r.name: r for r in results[1:]}
    for key, name, target in (("vs_static_batch", "HF generate, static left-padded batch", "vs_static_batch"),
                              ("vs_continuous_batching", "HF continuous batching (generate_batch manager)",
                               "vs_continuous_batching"),
                              ("vs_one_at_a_time", "HF generate, one at a time", None)):
        if name in by_name:
            ratio = ours.useful_per_s / by_name[name].useful_per_s
            figures[f"{key}_ratio"] = round(ratio, 2)
            figures[f"hf_{key[3:]}_useful_tok_s"] = round(by_name[name].useful_per_s, 2)
            if target:
                met[key] = ratio >= TARGETS[target]
    figures["met"] = met
    print("BENCH " + json.dumps(figures))


if __name__ == "__main__":
    main()
