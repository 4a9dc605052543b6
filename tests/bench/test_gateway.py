"""`trtkit bench --endpoint http://HOST:PORT/v1` through the OpenAI-compatible gateway (trtkit.gateway).

The gateway is built in parallel (issue 12): these tests skip until ``trtkit.gateway`` exists. They start it
in-process with uvicorn on the app that ``_gateway_app`` finds; if the merged gateway names its app factory
differently, adapt ``_gateway_app`` (the one place that knows the gateway's launch API).
"""

from __future__ import annotations

import inspect
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_CONFIG
from trtkit.bench.outputs.files import read_run
from trtkit.bench.session import run_bench
from trtkit.bench.spec import BenchSpec, parse_endpoint, parse_points
from trtkit.bench.workloads import LengthDist, WorkloadSpec

gateway = pytest.importorskip("trtkit.gateway")
pytestmark = pytest.mark.slow


def _gateway_app(grpc_url: str):  # type: ignore[no-untyped-def]
    """The gateway's ASGI app serving the tiny config through ``grpc_url``."""
    from trtkit.config import load_config

    for name in ("create_app", "make_app", "build_app"):
        factory = getattr(gateway, name, None)
        if factory is not None:
            params = inspect.signature(factory).parameters
            kwargs = {k: v for k, v in (("config", load_config(TINY_CONFIG)), ("triton_url", grpc_url),
                                        ("grpc_url", grpc_url), ("auth", False)) if k in params}
            return factory(**kwargs)
    pytest.skip("trtkit.gateway has no create_app/make_app/build_app: adapt _gateway_app to its launch API")


@pytest.fixture()
def gateway_url(live_server):  # type: ignore[no-untyped-def]
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_gateway_app(live_server.grpc_url), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the gateway did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


def test_http_bench_counts_equal_server_counters(gateway_url: str, live_server, tiny_bench_counter,
                                                 tmp_path: Path) -> None:
    spec = BenchSpec(parse_endpoint(gateway_url), "tiny-llama", parse_points("1,2", None), requests_per_point=4,
                     warmup_requests=1)
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 16), LengthDist("uniform", 4, 12), force_output_len=True)
    folder = run_bench(spec, workload, tiny_bench_counter, tmp_path / "run", metrics_url=live_server.metrics_url,
                       entry_model="ensemble")
    run = read_run(folder)
    for s in run.summaries:
        assert s["errors"] == 0
        assert s["server"]["matches"] == {"requests": True, "input_tokens": True, "output_tokens": True}
    assert [r.output_tokens for r in run.records] == [r.requested_output_tokens for r in run.records]
