"""Issue 11 item 10: the GPU-host install keeps the container's pins and still brings every import.

Checked against tests/contracts/r26.04-requirements.txt, a mirror of the TensorRT-LLM 1.2 requirements
that the r26.04 trtllm container installs (source and commit in its header)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
GPU_HOST = ROOT / "requirements" / "gpu-host.txt"
CONTAINER = ROOT / "tests" / "contracts" / "r26.04-requirements.txt"
# the packages trtkit runs on a GPU host (the gateway and benchmarks bring their own requirements)
GPU_HOST_PACKAGES = ("consistency", "cli", "transport", "governance", "conversation", "config", "checkpoint",
                     "pipeline", "refengine", "repository", "serve", "sources", "tokenizer", "triton_models",
                     "trtllm_build", "wire")
# what the container's pinned packages pull in themselves (their own install requirements)
TRANSITIVE = {"transformers": {"tokenizers", "safetensors", "huggingface-hub", "pyyaml", "requests", "tqdm",
                               "regex", "filelock", "packaging"},
              "torch": {"jinja2", "sympy", "networkx", "fsspec"}, "datasets": {"pyarrow"}}
# modules the Triton server itself provides to Python models
SERVER_MODULES = {"triton_python_backend_utils"}
DISTRIBUTION = {"google": "protobuf", "yaml": "pyyaml", "pynvml": "nvidia-ml-py", "modelopt": "nvidia-modelopt",
                "rank_bm25": "rank-bm25", "grpc": "grpcio", "jinja2": "jinja2", "prometheus_client": "prometheus-client"}


def requirements(path: Path) -> dict[str, Requirement]:
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            found[canonicalize_name(req.name)] = req
    return found


def third_party_imports() -> set[str]:
    names: set[str] = set()
    for package in GPU_HOST_PACKAGES:
        assert (ROOT / "trtkit" / package).is_dir(), f"trtkit/{package} is gone: update GPU_HOST_PACKAGES"
        for path in (ROOT / "trtkit" / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "trtkit" and n not in SERVER_MODULES}


def test_gpu_host_install_never_replaces_the_container_pins() -> None:
    container, ours = requirements(CONTAINER), requirements(GPU_HOST)
    for pinned in ("tensorrt-llm", "nvidia-modelopt", "transformers", "torch", "numpy", "tensorrt"):
        assert pinned in container and pinned not in ours, pinned
    assert str(container["nvidia-modelopt"].specifier) == "~=0.37.0"
    assert str(container["transformers"].specifier) == "==4.57.1"


def test_gpu_host_install_brings_what_the_container_lacks() -> None:
    ours = requirements(GPU_HOST)
    assert {"tritonclient", "gguf"} <= set(ours)  # the container installs neither
    assert "grpc" in ours["tritonclient"].extras


def test_every_import_is_provided_on_the_gpu_host() -> None:
    container, ours = requirements(CONTAINER), requirements(GPU_HOST)
    provided = set(container) | set(ours)
    for parent, children in TRANSITIVE.items():
        if parent in container:
            provided |= children
    missing = {m for m in third_party_imports()
               if canonicalize_name(DISTRIBUTION.get(m, m)) not in provided}
    assert not missing, f"add these to requirements/gpu-host.txt: {sorted(missing)}"


def test_shared_packages_accept_the_container_versions() -> None:
    """A package in both lists: the container's pinned (==) version must satisfy our specifier."""
    container, ours = requirements(CONTAINER), requirements(GPU_HOST)
    for name in set(container) & set(ours):
        pin = [s.version for s in container[name].specifier if s.operator == "=="]
        if pin:
            assert ours[name].specifier.contains(pin[0], prereleases=True), name


def test_readme_gpu_section_uses_this_install() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## GPU hosts"):]
    section = section[:section.index("\n## ", 3)]
    assert "pip install --no-deps -e . && pip install -r requirements/gpu-host.txt" in section
    assert not re.search(r"nvidia-modelopt==0\.47", section)
    assert "scripts/gpu_smoke.sh" in section
