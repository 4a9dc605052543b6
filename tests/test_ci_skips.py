"""Under CI=true a skipped test that needs PostgreSQL or Chromium fails the run (tests/ci_skips.py); outside CI it
stays a skip, and other skips stay skips everywhere, listed with their reasons at the end of a CI run. CI is
CI=true and nothing else, in the plugin and in conftest alike. Run on a generated test file with pytester."""

from __future__ import annotations

import pytest

TESTS = """
import pytest

@pytest.mark.postgres
def test_needs_postgres():
    pytest.skip("PostgreSQL is not installed")

@pytest.mark.chromium
def test_needs_chromium():
    pytest.skip("no chromium")

@pytest.mark.postgres
def test_runs():
    pass

def test_other_skip():
    pytest.skip("needs a GPU host")
"""
MARKERS = "[pytest]\nmarkers =\n    postgres: x\n    chromium: x\n"


@pytest.mark.parametrize("ci", ["true", "", None, "1"])
def test_a_skip_of_what_ci_installs_fails_only_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                        ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeini(MARKERS)
    pytester.makepyfile(test_generated=TESTS)
    result = pytester.runpytest_inprocess("-p", "ci_skips", "-rfs")
    if ci == "true":
        result.assert_outcomes(passed=1, failed=2, skipped=1)
        result.stdout.fnmatch_lines(["*test_needs_postgres needs postgres, which CI installs, but it was skipped*",
                                     "*skipped under CI=true: 1*",
                                     "SKIPPED test_generated.py::test_other_skip: needs a GPU host"])
    else:  # "1" is not CI here, nor in tests/conftest.py: one test of it (ci_skips.in_ci)
        result.assert_outcomes(passed=1, skipped=3)
        assert "skipped under CI=true" not in result.stdout.str()


def test_conftest_asks_the_plugin_whether_this_is_ci() -> None:
    """Issue 51 item 6: conftest took any non-empty CI for CI while the plugin wanted CI=true."""
    from pathlib import Path

    source = (Path(__file__).parent / "conftest.py").read_text()  # tests/conftest.py, not tests/cli's
    assert "from ci_skips import in_ci" in source and 'environ.get("CI")' not in source
