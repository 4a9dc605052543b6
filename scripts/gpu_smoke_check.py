"""The checks of scripts/gpu_smoke.sh against a running server: exact usage, no U+FFFD, KV blocks freed.

    python scripts/gpu_smoke_check.py --grpc HOST:PORT --metrics URL --config CONFIG --label fp16 --out R.json \
        [--server-pid PID]                                     # fails at once when that server process is gone

For each of ``ensemble`` and ``tensorrt_llm_bls``, and a CJK and an English prompt, greedy, streamed and
not: the engine's counts (per-response counts added up, as the C++ backend sends them) equal the trtkit
client's usage, the prompt count equals the client's own tokenizer count, streamed equals non-streamed,
and no text holds U+FFFD. Guided decoding (the repository's xgrammar file): a JSON-schema enum and a regex hold
each model's answer, streamed and not. A long stream is ended with the engine's ``stop`` request (trtkit's own
way: wire/stop_request.py says why a cancelled gRPC stream can deadlock tritonserver), after the KV-block gauge has
shown its blocks in use (a gauge that never moves proves nothing), and must then give every block back. Then TTFT
(median of 5 streamed BLS requests) and tokens/s (16 concurrent requests). Exits 1 with every failed check listed.
Works against the CPU reference engine too, behind both engine models: its own loop and the LLM-API adapter
(tests/test_gpu_smoke.py runs it there).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

PROMPTS = {"cjk": "请用一句话介绍一下北京。", "english": "Write one sentence about graphics cards."}
MODELS = ("ensemble", "tensorrt_llm_bls")
MAX_TOKENS = 32
USED_BLOCKS = re.compile(r'^nv_trt_llm_kv_cache_block_metrics\{[^}]*kv_cache_block_type="used"[^}]*\} ([0-9.e+-]+)$',
                         re.M)


def tensor(name: str, value: object, dtype: type) -> grpcclient.InferInput:
    array = np.array([[value]], dtype=dtype)
    item = grpcclient.InferInput(name, list(array.shape), {np.object_: "BYTES", np.int32: "INT32",
                                                           np.bool_: "BOOL"}[dtype])
    item.set_data_from_numpy(array)
    return item


def request(prompt: str, max_tokens: int, stream: bool, min_tokens: int = 0) -> list[grpcclient.InferInput]:
    items = [tensor("text_input", prompt.encode(), np.object_), tensor("max_tokens", max_tokens, np.int32),
             tensor("stream", stream, np.bool_), tensor("top_k", 1, np.int32),
             tensor("return_num_input_tokens", True, np.bool_), tensor("return_num_output_tokens", True, np.bool_)]
    if min_tokens:
        items.append(tensor("min_tokens", min_tokens, np.int32))
    return items


def raw_generate(url: str, model: str, items: list) -> dict:
    """One request over a gRPC stream: text, the engine's counts (added up when sent per response), TTFT."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    started, first, pieces = time.perf_counter(), None, []
    num_input, num_output, per_response = None, 0, True
    try:
        client.async_stream_infer(model, items, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=300)
            if error is not None:
                raise RuntimeError(f"{model}: {error}")
            text = result.as_numpy("text_output")
            if text is not None and text.size:
                first = first or time.perf_counter()
                pieces.append(text.reshape(-1)[0].decode("utf-8", errors="strict"))
            per_response = per_response and result.as_numpy("finish_reason") is None
            for name, value in (("num_input_tokens", result.as_numpy("num_input_tokens")),
                                ("num_output_tokens", result.as_numpy("num_output_tokens"))):
                if value is not None and value.size:
                    if name == "num_input_tokens":
                        num_input = int(value.reshape(-1)[0])
                    else:  # the C++ backend counts each response's own tokens; trtkit's models send totals
                        num_output = num_output + int(value.reshape(-1)[0]) if per_response else int(value.reshape(-1)[0])
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                break
    finally:
        client.stop_stream(cancel_requests=False)
        client.close()
    return {"text": "".join(pieces), "num_input_tokens": num_input, "num_output_tokens": num_output,
            "ttft_s": None if first is None else first - started}


