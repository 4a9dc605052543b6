"""The thin GPU-host part: probe the host (NVML, installed packages, disk) and run trtllm-build.

Everything that decides *what* to run lives in pure modules (flags, preflight, manifest); this
module only talks to the machine, so it stays small.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import shutil
import subprocess
from pathlib import Path

from trtkit.errors import BuildError
from trtkit.trtllm_build.preflight import CONTAINER, GpuFact, HostFacts

log = logging.getLogger(__name__)
TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt_libs")


def probe_gpus() -> tuple[tuple[GpuFact, ...], str | None]:
    """GPUs via NVML (nvidia-ml-py); on a machine without a driver, no GPUs and NVML's reason."""
    try:
        import pynvml
    except ImportError as exc:
        return (), f"nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return (), str(exc)
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(GpuFact(index, name, memory, (int(major), int(minor))))
        return tuple(gpus), None
    finally:
        pynvml.nvmlShutdown()


def _distribution_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def probe_tensorrt_llm() -> tuple[str | None, str | None]:
    """(version, None) when tensorrt_llm is importable-looking, else (None, reason). Does not import it:
    importing TensorRT-LLM initialises CUDA, which is slow and fails on CPU machines."""
    if importlib.util.find_spec("tensorrt_llm") is None:
        return None, "No module named 'tensorrt_llm'"
    version = _distribution_version("tensorrt_llm", "tensorrt-llm")
    if version is None:
        return None, "tensorrt_llm is on the path but has no package metadata"
    if shutil.which("trtllm-build") is None:
        return None, f"tensorrt_llm {version} is installed but the trtllm-build command is not on PATH"
    return version, None


def free_disk_bytes(path: Path) -> int:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def collect_host_facts(disk_path: Path) -> HostFacts:
    gpus, nvml_error = probe_gpus()
    trtllm_version, trtllm_error = probe_tensorrt_llm()
    return HostFacts(gpus=gpus, nvml_error=nvml_error, tensorrt_llm_version=trtllm_version,
                     tensorrt_llm_error=trtllm_error, tensorrt_version=_distribution_version(*TENSORRT_DISTRIBUTIONS),
                     free_disk_bytes=free_disk_bytes(disk_path))


def run_trtllm_build(command: list[str], log_path: Path) -> None:
    """Run trtllm-build, streaming its output to ``log_path``; a failure names the log and its tail."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log.info("running %s (log: %s)", " ".join(command), log_path)
    with log_path.open("w", encoding="utf-8") as handle:
        try:
            process = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
        except FileNotFoundError as exc:
            raise BuildError(f"{command[0]} is not on PATH ({exc.strerror}); run trtkit build inside "
                             f"{CONTAINER}") from exc
    if process.returncode != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise BuildError(f"trtllm-build failed with exit code {process.returncode} (last line: {tail[0]!r}); "
                         f"see the full log in {log_path}")
