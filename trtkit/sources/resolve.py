"""Resolve a config's ``model.source`` to a local Hugging Face folder. Never touches a model hub."""

from __future__ import annotations

from pathlib import Path

from trtkit.config.paths import cache_dir
from trtkit.errors import ModelSourceError
from trtkit.sources.bundled import bundled_gguf_path
from trtkit.sources.cached_folder import build_once
from trtkit.sources.gguf import gguf_to_hf, is_converted
from trtkit.sources.portable import FOLDER_FORMAT

BUNDLED_PREFIX = "bundled:"
GENERATED_PREFIX = "generated:"
GENERATED = {"tiny-llama": "a random 2-layer Llama, hidden 128, with SmolLM2's tokenizer (for tests)"}


def resolve_model_dir(source: str) -> Path:
    """``bundled:NAME``, a ``.gguf`` file, or a Hugging Face folder -> an HF folder on disk."""
    if source.startswith(BUNDLED_PREFIX):
        return gguf_to_hf(bundled_gguf_path(source[len(BUNDLED_PREFIX):]), cache_dir())
    if source.startswith(GENERATED_PREFIX):
        return generated_model_dir(source[len(GENERATED_PREFIX):], cache_dir())
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelSourceError(f"model.source: GGUF file {path} does not exist; check the path")
        return gguf_to_hf(path, cache_dir())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"model.source: {path} has no config.json; point it at a Hugging Face model folder")
        return path
    if "/" in source and not path.exists() and not source.startswith((".", "/", "~")):
        raise ModelSourceError(f"model.source: {source!r} looks like a hub id; trtkit never downloads models. "
                               f"Download it yourself and point model.source at the local folder")
    raise ModelSourceError(f"model.source: {source} does not exist; use bundled:smollm2-135m, a .gguf file "
                           f"or a Hugging Face folder")


def pending_conversion(source: str) -> str | None:
    """What resolving ``source`` will convert first (a sentence), or None when nothing needs converting."""
    gguf: Path | None = None
    if source.startswith(BUNDLED_PREFIX):
        gguf = bundled_gguf_path(source[len(BUNDLED_PREFIX):])
    elif source.startswith(GENERATED_PREFIX):
        gguf = bundled_gguf_path("smollm2-135m")
    elif source.endswith(".gguf") and Path(source).expanduser().is_file():
        gguf = Path(source).expanduser()
    if gguf is None or is_converted(gguf, cache_dir()):
        return None
    return f"converting {gguf.name} to a Hugging Face folder under {cache_dir() / 'gguf'}"


def resolve_tokenizer_dir(source: str, tokenizer: str | None) -> Path:
    return resolve_model_dir(tokenizer) if tokenizer else resolve_model_dir(source)


def generated_model_dir(name: str, cache_root: Path) -> Path:
    """Models made locally from the bundled tokenizer, cached under ``cache_root``; used by tests and the
    tiny config."""
    from trtkit.sources.tiny import make_tiny_llama

    if name not in GENERATED:
        raise ModelSourceError(f"generated:{name} is unknown; known: {', '.join('generated:' + n for n in GENERATED)}")
    out = cache_root / f"tiny-llama-h128-{FOLDER_FORMAT}"
    return build_once(out, lambda folder: (folder / "model.safetensors").is_file(),
                      lambda tmp: make_tiny_llama(tmp, gguf_to_hf(bundled_gguf_path("smollm2-135m"), cache_root)))
