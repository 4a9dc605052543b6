"""Waiting on a condition in a test: polled under a generous deadline, never a fixed sleep."""

from __future__ import annotations

import time


def wait_for(condition, timeout_s: float = 90.0, what: object = "condition") -> None:  # type: ignore[no-untyped-def]
    """Poll under a generous deadline: a busy machine is slow, never wrong."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what() if callable(what) else what}")
        time.sleep(0.1)
