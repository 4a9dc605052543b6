"""Pure parts of the bench: option parsing, goodput and latency arithmetic, arrivals, metrics parsing."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from trtkit.bench.aggregate import describe, meets_slo, summarize_point
from trtkit.bench.compare import ratio
from trtkit.bench.engine_metrics import EngineSample, parse_prometheus, select_series
from trtkit.bench.profiles import Budget, arrival_gaps
from trtkit.bench.records import RequestRecord
from trtkit.bench.spec import BenchSpec, Slo, parse_endpoint, parse_points, parse_slo
from trtkit.bench.workloads import LengthDist
from trtkit.errors import BenchError


def record(index: int, ttft: float, gaps: list[float], *, tokens: int | None = None, error: str | None = None,
           start: float = 0.0, warmup: bool = False) -> RequestRecord:
    offsets = [ttft]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    n = len(offsets) if tokens is None else tokens
    return RequestRecord(point="c2", index=index, warmup=warmup, tag="t", start_s=start, end_s=start + offsets[-1],
                         ttft_s=ttft, chunk_offsets_s=offsets, chunk_tokens=[1] * len(offsets),
                         input_tokens=10, output_tokens=n, local_input_tokens=10, local_output_tokens=n,
                         error=error)


def test_endpoint_parsing_and_loopback_only_by_default() -> None:
    assert parse_endpoint("grpc://127.0.0.1:8001").address == "127.0.0.1:8001"
    assert parse_endpoint("http://localhost:8080/v1").kind == "http"
    with pytest.raises(BenchError, match="--allow-remote"):
        parse_endpoint("grpc://10.1.2.3:8001")
    assert parse_endpoint("grpc://10.1.2.3:8001", allow_remote=True).host == "10.1.2.3"
    with pytest.raises(BenchError, match="/v1"):
        parse_endpoint("http://127.0.0.1:8080")
    with pytest.raises(BenchError, match="grpc://HOST:PORT"):
        parse_endpoint("ftp://127.0.0.1:1")


def test_points_and_slo_parsing() -> None:
    points = parse_points("1,2,8", None)
    assert [p.name for p in points] == ["c1", "c2", "c8"]
    assert [p.value for p in parse_points(None, "0.5,4", 0.5)] == [0.5, 4.0]
    for bad in (("1.5", None), (None, None), ("1", "2"), ("x", None)):
        with pytest.raises(BenchError):
            parse_points(*bad)
    assert parse_slo("ttft=200ms,tpot=0.05s,e2e=3000") == Slo(ttft_s=0.2, tpot_s=0.05, e2e_s=3.0)
    with pytest.raises(BenchError, match="unknown metric"):
        parse_slo("latency=3ms")
    with pytest.raises(BenchError, match="--max-in-flight"):
        BenchSpec(parse_endpoint("grpc://127.0.0.1:1"), "ensemble", parse_points("512", None), requests_per_point=3)
    with pytest.raises(BenchError, match="exactly one"):
        BenchSpec(parse_endpoint("grpc://127.0.0.1:1"), "ensemble", points, requests_per_point=3, duration_s=2)


def test_length_distributions() -> None:
    rng = random.Random(1)
    assert LengthDist.parse("fixed:7", "--x").sample(rng) == 7
    assert {LengthDist.parse("uniform:3-5", "--x").sample(rng) for _ in range(200)} == {3, 4, 5}
    draws = [LengthDist.parse("normal:100,10", "--x").sample(rng) for _ in range(2000)]
    assert 98 < statistics.mean(draws) < 102
    with pytest.raises(BenchError):
        LengthDist.parse("uniform:9-3", "--x")


def test_goodput_hand_computed_case() -> None:
    """Four finished requests and one error, SLO ttft <= 100 ms and tpot <= 20 ms:
    r0 ttft 50, tpot 10 -> good; r1 ttft 150 -> bad; r2 ttft 90, tpot 30 -> bad; r3 ttft 100, tpot 20 -> good
    (limits are inclusive); r4 failed -> bad. Window: 0 s .. 2.0 s -> goodput 2 / 2.0 s = 1.0 req/s."""
    slo = parse_slo("ttft=100ms,tpot=20ms")
    records = [record(0, 0.05, [0.01, 0.01]), record(1, 0.15, [0.01]), record(2, 0.09, [0.03, 0.03]),
               record(3, 0.10, [0.02, 0.02, 0.02], start=1.84), record(4, 0.01, [0.01], error="boom"),
               record(5, 9.0, [9.0], warmup=True)]
    assert [meets_slo(r, slo) for r in records[:5]] == [True, False, False, True, False]
    summary = summarize_point("c2", records, slo, samples=[], boundary=(0.0, 10.0), entry_model="ensemble")
    assert summary["duration_s"] == pytest.approx(2.0)  # r0 starts at 0, r3 ends at 1.84 + 0.16
    assert summary["good_requests"] == 2
    assert summary["goodput_req_per_s"] == pytest.approx(1.0)
    assert summary["requests_per_s"] == pytest.approx(4 / 2.0)
    assert summary["requests"] == 5 and summary["errors"] == 1 and summary["warmup_requests"] == 1
    assert summary["goodput_fraction"] == pytest.approx(2 / 4)


def test_latency_statistics() -> None:
    r = record(0, 0.1, [0.02, 0.04])  # three single-token responses
    assert r.itls_s() == pytest.approx([0.02, 0.04])
    assert r.tpot_s() == pytest.approx(0.03)
    chunky = RequestRecord("c1", 0, False, "t", 0.0, 1.0, 0.1, [0.1, 0.4], [2, 3], output_tokens=5)
    assert chunky.itls_s() == pytest.approx([0.1, 0.1, 0.1])  # a response of 3 tokens shares its gap
    assert chunky.tpot_s() == pytest.approx(0.3 / 4)
    stats = describe([0.001 * i for i in range(1, 101)])
    assert stats["p50"] == pytest.approx(50.5) and stats["mean"] == pytest.approx(50.5)
    assert stats["p99"] == pytest.approx(99.01)
    assert math.isnan(describe([])["p90"])
    assert ratio(2.0, 3.0) == pytest.approx(1.5) and ratio(0.0, 1.0) is None


def test_arrivals_and_budget() -> None:
    rng = random.Random(0)
    poisson = [g for g, _ in zip(arrival_gaps(4.0, 1.0, rng), range(20000), strict=False)]
    assert statistics.mean(poisson) == pytest.approx(0.25, rel=0.03)
    assert statistics.pstdev(poisson) == pytest.approx(0.25, rel=0.05)  # exponential: std = mean
    bursty = [g for g, _ in zip(arrival_gaps(4.0, 0.25, rng), range(20000), strict=False)]
    assert statistics.mean(bursty) == pytest.approx(0.25, rel=0.05)
    assert statistics.pstdev(bursty) > 2 * statistics.pstdev(poisson) * 0.9  # gamma shape 0.25: cv = 2
    budget = Budget(total=3, deadline=None)
    assert [budget.take() for _ in range(5)] == [0, 1, 2, None, None]


PROM = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 14
nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 596900
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 16
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.015625
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 2
nv_trt_llm_general_metrics{general_type="iteration_counter",model="tensorrt_llm",version="1"} 68
nv_llm_output_token_len_sum{model="tensorrt_llm",response_metric_type="total_output_tokens",version="1"} 224
nv_llm_output_token_len_bucket{model="tensorrt_llm",le="10",version="1"} 3
"""


