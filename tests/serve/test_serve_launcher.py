"""The launcher against a real tritonserver (pytriton's bundled binary) on small Python-backend repositories."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import leftovers
from echo_repo import echo_repository, failing_repository, invalid_config_repository, stuck_repository

from trtkit.errors import ServerError
from trtkit.serve import TritonServer, stop_recorded_servers
from trtkit.serve.state import read_records

pytestmark = pytest.mark.slow


def _echo(grpc_url: str, text: bytes) -> bytes:
    client = grpcclient.InferenceServerClient(grpc_url)
    tensor = grpcclient.InferInput("text_input", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([text], dtype=object))
    result = client.infer("echo", [tensor]).as_numpy("text_output")
    assert result is not None
    return bytes(result[0])


def test_server_answers_grpc_on_loopback_with_distinct_free_ports(echo_server: TritonServer) -> None:
    assert _echo(echo_server.grpc_url, b"hello") == b"echo: hello"
    assert echo_server.grpc_url.startswith("127.0.0.1:")
    ports = {echo_server.grpc_url, echo_server.http_url, echo_server.metrics_url}
    assert len({url.rsplit(":", 1)[-1] for url in ports}) == 3
    with urllib.request.urlopen(f"{echo_server.http_url}/v2/health/ready", timeout=5) as response:
        assert response.status == 200
    with urllib.request.urlopen(echo_server.metrics_url, timeout=5) as response:
        assert b"nv_inference_request_success" in response.read()
    assert echo_server.log_path.is_file() and echo_server.log_path.stat().st_size > 0


def test_tritonserver_runs_with_two_malloc_arenas_unless_told_otherwise(echo_server: TritonServer) -> None:
    """One glibc arena per thread let tritonserver's heap creep up under the soak (+13.7% in 5 minutes)."""
    environ = Path(f"/proc/{echo_server.pid}/environ").read_bytes().split(b"\0")
    assert b"MALLOC_ARENA_MAX=2" in environ


def test_stop_leaves_no_stub_no_shm_and_no_record(tmp_path: Path) -> None:
    reused_log = tmp_path / "triton.log"  # an earlier run's failure above must not fail this one
    reused_log.write_text("E1202 model_lifecycle.cc:1] \"failed to load 'echo' version 1: Internal: old run\"\n")
    server = TritonServer(echo_repository(tmp_path / "repo"), start_timeout_s=60, log_path=reused_log).start()
    assert "old run" not in server.log_tail()
    # ready means every endpoint answers: tritonserver starts its metrics listener last, and a scrape at once
    # after start() was once refused (CI: a cancelled-stream test's first scrape)
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:
        assert response.status == 200
    pids, regions = leftovers(server.shm_prefix)
    assert len(pids) >= 2 and regions, "a running server has a stub and shm regions"
    assert [r.pid for r in read_records()] == [server.pid]
    assert _echo(server.grpc_url, b"x") == b"echo: x"
    server.stop()
    assert leftovers(server.shm_prefix) == ([], [])
    assert read_records() == []
    server.stop()  # idempotent


def test_stop_recorded_servers_stops_a_server_from_its_record(tmp_path: Path) -> None:
    server = TritonServer(echo_repository(tmp_path / "repo"), start_timeout_s=60).start()
    stopped = stop_recorded_servers(grace_s=10)
    assert [record.pid for record in stopped] == [server.pid]
    assert not server.is_running()
    assert leftovers(server.shm_prefix) == ([], [])
    server.stop()


def test_model_failing_initialize_fails_fast_with_the_reason_and_log_tail(tmp_path: Path) -> None:
    # a start deadline far beyond the test's patience: only the failure itself can end start() with this message
    server = TritonServer(failing_repository(tmp_path / "repo"), start_timeout_s=300)
    with pytest.raises(ServerError) as excinfo:
        server.start()
    message = str(excinfo.value)
    assert "was not ready after" not in message  # reported as the model's failure, not as a timeout
    assert "'broken'" in message and "boom: this model refuses to initialize" in message
    assert "--- log tail ---" in message and str(server.log_path) in message
    assert leftovers(server.shm_prefix) == ([], [])


def test_server_that_exits_reports_its_exit_code(tmp_path: Path) -> None:
    server = TritonServer(invalid_config_repository(tmp_path / "repo"), start_timeout_s=60)
    with pytest.raises(ServerError, match=r"(exited with code|failed to load)"):
        server.start()
    assert not server.is_running()


def test_stuck_loading_hits_the_deadline_and_cleans_up(tmp_path: Path) -> None:
    server = TritonServer(stuck_repository(tmp_path / "repo"), start_timeout_s=3, stop_grace_s=3)
    with pytest.raises(ServerError, match=r"was not ready after 3 s \(http://\S+/v2/health/ready did not answer 200"):
        server.start()
    assert not server.is_running()
    assert leftovers(server.shm_prefix) == ([], [])


def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="trtkit deploy"):
        TritonServer(tmp_path / "nope")


def test_busy_explicit_port_is_reported(echo_server: TritonServer, tmp_path: Path) -> None:
    busy = int(echo_server.grpc_url.rsplit(":", 1)[1])
    server = TritonServer(echo_repository(tmp_path / "repo"), grpc_port=busy, start_timeout_s=30)
    with pytest.raises(ServerError, match="exited with code"):
        server.start()
    assert leftovers(server.shm_prefix) == ([], [])
    assert json.dumps([r.pid for r in read_records()]) == "[]"
