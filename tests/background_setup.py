"""A pytest plugin (loaded by tests/conftest.py) for the set-up that scripts/test.sh runs in the background while the
tests that do not need it run: llama.cpp's llama-server (built once per machine) and .venv-dynamo.

scripts/test.sh starts each set-up script at once and names a folder in ``$TRTKIT_SETUP_STATE``, where each one
writes ``NAME.log`` and, when it ends, ``NAME.rc`` (its exit status). The tests that need one run last
(``pytest_collection_modifyitems``: whole modules, so that module fixtures still start once), and their session
fixture waits for it with ``wait_for`` (a deadline; a failed set-up fails them with its log). Without
``$TRTKIT_SETUP_STATE`` (pytest run by hand) nothing runs in the background and nothing waits.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

STATE_ENV = "TRTKIT_SETUP_STATE"
# The llama-server build takes 6-20 minutes on a loaded 2-core machine: past this the set-up is stuck
WAIT_S = float(os.environ.get("TRTKIT_SETUP_WAIT_S", "2400"))
POLL_S = 0.5
# What each set-up serves, in the order its tests run at the end: Dynamo's (about 1-4 minutes) before llama-server's
LAST = {"dynamo": 1, "llama-server": 2}


def wait_for(name: str, *, timeout_s: float = WAIT_S) -> None:
    """Until scripts/test.sh's background set-up NAME has ended; fails the test if it failed or is still running
    after timeout_s. Returns at once when nothing runs in the background."""
    state = os.environ.get(STATE_ENV)
    if not state:
        return
    rc_file, log = Path(state, f"{name}.rc"), Path(state, f"{name}.log")
    if not log.exists():  # this run of scripts/test.sh does not set it up in the background
        return
    deadline = time.monotonic() + timeout_s
    while not rc_file.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the background set-up {name} still runs after {timeout_s:g} s ({STATE_ENV}={state}; "
                        f"TRTKIT_SETUP_WAIT_S sets the wait); its log ends: {_tail(log)}")
        time.sleep(POLL_S)
    rc = rc_file.read_text().strip()
    if rc != "0":
        pytest.fail(f"the background set-up {name} failed (exit {rc}); its log ends: {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


def needs(item: pytest.Item) -> str | None:
    """The background set-up a test needs, or None."""
    if item.get_closest_marker("dynamo") is not None:
        return "dynamo"
    if "llama_tools" in getattr(item, "fixturenames", ()):
        return "llama-server"
    return None


def module_ranks(items: list[pytest.Item]) -> dict[str, int]:
    """Each module's place at the end: 0 for a module that needs no background set-up, else its LAST rank."""
    rank: dict[str, int] = {}
    for item in items:
        name = needs(item)
        module = item.nodeid.split("::", 1)[0]
        rank[module] = max(rank.get(module, 0), LAST[name] if name else 0)
    return rank


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules whose tests need a background set-up run last, whole, in the order of LAST; the rest keep their
    order."""
    rank = module_ranks(items)
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])  # stable: the order within a rank stays
