"""`trtkit serve` as a user runs it: in its own process, stopped by Ctrl-C or by `trtkit serve --stop`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import leftovers
from echo_repo import echo_repository
from test_serve_launcher import _echo

from trtkit.cli.main import main

pytestmark = pytest.mark.slow
TRTKIT = [sys.executable, "-m", "trtkit.cli.main"]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Every `trtkit serve` a test starts is stopped (SIGTERM: it stops its server) even if the test fails."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)


def _with_sigint(sigint: signal.Handlers, command: list[str]) -> list[str]:
    """``command`` started with SIGINT at ``sigint``: ignored, as a shell's `&` hands it, or at its default, set
    explicitly (this test process may itself run with SIGINT ignored: scripts/test.sh starts its second pytest with `&`).

    Not ``preexec_fn``: that forks this process, whose gRPC threads (the session's clients) may be mid-call, and gRPC's
    post-fork handler then aborts the child before it execs ("Epoll1Poller ... epoll_wait error: Bad file
    descriptor", seen in CI). A small process that holds no gRPC sets the disposition and execs the command: an
    ignored signal stays ignored across ``exec``, a default one stays default."""
    assert sigint in (signal.SIG_IGN, signal.SIG_DFL), sigint
    setting = "SIG_IGN" if sigint == signal.SIG_IGN else "SIG_DFL"
    return [sys.executable, "-c", f"import os, signal, sys; signal.signal(signal.SIGINT, signal.{setting}); "
            "os.execvp(sys.argv[1], sys.argv[1:])", *command]


def test_a_command_started_with_sigint_ignored_inherits_it() -> None:
    ignored = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"]
    assert subprocess.run(_with_sigint(signal.SIG_IGN, ignored), capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
    assert subprocess.run(_with_sigint(signal.SIG_DFL, ignored), capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def _start(repo: Path, home: Path, started: list[subprocess.Popen[str]], *, sigint: signal.Handlers = signal.SIG_DFL,
           ) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """``sigint``: the disposition the process starts with (a shell's `&` hands SIGINT ignored)."""
    env = {**os.environ, "TRTKIT_HOME": str(home)}
    process = subprocess.Popen(_with_sigint(sigint, [*TRTKIT, "serve", str(repo), "--http-port", "0", "--grpc-port",
                                                     "0", "--metrics-port", "0", "--skip-check"]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    started.append(process)
    urls = {}
    assert process.stdout is not None
    while len(urls) < 4:
        line = process.stdout.readline()
        assert line, f"serve ended early: {process.stderr.read() if process.stderr else ''}"
        key, value = line.split(maxsplit=1)
        urls[key] = value.strip()
    return process, urls


def _shm_prefix(log_path: str) -> str:
    match = re.search(r"trtkit_[0-9a-f]{8}_", Path(log_path).read_text())
    assert match is not None
    return match.group(0)


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["foreground", "started-with-ampersand"])
def test_ctrl_c_stops_the_server_cleanly(tmp_path: Path, started: list[subprocess.Popen[str]],
                                         sigint: signal.Handlers) -> None:
    process, urls = _start(echo_repository(tmp_path / "repo"), tmp_path / "home", started, sigint=sigint)
    assert urls["grpc"].startswith("127.0.0.1:") and urls["http"].startswith("http://127.0.0.1:")
    assert _echo(urls["grpc"], b"cli") == b"echo: cli"
    prefix = _shm_prefix(urls["log"])
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    assert leftovers(prefix) == ([], [])


def test_serve_stop_from_another_process(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    home = tmp_path / "home"
    process, urls = _start(echo_repository(tmp_path / "repo"), home, started)
    prefix = _shm_prefix(urls["log"])
    stopper = subprocess.run([*TRTKIT, "serve", "--stop"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "TRTKIT_HOME": str(home)})
    assert stopper.returncode == 0 and "stopped tritonserver" in stopper.stdout
    assert process.wait(timeout=30) == 0
    assert leftovers(prefix) == ([], [])
    assert not list((home / "serve").glob("server-*.json"))


def test_serve_refuses_an_inconsistent_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(echo_repository(tmp_path / "repo"))]) == 1
    err = capsys.readouterr().err
    assert "failed 1 consistency check" in err and "gpt_model_path" in err


def test_serve_stop_with_nothing_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--stop"]) == 0
    assert "no running trtkit server" in capsys.readouterr().err


def test_serve_reports_the_servers_death_with_the_log_tail(tmp_path: Path,
                                                           started: list[subprocess.Popen[str]]) -> None:
    import json

    home = tmp_path / "home"
    process, urls = _start(echo_repository(tmp_path / "repo"), home, started)
    (record,) = [json.loads(p.read_text()) for p in (home / "serve").glob("server-*.json")]
    os.kill(record["pid"], signal.SIGKILL)  # tritonserver dies under `trtkit serve`
    assert process.wait(timeout=60) == 1
    err = process.stderr.read() if process.stderr else ""
    assert "tritonserver died unexpectedly (killed by SIGKILL)" in err, err
    assert "--- log tail ---" in err and urls["log"] in err
    assert leftovers(_shm_prefix(urls["log"])) == ([], [])
