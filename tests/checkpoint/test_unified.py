"""Issue 36: calibrate under build.backend: pytorch writes ModelOpt's unified Hugging Face checkpoint on CPU
(export_hf_checkpoint + hf_quant_config.json), which TensorRT-LLM's PyTorch backend loads directly; the CPU
reference engine loads it back, and the quality report measures the exported files in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.checkpoint.conftest import make_config
from trtkit.errors import CalibrationError

PYTORCH = {"backend": "pytorch"}


@pytest.fixture(scope="module")
def fp8(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from trtkit.checkpoint import calibrate

    config = make_config(tiny_llama_dir, tmp_path_factory.mktemp("unified") / "work", build=PYTORCH,
                         quantization={"format": "fp8", "kv_cache_dtype": "fp8"}, convert={"dtype": "bfloat16"})
    return config, calibrate(config)


def test_an_fp8_unified_checkpoint_with_its_quant_config_and_tokenizer(fp8) -> None:  # type: ignore[no-untyped-def]
    config, result = fp8
    out = result.checkpoint_dir
    assert out.name == "hf-fp8-kvfp8-bfloat16" and not (out / "rank0.safetensors").exists()
    quant = json.loads((out / "hf_quant_config.json").read_text())["quantization"]
    assert (quant["quant_algo"], quant["kv_cache_quant_algo"]) == ("FP8", "FP8") and "lm_head" in quant["exclude_modules"]
    for name in ("config.json", "tokenizer.json", "quality_report.json", "trtkit-manifest.json"):
        assert (out / name).is_file(), name
    tensors = load_file(str(out / "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj."
    assert tensors[q + "weight"].dtype == torch.float8_e4m3fn and q + "weight_scale" in tensors
    assert "model.layers.0.self_attn.k_proj.k_scale" in tensors and "model.layers.0.self_attn.v_proj.v_scale" in tensors


def test_the_reference_engine_loads_it_back_with_the_files_arithmetic(fp8) -> None:  # type: ignore[no-untyped-def]
    from trtkit.refengine.weights import load_model

    _, result = fp8
    out = result.checkpoint_dir
    weights = load_model(out)
    assert (weights.spec.quant_algo, weights.spec.kv_cache_quant_algo) == ("FP8", "FP8")
    tensors = load_file(str(out / "model.safetensors"))
    layer = weights.layers[0]
    assert layer.kv_scale is not None and layer.v_scale is not None
    assert float(layer.v_scale) == float(tensors["model.layers.0.self_attn.v_proj.v_scale"])
    o = "model.layers.0.self_attn.o_proj."
    expected = tensors[o + "weight"].float() * tensors[o + "weight_scale"].float()
    assert torch.equal(layer.o_proj.weight, expected)  # type: ignore[union-attr]
    assert layer.o_proj.act_quant == "fp8"  # type: ignore[union-attr]


def test_its_quality_report_measures_the_exported_files(fp8) -> None:  # type: ignore[no-untyped-def]
    from trtkit.checkpoint import load_report, render_table

    _, result = fp8
    report = load_report(result.checkpoint_dir)
    assert report.quant_algo == "FP8" and report.kv_cache_quant_algo == "FP8"
    assert report.reference_engine_perplexity is not None
    # the files in the reference engine and ModelOpt's fake quantization agree (a dropped scale would not)
    assert abs(report.reference_engine_perplexity / report.quantized_perplexity - 1) < 0.05
    assert "the exported checkpoint in the CPU reference engine: perplexity" in render_table([report])
    assert report.timings_s["reference_engine"] > 0


def test_the_pytorch_backend_refuses_formats_it_does_not_load(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from trtkit.checkpoint.calibrate import plan_calibration

    config = make_config(tiny_llama_dir, tmp_path / "work", build=PYTORCH)
    for fmt in ("int8_sq", "int8_wo", "int4_wo"):
        with pytest.raises(CalibrationError, match=f"--format {fmt} .* build.backend: pytorch"):
            plan_calibration(config, fmt, "auto")
    with pytest.raises(CalibrationError, match="--kv-cache-dtype int8"):
        plan_calibration(config, "fp8", "int8")
    with pytest.raises(CalibrationError, match="fp8_block is a PyTorch-backend format"):
        plan_calibration(make_config(tiny_llama_dir, tmp_path / "w2"), "fp8_block", "auto")
    assert plan_calibration(config, "fp8_block", "auto").out_dir.name == "hf-fp8_block-float16"


def test_convert_under_pytorch_writes_a_hugging_face_folder(tiny_llama_dir: Path, tmp_path: Path) -> None:
    from trtkit.checkpoint import convert_checkpoint
    from trtkit.trtllm_build.checkpoint_info import find_unified_checkpoint, read_unified_info

    config = make_config(tiny_llama_dir, tmp_path / "work", build=PYTORCH, convert={"dtype": "bfloat16"})
    out = convert_checkpoint(config)
    assert out.name == "hf-none-bfloat16" and (out / "tokenizer.json").is_file()
    assert not (out / "hf_quant_config.json").exists() and find_unified_checkpoint(config) == out
    info = read_unified_info(out)
    assert (info.architecture, info.quant_algo, info.dtype) == ("LlamaForCausalLM", None, "bfloat16")
