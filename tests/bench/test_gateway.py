"""`trtkit bench --endpoint http://HOST:PORT/v1` through the OpenAI-compatible gateway: the request count and
token totals equal the Triton server's counters and the gateway's ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gateways import RunningGateway
from trtkit.bench.outputs.files import read_run
from trtkit.bench.session import run_bench
from trtkit.bench.spec import BenchSpec, parse_endpoint, parse_points
from trtkit.bench.workloads import LengthDist, WorkloadSpec

pytestmark = pytest.mark.slow


@pytest.fixture
def own_gateway(live_server, tiny_config, tmp_path: Path) -> Iterator[RunningGateway]:  # type: ignore[no-untyped-def]
    """A gateway of the test's own (its own ledger: the rows are this test's alone)."""
    gateway = RunningGateway(tiny_config, live_server.grpc_url, tmp_path / "gateway")
    yield gateway
    gateway.stop()


def test_http_bench_counts_equal_server_counters_and_the_ledger(own_gateway, live_server, tiny_config,
                                                                tiny_bench_counter, tmp_path: Path) -> None:
    key, secret = own_gateway.key()
    spec = BenchSpec(parse_endpoint(f"{own_gateway.url}/v1"), tiny_config.name, parse_points("1,2", None),
                     requests_per_point=4, warmup_requests=1)
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 16), LengthDist("uniform", 4, 12), force_output_len=True)
    folder = run_bench(spec, workload, tiny_bench_counter, tmp_path / "run", metrics_url=live_server.metrics_url,
                       entry_model=None, api_key=secret)  # default: the gateway's model
    run = read_run(folder)
    for s in run.summaries:
        assert s["errors"] == 0
        assert s["cache_hits"] == 0  # the gateway's response cache is on: no point may replay another's prompts
        assert s["server"]["matches"] == {"requests": True, "input_tokens": True, "output_tokens": True}, s["server"]
    assert [r.output_tokens for r in run.records] == [r.requested_output_tokens for r in run.records]
    # the local tokenizer counts the chat prompt as the gateway renders it (the whole template)
    assert all(r.input_tokens == r.local_input_tokens for r in run.records)
    assert len({r.slot for r in run.records}) == len(run.records)  # each point sent its own prompts
    rows = own_gateway.rows(key, "prompt_tokens, completion_tokens, cache_hit")
    assert len(rows) == len(run.records)  # warm-up requests included: one ledger row each
    assert not any(r[2] for r in rows)
    assert sum(r[0] for r in rows) == sum(r.input_tokens for r in run.records)
    assert sum(r[1] for r in rows) == sum(r.output_tokens for r in run.records)


def test_http_bench_sends_the_guide_as_response_format(own_gateway, live_server, tiny_config, tiny_bench_counter,
                                                       tmp_path: Path) -> None:
    _, secret = own_gateway.key()
    spec = BenchSpec(parse_endpoint(f"{own_gateway.url}/v1"), tiny_config.name, parse_points("2", None),
                     requests_per_point=3, warmup_requests=1)
    workload = WorkloadSpec("synthetic", LengthDist("fixed", 12), LengthDist("fixed", 20), guide_type="json_schema",
                            guide='{"type": "string", "enum": ["north", "south"]}')
    run = read_run(run_bench(spec, workload, tiny_bench_counter, tmp_path / "run",
                             metrics_url=live_server.metrics_url, entry_model=None, api_key=secret))
    assert run.summaries[0]["errors"] == 0
    # '"north"' or '"south"' and the grammar's end: a few tokens of the 20 allowed
    assert all(1 <= r.output_tokens < 8 for r in run.records)
