"""Triton overhead: streaming through the real tritonserver vs the same engine in-process, like with like,
and the cost per token of streaming detokenization at 100 vs 8,000 output tokens.

    python benchmarks/triton_overhead.py [--requests 16] [--threads N] [--model ensemble|tensorrt_llm_bls] [--quick]

Part 1 deploys SmolLM2-135M (bundled) to a CPU repository, then runs one workload in alternating rounds:
in-process on ``trtkit.refengine.LLMEngine`` built from the repository's own engine parameters (same
precision, same KV cache, same scheduler), and through tritonserver (one gRPC stream per request, all
concurrent). Like with like: the engine gets the same torch threads on both sides (``--threads``, default
every core: the server's stubs get OMP_NUM_THREADS), the same requests, and the same detokenization work
(in-process, every request's tokens go through the repository's IncrementalDetokenizer as they arrive and
are flushed at the end, as a streaming caller must). Every request generates exactly its max_tokens
(min_tokens = max_tokens), so both sides produce the same useful tokens. Target: Triton >= 90% of the
in-process tokens/s (best round of each), judged on a quiet host: on a loaded one Linux autogroup gives
tritonserver (its own session) a larger CPU share than this process, and the script says so. Where the time
goes: the CPU seconds each side burns per round, split by process (engine stub, pre/postprocessing stubs,
tritonserver, the benchmark's own gRPC client); CPU per token is judged beside it, as it depends less on load:
target Triton's CPU per token <= 1.2x the in-process side's.
Part 2 feeds the IncrementalDetokenizer one token at a time. Target: cost per token at 8,000 tokens
<= 1.2x the cost at 100. Ends with one ``BENCH {json}`` line.

Run time: 1.75 minutes with the defaults (2 rounds of each side of 960 tokens, model load, server start,
the detokenizer part) on the shared 2-core host at load average 2.3-2.6, 7 minutes at load 11-13 (1.8
CPU-minutes either way); ``--quick --requests 8`` 3.3 minutes at load 11.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from figures import print_bench, process_tree_cpu_s
from serving import deploy_cpu, infer_inputs, stream_once

PROMPTS = [
    "Explain why the sky is blue.", "Write a short poem about rivers.", "List three uses of copper.",
    "What is a binary search tree?", "Describe the water cycle.", "Give advice for a first job interview.",
    "Why do cats purr?", "Summarise the plot of a heist film.", "How does a bicycle stay upright?",
    "Name some famous bridges.", "What makes bread rise?", "Explain compound interest simply.",
    "Describe a busy market at dawn.", "How do vaccines work?", "What is the tallest mountain?",
    "Tell me about the history of tea.",
]
LENGTHS = (16, 32, 64, 128)
CPU_RATIO_TARGET = 1.2  # Triton's CPU per token over the in-process engine's
DETOK_TEXT = ("The quick brown fox jumps over the lazy dog, 1234567890. 敏捷的棕色狐狸跳过了懒狗。"
              "素早い茶色の狐がのろまな犬を飛び越える。🦊🐶✨ def f(x):\n    return x ** 2\n")


@dataclass(slots=True)
class Round:
    tokens: int
    seconds: float
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds burnt during the round, by process

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def cpu_ms_per_token(self) -> float:
        return sum(self.cpu_s.values()) / self.tokens * 1e3


def workload(num_requests: int, quick: bool) -> list[tuple[str, int]]:
    lengths = (8, 16) if quick else LENGTHS
    return [(PROMPTS[i % len(PROMPTS)], lengths[i % len(lengths)]) for i in range(num_requests)]


def engine_parameters(repo: Path) -> dict[str, str]:
    from trtkit.consistency.repository import load_models

    model = load_models(repo)["tensorrt_llm"]
    return {key: value.string_value for key, value in model.config.parameters.items()}


def load_in_process(repo: Path):  # type: ignore[no-untyped-def]
    """The engine configured exactly like the server's (its own tensorrt_llm parameters) and driven the same
    way: an EngineLoop steps it on its own thread (running it on the main thread instead measured 8-15x
    slower with 2 OpenMP threads on a loaded host), and the tokenizer."""
    from transformers import AutoTokenizer

    from trtkit.refengine import EngineLoop, LLMEngine, SamplingParams
    from trtkit.triton_models.engine_host import engine_config

    params = engine_parameters(repo)
    engine = LLMEngine.from_pretrained(params["gpt_model_path"], engine_config(params))
    tokenizer = AutoTokenizer.from_pretrained(params["tokenizer_dir"])
    engine.generate([tokenizer.encode("warm up")], SamplingParams(max_tokens=4))
    return EngineLoop(engine), tokenizer


def run_in_process(loop, tokenizer, jobs: list[tuple[str, int]]) -> Round:  # type: ignore[no-untyped-def]
    """All requests submitted at once; every new token is detokenized incrementally on the loop thread, as
    the server's engine model does (its token gate) and as a streaming caller must."""
    from trtkit.refengine import SamplingParams
    from trtkit.tokenizer.detokenizer import IncrementalDetokenizer, find_anchor

    anchor = find_anchor(tokenizer)
    tokens, remaining, done = [0], [len(jobs)], threading.Event()

    def on_output_for(detok: IncrementalDetokenizer):  # type: ignore[no-untyped-def]
        def on_output(out) -> None:  # type: ignore[no-untyped-def]
            tokens[0] += len(out.new_token_ids)
            detok.push(out.new_token_ids)
            if out.finished:
                detok.flush()
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()
        return on_output

    cpu, started = time.process_time(), time.perf_counter()
    for prompt, length in jobs:
        loop.submit(tokenizer.encode(prompt), SamplingParams(max_tokens=length, min_tokens=length),
                    on_output_for(IncrementalDetokenizer(tokenizer, anchor)))
    if not done.wait(timeout=3600):
        raise RuntimeError("the in-process round did not finish within an hour")
    seconds = time.perf_counter() - started
    return Round(tokens[0], seconds, {"in-process (engine + detokenizer)": time.process_time() - cpu})


