"""Fixtures of the repository tests: tokenizers (cheap) and, for live tests, one shared tritonserver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def bytelevel_tokenizer(tiny_llama_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_llama_dir), local_files_only=True)


@pytest.fixture(scope="session")
def sentencepiece_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from tokenizers_for_tests import sentencepiece_tokenizer as build

    return build(tmp_path_factory.mktemp("sp-tokenizer"))


@pytest.fixture(scope="session", params=["byte_level_bpe", "sentencepiece"])
def any_tokenizer(request: pytest.FixtureRequest, bytelevel_tokenizer, sentencepiece_tokenizer):
    return bytelevel_tokenizer if request.param == "byte_level_bpe" else sentencepiece_tokenizer


@pytest.fixture(scope="session")
def echo_model_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from echo_model import build_echo_model

    out = tmp_path_factory.mktemp("echo-model")
    build_echo_model(tiny_llama_dir, out)
    return out


@pytest.fixture(scope="session")
def live(echo_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """ONE tritonserver for every live test: the CPU repository of tiny-llama.yaml on the echo model."""
    from live_client import Live

    from trtkit.config import load_config
    from trtkit.repository import deploy_repository
    from trtkit.serve import TritonServer

    config = load_config(Path(__file__).resolve().parents[2] / "model_configs" / "tiny-llama.yaml")
    repo = tmp_path_factory.mktemp("live") / "repo"
    deploy_repository(config, echo_model_dir, repo, target="cpu")
    with TritonServer(repo, start_timeout_s=150, log_path=repo.parent / "tritonserver.log") as server:
        yield Live(server, echo_model_dir)
