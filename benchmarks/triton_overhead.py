"""Triton overhead: streaming through the real tritonserver vs the same engine in-process, and the cost
per token of streaming detokenization at 100 vs 8,000 output tokens.

    python benchmarks/triton_overhead.py [--requests 16] [--model ensemble|tensorrt_llm_bls] [--quick]

Part 1 deploys SmolLM2-135M (bundled) to a CPU repository, then runs one workload in alternating
rounds: in-process on ``trtkit.refengine.LLMEngine`` built from the repository's own engine parameters,
and through tritonserver (one gRPC stream per request, all concurrent). Every request generates
exactly its max_tokens (min_tokens = max_tokens) so both sides produce the same useful tokens.
Target: Triton >= 90% of the in-process tokens/s (best round of each). Part 2 feeds the repository's
IncrementalDetokenizer one token at a time. Target: cost per token at 8,000 tokens <= 1.2x the cost
at 100. Ends with one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

PROMPTS = [
    "Explain why the sky is blue.", "Write a short poem about rivers.", "List three uses of copper.",
    "What is a binary search tree?", "Describe the water cycle.", "Give advice for a first job interview.",
    "Why do cats purr?", "Summarise the plot of a heist film.", "How does a bicycle stay upright?",
    "Name some famous bridges.", "What makes bread rise?", "Explain compound interest simply.",
    "Describe a busy market at dawn.", "How do vaccines work?", "What is the tallest mountain?",
    "Tell me about the history of tea.",
]
LENGTHS = (16, 32, 64, 128)
DETOK_TEXT = ("The quick brown fox jumps over the lazy dog, 1234567890. 敏捷的棕色狐狸跳过了懒狗。"
              "素早い茶色の狐がのろまな犬を飛び越える。🦊🐶✨ def f(x):\n    return x ** 2\n")


def workload(num_requests: int, quick: bool) -> list[tuple[str, int]]:
    lengths = (8, 16) if quick else LENGTHS
    return [(PROMPTS[i % len(PROMPTS)], lengths[i % len(lengths)]) for i in range(num_requests)]


def deploy(work: Path):  # type: ignore[no-untyped-def]
    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.sources.resolve import resolve_model_dir

    root = Path(__file__).resolve().parent.parent
    config = load_config(root / "model_configs" / "smollm2-135m.yaml")
    config = replace(config, model=replace(config.model, chat_template=False),
                     serve=replace(config.serve, http_port=0, grpc_port=0, metrics_port=0))
    model_dir = resolve_model_dir(config.model.source)
    return config, deploy_repository(config, model_dir, work / "repo", target="cpu").out_dir


def engine_parameters(repo: Path) -> dict[str, str]:
    from trtkit.check.repository import load_models

    model = load_models(repo)["tensorrt_llm"]
    return {key: value.string_value for key, value in model.config.parameters.items()}


def load_in_process(repo: Path):  # type: ignore[no-untyped-def]
    """The engine configured exactly like the server's (its own tensorrt_llm parameters), and the tokenizer."""
    from transformers import AutoTokenizer

    from trtkit.refengine import LLMEngine, SamplingParams
    from trtkit.triton_models.engine_host import engine_config

    params = engine_parameters(repo)
    engine = LLMEngine.from_pretrained(params["gpt_model_path"], engine_config(params))
    tokenizer = AutoTokenizer.from_pretrained(params["tokenizer_dir"])
    engine.generate([tokenizer.encode("warm up")], SamplingParams(max_tokens=4))
    return engine, tokenizer


def run_in_process(engine, tokenizer, jobs: list[tuple[str, int]]) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """Useful tokens and seconds for the workload, all requests submitted at once."""
    from trtkit.refengine import SamplingParams

    started = time.perf_counter()
    for prompt, length in jobs:
        engine.add_request(tokenizer.encode(prompt), SamplingParams(max_tokens=length, min_tokens=length))
    tokens = 0
    while engine.has_unfinished():
        tokens += sum(len(out.new_token_ids) for out in engine.step())
    return tokens, time.perf_counter() - started


