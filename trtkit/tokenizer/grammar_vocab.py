"""The tokenizer as a grammar engine sees it: xgrammar's tokenizer-info file.

TensorRT-LLM's C++ backend reads it from the ``xgrammar_tokenizer_info_path`` parameter of the ``tensorrt_llm``
model (triton_backend/inflight_batcher_llm/src/model_instance_state.cc, getGuidedDecodingConfigFromParams, read at
NVIDIA/TensorRT-LLM 0c8de69): a JSON object with ``encoded_vocab`` (every token string, at its id),
``tokenizer_str`` (the serialized ``tokenizer.json``) and ``stop_token_ids``. Upstream makes it with
examples/generate_xgrammar_tokenizer_info.py; trtkit writes the same keys into the repository, and the CPU engine
reads that very file, so both engines mask with one vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtkit.errors import RepositoryError

FILE_NAME = "xgrammar_tokenizer_info.json"
KEYS = ("encoded_vocab", "tokenizer_str", "stop_token_ids")


def tokenizer_info(tokenizer_dir: Path) -> dict[str, Any]:
    """The three keys from ``tokenizer_dir``'s tokenizer.json; the stop id is the tokenizer's end of sequence,
    the id the clients send as ``end_id`` (as upstream's generator takes it)."""
    from trtkit.tokenizer.fast_tokenizer import load_fast_tokenizer

    if not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise RepositoryError(f"guided decoding needs {tokenizer_dir}/tokenizer.json (a fast tokenizer); add it, "
                              "or set serve.guided_decoding: none")
    try:
        tokenizer = load_fast_tokenizer(tokenizer_dir)
    except Exception as exc:  # tokenizers' own message names no file
        raise RepositoryError(f"{tokenizer_dir}/tokenizer.json cannot be loaded ({exc}); point --tokenizer at the "
                              "model's tokenizer folder, or set serve.guided_decoding: none") from exc
    if tokenizer.eos_token_id is None:
        raise RepositoryError(f"the tokenizer in {tokenizer_dir} names no eos_token, so a grammar could never end; "
                              "set eos_token in tokenizer_config.json, or set serve.guided_decoding: none")
    vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
    encoded = [""] * (max(vocab.values()) + 1)  # at its id: a gap in the ids stays an empty (never allowed) entry
    for token, token_id in vocab.items():
        encoded[token_id] = token
    return {"encoded_vocab": encoded, "tokenizer_str": tokenizer.backend.to_str(),
            "stop_token_ids": [int(tokenizer.eos_token_id)]}


def write_tokenizer_info(tokenizer_dir: Path, path: Path) -> Path:
    path.write_text(json.dumps(tokenizer_info(tokenizer_dir), ensure_ascii=False), encoding="utf-8")
    return path


def read_tokenizer_info(path: Path) -> dict[str, Any]:
    """The file as the C++ backend parses it: every key present, of the right type."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RepositoryError(f"xgrammar tokenizer info {path} cannot be read ({exc}); regenerate the repository "
                              "with trtkit deploy") from exc
    missing = [key for key in KEYS if key not in data]
    if missing or not isinstance(data.get("encoded_vocab"), list) or not isinstance(data.get("stop_token_ids"), list):
        raise RepositoryError(f"xgrammar tokenizer info {path} lacks {', '.join(missing) or 'a list field'}; "
                              "regenerate the repository with trtkit deploy")
    return data
