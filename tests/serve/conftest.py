"""Launcher fixtures: one echo server for the module, plus helpers that find leftovers of a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from echo_repo import echo_repository

from trtkit.serve import TritonServer
from trtkit.serve.processes import pids_with_marker, shm_regions


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repo = echo_repository(tmp_path_factory.mktemp("echo-repo"))
    home = tmp_path_factory.mktemp("echo-home")
    with pytest.MonkeyPatch.context() as patch:  # module scope runs outside the per-test TRTKIT_HOME
        patch.setenv("TRTKIT_HOME", str(home))
        with TritonServer(repo, log_path=home / "triton.log", start_timeout_s=60) as server:
            yield server


def leftovers(shm_prefix: str) -> tuple[list[int], list[Path]]:
    return pids_with_marker(shm_prefix), shm_regions(shm_prefix)
