"""The serving loop binds the engine's intra-op threads one per core (thread_binding.py), only where the engine takes
every usable core, only on its own thread, and not when TRTKIT_CPU_BIND=0."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch

from tests.refengine.conftest import EngineFactory
from trtkit.refengine import EngineLoop, RequestOutput, SamplingParams
from trtkit.refengine.cpu_features import usable_cores
from trtkit.refengine.thread_binding import DISABLE_ENV, binding_cores

CORES = sorted(os.sched_getaffinity(0))


def affinity(thread_id: int) -> set[int]:
    text = Path(f"/proc/self/task/{thread_id}/status").read_text()
    listed = next(line for line in text.splitlines() if line.startswith("Cpus_allowed_list:")).split(":")[1]
    cores: set[int] = set()
    for part in listed.strip().split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def run_one_request(loop: EngineLoop) -> None:
    done = threading.Event()

    def on_output(output: RequestOutput) -> None:
        if output.finished:
            done.set()

    loop.submit([5, 6, 7, 8], SamplingParams(max_tokens=3, end_id=-1), on_output)
    assert done.wait(120), "the request did not finish"


def test_binding_applies_only_to_an_engine_that_takes_every_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    assert binding_cores(1) is None  # one thread: nothing to keep apart
    assert binding_cores(len(CORES) + 1) is None  # more threads than cores
    if len(CORES) < 2:
        pytest.skip("one usable core")
    assert binding_cores(len(CORES)) == CORES
    assert binding_cores(len(CORES) - 1) is None or len(CORES) - 1 < 2  # a partition the user chose
    monkeypatch.setenv(DISABLE_ENV, "0")
    assert binding_cores(len(CORES)) is None


@pytest.mark.skipif(len(CORES) < 2 or len(CORES) != usable_cores(), reason="needs two usable cores or more")
@pytest.mark.parametrize("disabled", [False, True])
def test_the_loop_binds_its_own_thread_and_its_team(make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch,
                                                    disabled: bool) -> None:
    if disabled:
        monkeypatch.setenv(DISABLE_ENV, "0")
    else:
        monkeypatch.delenv(DISABLE_ENV, raising=False)
    caller_before = affinity(threading.get_native_id())
    before = {int(t) for t in os.listdir("/proc/self/task")}
    engine = make_engine(attention="native", num_threads=len(CORES))
    loop = EngineLoop(engine)
    try:
        run_one_request(loop)
        loop_thread = loop._thread.native_id
        assert loop_thread is not None
        if disabled:
            assert affinity(loop_thread) == set(CORES)
        else:
            assert affinity(loop_thread) == {CORES[0]}  # the stepping thread on the first core
            workers = {int(t) for t in os.listdir("/proc/self/task")} - before - {loop_thread}
            assert any(affinity(w) == {CORES[1]} for w in workers)  # a team thread on the next one
        assert affinity(threading.get_native_id()) == caller_before  # the caller's thread is never bound
        assert torch.get_num_threads() == len(CORES)
    finally:
        loop.shutdown()
