"""Bench fixtures: a bench-run helper and the tiny counter; the live servers are the session ones of tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.bench.session import run_bench
from trtkit.bench.spec import BenchSpec, parse_endpoint, parse_points, parse_slo
from trtkit.bench.workloads import LengthDist, WorkloadSpec
from trtkit.governance.tokens import TokenCounter


def bench_once(server, out: Path, counter: TokenCounter, *, model: str = "ensemble", concurrency: str | None = "1,3",  # type: ignore[no-untyped-def]
               rate: str | None = None, requests: int = 6, workload: WorkloadSpec | None = None,
               slo: str | None = "ttft=500ms,tpot=100ms", warmup: int = 1) -> Path:
    spec = BenchSpec(parse_endpoint(f"grpc://{server.grpc_url}"), model, parse_points(concurrency, rate),
                     requests_per_point=requests, warmup_requests=warmup, slo=parse_slo(slo))
    workload = workload or WorkloadSpec("synthetic", LengthDist("uniform", 8, 40), LengthDist("fixed", 8))
    return run_bench(spec, workload, counter, out, metrics_url=server.metrics_url)


@pytest.fixture(scope="session")
def tiny_bench_counter(tiny_llama_dir: Path) -> TokenCounter:
    return TokenCounter(tiny_llama_dir, chat_template=False)
