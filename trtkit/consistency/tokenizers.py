"""The tokenizer facts the check compares: end and pad ids and the vocabulary size."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass(slots=True, frozen=True)
class TokenizerInfo:
    path: Path
    end_id: int | None
    pad_id: int | None
    vocab_size: int


def has_tokenizer_files(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer_info(path: Path) -> TokenizerInfo | None:
    """None when the folder does not load as a tokenizer (reported as a finding by the caller)."""
    stamp = tuple((path / name).stat().st_mtime_ns if (path / name).is_file() else 0
                  for name in (*TOKENIZER_FILES, "special_tokens_map.json"))
    return _load_cached(path.resolve(), stamp)


@functools.lru_cache(maxsize=16)
def _load_cached(path: Path, stamp: tuple[int, ...]) -> TokenizerInfo | None:
    from transformers import AutoTokenizer  # heavy import: only when a repository is checked

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        logger.info("tokenizer at %s does not load: %s", path, exc)
        return None
    return TokenizerInfo(path, tokenizer.eos_token_id, tokenizer.pad_token_id, len(tokenizer))
