"""GGUF file -> a normal Hugging Face folder (bf16 safetensors + tokenizer), converted once and cached.

transformers dequantizes GGUF weights on load but refuses to ``save_pretrained`` a model that still
carries its GGUF quantization config; dropping that config and copying the state dict into a fresh
model gives a plain folder that every later stage (ModelOpt, our engine, tokenizers) reads.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from pathlib import Path
from typing import Any

from trtkit.errors import ModelSourceError
from trtkit.sources.cached_folder import build_once
from trtkit.sources.portable import FOLDER_FORMAT, make_portable

log = logging.getLogger(__name__)
COMPLETE_MARKER = ".trtkit-complete"


def file_fingerprint(path: Path) -> str:
    """Cheap identity of a large file: size, mtime-independent head and tail bytes."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def converted_dir(gguf_path: Path, cache_root: Path, dtype: str = "bfloat16") -> Path:
    """Where ``gguf_to_hf`` keeps the Hugging Face folder of ``gguf_path`` (complete once it holds the marker)."""
    return cache_root / "gguf" / f"{gguf_path.stem}-{file_fingerprint(gguf_path)}-{dtype}-{FOLDER_FORMAT}"


def is_converted(gguf_path: Path, cache_root: Path, dtype: str = "bfloat16") -> bool:
    return _is_complete(converted_dir(gguf_path, cache_root, dtype))


def _is_complete(folder: Path) -> bool:
    return (folder / COMPLETE_MARKER).is_file()


def gguf_to_hf(gguf_path: Path, cache_root: Path, dtype: str = "bfloat16") -> Path:
    """Return a cached HF folder for ``gguf_path``, converting it the first time (once, also when asked
    concurrently: ``build_once``)."""
    def convert(tmp: Path) -> None:
        log.info("converting %s to a Hugging Face folder (once; cached in %s)", gguf_path.name, out)
        _convert(gguf_path, tmp, dtype)
        (tmp / COMPLETE_MARKER).write_text(str(gguf_path))

    out = converted_dir(gguf_path, cache_root, dtype)
    return build_once(out, _is_complete, convert)


def _convert(gguf_path: Path, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    # transformers parses the whole GGUF header (every vocabulary string) for each of these calls, 2-3 s each:
    # the config is read once and handed to the model's load, and a copy of it makes the plain model
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        _match_gguf_tokenizer(tokenizer, gguf_path)
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, config=copy.deepcopy(config),
                                                      dtype=torch.float32)
    except Exception as exc:  # transformers raises many types for unreadable GGUF
        raise ModelSourceError(f"{gguf_path}: transformers cannot read this GGUF file ({exc}); "
                               f"use a Llama-family GGUF or a Hugging Face folder") from exc
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    fresh.load_state_dict(loaded.state_dict(), strict=False)
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    make_portable(out)


# tokenizer attribute -> the GGUF key of its token id
GGUF_SPECIAL_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                       "pad_token": "padding_token_id"}


def _match_gguf_tokenizer(tokenizer: Any, gguf_path: Path) -> None:
    """Make the tokenizer say what the GGUF file says. transformers 4.57 (the GPU container's) makes every GGUF
    Llama tokenizer add BOS and took SmolLM2's BOS for its EOS (generation would not stop at <|im_end|>);
    transformers 5 reads both from the file, as this does."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)

    def value(key: str) -> Any:
        field = reader.get_field(f"tokenizer.ggml.{key}")
        return field.parts[field.data[0]][0] if field is not None and field.data else None

    for attr, key in GGUF_SPECIAL_TOKENS.items():
        token_id = value(key)
        if token_id is not None and 0 <= int(token_id) < len(tokenizer):
            setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(int(token_id)))
    for attr in ("add_bos_token", "add_eos_token"):  # after the tokens: 4.57 rebuilds its template from them
        flag = value(attr)
        if flag is not None:
            setattr(tokenizer, attr, bool(flag))
