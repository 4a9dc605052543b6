"""GGUF file -> a normal Hugging Face folder (bf16 safetensors + tokenizer), converted once and cached.

transformers dequantizes GGUF weights on load but refuses to ``save_pretrained`` a model that still
carries its GGUF quantization config; dropping that config and copying the state dict into a fresh
model gives a plain folder that every later stage (ModelOpt, our engine, tokenizers) reads.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtkit.errors import ModelSourceError
from trtkit.sources.cached_folder import build_once
from trtkit.sources.portable import FOLDER_FORMAT, make_portable

log = logging.getLogger(__name__)
COMPLETE_MARKER = ".trtkit-complete"
_SWAP_LOCK = threading.Lock()  # one conversion at a time swaps gguf's attributes (each swap restores what it found)


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
    # the config is read once and handed to the model's load, and a copy of it makes the plain model
    try:
        with _gguf_read_once():
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


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """While transformers reads one GGUF file: its header parsed once, and the tensor-name map built once.

    transformers (4.57 and 5) parses the whole header (every vocabulary string: about 4 s for SmolLM2) for the
    tokenizer, the config and the weights, and builds gguf-py's name map of every layer once per module of the model
    (about 6 s). Both come from ``gguf``'s module attributes at each call (``from gguf import ...`` inside the
    function), and neither changes between calls, so they are memoized for the duration: the same files, in half the
    time (tests/test_sources.py)."""
    import gguf

    module: Any = gguf  # its attributes are swapped for the duration
    with _SWAP_LOCK:
        original_reader, original_map = module.GGUFReader, module.get_tensor_name_map
        readers: dict[tuple[str, str], Any] = {}

        def reader(path: Any, mode: Any = "r") -> Any:
            key = (str(Path(path).resolve()), mode)
            if key not in readers:
                readers[key] = original_reader(path, mode)
            return readers[key]

        module.GGUFReader, module.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(original_map)
        try:
            yield
        finally:
            module.GGUFReader, module.get_tensor_name_map = original_reader, original_map


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