def _tensor(name: str, value: object, dtype: str):  # type: ignore[no-untyped-def]
    import tritonclient.grpc as grpcclient

    array = np.array([[value]], dtype=object if dtype == "BYTES" else {"INT32": np.int32, "BOOL": bool}[dtype])
    tensor = grpcclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def stream_one(url: str, model: str, prompt: str, length: int, start: threading.Event) -> int:
    """One streaming request; returns the tokens it produced (num_output_tokens of the last response)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: inbox.put((result, error)))
    inputs = [_tensor("text_input", prompt.encode(), "BYTES"), _tensor("max_tokens", length, "INT32"),
              _tensor("min_tokens", length, "INT32"), _tensor("stream", True, "BOOL")]
    start.wait()
    client.async_stream_infer(model, inputs, enable_empty_final_response=True)
    tokens, deltas = 0, 0
    while True:
        result, error = inbox.get(timeout=600)
        if error is not None:
            raise RuntimeError(f"stream failed: {error}")
        counted = result.as_numpy("num_output_tokens")
        if counted is not None:
            tokens = max(tokens, int(counted.reshape(-1)[0]))
        deltas += result.as_numpy("text_output") is not None
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    return tokens or deltas


def run_triton(url: str, model: str, jobs: list[tuple[str, int]]) -> tuple[int, float]:
    start = threading.Event()
    counts = [0] * len(jobs)

    def work(index: int) -> None:
        counts[index] = stream_one(url, model, jobs[index][0], jobs[index][1], start)

    stream_one(url, model, "warm up", 4, _set_event())  # loads everything once, off the clock
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # every stream is open before the clock starts
    started = time.perf_counter()
    start.set()
    for thread in threads:
        thread.join()
    return sum(counts), time.perf_counter() - started


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


def detok_cost(tokenizer_dir: str, num_tokens: int, total_tokens: int = 8000, repeats: int = 3) -> float:
    """Microseconds per token when streaming num_tokens-long outputs through the incremental detokenizer.

    Both lengths do the same total work (total_tokens // num_tokens outputs), best of ``repeats``,
    so the comparison is of cost per token, not of timer noise."""
    from transformers import AutoTokenizer

    from trtkit.triton_models.detokenizer import IncrementalDetokenizer, find_anchor

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


def _best(runs: list[tuple[int, float]]) -> tuple[int, float]:
    """The fastest round (tokens, seconds): best-of estimates capability on a noisy host."""
    return max(runs, key=lambda run: run[0] / run[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--model", default="ensemble", choices=["ensemble", "tensorrt_llm_bls"])
    parser.add_argument("--quick", action="store_true", help="short outputs: a smoke run, not a measurement")
    parser.add_argument("--rounds", type=int, default=2, help="alternating in-process / Triton rounds; best of each")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads on both sides (1 default: on a shared 2-core host OpenMP spin-waits "
                             "make more threads several times slower and the figures noise)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)  # the server's engine stub gets the same through OMP_NUM_THREADS
    from trtkit.serve import TritonServer

    jobs = workload(args.requests, args.quick)
    local, remote = [], []
    with tempfile.TemporaryDirectory(prefix="triton-overhead-") as tmp:
        _config, repo = deploy(Path(tmp))
        print(f"workload: {len(jobs)} requests, {sum(n for _, n in jobs)} output tokens, model {args.model}, "
              f"{args.rounds} round(s)", file=sys.stderr)
        engine, tokenizer = load_in_process(repo)
        with TritonServer(repo, start_timeout_s=300, log_path=Path(tmp) / "triton.log",
                          env={"OMP_NUM_THREADS": str(args.threads)}) as server:
            # rounds alternate so a busy spell on a shared host hits both sides; the idle server waits on
            # an event (no polling), so it does not slow the in-process rounds
            for _ in range(args.rounds):
                local.append(run_in_process(engine, tokenizer, jobs))
                remote.append(run_triton(server.grpc_url, args.model, jobs))
        tokenizer_dir = engine_parameters(repo)["tokenizer_dir"]
    (local_tokens, local_s), (triton_tokens, triton_s) = _best(local), _best(remote)
    local_tps, triton_tps = local_tokens / local_s, triton_tokens / triton_s
    ratio = triton_tps / local_tps
    short, long = detok_cost(tokenizer_dir, 100), detok_cost(tokenizer_dir, 8000)
    detok_ratio = long / short
    rows = [("in-process engine", f"{local_tokens}", f"{local_s:.2f}", f"{local_tps:.1f}"),
            (f"tritonserver ({args.model}, streaming)", f"{triton_tokens}", f"{triton_s:.2f}", f"{triton_tps:.1f}")]
    print(f"{'path':<40} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
    for row in rows:
        print(f"{row[0]:<40} {row[1]:>7} {row[2]:>8} {row[3]:>9}")
    print(f"Triton / in-process: {ratio:.1%} (target >= 90%)")
    print(f"detokenization: {short:.1f} us/token at 100 tokens, {long:.1f} us/token at 8000 "
          f"({detok_ratio:.2f}x, target <= 1.2x)")
    bench = {"benchmark": "triton_overhead", "model": "smollm2-135m", "triton_model": args.model,
             "requests": len(jobs), "quick": args.quick, "threads": args.threads, "rounds": args.rounds,
             "in_process_rounds_tokens_per_s": [round(t / d, 2) for t, d in local],
             "triton_rounds_tokens_per_s": [round(t / d, 2) for t, d in remote],
             "load_average_1m": round(os.getloadavg()[0], 2), "cpu_count": os.cpu_count(),
             "in_process_tokens_per_s": round(local_tps, 2), "triton_tokens_per_s": round(triton_tps, 2),
             "triton_ratio": round(ratio, 3), "triton_ratio_target": 0.9, "triton_ratio_met": ratio >= 0.9,
             "tokens_match": local_tokens == triton_tokens,
             "detok_us_per_token_100": round(short, 2), "detok_us_per_token_8000": round(long, 2),
             "detok_ratio": round(detok_ratio, 3), "detok_ratio_target": 1.2, "detok_ratio_met": detok_ratio <= 1.2}
    print("BENCH " + json.dumps(bench))
    return 0


if __name__ == "__main__":
    sys.exit(main())
