"""A pytest plugin (loaded by tests/conftest.py): every test that runs a real server is marked ``server``, so that the
quick command (``bash scripts/test.sh --quick``: ``pytest -m "not server and not slow"``) runs all the others, and a
test that starts a server without the mark fails, in the quick run and in the full one alike.

Marked at collection: a test that uses a fixture in ``SERVER_FIXTURES`` (directly or through another fixture: the
session's tritonservers, PostgreSQL, llama-server, the Dynamo cluster), or that is marked ``postgres``, ``chromium``
or ``dynamo``.

Found at run time: while a test not marked ``server`` sets up or runs, an audit hook (``sys.addaudithook``) sees every
program this process starts; one that is a server (``server_program``: tritonserver, PostgreSQL's programs,
llama-server, Chromium, Dynamo's processes, the trtkit commands that start a server) is refused before it starts,
and the test fails, naming the program and the fix. A server started further down (a script or a CLI process that
starts one) is seen by a thread that reads this process's descendants from /proc every ``POLL_S`` seconds while such
a test runs: a server lives for seconds, and the test fails all the same.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest

SERVER_FIXTURES = frozenset({
    "live_server", "paced_server", "live", "live_batch",  # tests/conftest.py: tritonserver
    "postgres_cluster",  # tests/conftest.py: PostgreSQL
    "echo_server",  # tests/serve/conftest.py: tritonserver
    "llm_api_echo", "llm_api_paced_echo", "llm_api_server",  # tests/llm_api/conftest.py: tritonserver
    "llama",  # tests/upstreams/conftest.py: llama-server
    "dynamo_cluster",  # tests/dynamo/conftest.py: Dynamo's frontend and workers
})
SERVER_MARKERS = ("postgres", "chromium", "dynamo")
SERVER_PROGRAMS = frozenset({"tritonserver", "postgres", "postmaster", "pg_ctl", "initdb", "llama-server",
                             "chromium", "chromium-browser", "chrome", "headless_shell"})
SERVER_COMMANDS = frozenset({"serve", "gateway", "quickstart", "dynamo"})  # trtkit commands that start a server
QUICK_LEAVES_OUT = ("server", "slow", "gpu")  # scripts/test.sh --quick: pytest -m "not server and not slow and not gpu"
POLL_S = 0.2
MARK_HINT = ("mark it `server` (pytestmark = pytest.mark.server), or use a session fixture of tests/conftest.py: "
             "the quick command (bash scripts/test.sh --quick) runs only tests that start no server")


def server_program(argv: Sequence[str]) -> str | None:
    """The server a command line starts, or None."""
    if not argv:
        return None
    args = [str(a) for a in argv]
    name = Path(args[0]).name
    if name in SERVER_PROGRAMS:
        return name
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "-m" and value.startswith(("dynamo.", "trtkit.dynamo.")):
            return f"Dynamo ({value})"
    command = _trtkit_command(args)
    if command in SERVER_COMMANDS and "--stop" not in args:
        return f"trtkit {command}"
    return None


def _trtkit_command(args: list[str]) -> str | None:
    """The trtkit command of a CLI command line (``trtkit X``, ``python -m trtkit.cli.main X``, ``python -c
    '...trtkit.cli.main...' X``), or None."""
    if Path(args[0]).name == "trtkit":
        rest = args[1:]
    else:
        entry = next((i for i, a in enumerate(args) if a in ("trtkit", "trtkit.cli.main") or "trtkit.cli.main" in a
                      and args[i - 1] == "-c"), None)
        if entry is None:
            return None
        rest = args[entry + 1:]
    return next((a for a in rest if not a.startswith("-")), None)


# -- the state of the run: which unmarked test is running, and what it started ------------------------------------
_running: list[pytest.Item] = []  # a stack: pytester runs tests inside a test, and the innermost one is the culprit
_watching: list[_Watcher] = []  # the threads of the unmarked tests running, innermost last
_watcher = pytest.StashKey["_Watcher"]()
_found = pytest.StashKey[list[str]]()  # on each item: the servers it started
_reported = pytest.StashKey[bool]()
_hook_added = False


def found(item: pytest.Item) -> list[str]:
    """The servers the test started without the mark (empty if none)."""
    return item.stash.setdefault(_found, [])


class ServerNotMarked(RuntimeError):
    pass


def _audit(event: str, args: tuple) -> None:  # type: ignore[type-arg]
    if not _running or is_server_test(_running[-1]) or event not in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        return
    argv = args[1]  # subprocess.Popen: (executable, args, cwd, env); os.posix_spawn, os.exec: (path, argv, env)
    if isinstance(argv, (str, bytes)):
        argv = [argv]
    program = server_program([os.fsdecode(a) for a in argv] if isinstance(argv, Iterable) else [])
    if program is None:
        return
    item = _running[-1]
    found(item).append(program)
    raise ServerNotMarked(f"{item.nodeid} starts {program} but is not marked `server`: {MARK_HINT}")


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


class _Watcher(threading.Thread):
    """Reads this process's descendants while an unmarked test runs: a server a child started is seen too. The ones
    started before the test began are not its own (the session's servers, started for an earlier test), nor those of
    a pytest session run inside the test (pytester: its tests are watched by their own threads)."""

    def __init__(self, item: pytest.Item) -> None:
        super().__init__(name="server-guard", daemon=True)
        self.item = item
        self.stop = threading.Event()
        self.before = set(_descendants(os.getpid()))  # read before the test starts (a few ms)
        self.paused = False
        self.scans = 0

    def run(self) -> None:
        while not self.stop.wait(POLL_S):
            if self.paused:
                continue
            self.scans += 1
            for pid in set(_descendants(os.getpid())) - self.before:
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
                except OSError:
                    continue
                program = server_program([os.fsdecode(a) for a in argv])
                if program is not None and not self.paused and program not in found(self.item):
                    found(self.item).append(program)

    def resume(self) -> None:
        self.before = set(_descendants(os.getpid()))
        self.paused = False


def is_server_test(item: pytest.Item) -> bool:
    """Marked `server`, or left out of the quick command otherwise (`slow`: the bundled model or tritonserver;
    `gpu`): a server is allowed there."""
    return any(item.get_closest_marker(name) is not None for name in QUICK_LEAVES_OUT)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects (postgres_db uses postgres_cluster: its tests are found)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        uses = SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses or any(item.get_closest_marker(name) is not None for name in SERVER_MARKERS):
            item.add_marker(pytest.mark.server)


def pytest_configure(config: pytest.Config) -> None:
    global _hook_added
    config.addinivalue_line("markers", "server: runs a real server (tritonserver, PostgreSQL, llama-server, Dynamo, "
                                       "Chromium): left out by the quick command (tests/server_guard.py)")
    if not _hook_added:  # an audit hook cannot be removed: one for the process, whatever pytester runs inside
        sys.addaudithook(_audit)
        _hook_added = True


def pytest_sessionstart(session: pytest.Session) -> None:
    for watcher in _watching:  # a session inside a test (pytester): its tests are watched by their own threads
        watcher.paused = True


def pytest_sessionfinish(session: pytest.Session) -> None:
    for watcher in _watching:
        watcher.resume()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    if sys.platform == "linux" and not is_server_test(item):  # one thread watches the set-up and the test
        watcher = item.stash[_watcher] = _Watcher(item)
        watcher.start()
        _watching.append(watcher)
    with _running_as(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    with _running_as(item):
        yield
    _stop_watching(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Not teardown, where the last test of a session stops the session's servers (a set-up that failed ends here)."""
    _stop_watching(item)


@contextlib.contextmanager
def _running_as(item: pytest.Item) -> Iterator[None]:
    _running.append(item)
    try:
        yield
    finally:
        _running.remove(item)


def _stop_watching(item: pytest.Item) -> None:
    watcher = item.stash.get(_watcher, None)
    if watcher is not None and watcher in _watching:
        _watching.remove(watcher)
        watcher.stop.set()
        watcher.join()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    started = found(item)
    if not started or item.stash.get(_reported, False) or is_server_test(item):
        return
    item.stash[_reported] = True
    if not report.failed:  # the audit hook's ServerNotMarked has failed it already, or a child's server was seen
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} starts {', '.join(sorted(set(started)))} but is not marked `server`: "
                           f"{MARK_HINT}")
