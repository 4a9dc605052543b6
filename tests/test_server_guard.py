"""The quick command leaves out the tests marked `server` (tests/server_guard.py): a test that starts a server without
the mark fails, whether it starts it itself or through a child, and one that uses a session server is marked at
collection. Run on generated test files with pytester, with a stand-in program named like a server."""

from __future__ import annotations

from pathlib import Path

import pytest
import server_guard

TESTS = """
import os, subprocess, time
import pytest
import server_guard

SERVER = os.environ["FAKE_SERVER"]

def test_starts_a_server_unmarked():
    subprocess.run([SERVER, "0"], check=True)

@pytest.mark.server
def test_starts_a_server_marked():
    subprocess.run([SERVER, "0"], check=True)

def test_a_child_starts_a_server_unmarked(request):
    child = subprocess.Popen(["sh", "-c", f'exec "{SERVER}" 60'])
    deadline = time.monotonic() + 60
    while not server_guard.found(request.node) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the guard's thread has seen the server (the condition, not a time)
    child.kill()
    child.wait()

@pytest.fixture(scope="session")
def session_server():
    server = subprocess.Popen([SERVER, "60"])
    yield server
    server.kill()
    server.wait()

@pytest.mark.server
def test_starts_a_session_server(session_server):
    pass

def test_runs_while_an_earlier_tests_server_lives():
    # not this test's own server: the guard's thread scans twice (the condition, not a time) and finds nothing
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server_guard._watching[-1].scans < 2:
        time.sleep(0.05)

def test_starts_a_plain_program():
    subprocess.run(["true"], check=True)

@pytest.fixture(scope="session")
def live_server():
    return "stands for tests/conftest.py's tritonserver"

def test_uses_a_session_server(live_server, request):
    assert request.node.get_closest_marker("server") is not None
"""


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`sleep` under the name tritonserver: the guard knows a server by the name it runs under."""
    link = tmp_path / "bin" / "tritonserver"
    link.parent.mkdir()
    link.symlink_to(Path("/bin/sleep") if Path("/bin/sleep").exists() else Path("/usr/bin/sleep"))
    monkeypatch.setenv("FAKE_SERVER", str(link))
    return link


def test_a_test_that_starts_a_server_unmarked_fails(pytester: pytest.Pytester, fake_server: Path) -> None:
    pytester.makepyfile(test_generated=TESTS)
    result = pytester.runpytest_inprocess("-p", "server_guard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines(["*test_starts_a_server_unmarked starts tritonserver but is not marked `server`*"])
    outcomes = {r.nodeid.split("::")[1]: r.outcome for r in result.reprec.getreports("pytest_runtest_logreport")
                if r.when == "call"}
    assert outcomes == {"test_starts_a_server_unmarked": "failed", "test_starts_a_server_marked": "passed",
                        "test_a_child_starts_a_server_unmarked": "failed", "test_starts_a_session_server": "passed",
                        "test_runs_while_an_earlier_tests_server_lives": "passed", "test_starts_a_plain_program": "passed",
                        "test_uses_a_session_server": "passed"}


def test_the_quick_selection_leaves_out_what_uses_a_server(pytester: pytest.Pytester, fake_server: Path) -> None:
    pytester.makepyfile(test_generated=TESTS)
    result = pytester.runpytest_inprocess("-p", "server_guard", "-p", "no:cacheprovider", "-m", "not server")
    result.assert_outcomes(passed=2, failed=2, deselected=3)


@pytest.mark.parametrize(("argv", "program"), [
    (["/opt/x/bin/tritonserver", "--model-repository=r"], "tritonserver"),
    (["/usr/lib/postgresql/15/bin/pg_ctl", "start"], "pg_ctl"),
    (["/cache/llama-server", "-m", "m.gguf"], "llama-server"),
    (["/v/bin/python", "-m", "dynamo.frontend"], "Dynamo (dynamo.frontend)"),
    (["/v/bin/python", "-m", "trtkit.dynamo.worker"], "Dynamo (trtkit.dynamo.worker)"),
    (["python", "-m", "trtkit.cli.main", "serve", "repo"], "trtkit serve"),
    (["python", "-c", "from trtkit.cli.main import main; raise SystemExit(main())", "gateway", "c.yaml"],
     "trtkit gateway"),
    (["trtkit", "-v", "quickstart"], "trtkit quickstart"),
    (["python", "-m", "trtkit.cli.main", "serve", "--stop"], None),
    (["python", "-m", "trtkit.cli.main", "config", "validate", "c.yaml"], None),
    (["python", "-c", "print('serve')"], None),
    (["git", "show"], None),
])
def test_what_counts_as_a_server(argv: list[str], program: str | None) -> None:
    assert server_guard.server_program(argv) == program


def test_every_server_fixture_is_defined_where_it_says() -> None:
    """A renamed fixture would leave its tests unmarked: each name of SERVER_FIXTURES is a fixture of a conftest."""
    tests = Path(__file__).parent
    defined = {line.split("def ", 1)[1].split("(", 1)[0] for conftest in tests.rglob("conftest.py")
               for line in conftest.read_text().splitlines() if line.startswith("def ")}
    assert server_guard.SERVER_FIXTURES <= defined, server_guard.SERVER_FIXTURES - defined
