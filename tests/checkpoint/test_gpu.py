"""On a GPU host calibration runs on the GPU, and nvfp4 (refused on CPU, see test_preflight) works there."""

from __future__ import annotations

import json

import pytest
import torch

from trtkit.checkpoint import calibrate
from trtkit.checkpoint.modelio import pick_device


def test_device_follows_cuda_availability() -> None:
    assert pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.gpu  # skipped, with the reason, where there is no GPU host (tests/gpu_host.py)
@pytest.mark.parametrize(("fmt", "algo"), [("fp8", "FP8"), ("nvfp4", "NVFP4")])
def test_calibrates_on_the_gpu(tiny_config, fmt: str, algo: str) -> None:
    result = calibrate(tiny_config, fmt=fmt)
    assert result.report.device == "cuda"
    assert json.loads((result.checkpoint_dir / "config.json").read_text())["quantization"]["quant_algo"] == algo
