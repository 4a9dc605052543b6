"""Where trtkit keeps its files. ``TRTKIT_HOME`` moves all of them (tests point it at a temp folder)."""

from __future__ import annotations

import os
from pathlib import Path

from trtkit.config.schema import ModelConfig


def trtkit_home(*, create: bool = True) -> Path:
    """``create=False``: only name it (a reading command must not leave a folder behind)."""
    home = Path(os.environ.get("TRTKIT_HOME", Path.home() / ".trtkit")).expanduser()
    if create:
        home.mkdir(parents=True, exist_ok=True)
    return home


def cache_dir() -> Path:
    """Model conversions (GGUF -> HF) shared by every config; safe to delete."""
    path = Path(os.environ.get("TRTKIT_CACHE", trtkit_home() / "cache")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def workdir(config: ModelConfig) -> Path:
    """Artifacts of one model: checkpoints/, engines/, reports/."""
    path = Path(config.workdir) if config.workdir else trtkit_home() / "work" / config.name
    path.mkdir(parents=True, exist_ok=True)
    return path
