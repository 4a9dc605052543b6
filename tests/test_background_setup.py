"""scripts/test.sh sets up llama-server and .venv-dynamo in the background (tests/background_setup.py): the tests that
need one run last and wait for it; a failed or stuck set-up fails them with its log; by hand nothing waits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import background_setup
import pytest


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(background_setup.STATE_ENV, str(tmp_path))
    return tmp_path


def test_without_a_background_set_up_nothing_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(background_setup.STATE_ENV, raising=False)
    background_setup.wait_for("llama-server", timeout_s=0)  # pytest run by hand
    monkeypatch.setenv(background_setup.STATE_ENV, str(tmp_path))
    background_setup.wait_for("llama-server", timeout_s=0)  # scripts/test.sh did not start this one


def test_waits_until_the_set_up_ends(state: Path) -> None:
    (state / "dynamo.log").write_text("building .venv-dynamo\n")
    ended = threading.Event()
    waiter = threading.Thread(target=lambda: (background_setup.wait_for("dynamo", timeout_s=60), ended.set()))
    waiter.start()
    assert not ended.wait(0.3)  # still running: no rc file yet
    (state / "dynamo.rc").write_text("0\n")
    waiter.join(timeout=60)
    assert ended.is_set()


def test_a_failed_set_up_fails_the_test_with_its_log(state: Path) -> None:
    (state / "llama-server.log").write_text("cmake: c++ compiler not found\n")
    (state / "llama-server.rc").write_text("1\n")
    with pytest.raises(pytest.fail.Exception, match=r"llama-server failed \(exit 1\).*c\+\+ compiler not found"):
        background_setup.wait_for("llama-server", timeout_s=60)


def test_a_stuck_set_up_fails_at_its_deadline(state: Path) -> None:
    (state / "dynamo.log").write_text("pip: resolving\n")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"dynamo still runs after 0.5 s.*pip: resolving"):
        background_setup.wait_for("dynamo", timeout_s=0.5)
    assert time.monotonic() - started >= 0.5


ORDER_TESTS = {
    "test_a_upstream": """
import pytest

@pytest.fixture(scope="session")
def llama_tools():
    return "stands for tests/upstreams' llama-server"

def test_one(llama_tools):
    pass

def test_two():
    pass
""",
    "test_b_dynamo": """
import pytest

@pytest.mark.dynamo
def test_cluster():
    pass

def test_plain():
    pass
""",
    "test_c_plain": """
def test_first():
    pass

def test_second():
    pass
""",
}


def test_the_tests_that_need_a_background_set_up_run_last_by_whole_modules(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**ORDER_TESTS)
    pytester.makeini("[pytest]\nmarkers =\n    dynamo: runs Dynamo\n")
    result = pytester.runpytest_inprocess("-p", "background_setup", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=6)
    ran = [r.nodeid for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert ran == ["test_c_plain.py::test_first", "test_c_plain.py::test_second",
                   "test_b_dynamo.py::test_cluster", "test_b_dynamo.py::test_plain",
                   "test_a_upstream.py::test_one", "test_a_upstream.py::test_two"]
