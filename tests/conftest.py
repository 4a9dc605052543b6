"""Shared fixtures: an isolated TRTKIT_HOME per test, and expensive models made once per session.

Model conversions are cached in ``<repo>/.trtkit-cache`` (git-ignored) so repeated runs reuse them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_CACHE = Path(os.environ.get("TRTKIT_TEST_CACHE", REPO_ROOT / ".trtkit-cache"))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own TRTKIT_HOME (ledger, work folders); model caches stay shared."""
    home = tmp_path / "trtkit-home"
    monkeypatch.setenv("TRTKIT_HOME", str(home))
    monkeypatch.setenv("TRTKIT_CACHE", str(SHARED_CACHE))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return home


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The bundled SmolLM2-135M-Instruct as a Hugging Face folder (GGUF converted once, cached)."""
    from trtkit.sources.bundled import bundled_gguf_path
    from trtkit.sources.gguf import gguf_to_hf

    return gguf_to_hf(bundled_gguf_path("smollm2-135m"), SHARED_CACHE)


@pytest.fixture(scope="session")
def tiny_llama_dir(smollm2_dir: Path) -> Path:
    """A random 2-layer Llama (hidden 128, 4 heads / 2 KV heads) with SmolLM2's real tokenizer."""
    from trtkit.sources.resolve import generated_model_dir

    return generated_model_dir("tiny-llama", SHARED_CACHE)
