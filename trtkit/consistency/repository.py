"""What the check reads: every config.pbtxt (Triton's own protobuf), the engine or checkpoint config.

The engine slot is found by its ``gpt_model_path`` parameter (the C++ ``tensorrtllm`` backend and our
CPU Python-backend engine model both carry it). A trtllm-build engine's config.json has
``build_config`` (limits, plugins) and ``pretrained_config`` (mapping); a TensorRT-LLM checkpoint has the
model fields at the top level; a Hugging Face folder has ``architectures`` and no ``mapping``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from trtkit.errors import RepositoryError


@dataclass(slots=True)
class RepoModel:
    name: str
    config_path: Path
    config: mc.ModelConfig

    def param(self, key: str) -> str | None:
        if key not in self.config.parameters:
            return None
        return str(self.config.parameters[key].string_value)

    def bool_param(self, key: str) -> bool | None:
        value = self.param(key)
        return None if value is None else value.strip().lower() in ("true", "1", "yes", "on")

    def int_param(self, key: str) -> int | None:
        value = self.param(key)
        try:
            return None if value is None else int(value)
        except ValueError:
            return None

    @property
    def decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)

    @property
    def is_cpp_engine(self) -> bool:
        return self.config.backend == "tensorrtllm"


@dataclass(slots=True)
class EngineInfo:
    """Limits of what sits in the engine slot; None where that kind of artifact does not record it."""

    path: Path
    config_path: Path
    kind: str  # "engine", "checkpoint" or "hf"
    max_batch_size: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_beam_width: int | None = None
    use_paged_context_fmha: bool | None = None
    world_size: int = 1
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)


def load_models(repo_dir: Path) -> dict[str, RepoModel]:
    models = {}
    for config_path in sorted(repo_dir.glob("*/config.pbtxt")):
        text = config_path.read_text()
        try:
            config = text_format.Parse(text, mc.ModelConfig())
        except text_format.ParseError as exc:
            raise RepositoryError(f"{config_path} is not a valid Triton model config ({exc}); regenerate it "
                                  "with `trtkit deploy`") from exc
        models[config_path.parent.name] = RepoModel(config_path.parent.name, config_path, config)
    if not models:
        raise RepositoryError(f"{repo_dir} holds no */config.pbtxt; point at a model repository made by `trtkit deploy`")
    return models


def _eos_ids(*sources: dict[str, Any]) -> list[int]:
    for source in sources:
        value = source.get("eos_token_id")
        if isinstance(value, int):
            return [value]
        if isinstance(value, list) and value:
            return [int(v) for v in value]
    return []


def load_engine(path: Path) -> EngineInfo:
    config_path = path / "config.json"
    raw = json.loads(config_path.read_text())
    generation_path = path / "generation_config.json"
    generation = json.loads(generation_path.read_text()) if generation_path.is_file() else {}
    if "build_config" in raw:
        build, pretrained = raw["build_config"], raw.get("pretrained_config", {})
        plugins = build.get("plugin_config", {})
        return EngineInfo(path, config_path, "engine", build.get("max_batch_size"), build.get("max_input_len"),
                          build.get("max_seq_len"), build.get("max_beam_width"),
                          plugins.get("use_paged_context_fmha"),
                          int(pretrained.get("mapping", {}).get("world_size", 1)), pretrained.get("vocab_size"),
                          pretrained.get("max_position_embeddings"), _eos_ids(generation, pretrained))
    kind = "checkpoint" if "mapping" in raw else "hf"
    world_size = int(raw.get("mapping", {}).get("world_size", 1))
    return EngineInfo(path, config_path, kind, world_size=world_size, vocab_size=raw.get("vocab_size"),
                      max_position_embeddings=raw.get("max_position_embeddings"),
                      eos_token_ids=_eos_ids(generation, raw))
