"""The GPU-host install (issue 11 item 10, issue 34 item 10): inside the r26.04 container it needs no network,
moves none of the container's packages, and still brings every import trtkit makes there.

tests/contracts/r26.04-requirements.txt is what the container installs, read from upstream (each line names its
source). The install freezes the container into a constraints file first, so pip can only keep a container
package where it is, or fail: `resolve_against_container` predicts that outcome for requirements/gpu-host.txt.
scripts/setup_pins_env.sh runs the same commands for real against a stand-in container (.venv-pins)."""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
GPU_HOST = ROOT / "requirements" / "gpu-host.txt"
CONTAINER = ROOT / "tests" / "contracts" / "r26.04-requirements.txt"
# The documented commands, exactly (README "GPU hosts", requirements/gpu-host.txt, scripts/gpu_smoke.sh)
FREEZE = "pip list --format=freeze --exclude-editable > container-constraints.txt"
INSTALL_TRTKIT = "pip install --no-deps --no-build-isolation -e ."
INSTALL_REQUIREMENTS = "pip install -c container-constraints.txt -r requirements/gpu-host.txt"
OFFLINE = ("pip download --only-binary=:all: --python-version 3.12",
           "-d wheels -c container-constraints.txt -r requirements/gpu-host.txt",
           "pip install --no-index --find-links wheels -c container-constraints.txt -r requirements/gpu-host.txt")
# the source every contract line names: repository@branch-or-tag, full commit, file
SOURCE = re.compile(r"(NVIDIA/TensorRT-LLM|triton-inference-server/tensorrtllm_backend)@(\S+) ([0-9a-f]{40}) (\S+)")
LOWER = (">=", ">")

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


@dataclass(frozen=True, slots=True)
class ContainerPackage:
    requirement: Requirement  # as the container's sources state it
    source: str

    @property
    def version(self) -> str | None:
        """The exact version, when the sources pin one."""
        pins = [s.version for s in self.requirement.specifier if s.operator in ("==", "===")]
        return pins[0] if pins else None


def read_requirements(path: Path) -> dict[str, Requirement]:
    return {name: package.requirement for name, package in read_contract(path).items()}


def read_contract(path: Path) -> dict[str, ContainerPackage]:
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        text, _, comment = line.partition("#")
        if text.strip():
            requirement = Requirement(text.strip())
            found[canonicalize_name(requirement.name)] = ContainerPackage(requirement, comment.strip())
    return found


def moves(requirement: Requirement, installed: ContainerPackage) -> str | None:
    """Why pip, held to the container's freeze, could not install ``requirement`` (it would have to move the
    container's package); None when every version the container can have satisfies it."""
    ours, theirs = requirement.specifier, installed.requirement.specifier
    if installed.version is not None:
        if ours.contains(installed.version, prereleases=True):
            return None
        return f"{requirement} would move {requirement.name} {installed.version} ({installed.source})"
    if not ours or (all(s.operator in LOWER for s in ours) and _implied(ours, theirs)):
        return None
    return (f"{requirement} may move {requirement.name}: the container's version is only known as "
            f"'{theirs or 'any'}' ({installed.source})")


def _implied(ours: SpecifierSet, theirs: SpecifierSet) -> bool:
    """Every version in ``theirs`` passes our lower bounds: theirs has a lower bound at least as high."""
    floors = [Version(s.version) for s in theirs if s.operator in (">=", ">", "~=", "==")]
    return all(any(floor > Version(s.version) or (floor == Version(s.version) and s.operator == ">=")
                   for floor in floors) for s in ours)


def resolve_against_container(requirements: dict[str, Requirement],
                              container: dict[str, ContainerPackage]) -> list[str]:
    return [reason for name, requirement in requirements.items() if name in container
            if (reason := moves(requirement, container[name])) is not None]


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


def test_every_contract_line_names_its_source() -> None:
    for name, package in read_contract(CONTAINER).items():
        assert SOURCE.search(package.source), f"{name}: no 'repository@ref <40-hex commit> file' in {package.source!r}"


