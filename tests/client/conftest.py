"""Client test fixtures: the tiny model's config and tokenizer; one shared live tritonserver (see live tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.client.tokens import TokenCounter
from trtkit.config import load_config
from trtkit.config.schema import ModelConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = REPO_ROOT / "model_configs" / "tiny-llama.yaml"


@pytest.fixture(scope="session")
def tiny_config(tiny_llama_dir: Path) -> ModelConfig:
    return load_config(TINY_CONFIG)


@pytest.fixture(scope="session")
def tiny_counter(tiny_llama_dir: Path) -> TokenCounter:
    return TokenCounter(tiny_llama_dir, chat_template=False)
