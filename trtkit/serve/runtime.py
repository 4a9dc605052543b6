"""Where tritonserver comes from and the environment it needs.

GPU hosts (NVIDIA's Triton TensorRT-LLM container) run ``/opt/tritonserver/bin/tritonserver`` with
its own backends. Everywhere else we run the binary bundled in the ``nvidia-pytriton`` wheel, set up
as the field notes record: a backend directory of our own whose ``python/`` folder holds symlinks
(a copied stub cannot find its bundled libraries and hangs in "loading"), ``LD_LIBRARY_PATH``
starting with this interpreter's LIBDIR (else the stub may load another libpython), and this
environment's ``bin`` first on PATH (the stub takes its Python from PATH).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from trtkit.config.paths import trtkit_home
from trtkit.errors import ServerError

CONTAINER_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")
BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
STUB_NAME = "triton_python_backend_stub"


@dataclass(slots=True, frozen=True)
class TritonRuntime:
    tritonserver: Path
    backend_dir: Path | None  # None: the binary's default backend directory
    env: dict[str, str]
    kind: str  # "container" or "pytriton"


def pytriton_root() -> Path:
    """The ``pytriton/tritonserver`` folder of the installed wheel (found without importing pytriton)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise ServerError("tritonserver not found: install it with `pip install --no-deps nvidia-pytriton==0.7.0` "
                          "or run inside NVIDIA's Triton TensorRT-LLM container")
    root = Path(spec.origin).parent / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise ServerError(f"the nvidia-pytriton wheel has no bundled tritonserver under {root}; reinstall it "
                          "with `pip install --force-reinstall --no-deps nvidia-pytriton==0.7.0`")
    return root


def python_backend_dir(root: Path, home: Path | None = None) -> Path:
    """A backend directory whose python/ holds symlinks to the wheel's backend and this Python's stub."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / STUB_NAME
    if not stub.is_file():
        raise ServerError(f"the bundled Python backend has no stub for Python {version}; use Python 3.10 to 3.12")
    # one folder per installation: two environments on one machine (or one TRTKIT_HOME) never relink each
    # other's stub while a server of the other is starting
    install = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:10]
    backends = (home or trtkit_home()) / "triton-backends" / f"py{version}-{install}"
    python_dir = backends / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    targets = {name: root / "backends" / "python" / name for name in BACKEND_FILES}
    targets[STUB_NAME] = stub
    for name, target in targets.items():
        link = python_dir / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        staged = python_dir / f".{name}.{os.getpid()}"  # replaced in one rename: never a moment without the link
        if staged.is_symlink() or staged.exists():
            staged.unlink()
        staged.symlink_to(target)
        os.replace(staged, link)
    return backends


def stub_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The process environment the Python-backend stub needs to run in this virtual environment."""
    env = dict(os.environ if base is None else base)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
    env_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in (env_bin, env.get("PATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def resolve_runtime(tritonserver: Path | None = None) -> TritonRuntime:
    """Pick the binary: an explicit path, else the container's, else the pytriton wheel's."""
    explicit = tritonserver or (Path(os.environ["TRTKIT_TRITONSERVER"]) if os.environ.get("TRTKIT_TRITONSERVER")
                                else None)
    if explicit is not None and explicit != CONTAINER_TRITONSERVER:
        if not explicit.is_file():
            raise ServerError(f"tritonserver binary {explicit} does not exist; fix the path or unset TRTKIT_TRITONSERVER")
        return TritonRuntime(explicit, None, dict(os.environ), "explicit")
    if CONTAINER_TRITONSERVER.is_file():
        return TritonRuntime(CONTAINER_TRITONSERVER, None, dict(os.environ), "container")
    root = pytriton_root()
    return TritonRuntime(root / "bin" / "tritonserver", python_backend_dir(root), stub_environment(), "pytriton")
