"""Model shapes for planning: read from a config.json, or taken from a small table of known models.

The table lets ``trtkit plan`` answer for models whose weights are not on this machine
(Llama-3-8B/70B): the planner needs only the shape, never the weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trtkit.errors import BuildError


@dataclass(slots=True, frozen=True)
class ModelShape:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


KNOWN_SHAPES: dict[str, ModelShape] = {
    "llama-3-8b": ModelShape("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, False, 8192),
    "llama-3-70b": ModelShape("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, False, 8192),
    "llama-3.1-8b": ModelShape("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, False, 131072),
    "smollm2-135m": ModelShape("smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, True, 8192),
    "tiny-llama": ModelShape("tiny-llama", 2, 128, 4, 2, 32, 256, 49152, False, 1024),
}
_NAME_HINTS = (("llama-3.1-8b", ("llama-3.1-8b", "llama3.1-8b")), ("llama-3-70b", ("llama-3-70b", "llama3-70b")),
               ("llama-3-8b", ("llama-3-8b", "llama3-8b", "meta-llama-3-8b")),
               ("smollm2-135m", ("smollm2-135m",)), ("tiny-llama", ("tiny-llama",)))


def known_shape(name: str) -> ModelShape:
    key = name.strip().lower()
    if key not in KNOWN_SHAPES:
        raise BuildError(f"unknown model shape {name!r}; use one of {', '.join(KNOWN_SHAPES)} or a config.json path")
    return KNOWN_SHAPES[key]


def guess_known_shape(*texts: str) -> ModelShape | None:
    """A known shape whose name appears in any of ``texts`` (a config name, a model path)."""
    lowered = [t.lower() for t in texts if t]
    for key, hints in _NAME_HINTS:
        if any(hint in text for text in lowered for hint in hints):
            return KNOWN_SHAPES[key]
    return None


def shape_from_config_json(path: Path, name: str | None = None) -> ModelShape:
    """A Hugging Face config.json (or a TensorRT-LLM checkpoint config.json) -> ModelShape."""
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BuildError(f"cannot read model shape from {file}: {exc}; pass --shape NAME instead") from exc
    try:
        hidden = int(data["hidden_size"])
        heads = int(data["num_attention_heads"])
        return ModelShape(
            name=name or file.parent.name,
            num_layers=int(data["num_hidden_layers"]),
            hidden_size=hidden, num_heads=heads,
            num_kv_heads=int(data.get("num_key_value_heads") or heads),
            head_dim=int(data.get("head_dim") or data.get("head_size") or hidden // heads),
            intermediate_size=int(data["intermediate_size"]),
            vocab_size=int(data["vocab_size"]),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", data.get("share_embedding_table", False))),
            max_position_embeddings=int(data.get("max_position_embeddings") or 0),
        )
    except KeyError as exc:
        raise BuildError(f"{file} lacks {exc.args[0]}; it is not a decoder config trtkit can plan for, "
                         f"pass --shape NAME instead") from exc


def resolve_shape(spec: str) -> ModelShape:
    """``spec`` is a known shape name or a path to a config.json / model folder."""
    if spec.strip().lower() in KNOWN_SHAPES:
        return known_shape(spec)
    path = Path(spec).expanduser()
    if path.exists():
        return shape_from_config_json(path)
    raise BuildError(f"--shape {spec!r} is neither a known shape ({', '.join(KNOWN_SHAPES)}) nor an existing "
                     f"config.json or model folder")
