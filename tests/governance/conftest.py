"""Client test helpers; the tiny model's fixtures and the shared live tritonserver are in tests/conftest.py."""

from __future__ import annotations

from tests.conftest import TINY_CONFIG
from trtkit.config.schema import ModelConfig

__all__ = ["TINY_CONFIG", "client_config"]  # the live server and tiny fixtures live in tests/conftest.py


def client_config(config: ModelConfig, **client_changes: object) -> ModelConfig:
    """The tiny config with some client.* fields replaced (nested sections as whole objects)."""
    from dataclasses import replace

    return replace(config, client=replace(config.client, **client_changes))  # type: ignore[arg-type]
