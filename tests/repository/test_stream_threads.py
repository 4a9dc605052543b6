"""A decoupled model's unload waits for its stream threads a bounded time in all, and names the ones left
(trtkit/triton_models/stream_threads.py). Real threads; one of them blocks on an event until released."""

from __future__ import annotations

import logging
import threading
import time

from trtkit.triton_models.stream_threads import UNLOAD_WAIT_S, StreamThreads


def wait_for_the_engine(gate: threading.Event) -> None:
    gate.wait()


def test_unload_waits_a_bounded_time_in_all_and_names_the_stuck_streams(caplog) -> None:  # type: ignore[no-untyped-def]
    streams = StreamThreads()
    gate = threading.Event()
    for _ in range(4):  # four stuck streams: a timeout per thread would take four times as long
        streams.start(wait_for_the_engine, gate)
    streams.start(time.sleep, 0.05)  # one that ends by itself
    assert len(streams.running()) >= 4
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="trtkit.triton_models.stream_threads"):
        stuck = streams.wait(0.5)
    waited = time.monotonic() - started
    try:
        assert 0.5 <= waited < 0.5 * 4 - 0.1  # the budget is for all of them together
        assert len(stuck) == 4 and all("wait_for_the_engine" in stack for stack in stuck)
        assert sum("still running" in r.getMessage() for r in caplog.records) == 4
    finally:
        gate.set()
    assert streams.wait(5.0) == [] and streams.running() == []  # released: they end and leave the count
    assert UNLOAD_WAIT_S < 5  # below tritonserver's default exit timeout, shared by every model's unload


def test_streams_that_end_are_not_waited_for() -> None:
    streams = StreamThreads()
    done = []
    thread = streams.start(done.append, 1)
    thread.join(5)
    started = time.monotonic()
    assert streams.wait(2.0) == [] and done == [1]
    assert time.monotonic() - started < 1.9  # not the 2 s budget
