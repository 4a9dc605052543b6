"""What a host offers an engine build or a served engine: its GPUs (name, memory, SM), the TensorRT-LLM and
TensorRT it has installed, its free disk; and the probes that find out (NVML, package metadata, disk usage).

The records are plain data: the build preflight, the engine manifest's host guard, `trtkit deploy` (which
refuses engines built for another GPU) and `trtkit check` all judge a ``HostFacts``, and tests build them
by hand, so every rule runs on a CPU machine. Only ``collect_host_facts`` and its probes touch the machine.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True, frozen=True)
class GpuFact:
    index: int  # NVML's (PCI bus order)
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    uuid: str = ""  # "GPU-...": what CUDA_VISIBLE_DEVICES may name instead of an index


@dataclass(slots=True, frozen=True)
class HostFacts:
    gpus: tuple[GpuFact, ...] = ()
    nvml_error: str | None = None
    tensorrt_llm_version: str | None = None
    tensorrt_llm_error: str | None = None
    tensorrt_version: str | None = None
    free_disk_bytes: int = 0


TENSORRT_DISTRIBUTIONS = ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt_libs")


def probe_gpus() -> tuple[tuple[GpuFact, ...], str | None]:
    """The GPUs a CUDA process started here will see: NVML's (nvidia-ml-py) narrowed by CUDA_VISIBLE_DEVICES, which
    NVML ignores (``visible_gpus``); on a machine without a driver, no GPUs and NVML's reason."""
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
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            gpus.append(GpuFact(index, name, memory, (int(major), int(minor)), uuid))
        return visible_gpus(tuple(gpus), os.environ.get("CUDA_VISIBLE_DEVICES"),
                            os.environ.get("CUDA_DEVICE_ORDER")), None
    finally:
        pynvml.nvmlShutdown()


def visible_gpus(gpus: tuple[GpuFact, ...], cuda_visible_devices: str | None,
                 device_order: str | None = None) -> tuple[GpuFact, ...]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves a CUDA process, in its order. Entries are indices or UUID prefixes
    ("GPU-8e1f..."); CUDA ignores every entry from the first it cannot use on, and an empty value hides every GPU.
    An index is CUDA's, which follows NVML's PCI order only with CUDA_DEVICE_ORDER=PCI_BUS_ID or on a host whose
    GPUs are all alike; otherwise (and for MIG entries) which GPU an index means is not known here, and every GPU
    is kept: a check then holds all of them to the rule."""
    if cuda_visible_devices is None:
        return gpus
    alike = len({(g.name, g.compute_capability) for g in gpus}) <= 1
    chosen: list[GpuFact] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.isdigit():
            if not (alike or (device_order or "").upper() == "PCI_BUS_ID"):
                return gpus
            found = next((g for g in gpus if g.index == int(entry)), None)
        elif entry.startswith("GPU-"):
            found = next((g for g in gpus if g.uuid and g.uuid.startswith(entry)), None)
        elif entry.startswith("MIG-"):
            return gpus
        else:
            found = None
        if found is None or found in chosen:
            break
        chosen.append(found)
    return tuple(chosen)


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
