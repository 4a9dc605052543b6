"""A pytest plugin (loaded by tests/conftest.py): under ``CI=true`` a skipped test that needs a system tool the
test command installs (marked ``postgres`` or ``chromium``) fails the run instead of leaving it green.

Outside CI a machine without PostgreSQL or Chromium still runs the rest of the suite, and the skip says what to
install; in CI the test command (scripts/test.sh, through scripts/setup_env.sh) installs both, so a skip there
means the install went wrong, and a green run would hide that the fleet and report tests never ran.
"""

from __future__ import annotations

import os

import pytest

REQUIRED_IN_CI = ("postgres", "chromium", "dynamo")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    needed = [name for name in REQUIRED_IN_CI if item.get_closest_marker(name) is not None]
    if not needed:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"{item.nodeid} needs {' and '.join(needed)}, which CI installs, but it was skipped: "
                       f"{reason}. Under CI=true this fails the run (tests/ci_skips.py); install it "
                       f"(scripts/setup_env.sh as root) or unset CI to run without it.")
