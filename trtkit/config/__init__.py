"""Model configs: load a YAML file strictly, resolve derived values, check cross-field rules."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import yaml

from trtkit.config.build_backend import backend_of
from trtkit.config.loader import ConfigProblems, load_dataclass, problems_of, to_plain
from trtkit.config.profiles import resolve
from trtkit.config.rules import broken_rules, check_rules
from trtkit.config.schema import ImpliedSetting, ModelConfig, Profile
from trtkit.config.yaml_file import read_yaml
from trtkit.errors import ConfigError

__all__ = ["ModelConfig", "ImpliedSetting", "load_config", "parse_config", "to_plain", "resolve", "config_to_yaml",
           "PROFILES"]

PROFILES = ("latency", "throughput")


def parse_config(data: object, *, base_dir: Path | None = None, profile: str | None = None) -> ModelConfig:
    """Validate plain data (as read from YAML) and return the resolved config: the one place a serving profile
    is applied (``profile`` overrides ``serve.profile``)."""
    if profile not in (None, *PROFILES):
        raise ConfigError(f"profile {profile!r} is unknown; use latency or throughput")
    try:
        config = load_dataclass(ModelConfig, data)
    except ConfigProblems as exc:  # every field's problem at once, and the rules the other fields break
        raise ConfigProblems(exc.problems + _rules_beside(exc)) from exc
    backend_of(config).check_config(data, config)
    if base_dir is not None:
        config = _anchor_paths(config, base_dir)
    resolved = resolve(config, cast("Profile | None", profile))
    check_rules(resolved)
    return resolved


def load_config(path: str | Path, *, profile: str | None = None) -> ModelConfig:
    """Read, validate and resolve a model config file. Relative paths in it are taken from its folder.
    ``profile`` (latency or throughput) overrides the file's ``serve.profile``. Every problem of the file
    (repeated keys, unknown keys, types, bounds, then the cross-field rules) is reported in one error."""
    path = Path(path)
    data, problems = read_yaml(path)
    try:
        config = parse_config(data, base_dir=path.resolve().parent, profile=profile)
    except ConfigError as exc:
        problems += problems_of(exc)
    if problems:
        raise ConfigProblems([f"{path}: {p}" for p in problems])
    return config


def _rules_beside(failed: ConfigProblems) -> list[str]:
    """The cross-field rules over the fields that loaded (the failed ones at their defaults), leaving out any
    rule that names a failed field: it would judge a default the user never wrote."""
    if failed.partial is None:
        return []
    paths = [p.split(":", 1)[0] for p in failed.problems]
    try:
        messages = broken_rules(resolve(failed.partial))
    except ConfigError:
        return []
    return [m for m in messages if not any(path in m for path in paths)]


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
