"""Fixtures of the repository tests: tokenizers (cheap). The shared echo-model server `live` is in tests/conftest.py."""

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
