"""Fixtures for the checkpoint tests: configs for the tiny model, and calibrated checkpoints made once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trtkit.config import parse_config
from trtkit.config.schema import ModelConfig

TINY_QUANT = {"calib_size": 8, "calib_max_seq_len": 32, "calib_batch_size": 4, "eval_samples": 2}


def make_config(model_dir: Path, workdir: Path, *, convert: dict[str, Any] | None = None,
                quantization: dict[str, Any] | None = None, build: dict[str, Any] | None = None,
                name: str = "tiny") -> ModelConfig:
    data: dict[str, Any] = {
        "name": name, "model": {"source": str(model_dir), "chat_template": False}, "workdir": str(workdir),
        "convert": {"dtype": "float16", **(convert or {})},
        "quantization": {**TINY_QUANT, **(quantization or {})},
    }
    if build:
        data["build"] = build
    return parse_config(data)


@pytest.fixture
def tiny_config(tiny_llama_dir: Path, tmp_path: Path) -> ModelConfig:
    return make_config(tiny_llama_dir, tmp_path / "work")


Calibrated = Callable[..., Any]


@pytest.fixture(scope="session")
def calibrated(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Calibrated:
    """``calibrated(fmt, kv, tp_size=1)`` -> CalibrationResult, each made once per session on the tiny model.

    One CalibrationSession per tensor-parallel size shares the loaded model and the baseline.
    """
    from trtkit.checkpoint.calibrate import CalibrationSession, plan_calibration

    root = tmp_path_factory.mktemp("calibrated")
    sessions: dict[int, tuple[ModelConfig, Any]] = {}
    results: dict[tuple[str, str, int], Any] = {}

    def get(fmt: str, kv: str = "auto", tp_size: int = 1) -> Any:
        key = (fmt, kv, tp_size)
        if key not in results:
            if tp_size not in sessions:
                config = make_config(tiny_llama_dir, root / f"tp{tp_size}", convert={"tp_size": tp_size})
                sessions[tp_size] = (config, CalibrationSession(config))
            config, session = sessions[tp_size]
            results[key] = session.run(plan_calibration(config, fmt, kv))
        return results[key]

    return get