def usage_checks(url: str, config, failures: list[str]) -> None:  # type: ignore[no-untyped-def]
    from trtkit.governance import Caller, SamplingParams
    from trtkit.upstreams import connect

    for model in MODELS:
        with connect(url, config=config, caller=Caller(user="smoke"), ledger=False, model_name=model) as client:
            counter = client.governor.counter  # the client's own count, chat template included
            for label, prompt in PROMPTS.items():
                runs = {s: raw_generate(url, model, request(prompt, MAX_TOKENS, s)) for s in (True, False)}
                usage = client.generate(prompt, SamplingParams(max_tokens=MAX_TOKENS, top_k=1)).usage
                where = f"{model}/{label}"
                if runs[True]["text"] != runs[False]["text"]:
                    failures.append(f"{where}: streamed text differs from non-streamed")
                for stream, run in runs.items():
                    if "\ufffd" in run["text"]:
                        failures.append(f"{where} stream={stream}: U+FFFD in {run['text']!r}")
                    if run["num_output_tokens"] != runs[False]["num_output_tokens"]:
                        failures.append(f"{where}: streamed count {run['num_output_tokens']} != non-streamed "
                                        f"{runs[False]['num_output_tokens']}")
                if usage.completion_tokens != runs[False]["num_output_tokens"]:
                    failures.append(f"{where}: client billed {usage.completion_tokens} completion tokens, the engine "
                                    f"counted {runs[False]['num_output_tokens']}")
                local = counter.count_prompt(prompt)
                if runs[False]["num_input_tokens"] != local or usage.prompt_tokens != local:
                    failures.append(f"{where}: prompt tokens engine {runs[False]['num_input_tokens']}, client "
                                    f"{usage.prompt_tokens}, tokenizer {local}")


GUIDES = {"json_schema": json.dumps({"type": "string", "enum": ["red", "green", "blue"]}), "regex": "[0-9]{4}-[0-9]{2}"}


def guided_checks(url: str, failures: list[str]) -> None:
    """Each model's answer held to a JSON-schema enum and to a regex (the C++ backend's xgrammar on GPU)."""
    for model in MODELS:
        for guide_type, guide in GUIDES.items():
            for stream in (True, False):
                items = request(PROMPTS["english"], MAX_TOKENS, stream)
                items += [tensor("guided_decoding_guide_type", guide_type.encode(), np.object_),
                          tensor("guided_decoding_guide", guide.encode(), np.object_)]
                text = raw_generate(url, model, items)["text"]
                if not _holds(guide_type, guide, text):
                    failures.append(f"{model} {guide_type} stream={stream}: {text!r} does not match {guide!r}")


def _holds(guide_type: str, guide: str, text: str) -> bool:
    if guide_type == "regex":
        return re.fullmatch(guide, text) is not None
    try:
        return json.loads(text) in json.loads(guide)["enum"]
    except ValueError:
        return False


def used_blocks(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        found = USED_BLOCKS.findall(response.read().decode())
    if not found:
        raise RuntimeError(f"no nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type=\"used\"}} at {metrics_url}")
    return sum(float(v) for v in found)


def gauge_reaches(metrics_url: str, wanted, timeout_s: float, running=lambda: True) -> float:  # type: ignore[no-untyped-def]
    """Poll the used-blocks gauge until ``wanted(value)`` or the deadline (or until ``running()`` turns false);
    the last value read."""
    deadline, used = time.monotonic() + timeout_s, used_blocks(metrics_url)
    while not wanted(used) and running() and time.monotonic() < deadline:
        time.sleep(0.1)
        used = used_blocks(metrics_url)
    return used


def stop_checks(url: str, metrics_url: str, long_tokens: int, failures: list[str]) -> None:
    """A stream that cannot end early (min_tokens), stopped with the stop request once the gauge shows it."""
    for model in MODELS:
        failure = _stop_one(url, metrics_url, model, long_tokens)
        if failure is None and (used := gauge_reaches(metrics_url, lambda v: v == 0, 60)) != 0:
            failure = f"{model}: {used} KV blocks still used 60 s after a stopped stream"
        if failure is not None:
            failures.append(failure)


def _stop_one(url: str, metrics_url: str, model: str, long_tokens: int) -> str | None:
    request_id, results, ended = f"smoke-stop-{uuid.uuid4().hex}", queue.Queue(), threading.Event()

    def on_response(result, error) -> None:  # type: ignore[no-untyped-def]
        results.put((result, error))
        final = None if result is None else result.get_response().parameters.get("triton_final_response")
        if error is not None or (final is not None and final.bool_param):
            ended.set()

    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=on_response)
    try:
        client.async_stream_infer(model, request(PROMPTS["english"], long_tokens, True, min_tokens=long_tokens),
                                  request_id=request_id, enable_empty_final_response=True)
        results.get(timeout=300)  # the first response: the request is running
        used = gauge_reaches(metrics_url, lambda v: v > 0, 60, running=lambda: not ended.is_set())
        if used <= 0:
            return (f"{model}: the KV-block gauge read {used} all through a {long_tokens}-token request: it does not "
                    "show the engine's blocks, so it cannot show them freed")
        if (error := _send_stop(url, request_id)) is not None:
            return f"{model}: the stop request failed: {error}"
        if not ended.wait(300):
            return f"{model}: the stopped stream did not end within 300 s"
    finally:
        client.stop_stream(cancel_requests=False)
        client.close()
    return None


