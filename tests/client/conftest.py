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


@pytest.fixture(scope="session")
def live_server(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """ONE tritonserver for every live client test: the tiny model's CPU repository (ensemble + BLS)."""
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    config = load_config(TINY_CONFIG)
    repo = tmp_path_factory.mktemp("client-live") / "repo"
    deploy_repository(config, tiny_llama_dir, repo, target="cpu")
    with TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log") as server:
        yield server


def client_config(config: ModelConfig, **client_changes: object) -> ModelConfig:
    """The tiny config with some client.* fields replaced (nested sections as whole objects)."""
    from dataclasses import replace

    return replace(config, client=replace(config.client, **client_changes))  # type: ignore[arg-type]
