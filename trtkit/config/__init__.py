"""Model configs: load a YAML file strictly, resolve derived values, check cross-field rules."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import yaml

from trtkit.config.llm_api import check_backend
from trtkit.config.loader import load_dataclass, to_plain
from trtkit.config.profiles import resolve
from trtkit.config.rules import check_rules
from trtkit.config.schema import ImpliedSetting, ModelConfig, Profile
from trtkit.errors import ConfigError

__all__ = ["ModelConfig", "ImpliedSetting", "load_config", "parse_config", "to_plain", "resolve", "config_to_yaml",
           "PROFILES"]

PROFILES = ("latency", "throughput")


def parse_config(data: object, *, base_dir: Path | None = None, profile: str | None = None) -> ModelConfig:
    """Validate plain data (as read from YAML) and return the resolved config: the one place a serving profile
    is applied (``profile`` overrides ``serve.profile``)."""
    if profile not in (None, *PROFILES):
        raise ConfigError(f"profile {profile!r} is unknown; use latency or throughput")
    config = load_dataclass(ModelConfig, data)
    check_backend(data, config)
    if base_dir is not None:
        config = _anchor_paths(config, base_dir)
    resolved = resolve(config, cast("Profile | None", profile))
    check_rules(resolved)
    return resolved


def load_config(path: str | Path, *, profile: str | None = None) -> ModelConfig:
    """Read, validate and resolve a model config file. Relative paths in it are taken from its folder.
    ``profile`` (latency or throughput) overrides the file's ``serve.profile``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file; pass a YAML file such as model_configs/smollm2-135m.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}; fix the syntax") from exc
    try:
        return parse_config(data, base_dir=path.resolve().parent, profile=profile)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def config_to_yaml(config: ModelConfig) -> str:
    return yaml.safe_dump(to_plain(config), sort_keys=False)


def _anchor_paths(config: ModelConfig, base_dir: Path) -> ModelConfig:
    """Local paths in the YAML are relative to the YAML file, so configs work from any cwd."""
    from dataclasses import replace

    def anchor(value: str | None) -> str | None:
        if value is None or ":" in value.split("/")[0] or value == "default":
            return value
        p = Path(value).expanduser()
        if p.is_absolute():
            return str(p)
        return str((base_dir / p).resolve())

    model = replace(config.model, source=anchor(config.model.source) or config.model.source,
                    tokenizer=anchor(config.model.tokenizer))
    quant = replace(config.quantization, calib_dataset=anchor(config.quantization.calib_dataset) or "default")
    return replace(config, model=model, quantization=quant, workdir=anchor(config.workdir))
