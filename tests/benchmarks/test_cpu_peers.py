"""benchmarks/cpu_peers.py's parts that run without the three stacks: the load generator against a real streaming
server (benchmarks/null_sse_server.py), its figures, the roofline arithmetic, and the report's BENCH line."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from peer_load import Request, Result, Server, make_workload, run_load, summarize  # noqa: E402
from roofline import Machine, ModelShape, decode_roofline_ms  # noqa: E402


def test_the_workload_is_seeded_and_within_its_ranges() -> None:
    workload = make_workload(64, (16, 512), (16, 256), seed=0)
    assert workload == make_workload(64, (16, 512), (16, 256), seed=0)
    assert all(16 <= len(r.prompt) <= 512 and 16 <= r.max_tokens <= 256 for r in workload)
    assert all(100 <= t < 49152 for r in workload for t in r.prompt)  # no special or byte tokens
    assert workload != make_workload(64, (16, 512), (16, 256), seed=1)


def test_each_server_is_told_to_force_lengths_its_own_way() -> None:
    request = Request(0, [101, 102], 7)
    trtkit = Server("trtkit", "u", "m", min_tokens=True, ignore_eos=False).body(request)
    llama = Server("llama", "u", "m", min_tokens=False, ignore_eos=True).body(request)
    assert trtkit["min_tokens"] == 7 and "ignore_eos" not in trtkit  # the gateway refuses unknown fields
    assert llama["ignore_eos"] is True and "min_tokens" not in llama
    assert trtkit["stream_options"] == {"include_usage": True} and trtkit["prompt"] == [101, 102]


@pytest.fixture
def null_server():  # type: ignore[no-untyped-def]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(BENCHMARKS / "null_sse_server.py"), str(port)])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None, "the null server did not start"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    process.wait(timeout=10)


def test_the_load_counts_what_a_real_stream_sends(null_server: str) -> None:
    workload = make_workload(12, (4, 8), (3, 9), seed=2)
    results, wall = asyncio.run(run_load(Server("null", null_server, "tiny-llama"), workload, concurrency=4))
    assert [r.request.index for r in results] == list(range(12)) and wall > 0
    assert all(r.error is None and r.completion_tokens == r.request.max_tokens for r in results)
    assert all(len(r.chunk_times) == r.request.max_tokens for r in results)  # one text chunk per token there
    figures = summarize(results, wall)
    assert figures["useful_tokens"] == sum(r.max_tokens for r in workload)
    assert figures["failed"] == [] and figures["wrong_counts"] == []
    assert figures["ttft_p50_ms"] is not None and figures["itl_p50_ms"] is not None


def test_a_refused_request_is_a_figure_not_a_crash() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results, wall = asyncio.run(run_load(Server("gone", f"http://127.0.0.1:{port}/v1", "m"),
                                         make_workload(2, (4, 4), (3, 3), seed=0), concurrency=2))
    figures = summarize(results, wall)
    assert len(figures["failed"]) == 2 and figures["useful_tokens"] == 0


def test_tokens_are_counted_only_up_to_what_was_asked() -> None:
    request = Request(0, [101], 4)
    over = Result(request, 0.0, [0.1, 0.2], "ab", completion_tokens=9)
    under = Result(Request(1, [101], 4), 0.0, [0.1], "a", completion_tokens=2)
    figures = summarize([over, under], 1.0)
    assert figures["useful_tokens"] == 4 + 2
    assert figures["wrong_counts"] == ["#0: 9 of 4", "#1: 2 of 4"]


def test_the_roofline_is_the_slower_of_memory_and_compute() -> None:
    from types import SimpleNamespace

    spec = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_heads=9, num_kv_heads=3, head_dim=64,
                           num_layers=30, vocab_size=49152)
    shape = ModelShape.of(spec)
    assert shape.layer_params == 30 * (576 * 960 + 576 * 576 + 3 * 576 * 1536)  # SmolLM2-135M's projections
    machine = Machine(2, bandwidth_gb_s=30.0, fp32_gflop_s=200.0, bf16_gflop_s=400.0, bf16_native=True)
    fp32 = decode_roofline_ms(machine, shape, "fp32", 16, 512)
    weights_mb = (shape.layer_params + shape.vocab_params) * 4 / 1e6
    assert fp32["mbytes"] == pytest.approx(weights_mb + 16 * 512 * 30 * 2 * 3 * 64 * 4 / 1e6, rel=1e-3)
    assert fp32["roofline_ms"] == max(fp32["memory_ms"], fp32["compute_ms"])
    bf16 = decode_roofline_ms(machine, shape, "bf16", 16, 512)
    assert bf16["memory_ms"] == pytest.approx(fp32["memory_ms"] / 2, rel=1e-2)
    assert bf16["compute_ms"] == pytest.approx(fp32["compute_ms"] / 2, rel=1e-2)


def test_the_report_judges_every_target_with_booleans(capsys: pytest.CaptureFixture[str]) -> None:
    from peer_report import report

    def run(tok_s: float, ttft: float, itl: float) -> dict:
        return {"useful_tok_s": tok_s, "ttft_p50_ms": ttft, "itl_p50_ms": itl, "itl_p90_ms": itl * 2,
                "tpot_p50_ms": itl, "cpu_s_per_1k_tokens": 5.0, "failed": [], "wrong_counts": [],
                "load_average": [1.0, 1.0]}

    step = {"batch": 16, "context": 332, "step_ms": 40.0, "memory_ms": 20.0, "compute_ms": 18.0, "roofline_ms": 20.0,
            "mbytes": 600.0, "gflop": 4.4, "step_over_roofline": 2.0}
    results = {"bf16": {"runs": {"trtkit": [run(180.0, 500.0, 60.0)], "vllm": [run(100.0, 600.0, 80.0)],
                                 "llama": [run(80.0, 700.0, 90.0)]},
                        "greedy": {"trtkit": {"compared": 4, "identical": 4, "share_before_divergence": 1.0},
                                   "vllm": {"compared": 4, "identical": 1, "share_before_divergence": 0.5}},
                        "decode_step": step}}
    machine = Machine(2, 30.0, 200.0, 400.0, True)
    args = argparse.Namespace(requests=64, prompt_range=(16, 512), output_range=(16, 256), concurrency=16, warmup=16,
                              threads=2, rounds=1, quick=False)
    met = report(results, machine, args)
    out = capsys.readouterr().out
    line = json.loads(next(ln for ln in out.splitlines() if ln.startswith("BENCH "))[len("BENCH "):])
    assert met == line["met"] and not all(met.values())  # cpu_peers exits 1 on it
    assert line["met"] == {"bf16.vs_vllm": True, "bf16.ttft_p50": True, "bf16.itl_p50": True, "bf16.greedy": True,
                           "bf16.decode_step": False}
    assert line["bf16"]["vs_vllm_tok_s"] == 1.8 and line["bf16"]["vs_llama_tok_s"] == 2.25
    assert "MISSED bf16.decode_step" in out


async def _flaky_server(drop_after_chunks: int | None, sent: list[int]) -> asyncio.AbstractServer:
    """A streaming server on 127.0.0.1 whose first request's connection is closed without an answer (None) or after
    ``drop_after_chunks`` text chunks; every later request gets three tokens and usage. ``sent``: requests seen."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        sent.append(1)
        first = len(sent) == 1
        events = [{"choices": [{"text": f" w{i}"}]} for i in range(3)] + [{"choices": [], "usage": {"completion_tokens": 3}}]
        if first and drop_after_chunks is not None:
            events = events[:drop_after_chunks]
        if not (first and drop_after_chunks is None):
            body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            if not first:
                body += b"data: [DONE]\n\n"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                         + b"%x\r\n%s\r\n" % (len(body), body) + (b"" if first else b"0\r\n\r\n"))
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _one_request_against(drop_after_chunks: int | None) -> tuple[Result, int]:
    async def run() -> tuple[Result, int]:
        sent: list[int] = []
        server = await _flaky_server(drop_after_chunks, sent)
        port = server.sockets[0].getsockname()[1]
        async with server:
            results, _ = await run_load(Server("flaky", f"http://127.0.0.1:{port}/v1", "m"), [Request(0, [101], 3)], 1)
        return results[0], len(sent)

    return asyncio.run(run())


def test_a_connection_closed_before_any_answer_is_retried_once() -> None:
    result, requests_seen = _one_request_against(drop_after_chunks=None)
    assert requests_seen == 2 and result.retried
    assert result.error is None and result.completion_tokens == 3 and result.text == " w0 w1 w2"
    assert summarize([result], 1.0)["retried"] == 1


def test_a_stream_cut_after_its_first_tokens_is_a_failure_not_a_retry() -> None:
    result, requests_seen = _one_request_against(drop_after_chunks=1)
    assert requests_seen == 1 and not result.retried
    assert result.error is not None and result.text == " w0"  # its tokens were generated: never sent twice
    assert summarize([result], 1.0)["failed"] == [f"#0: {result.error}"]


def test_unknown_stacks_and_precisions_are_refused_by_name() -> None:
    for option, value in (("--stacks", "trtkit,vlm"), ("--precisions", "fp16")):
        done = subprocess.run([sys.executable, str(BENCHMARKS / "cpu_peers.py"), option, value], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and f"{option}: unknown {value.split(',')[-1]}" in done.stderr
