"""A pytest plugin (loaded by tests/conftest.py): under ``CI=true`` a skipped test that needs a system tool the
test command installs (marked ``postgres``, ``chromium`` or ``dynamo``) fails the run instead of leaving it green, and
the run ends with every skip listed, each with its reason (GPU-gated ones say so: tests/gpu_host.py).

``in_ci`` is the one test of "is this CI" (tests/conftest.py uses it too): ``CI=true``, as CI services set it.

Outside CI a machine without PostgreSQL or Chromium still runs the rest of the suite, and the skip says what to
install; in CI the test command (scripts/test.sh, through scripts/setup_env.sh) installs both, so a skip there
means the install went wrong, and a green run would hide that the fleet and report tests never ran.
"""

from __future__ import annotations

import os

import pytest

REQUIRED_IN_CI = ("postgres", "chromium", "dynamo")
# (test, reason), in the order they ran; kept per session (a pytester run inside the suite has its own list)
_SKIPPED = pytest.StashKey[list[tuple[str, str]]]()


def _skipped(config: pytest.Config) -> list[tuple[str, str]]:
    return config.stash.setdefault(_SKIPPED, [])


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    needed = [name for name in REQUIRED_IN_CI if item.get_closest_marker(name) is not None]
    reason = _reason(report)
    if not needed:
        _skipped(item.config).append((item.nodeid, reason))
        return
    report.outcome = "failed"
    report.longrepr = (f"{item.nodeid} needs {' and '.join(needed)}, which CI installs, but it was skipped: "
                       f"{reason}. Under CI=true this fails the run (tests/ci_skips.py); install it "
                       f"(scripts/setup_env.sh as root) or unset CI to run without it.")


def _reason(report: pytest.TestReport) -> str:
    return str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr).removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    """Under CI=true: every skip of the run, one line each, with its reason."""
    if not in_ci():
        return
    skipped = _skipped(config)
    terminalreporter.section(f"skipped under CI=true: {len(skipped)}")
    for nodeid, reason in skipped:
        terminalreporter.write_line(f"SKIPPED {nodeid}: {reason}")