def stream_one(url: str, model: str, prompt: str, length: int, start: threading.Event) -> int:
    """One streaming request; returns the tokens it produced (num_output_tokens of the last response)."""
    import tritonclient.grpc as grpcclient

    counted, deltas = [0], [0]

    def count(result) -> None:  # type: ignore[no-untyped-def]
        tokens = result.as_numpy("num_output_tokens")
        if tokens is not None:
            counted[0] = max(counted[0], int(tokens.reshape(-1)[0]))
        deltas[0] += result.as_numpy("text_output") is not None

    client = grpcclient.InferenceServerClient(url)
    inputs = infer_inputs({"text_input": (prompt.encode(), "BYTES"), "max_tokens": (length, "INT32"),
                           "min_tokens": (length, "INT32"), "stream": (True, "BOOL")})
    try:
        stream_once(client, model, inputs, before_send=start.wait, on_response=count)
    finally:
        client.close()
    return counted[0] or deltas[0]


def run_triton(server, model: str, jobs: list[tuple[str, int]]) -> Round:  # type: ignore[no-untyped-def]
    start = threading.Event()
    counts = [0] * len(jobs)

    def work(index: int) -> None:
        counts[index] = stream_one(server.grpc_url, model, jobs[index][0], jobs[index][1], start)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # every stream is open before the clock starts
    before, client_cpu, started = process_tree_cpu_s(server.pid), time.process_time(), time.perf_counter()
    start.set()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    cpu = cpu_by_process(before, process_tree_cpu_s(server.pid), server.repo_dir)
    cpu["benchmark gRPC client"] = time.process_time() - client_cpu
    return Round(sum(counts), seconds, cpu)


