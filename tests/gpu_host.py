"""The one gate of the tests marked ``gpu``: a GPU host with TensorRT-LLM 1.2.x importable (tests/conftest.py applies it).

"Importable" is tried for real, in a child process and only where NVML sees a GPU: ``import tensorrt_llm`` starts
CUDA, and an import that fails (a wheel without its driver, a placeholder package) must not take pytest down. On a
machine without a GPU the reason is known at once. Every gated test is skipped with the same reason, which starts
with ``GPU-gated``; scripts/gpu_smoke.sh runs them on a GPU host and fails if one of them skips there.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys

LABEL = "GPU-gated: needs a GPU host with TensorRT-LLM 1.2.x importable"
IMPORT_TIMEOUT_S = 300  # importing tensorrt_llm initialises CUDA and loads its bindings: tens of seconds on a GPU


@functools.cache
def missing() -> str | None:
    """What this machine lacks for the gpu-marked tests (None: nothing)."""
    from trtkit.trtllm_build.host_facts import probe_gpus

    gpus, nvml_error = probe_gpus()
    problems = [] if gpus else [f"no NVIDIA GPU (NVML: {nvml_error})"]
    if importlib.util.find_spec("tensorrt_llm") is None:
        problems.append("no tensorrt_llm module")
    elif gpus:
        problems += _import_problems()
    else:
        problems.append("tensorrt_llm is installed, but importing it needs a GPU driver")
    return "; ".join(problems) or None


def _import_problems() -> list[str]:
    try:
        done = subprocess.run([sys.executable, "-c", "import tensorrt_llm; print(tensorrt_llm.__version__)"],
                              capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return [f"import tensorrt_llm did not finish in {IMPORT_TIMEOUT_S} s"]
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return [f"import tensorrt_llm failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"]
    version = lines[-1].strip()
    return [] if version.startswith("1.2.") else [f"TensorRT-LLM {version} is not 1.2.x"]


def skip_reason() -> str | None:
    problem = missing()
    return None if problem is None else f"{LABEL}: {problem}"