def _send_stop(url: str, request_id: str) -> object:
    """The engine's stop request for ``request_id`` (over a stream: the engine model is decoupled); its error."""
    from trtkit.transport.triton.protocol import stop_inputs
    from trtkit.wire.stop_request import ENGINE_MODEL

    answers: queue.Queue = queue.Queue()
    stopper = grpcclient.InferenceServerClient(url)
    stopper.start_stream(callback=lambda result, error: answers.put(error))
    try:
        stopper.async_stream_infer(ENGINE_MODEL, stop_inputs(), request_id=request_id, enable_empty_final_response=True)
        return answers.get(timeout=60)
    finally:
        stopper.stop_stream(cancel_requests=False)
        stopper.close()


def bench(url: str, config) -> dict:  # type: ignore[no-untyped-def]
    from trtkit.governance import Caller, SamplingParams
    from trtkit.upstreams import connect

    ttfts = [raw_generate(url, "tensorrt_llm_bls", request(PROMPTS["english"], 16, True))["ttft_s"] for _ in range(5)]
    prompts = [f"{PROMPTS['english']} Number {i}." for i in range(16)]
    with connect(url, config=config, caller=Caller(user="smoke"), ledger=False,
                         model_name="tensorrt_llm_bls") as client:
        started = time.perf_counter()
        results = client.generate_batch(prompts, SamplingParams(max_tokens=64, min_tokens=64), max_concurrency=16)
        wall = time.perf_counter() - started
    tokens = sum(r.usage.completion_tokens for r in results)
    return {"ttft_ms_median": round(statistics.median(t for t in ttfts if t is not None) * 1e3, 2),
            "tokens_per_s_16_concurrent": round(tokens / wall, 1)}


def wait_ready(url: str, timeout_s: float, server_pid: int | None) -> float:
    """Seconds until the server is ready; fails at once when its process is gone (``trtkit serve`` exits when
    serve.server_start_timeout_s runs out or tritonserver dies), and after ``timeout_s`` at the latest."""
    started = time.monotonic()
    while time.monotonic() < started + timeout_s:
        if server_pid is not None and not _alive(server_pid):
            raise SystemExit(f"the server process {server_pid} exited before {url} was ready; see its log")
        try:
            with grpcclient.InferenceServerClient(url) as client:
                if client.is_server_ready():
                    return time.monotonic() - started
        except Exception:  # not listening yet
            pass
        time.sleep(1)
    raise SystemExit(f"server at {url} not ready after {timeout_s:.0f} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def check(args: argparse.Namespace) -> int:
    from trtkit.config import load_config

    config = load_config(args.config)
    ready_s = wait_ready(args.grpc, config.serve.server_start_timeout_s + 60, args.server_pid)
    failures: list[str] = []
    usage_checks(args.grpc, config, failures)
    if config.serve.guided_decoding == "xgrammar":
        guided_checks(args.grpc, failures)
    long_tokens = min(1024, config.build.max_seq_len - config.build.max_input_len)
    stop_checks(args.grpc, args.metrics, long_tokens, failures)
    result = {"label": args.label, "failures": failures, "ready_s": round(ready_s, 1), **bench(args.grpc, config)}
    Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")
    for failure in failures:
        print(f"FAIL {args.label}: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grpc")
    parser.add_argument("--metrics")
    parser.add_argument("--config")
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", default="result-run.json")
    parser.add_argument("--server-pid", type=int, help="the server's process: gone means fail at once")
    args = parser.parse_args()
    if not (args.grpc and args.metrics and args.config):
        parser.error("--grpc, --metrics and --config are needed")
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