def test_prometheus_parsing_and_series() -> None:
    samples = parse_prometheus(PROM)
    assert ("nv_inference_request_success", {"model": "ensemble", "version": "1"}, 14.0) in samples
    series = select_series(PROM)
    assert series == {"success:ensemble": 14.0, "queue_us:tensorrt_llm": 596900.0, "kv_used": 16.0,
                      "kv_fraction": 0.015625, "requests_waiting": 2.0, "iteration": 68.0,
                      "server_output_tokens": 224.0}


def test_server_reconciliation_uses_boundary_samples() -> None:
    records = [record(0, 0.1, [0.01]), record(1, 0.1, [0.01], warmup=True)]  # 2 tokens each, warm-up included
    samples = [EngineSample(0.0, {"success:ensemble": 5, "server_output_tokens": 100, "server_input_tokens": 50}),
               EngineSample(1.0, {"success:ensemble": 6, "server_output_tokens": 102, "server_input_tokens": 60}),
               EngineSample(3.0, {"success:ensemble": 7, "server_output_tokens": 104, "server_input_tokens": 70}),
               EngineSample(9.0, {"success:ensemble": 99, "server_output_tokens": 999, "server_input_tokens": 999})]
    summary = summarize_point("c2", records, Slo(), samples=samples, boundary=(1.5, 5.0), entry_model="ensemble")
    server = summary["server"]  # samples at 1.0 and 3.0 bound the point: the server saw 1 request, we sent 2
    assert server["server"]["requests"] == 1 and server["bench"]["requests"] == 2
    assert server["matches"] == {"requests": False, "input_tokens": False, "output_tokens": False}
    summary = summarize_point("c2", records, Slo(), samples=samples, boundary=(0.0, 5.0), entry_model="ensemble")
    assert summary["server"]["matches"] == {"requests": True, "input_tokens": True, "output_tokens": True}
