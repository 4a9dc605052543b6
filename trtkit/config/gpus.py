"""The GPUs people deploy on: total memory and compute capability, for planning without the GPU. The one
table: `build.target_gpu` is validated against it when a config loads, `trtkit plan --gpu` when it is parsed.

``memory_bytes`` is the total that NVML reports (what ``nvidia-smi`` prints in MiB) where one was recorded
(``memory_source="nvml"``): an "80GB" H100 reports 81559 MiB. For the Blackwell parts added from NVIDIA's
spec sheets (``memory_source="spec sheet"``) it is the sheet's capacity in GB (10^9 bytes); NVML's total
for such a part is a little lower, so plans on them are slightly optimistic until a reading replaces it.
Compute capabilities are NVIDIA's (developer.nvidia.com/cuda-gpus): data-center Blackwell B200/GB200 10.0,
B300/GB300 10.3; RTX Blackwell (RTX PRO 6000, GeForce RTX 5090) 12.0; GB10 (DGX Spark) 12.1. What each SM
can build is ``gpu_support``'s answer, not this table's.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.errors import BuildError

MIB = 1 << 20
GB = 10**9


@dataclass(slots=True, frozen=True)
class GpuSpec:
    kind: str                 # our key, e.g. "H100-80GB"
    memory_bytes: int
    compute_capability: tuple[int, int]
    architecture: str
    nvml_markers: tuple[str, ...]  # substrings of the NVML device name, lower case, all must match
    memory_source: str = "nvml"    # "nvml": an NVML total; "spec sheet": NVIDIA's published capacity

    @property
    def sm(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]


GPU_TABLE: tuple[GpuSpec, ...] = (
    GpuSpec("T4", 15360 * MIB, (7, 5), "Turing", ("t4",)),
    GpuSpec("A10G", 23028 * MIB, (8, 6), "Ampere", ("a10g",)),
    GpuSpec("A10", 23028 * MIB, (8, 6), "Ampere", ("a10",)),
    GpuSpec("L4", 23034 * MIB, (8, 9), "Ada Lovelace", ("l4",)),
    GpuSpec("L40S", 46068 * MIB, (8, 9), "Ada Lovelace", ("l40s",)),
    GpuSpec("L40", 46068 * MIB, (8, 9), "Ada Lovelace", ("l40",)),
    GpuSpec("A100-40GB", 40960 * MIB, (8, 0), "Ampere", ("a100", "40gb")),
    GpuSpec("A100-80GB", 81920 * MIB, (8, 0), "Ampere", ("a100", "80gb")),
    GpuSpec("H100-80GB", 81559 * MIB, (9, 0), "Hopper", ("h100", "80gb")),
    GpuSpec("H100-PCIE", 81559 * MIB, (9, 0), "Hopper", ("h100", "pcie")),
    GpuSpec("H100-NVL", 95830 * MIB, (9, 0), "Hopper", ("h100", "nvl")),
    GpuSpec("H200", 143771 * MIB, (9, 0), "Hopper", ("h200",)),
    GpuSpec("GH200", 97871 * MIB, (9, 0), "Hopper", ("gh200",)),
    GpuSpec("B200", 183359 * MIB, (10, 0), "Blackwell", ("b200",)),
    GpuSpec("GB200", 186 * GB, (10, 0), "Blackwell", ("gb200",), "spec sheet"),
    GpuSpec("B300", 288 * GB, (10, 3), "Blackwell Ultra", ("b300",), "spec sheet"),
    # NVML names it "NVIDIA GB300": the B300 marker needs "b300" as a word of its own, so it never matches it
    GpuSpec("GB300", 288 * GB, (10, 3), "Blackwell Ultra", ("gb300",), "spec sheet"),
    GpuSpec("RTX-PRO-6000-BLACKWELL", 96 * GB, (12, 0), "Blackwell (RTX)", ("rtx pro 6000", "blackwell"),
            "spec sheet"),
    GpuSpec("RTX-5090", 32 * GB, (12, 0), "Blackwell (RTX)", ("rtx 5090",), "spec sheet"),
    # unified LPDDR5X shared with the Grace CPU: less than this is free for the KV cache
    GpuSpec("GB10", 128 * GB, (12, 1), "Blackwell (RTX)", ("gb10",), "spec sheet"),
)

_ALIASES = {"H100": "H100-80GB", "H100-SXM": "H100-80GB", "A100": "A100-80GB",
            "H200-141GB": "H200", "GH200-96GB": "GH200", "RTX-PRO-6000": "RTX-PRO-6000-BLACKWELL",
            "RTX5090": "RTX-5090", "GEFORCE-RTX-5090": "RTX-5090", "DGX-SPARK": "GB10", "B300-288GB": "B300",
            "GB300-288GB": "GB300"}


def known_gpu_kinds() -> list[str]:
    return [spec.kind for spec in GPU_TABLE]


def unknown_gpu(name: str) -> str | None:
    """What is wrong with ``name`` as a GPU kind (build.target_gpu checks with it), or None."""
    try:
        lookup_gpu(name)
    except BuildError:
        return f"{name!r} is not a GPU trtkit knows; use one of {', '.join(known_gpu_kinds())}, or leave it unset"
    return None


def lookup_gpu(name: str) -> GpuSpec:
    """A GPU by our kind name (case-insensitive, a few aliases), e.g. ``H100-80GB`` or ``l4``."""
    wanted = _ALIASES.get(name.strip().upper(), name.strip().upper())
    for spec in GPU_TABLE:
        if spec.kind.upper() == wanted:
            return spec
    raise BuildError(f"unknown GPU {name!r}; use one of {', '.join(known_gpu_kinds())}")


def match_nvml_name(device_name: str) -> GpuSpec | None:
    """The table entry for an NVML device name such as 'NVIDIA H100 80GB HBM3', or None."""
    lowered = device_name.lower()
    # Longer marker sets first, so "a10g" wins over "a10" and "l40s" over "l40".
    for spec in sorted(GPU_TABLE, key=lambda s: -sum(len(m) for m in s.nvml_markers)):
        if all(_has_token(lowered, marker) for marker in spec.nvml_markers):
            return spec
    return None


def _has_token(name: str, marker: str) -> bool:
    """Marker as a whole word prefix: 'l4' must not match 'l40s', 'h100' may match 'h100-sxm'."""
    import re

    return re.search(rf"(?<![a-z0-9]){re.escape(marker)}(?![0-9])", name) is not None
