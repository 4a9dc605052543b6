"""A decoupled model's unload waits for its stream threads a bounded time in all, and names the ones left
(trtkit/triton_models/stream_threads.py). Real threads; the stuck ones block on an event until released. No
wall-clock window: the joins' own timeouts show the budget is shared (a join on a thread that stays stuck
returns only once its timeout has passed, so every later join gets what is left of the budget)."""

from __future__ import annotations

import logging
import threading

from trtkit.triton_models.stream_threads import UNLOAD_WAIT_S, StreamThreads


class JoinsRecorded(StreamThreads):
    """StreamThreads that keeps the timeout each join was given (the joins themselves are real)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []
        self.stuck_timeouts: list[float] = []  # those of the joins that returned with the thread still running

    def _join(self, thread: threading.Thread, timeout: float) -> None:
        self.timeouts.append(timeout)
        super()._join(thread, timeout)
        if thread.is_alive():
            self.stuck_timeouts.append(timeout)


def wait_for_the_engine(gate: threading.Event) -> None:
    gate.wait()


def test_unload_waits_a_bounded_time_in_all_and_names_the_stuck_streams(caplog) -> None:  # type: ignore[no-untyped-def]
    streams = JoinsRecorded()
    gate, ended = threading.Event(), threading.Event()
    for _ in range(4):  # four stuck streams: a timeout per thread would give each the whole budget
        streams.start(wait_for_the_engine, gate)
    streams.start(ended.set)  # one that ends by itself
    assert len(streams.running()) >= 4
    with caplog.at_level(logging.WARNING, logger="trtkit.triton_models.stream_threads"):
        stuck = streams.wait(0.5)
    try:
        assert len(stuck) == 4 and all("wait_for_the_engine" in stack for stack in stuck)
        assert sum("still running" in r.getMessage() for r in caplog.records) == 4
        # the budget is for all of them together: the stuck joins' timeouts (each one waited out in full) add up
        # to at most 0.5 s, where a timeout per thread would have given each 0.5 s
        assert len(streams.stuck_timeouts) == 4 and all(t <= 0.5 for t in streams.timeouts)
        assert sum(streams.stuck_timeouts) <= 0.5
    finally:
        gate.set()
    assert ended.is_set()
    assert streams.wait(5.0) == [] and streams.running() == []  # released: they end and leave the count
    assert UNLOAD_WAIT_S < 5  # below tritonserver's default exit timeout, shared by every model's unload


def test_streams_that_end_are_not_waited_for() -> None:
    streams = JoinsRecorded()
    done: list[int] = []
    thread = streams.start(done.append, 1)
    thread.join(5)
    assert streams.wait(2.0) == [] and done == [1]
    assert streams.timeouts == []  # nothing left to join: none of the 2 s budget is spent