def cpu_by_process(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                   repo: Path) -> dict[str, float]:
    """CPU seconds between two snapshots of the server's process tree, named by the model a stub serves."""
    models = sorted((p.name for p in repo.iterdir() if p.is_dir()), key=len, reverse=True)
    spent: dict[str, float] = {}
    for pid, (cmdline, seconds) in after.items():
        name = next((f"stub {m}" for m in models if f"/{m}/" in cmdline or f"{m}_" in cmdline), "tritonserver")
        spent[name] = spent.get(name, 0.0) + seconds - before.get(pid, (cmdline, 0.0))[1]
    return spent


def detok_cost(tokenizer_dir: str, num_tokens: int, total_tokens: int = 8000, repeats: int = 3) -> float:
    """Microseconds per token when streaming num_tokens-long outputs through the incremental detokenizer.

    Both lengths do the same total work (total_tokens // num_tokens outputs), best of ``repeats``,
    so the comparison is of cost per token, not of timer noise."""
    from transformers import AutoTokenizer

    from trtkit.tokenizer.detokenizer import IncrementalDetokenizer, find_anchor

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = tokenizer.encode(DETOK_TEXT, add_special_tokens=False)
    ids = (ids * (num_tokens // len(ids) + 1))[:num_tokens]
    anchor = find_anchor(tokenizer)
    outputs = max(1, total_tokens // num_tokens)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(outputs):
            detok = IncrementalDetokenizer(tokenizer, anchor)
            for token in ids:
                detok.push([token])
            detok.flush()
        best = min(best, (time.perf_counter() - started) / (num_tokens * outputs) * 1e6)
    return best


def _best(runs: list[Round]) -> Round:
    """The fastest round: best-of estimates capability on a noisy host."""
    return max(runs, key=lambda run: run.tokens_per_s)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--model", default="ensemble", choices=["ensemble", "tensorrt_llm_bls"])
    parser.add_argument("--quick", action="store_true", help="short outputs: a smoke run, not a measurement")
    parser.add_argument("--rounds", type=int, default=2, help="alternating in-process / Triton rounds; best of each")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads of the engine on both sides (default: every core)")
    return parser.parse_args()


def measure(args: argparse.Namespace, jobs: list[tuple[str, int]]) -> tuple[list[Round], list[Round], str, str]:
    """(in-process rounds, Triton rounds, tokenizer folder, engine dtype), rounds alternating so a busy spell
    on a shared host hits both sides; the idle server waits on an event (no polling) during in-process rounds."""
    import tritonclient.grpc as grpcclient

    from trtkit.serve import TritonServer

    local, remote = [], []
    with tempfile.TemporaryDirectory(prefix="triton-overhead-") as tmp:
        _config, repo = deploy_cpu("smollm2-135m", Path(tmp), chat_template=False)
        loop, tokenizer = load_in_process(repo)
        with TritonServer(repo, start_timeout_s=300, log_path=Path(tmp) / "triton.log",
                          env={"OMP_NUM_THREADS": str(args.threads)}) as server:
            warm = grpcclient.InferenceServerClient(server.grpc_url)
            stream_once(warm, args.model, infer_inputs({"text_input": (b"warm up", "BYTES"),
                                                        "max_tokens": (4, "INT32")}))  # loads everything, off the clock
            warm.close()
            for _ in range(args.rounds):
                local.append(run_in_process(loop, tokenizer, jobs))
                remote.append(run_triton(server, args.model, jobs))
        loop.shutdown()
        return local, remote, engine_parameters(repo)["tokenizer_dir"], loop.engine.config.dtype


def main() -> int:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)  # the server's engine stub gets the same through OMP_NUM_THREADS
    jobs = workload(args.requests, args.quick)
    print(f"workload: {len(jobs)} requests, {sum(n for _, n in jobs)} output tokens, model {args.model}, "
          f"{args.rounds} round(s), {args.threads} engine thread(s) on both sides", file=sys.stderr)
    local_runs, remote_runs, tokenizer_dir, dtype = measure(args, jobs)
    local, remote = _best(local_runs), _best(remote_runs)
    ratio = remote.tokens_per_s / local.tokens_per_s
    short, long = detok_cost(tokenizer_dir, 100), detok_cost(tokenizer_dir, 8000)
    detok_ratio = long / short
    print(f"{'path':<44} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'CPU s':>7}")
    for name, run in (("in-process engine + incremental detokenizer", local),
                      (f"tritonserver ({args.model}, streaming)", remote)):
        print(f"{name:<44} {run.tokens:>7} {run.seconds:>8.2f} {run.tokens_per_s:>9.1f} {sum(run.cpu_s.values()):>7.2f}")
    cpu_ratio = remote.cpu_ms_per_token / local.cpu_ms_per_token
    print(f"Triton / in-process: {ratio:.1%} (target >= 90%: {'met' if ratio >= 0.9 else 'MISSED'})")
    print(f"CPU per token (less sensitive to a shared host than wall time): Triton {remote.cpu_ms_per_token:.1f} ms, "
          f"in-process {local.cpu_ms_per_token:.1f} ms ({cpu_ratio:.2f}x, target <= {CPU_RATIO_TARGET}x: "
          f"{'met' if cpu_ratio <= CPU_RATIO_TARGET else 'MISSED'})")
    loaded = os.getloadavg()[0] > (os.cpu_count() or 1)
    if loaded:
        print("caution: the host is loaded. tritonserver runs in its own session, which Linux autogroup schedules "
              "as one group beside this whole process, so on a busy host it gets a larger CPU share than the "
              "in-process side and the wall-time ratio flatters Triton; rerun on a quiet host, or read CPU per token")
    print("where the CPU time goes (best round of each side):")
    for name, seconds in sorted({**local.cpu_s, **remote.cpu_s}.items(), key=lambda item: -item[1]):
        print(f"  {name:<42} {seconds:>7.2f} s")
    print(f"detokenization: {short:.1f} us/token at 100 tokens, {long:.1f} us/token at 8000 "
          f"({detok_ratio:.2f}x, target <= 1.2x)")
    print_bench({
        "benchmark": "triton_overhead", "model": "smollm2-135m", "triton_model": args.model, "engine_dtype": dtype,
        "requests": len(jobs), "quick": args.quick, "engine_threads": args.threads, "rounds": args.rounds,
        "in_process_detokenizes": True,
        "in_process_rounds_tokens_per_s": [round(r.tokens_per_s, 2) for r in local_runs],
        "triton_rounds_tokens_per_s": [round(r.tokens_per_s, 2) for r in remote_runs],
        "in_process_tokens_per_s": round(local.tokens_per_s, 2), "triton_tokens_per_s": round(remote.tokens_per_s, 2),
        "cpu_s_in_process": {k: round(v, 2) for k, v in local.cpu_s.items()},
        "cpu_s_triton": {k: round(v, 2) for k, v in remote.cpu_s.items()},
        "cpu_ms_per_token_in_process": round(local.cpu_ms_per_token, 2),
        "cpu_ms_per_token_triton": round(remote.cpu_ms_per_token, 2), "cpu_ratio": round(cpu_ratio, 3),
        "host_loaded": loaded, "triton_ratio": round(ratio, 3), "triton_ratio_target": 0.9, "triton_ratio_met": ratio >= 0.9,
        "tokens_match": local.tokens == remote.tokens,
        "detok_us_per_token_100": round(short, 2), "detok_us_per_token_8000": round(long, 2),
        "detok_ratio": round(detok_ratio, 3), "detok_ratio_target": 1.2, "detok_ratio_met": detok_ratio <= 1.2,
        "targets": {"triton_ratio_min": 0.9, "cpu_ratio_max": CPU_RATIO_TARGET, "detok_ratio_max": 1.2},
        "met": {"triton_ratio": ratio >= 0.9, "cpu_ratio": cpu_ratio <= CPU_RATIO_TARGET,
                "detok_ratio": detok_ratio <= 1.2}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
