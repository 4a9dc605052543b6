"""Everything one check run reads, loaded once and handed to each rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtkit.config.schema import ModelConfig
from trtkit.consistency.repository import EngineInfo, RepoModel
from trtkit.consistency.tokenizers import TokenizerInfo, load_tokenizer_info
from trtkit.trtllm_build.host_facts import HostFacts

TOKENIZER_PARAM = "tokenizer_dir"
ENGINE_PARAM = "gpt_model_path"


@dataclass(slots=True)
class CheckContext:
    repo_dir: Path
    models: dict[str, RepoModel]
    config: ModelConfig | None
    gpu_count: int
    engine_model: RepoModel | None = None
    engine: EngineInfo | None = None
    host: HostFacts | None = None  # GPU and TensorRT facts, for the engine manifest check (probed lazily)
    # build.backend: pytorch: the LLM-API engine model's options file, as read (None: not one, or unreadable)
    llm_api_options: dict[str, Any] | None = None
    llm_api_error: str | None = None
    _tokenizers: dict[Path, TokenizerInfo | None] = field(default_factory=dict)

    def resolve(self, model: RepoModel, value: str) -> Path:
        """Paths in parameters are absolute in generated repositories; relative ones are read from the repo."""
        path = Path(value).expanduser()
        if path.is_absolute():
            return path
        for base in (self.repo_dir, model.config_path.parent):
            if (base / path).exists():
                return (base / path).resolve()
        return self.repo_dir / path

    def tokenizer(self, path: Path) -> TokenizerInfo | None:
        if path not in self._tokenizers:
            self._tokenizers[path] = load_tokenizer_info(path)
        return self._tokenizers[path]

    def tokenizer_dirs(self) -> list[tuple[RepoModel, Path]]:
        return [(model, self.resolve(model, value)) for model in self.models.values()
                if (value := model.param(TOKENIZER_PARAM))]

    def limit(self, name: str) -> tuple[int | None, str]:
        """An engine limit and where it comes from: the built engine, else the CPU engine model's
        ``cpu_<name>`` parameter, else the model config's build section."""
        if self.engine is not None and getattr(self.engine, name) is not None:
            return getattr(self.engine, name), f"{name} {getattr(self.engine, name)} in {self.engine.config_path}"
        cpu_value = self.engine_model.int_param(f"cpu_{name}") if self.engine_model else None
        if cpu_value is not None and self.engine_model is not None:
            return cpu_value, f"cpu_{name} {cpu_value} in {self.engine_model.config_path}"
        options = self.llm_api_options or {}
        if isinstance(options.get(name), int) and self.engine_model is not None:
            return options[name], f"{name} {options[name]} in {self.engine_model.param('llm_api_options')}"
        if self.config is not None:
            value = getattr(self.config.build, name)
            return value, f"build.{name} {value} in the model config"
        return None, ""