# where what the contract says can be held to something it was not typed from (issue 51 item 5)
DOCKERFILE_COMMIT = "ce68ff5fd0a746eac895cfb4a5677b329c5bc707"
DOCKERFILE = "dockerfile/Dockerfile.triton.trt_llm_backend"
BACKEND_MIRROR = Path(os.environ.get("TRTKIT_UPSTREAM_MIRRORS", "/work/.mirror")) / \
    "triton-inference-server+tensorrtllm_backend" / "repo"
# the real container's `pip list --format=freeze`, as scripts/gpu_smoke.sh records it on a GPU host
PIP_LIST = ROOT / "tests" / "contracts" / "r26.04-pip-list.txt"
# contract line -> the Dockerfile's ARG (or literal pin) that sets it
DOCKERFILE_PINS = {"torch": "PIP_WHL_VER_TORCH", "torchvision": "PIP_WHL_VER_TORCHVISION",
                   "torchao": "PIP_WHL_VER_TORCHAO", "pytorch-triton": "PIP_WHL_VER_PYTORCH_TRITON",
                   "tensorrt": "TRT_VER", "tensorrt-llm": "TENSORRTLLM_VER", "polygraphy": "polygraphy=="}


def test_the_dockerfile_pins_are_the_dockerfiles_own() -> None:
    """The torch, TensorRT and TensorRT-LLM lines against the r26.04 Dockerfile itself, read from a snapshot of
    tensorrtllm_backend where one is reachable (the search tools' fetch leaves it there)."""
    import subprocess

    if not (BACKEND_MIRROR / "HEAD").is_file():
        pytest.skip(f"no snapshot of triton-inference-server/tensorrtllm_backend at {BACKEND_MIRROR}: the lines' "
                    "sources (tests/contracts/verified-commits.json) are the only check here")
    text = subprocess.run(["git", "--git-dir", str(BACKEND_MIRROR), "show", f"{DOCKERFILE_COMMIT}:{DOCKERFILE}"],
                          capture_output=True, text=True, check=True).stdout
    container = read_contract(CONTAINER)
    for name, arg in DOCKERFILE_PINS.items():
        pattern = rf"{re.escape(arg)}(\S+?)\s" if arg.endswith("==") else rf"^ARG {arg}=(\S+)$"
        found = re.search(pattern, text, re.M)
        assert found, f"{arg} is not in the Dockerfile at {DOCKERFILE_COMMIT}"
        assert container[name].version == found.group(1), (name, container[name].version, found.group(1))
        assert container[name].source.startswith(f"triton-inference-server/tensorrtllm_backend@r26.04 "
                                                 f"{DOCKERFILE_COMMIT}"), name


def test_the_contract_holds_what_the_real_container_has() -> None:
    """Every line of the contract against the real container's package list, once scripts/gpu_smoke.sh has
    recorded one on a GPU host (commit its $WORK/container-pip-list.txt as tests/contracts/r26.04-pip-list.txt)."""
    if not PIP_LIST.is_file():
        pytest.skip(f"no recording of the real r26.04 container's pip list ({PIP_LIST.name}): it needs a GPU host; "
                    "scripts/gpu_smoke.sh writes one")
    installed = {canonicalize_name(line.split("==", 1)[0]): line.split("==", 1)[1].strip()
                 for line in PIP_LIST.read_text(encoding="utf-8").splitlines() if "==" in line}
    for name, package in read_contract(CONTAINER).items():
        assert name in installed, f"{name}: the contract lists it, the container does not have it"
        assert package.requirement.specifier.contains(installed[name], prereleases=True), (name, installed[name])


def test_gpu_host_requirements_move_nothing_in_the_container() -> None:
    assert resolve_against_container(read_requirements(GPU_HOST), read_contract(CONTAINER)) == []
    tests = ROOT / "requirements" / "gpu-host-tests.txt"  # what the gpu tests need there (scripts/gpu_smoke.sh)
    assert resolve_against_container(read_requirements(tests), read_contract(CONTAINER)) == []


