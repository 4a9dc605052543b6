"""Issue 45 item 1: the LLM-API port's statistics, against a facade that hands them out as TensorRT-LLM 1.2 does.

Upstream creates its iteration statistics at the first generate_async, on an async queue because the port runs
that call inside its event loop; a synchronous get_stats from the port's stats thread then fails with TypeError
on every call (refengine/llm_api_stats.py, contract: llm.get_stats). The port reads them with get_stats_async in
its own loop, from its first request on, and hands the newest record to Triton's gauges."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from trtkit.refengine.llm_api import LLM, CpuOptions, GuidedDecodingParams, SamplingParams
from trtkit.triton_models.llm_api_port import LlmApiPort
from trtkit.wire.engine_request import EngineRequest, SamplingInputs

STEP_MS = 20.0  # every engine step lasts at least this long: the request surely runs while the test looks


@pytest.fixture
def port(echo_model_dir: Path):  # type: ignore[no-untyped-def]
    llm = LLM(str(echo_model_dir), max_batch_size=2, max_input_len=128, max_seq_len=256,
              kv_cache_config={"tokens_per_block": 16}, cpu=CpuOptions(kv_cache_bytes=4 << 20, min_step_ms=STEP_MS))
    port = LlmApiPort(llm, SamplingParams, GuidedDecodingParams, vocab_size=llm.vocab_size)
    yield port
    port.shutdown()


def test_the_port_publishes_statistics_while_a_request_runs_and_once_it_ends(
        port: LlmApiPort, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert port.stats() is None  # nothing asked of the LLM API before its first request: no warning every 100 ms
    done = threading.Event()
    parsed = EngineRequest(prompt_ids=list(range(300, 340)), max_tokens=30, stream=True, exclude_input=True,
                           sampling=SamplingInputs(min_tokens=30))
    port.start_request(parsed, lambda delta: done.set() if delta.finished else None, None)
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (done.is_set() and seen and seen[-1].used_kv_blocks == 0):
        stats = port.stats()  # as Triton's stats thread calls it, every stats_check_period_ms
        if stats is not None:
            seen.append(stats)
        time.sleep(STEP_MS / 2000)
    assert done.is_set(), "the request did not end"
    busy = [s for s in seen if s.used_kv_blocks > 0]
    assert busy and max(s.active_requests for s in busy) == 1, seen  # the gauges moved during the request
    assert seen[-1].used_kv_blocks == 0 and seen[-1].active_requests == 0, seen[-1]  # and came back once it ended
    assert seen[-1].iteration > busy[0].iteration
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
