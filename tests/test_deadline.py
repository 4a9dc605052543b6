"""The suite's per-test deadline (tests/conftest.py): a test that hangs fails, with every thread's stack,
instead of holding CI until its global timeout (seen: a tritonserver whose gRPC frontend deadlocked)."""

from __future__ import annotations

import time

import pytest
from deadlines import TestTimedOut, deadline


def test_a_test_that_runs_past_its_deadline_fails_at_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(TestTimedOut, match="ran past 0.3 s"), deadline(0.3, "a sleeping test"):
        time.sleep(30)
    assert time.monotonic() - started < 5


def test_a_test_within_its_deadline_is_untouched() -> None:
    with deadline(5.0, "a quick test"):
        time.sleep(0.05)
    time.sleep(0.1)  # the timer is off once the block is left: nothing fires later
