"""A deadline for one test: past it, every thread's stack goes to stderr and the test fails. Driven by
SIGALRM, so it interrupts the main thread even inside a blocking wait (a queue, a lock, a sleep)."""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys
import time
from collections.abc import Iterator


class TestTimedOut(Exception):
    __test__ = False  # not a test class, whatever its name


@contextlib.contextmanager
def deadline(seconds: float, name: str) -> Iterator[None]:
    def expire(_signum, _frame):  # type: ignore[no-untyped-def]
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        raise TestTimedOut(f"{name} ran past {seconds:g} s (stacks of every thread above); a test must never "
                           "hang: find what it waits for")

    previous = signal.signal(signal.SIGALRM, expire)
    outer_left, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # a deadline around this one keeps running
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer_left - (time.monotonic() - started)))