@pytest.mark.parametrize(("line", "moved"), [
    ("transformers>=5", True), ("transformers>=4.56", False),
    ("torch<=2.9.0", True), ("torch>=2.4", False),
    ("tensorrt~=10.13.3", True), ("tensorrt~=10.14.1", False),
    ("nvidia-modelopt==0.47.0", True), ("nvidia-modelopt", False),
    ("numpy>=2", True), ("numpy>=1.24", True), ("numpy", False),
    ("accelerate>=1.8", True), ("accelerate>=1.0", False), ("setuptools>=80", True),
    ("tritonclient[grpc]>=2.50", False),  # not in the container: nothing to move
])
def test_the_check_catches_a_requirement_that_would_move_a_pin(line: str, moved: bool) -> None:
    """numpy>=1.24 is flagged although 1.26.4 is likely: the sources only say numpy<2, so a lower bound can move it."""
    requirement = Requirement(line)
    problems = resolve_against_container({canonicalize_name(requirement.name): requirement},
                                         read_contract(CONTAINER))
    assert bool(problems) is moved, problems


def test_gpu_host_install_never_names_the_container_pins() -> None:
    container, ours = read_contract(CONTAINER), read_requirements(GPU_HOST)
    for pinned in ("tensorrt-llm", "nvidia-modelopt", "transformers", "torch", "numpy", "tensorrt"):
        assert pinned in container and pinned not in ours, pinned


def test_editable_install_builds_with_the_containers_setuptools() -> None:
    """`--no-build-isolation` builds with the container's setuptools (TensorRT-LLM asks <80, so 79.0.1; the
    `license = "Apache-2.0"` string needs >= 77). setup_pins_env.sh builds with setuptools<80 for real."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    requires = re.search(r"\[build-system\]\s*requires = \[([^\]]*)\]", pyproject)
    assert requires, "pyproject.toml: no [build-system] requires"
    container = read_contract(CONTAINER)
    for line in re.findall(r'"([^"]+)"', requires.group(1)):
        requirement = Requirement(line)
        theirs = container[canonicalize_name(requirement.name)].requirement.specifier
        assert requirement.specifier.contains("79.0.1") and theirs.contains("79.0.1"), line


def test_gpu_host_install_brings_what_the_container_lacks() -> None:
    ours = read_requirements(GPU_HOST)
    assert {"tritonclient", "gguf"} <= set(ours)  # the container installs neither
    assert "grpc" in ours["tritonclient"].extras


def test_every_import_is_provided_on_the_gpu_host() -> None:
    container, ours = read_requirements(CONTAINER), read_requirements(GPU_HOST)
    provided = set(container) | set(ours)
    for parent, children in TRANSITIVE.items():
        if parent in container:
            provided |= children
    missing = {m for m in third_party_imports()
               if canonicalize_name(DISTRIBUTION.get(m, m)) not in provided}
    assert not missing, f"add these to requirements/gpu-host.txt: {sorted(missing)}"


def test_shared_packages_accept_the_container_versions() -> None:
    """A package in both lists: the container's pinned (==) version must satisfy our specifier."""
    container, ours = read_contract(CONTAINER), read_requirements(GPU_HOST)
    for name in set(container) & set(ours):
        version = container[name].version
        if version:
            assert ours[name].specifier.contains(version, prereleases=True), name


def test_the_documented_install_is_the_one_that_works() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## GPU hosts"):]
    section = section[:section.index("\n## ", 3)]
    for text in (section, GPU_HOST.read_text(encoding="utf-8")):
        for command in (FREEZE, INSTALL_TRTKIT, INSTALL_REQUIREMENTS, *OFFLINE):
            assert command in text, command
        assert "pip install --no-deps -e ." not in text  # needs the network for setuptools
    assert INSTALL_TRTKIT in (ROOT / "scripts" / "gpu_smoke.sh").read_text(encoding="utf-8")
    assert not re.search(r"nvidia-modelopt==0\.47", section) and "4.57.1" not in section
    assert "scripts/gpu_smoke.sh" in section
