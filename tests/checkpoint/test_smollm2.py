"""The bundled SmolLM2-135M end to end: int8_sq and fp8 calibrated, measured and exported (kept tiny)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from tests.checkpoint.conftest import make_config
from trtkit.checkpoint import compare_formats, render_table


@pytest.mark.slow
def test_smollm2_int8_sq_and_fp8_end_to_end(smollm2_dir: Path, tmp_path: Path) -> None:
    config = make_config(smollm2_dir, tmp_path / "work", name="smollm2", convert={"dtype": "bfloat16"},
                         quantization={"calib_size": 4, "calib_max_seq_len": 64, "calib_batch_size": 4,
                                       "eval_samples": 2})
    results = compare_formats(config, ["int8_sq", "fp8"], kv_cache_dtype="fp8")
    table = render_table([r.report for r in results])
    assert "smollm2 unquantized" in table and "int8_sq + kv fp8" in table and "fp8 + kv fp8" in table
    for result, algo, weight_dtype in zip(results, ("W8A8_SQ_PER_CHANNEL", "FP8"), ("I8", "F8_E4M3"), strict=True):
        report = result.report
        # A real model, so the cost is small but not zero; loose bounds keep the test stable on 4 samples.
        assert 10 < report.baseline_perplexity < 200
        assert -0.05 < report.relative_increase < 0.5, table
        assert report.top1_agreement > 0.7, table
        assert len(report.layer_ranges) == 30 * 7 + 1  # every decoder linear layer and lm_head
        config_json = json.loads((result.checkpoint_dir / "config.json").read_text())
        assert config_json["quantization"]["quant_algo"] == algo
        assert config_json["quantization"]["kv_cache_quant_algo"] == "FP8"
        assert config_json["rotary_base"] == 100000.0 and config_json["num_hidden_layers"] == 30
        with safe_open(str(result.checkpoint_dir / "rank0.safetensors"), "pt") as fh:
            assert fh.get_slice("transformer.layers.29.mlp.proj.weight").get_dtype() == weight_dtype
            assert fh.get_slice("transformer.layers.29.attention.kv_cache_scaling_factor").get_dtype() == "F32"
        assert (result.checkpoint_dir / "quality_report.json").is_file()
