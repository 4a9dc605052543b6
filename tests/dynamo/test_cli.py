"""`trtkit dynamo CONFIG --workers N --mocker` as a user runs it: one command starts Dynamo's frontend and N workers
(Dynamo's mocker here: no weights read), serves on 127.0.0.1, and on SIGTERM stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT
from tests.dynamo.conftest import dynamo_python_or_skip
from trtkit.serve.processes import is_alive

pytestmark = [pytest.mark.dynamo, pytest.mark.slow]


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url.removesuffix("/v1") + "/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} not ready"
        time.sleep(0.1)


def descendants(pid: int) -> set[int]:
    children = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    children.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return children | {d for child in children for d in descendants(child)}


@pytest.mark.parametrize("gateway", [False, True], ids=["frontend", "gateway-in-front"])
def test_one_command_starts_the_cluster_and_stops_it_cleanly(tiny_llama_dir: Path, tmp_path: Path,
                                                             gateway: bool) -> None:
    dynamo_python_or_skip()
    command = [sys.executable, "-m", "trtkit.cli.main", "dynamo", str(REPO_ROOT / "model_configs" / "tiny-llama.yaml"),
               "--workers", "2", "--mocker", *(["--gateway", "--no-auth", "--gateway-port", "0"] if gateway else [])]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=(tmp_path / "err.log").open("wb"), text=True,
                               env=os.environ | {"PYTHONPATH": str(REPO_ROOT)}, start_new_session=True)
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("frontend http://127.0.0.1:"), line + (tmp_path / "err.log").read_text()[-2000:]
        url = line.split()[1]
        if gateway:  # the gateway's line follows once it listens
            line = process.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith("gateway http://127.0.0.1:"), line
            url = line.split()[1]
            wait_ready(url)
        answer = httpx.post(f"{url}/completions", timeout=60,
                            json={"model": "tiny-llama", "prompt": "hello there", "max_tokens": 4}).json()
        assert answer["usage"]["completion_tokens"] == 4
        started = descendants(process.pid)
        assert len(started) >= 4  # the broker, the frontend, two workers
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        deadline = time.monotonic() + 30
        while any(is_alive(pid) for pid in started):
            assert time.monotonic() < deadline, [pid for pid in started if is_alive(pid)]
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
