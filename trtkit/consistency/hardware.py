"""How many GPUs this host can give a server (CUDA_VISIBLE_DEVICES narrows what the driver reports)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def visible_gpu_count() -> int:
    driver_count = _driver_gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return driver_count
    entries = [entry for entry in visible.split(",") if entry.strip() and entry.strip() != "-1"]
    return min(len(entries), driver_count)


def _driver_gpu_count() -> int:
    if shutil.which("nvidia-smi"):
        try:
            result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
            if result.returncode == 0:
                return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.TimeoutExpired):
            pass
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0
