"""The benchmarks' CPU placement: every thread of a real process tree lands on the cores asked for."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cpu_layout import pin_tree, split_cores, thread_affinities, usable_cores, yield_to_servers  # noqa: E402

# a parent with an extra thread and a child process (as tritonserver has threads and Python stubs)
TREE = ("import subprocess, sys, threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid, flush=True); time.sleep(60)")


def test_pin_tree_moves_every_thread_of_every_process() -> None:
    core = usable_cores()[-1]
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{parent.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        pinned = pin_tree(parent.pid, {core})
        assert pinned >= 3  # the parent's two threads and the child's one at least
        assert thread_affinities(parent.pid) == {frozenset({core})}
        assert thread_affinities(child_pid) == {frozenset({core})}
        assert frozenset(os.sched_getaffinity(0)) == frozenset(usable_cores())  # this process is untouched
    finally:
        parent.kill()
        parent.wait()


def test_split_keeps_the_engine_and_the_frontends_apart() -> None:
    cores = usable_cores()
    if len(cores) < 2:
        assert split_cores(1) is None
        pytest.skip("one usable core: nothing to split")
    split = split_cores(1)
    assert split is not None
    assert split.engine == {cores[0]} and split.frontends == set(cores[1:])
    assert split_cores(len(cores)) is None and split_cores(0) is None


def test_yield_to_servers_lowers_every_thread_and_the_threads_started_later() -> None:
    script = ("import os, sys, threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
              "print('ready', flush=True); sys.stdin.readline(); "
              "later = threading.Thread(target=lambda: print(os.getpriority(os.PRIO_PROCESS, 0), flush=True)); "
              "later.start(); later.join(); time.sleep(60)")
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the child starts here (CI may run the tests niced)
    lower = min(19, base + 7)
    if lower == base:
        pytest.skip("the tests already run at the lowest priority")
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == "ready"
        tids = [int(t) for t in os.listdir(f"/proc/{process.pid}/task")]
        assert len(tids) >= 2 and all(os.getpriority(os.PRIO_PROCESS, t) == base for t in tids)
        assert yield_to_servers(process.pid, lower) == len(tids)
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {lower}
        process.stdin.write("go\n")
        process.stdin.flush()
        assert process.stdout.readline().strip() == str(lower)  # a thread started afterwards inherits it
        assert os.getpriority(os.PRIO_PROCESS, 0) == base  # this process is untouched
    finally:
        process.kill()
        process.wait()
