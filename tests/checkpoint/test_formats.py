"""Every format on the tiny model: quant_algo, scale tensors, dtypes and rank files as TensorRT-LLM 1.2 reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from trtkit.checkpoint.formats import FORMATS

LAYERS = 2
LINEARS = ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj")


def read_config(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "config.json").read_text())


def tensor_dtypes(path: Path) -> dict[str, str]:
    with safe_open(str(path), "pt") as fh:
        return {name: fh.get_slice(name).get_dtype() for name in fh.keys()}  # noqa: SIM118


def linear_names() -> list[str]:
    return [f"transformer.layers.{i}.{linear}" for i in range(LAYERS) for linear in LINEARS]


# format -> dtype of the quantized linear weights in the checkpoint ("F16": float, quantized at build time)
WEIGHT_DTYPES = {"int8_sq": "I8", "int8_wo": "F16", "int4_wo": "F16", "int4_awq": "I8", "w4a8_awq": "I8",
                 "fp8": "F8_E4M3"}


@pytest.mark.parametrize("fmt", list(WEIGHT_DTYPES))
def test_format_checkpoint_matches_trtllm_contract(calibrated, fmt: str) -> None:
    result = calibrated(fmt)
    config = read_config(result.checkpoint_dir)
    spec = FORMATS[fmt]
    assert config["quantization"]["quant_algo"] == spec.quant_algo
    assert config["quantization"]["kv_cache_quant_algo"] is None
    assert "lm_head" in config["quantization"]["exclude_modules"]
    assert config["dtype"] == "float16" and config["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1}
    assert config["rotary_base"] > 0
    dtypes = tensor_dtypes(result.checkpoint_dir / "rank0.safetensors")
    for linear in linear_names():
        assert dtypes[f"{linear}.weight"] == WEIGHT_DTYPES[fmt], linear
        for suffix in spec.scale_suffixes:
            assert dtypes[f"{linear}.{suffix}"] in ("F32", "F16"), f"{linear}.{suffix}"
    scale_names = {n for n in dtypes if n.endswith("scaling_factor")}
    if not spec.scale_suffixes:  # weight-only: TensorRT-LLM computes per_channel_scale itself
        assert scale_names == set()
    assert dtypes["lm_head.weight"] == "F16" and "lm_head.weights_scaling_factor" not in dtypes
    assert not (result.checkpoint_dir / "quant_cfg.json").exists()


def test_int4_wo_quality_is_measured_per_channel(calibrated) -> None:
    """int4_wo weights stay float in the checkpoint, but the report measures real 4-bit fake quantization."""
    report = calibrated("int4_wo").report
    assert report.quant_algo == "W4A16"
    assert report.top1_agreement < 1.0 and report.quantized_perplexity != report.baseline_perplexity


@pytest.mark.parametrize(("fmt", "kv", "algo"), [("fp8", "fp8", "FP8"), ("int8_sq", "int8", "INT8"),
                                                   ("int8_wo", "fp8", "FP8"), ("none", "int8", "INT8")])
def test_kv_cache_scales(calibrated, fmt: str, kv: str, algo: str) -> None:
    result = calibrated(fmt, kv)
    config = read_config(result.checkpoint_dir)
    assert config["quantization"]["kv_cache_quant_algo"] == algo
    assert config["quantization"]["quant_algo"] == (FORMATS[fmt].quant_algo if fmt != "none" else None)
    dtypes = tensor_dtypes(result.checkpoint_dir / "rank0.safetensors")
    for i in range(LAYERS):
        assert dtypes[f"transformer.layers.{i}.attention.kv_cache_scaling_factor"] == "F32"
    assert result.checkpoint_dir.name == f"{fmt}-kv{kv}-float16-tp1-pp1"


@pytest.mark.parametrize("fmt", ["int8_sq", "fp8", "int8_wo"])
def test_tp2_writes_two_rank_files_with_halved_shards(calibrated, fmt: str) -> None:
    result = calibrated(fmt, tp_size=2)
    checkpoint = result.checkpoint_dir
    config = read_config(checkpoint)
    assert config["mapping"]["tp_size"] == 2 and config["mapping"]["world_size"] == 2
    assert sorted(p.name for p in checkpoint.glob("rank*.safetensors")) == ["rank0.safetensors", "rank1.safetensors"]
    for rank in (0, 1):
        with safe_open(str(checkpoint / f"rank{rank}.safetensors"), "pt") as fh:
            # qkv is column-parallel: (4 q heads + 2*2 kv heads) * 32 / 2 ranks; dense is row-parallel: 128 / 2
            assert fh.get_slice("transformer.layers.0.attention.qkv.weight").get_shape() == [128, 128]
            assert fh.get_slice("transformer.layers.0.attention.dense.weight").get_shape() == [128, 64]
            for suffix in FORMATS[fmt].scale_suffixes:
                assert f"transformer.layers.1.mlp.proj.{suffix}" in fh.keys()  # noqa: SIM118


def test_report_content(calibrated) -> None:
    result = calibrated("int8_sq")
    report = result.report
    assert report.baseline_perplexity > 1 and report.quantized_perplexity > 1
    assert 0.5 < report.top1_agreement <= 1.0
    assert report.eval_blocks == 2 and report.calib_blocks == 8 and report.seq_len == 32
    names = {r.name for r in report.layer_ranges}
    assert "model.layers.0.self_attn.q_proj" in names and "model.layers.1.mlp.down_proj" in names
    assert all(r.max >= r.min and r.absmax > 0 for r in report.layer_ranges)
    for phase in ("load", "baseline", "calibrate", "evaluate", "export", "total"):
        assert report.timings_s[phase] >= 0
    saved = json.loads((result.checkpoint_dir / "quality_report.json").read_text())
    assert saved["relative_increase"] == pytest.approx(report.relative_increase)
    table = (result.checkpoint_dir / "quality_report.txt").read_text()
    assert "tiny unquantized" in table and "int8_sq" in table and "model.layers.0.self_attn.q_proj" in table


def test_outlier_layers_are_named() -> None:
    from trtkit.checkpoint.quality import LayerRange
    from trtkit.checkpoint.report import QualityReport, render_ranges

    ranges = [LayerRange(f"model.layers.{i}.mlp.down_proj", -1.0, 1.0 + i % 3, 1.0 + i % 3) for i in range(20)]
    ranges += [LayerRange("model.layers.7.mlp.down_proj", -5.0, 900.0, 900.0), LayerRange("lm_head", -99, 99, 99)]
    report = QualityReport("m", "fp8", "auto", "FP8", None, 10.0, 10.5, 0.9, 2, 100, 4, 32, "cpu", layer_ranges=ranges)
    assert report.outlier_layers == ["model.layers.7.mlp.down_proj"]
    assert "outliers (over 20x the median range): layers.7.mlp.down_proj;" in render_ranges(report, limit=3)
    assert QualityReport.from_json(report.to_json()).outlier_layers == report.outlier_layers
