"""Which tritonserver runs, and the environment the bundled Python backend needs (field notes §3)."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

from trtkit.errors import ServerError
from trtkit.serve import runtime


def test_cpu_host_uses_the_pytriton_binary_with_a_symlinked_backend(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(runtime, "CONTAINER_TRITONSERVER", tmp_path / "absent")
    monkeypatch.delenv("TRTKIT_TRITONSERVER", raising=False)
    chosen = runtime.resolve_runtime()
    assert chosen.kind == "pytriton" and chosen.tritonserver.name == "tritonserver"
    assert chosen.backend_dir is not None
    python_dir = chosen.backend_dir / "python"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for name in (*runtime.BACKEND_FILES, runtime.STUB_NAME):
        assert (python_dir / name).is_symlink(), f"{name} must be a symlink, a copy cannot find its libraries"
    assert Path(os.readlink(python_dir / runtime.STUB_NAME)).parent.name == version
    assert chosen.env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == sysconfig.get_config_var("LIBDIR")
    assert chosen.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert runtime.resolve_runtime().backend_dir == chosen.backend_dir  # links are reused, not rebuilt


def test_gpu_container_binary_wins_and_keeps_its_own_backends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    container = tmp_path / "opt" / "tritonserver" / "bin" / "tritonserver"
    container.parent.mkdir(parents=True)
    container.write_text("#!/bin/sh\n")
    monkeypatch.setattr(runtime, "CONTAINER_TRITONSERVER", container)
    monkeypatch.delenv("TRTKIT_TRITONSERVER", raising=False)
    chosen = runtime.resolve_runtime()
    assert (chosen.kind, chosen.tritonserver, chosen.backend_dir) == ("container", container, None)


def test_explicit_binary_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRTKIT_TRITONSERVER", str(tmp_path / "missing"))
    with pytest.raises(ServerError, match="TRTKIT_TRITONSERVER"):
        runtime.resolve_runtime()


def test_two_installations_get_their_own_backend_folders(tmp_path: Path) -> None:
    """Two environments on one machine share TRTKIT_HOME: neither may relink the other's stub (a server of
    one then finds no stub while it starts)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    roots = []
    for name in ("env-a", "env-b"):
        root = tmp_path / name / "tritonserver"
        (root / "python_backend_stubs" / version).mkdir(parents=True)
        (root / "python_backend_stubs" / version / runtime.STUB_NAME).write_text("stub")
        (root / "backends" / "python").mkdir(parents=True)
        roots.append(root)
    home = tmp_path / "home"
    first, second = (runtime.python_backend_dir(root, home) for root in roots)
    assert first != second
    assert os.readlink(first / "python" / runtime.STUB_NAME) == str(roots[0] / "python_backend_stubs" / version
                                                                    / runtime.STUB_NAME)
    assert runtime.python_backend_dir(roots[0], home) == first  # stable for one installation
