"""Early errors: each is raised before any model is loaded, with a message that names the fix."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.checkpoint.conftest import make_config
from trtkit.checkpoint import calibrate, plan_calibration
from trtkit.checkpoint.formats import FORMATS
from trtkit.checkpoint.preflight import check_four_bit_widths, decoder_type, target_gpu_warning
from trtkit.errors import CalibrationError

SMOLLM2_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "intermediate_size": 1536,
                  "num_attention_heads": 9, "num_key_value_heads": 3}


def fake_model_dir(tmp_path: Path, config: dict) -> Path:
    """A folder with only config.json: enough for every check, and proof that no weights are loaded."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_unknown_format(tiny_config) -> None:
    with pytest.raises(CalibrationError) as err:
        calibrate(tiny_config, fmt="int3")
    assert str(err.value) == ("unknown quantization format 'int3'; use one of int8_sq, int8_wo, int4_wo, int4_awq, "
                              "w4a8_awq, fp8, fp8_block, nvfp4")


def test_unknown_kv_cache_dtype(tiny_config) -> None:
    with pytest.raises(CalibrationError) as err:
        calibrate(tiny_config, fmt="fp8", kv_cache_dtype="fp4")
    assert str(err.value) == "unknown KV-cache dtype 'fp4'; use one of auto, fp8, int8"


def test_nothing_to_calibrate(tiny_config) -> None:
    with pytest.raises(CalibrationError) as err:
        calibrate(tiny_config)
    assert str(err.value).startswith("nothing to calibrate: quantization.format is 'none' and kv_cache_dtype is 'auto'")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU refusal")
def test_nvfp4_without_gpu(tiny_config) -> None:
    with pytest.raises(CalibrationError) as err:
        calibrate(tiny_config, fmt="nvfp4")
    assert str(err.value) == ("nvfp4 needs an NVIDIA GPU to calibrate (ModelOpt's nvfp4 kernels are CUDA-only); run "
                              "trtkit calibrate on a GPU host, or use fp8, int8_sq or int4_awq here")


def test_missing_and_empty_calibration_set(tiny_llama_dir: Path, tmp_path: Path) -> None:
    missing = make_config(tiny_llama_dir, tmp_path / "w", quantization={"calib_dataset": str(tmp_path / "none")})
    with pytest.raises(CalibrationError) as err:
        calibrate(missing, fmt="fp8")
    assert str(err.value) == (f"quantization.calib_dataset: {tmp_path / 'none'} does not exist; fix the path or use "
                              f"'default' (the bundled corpus)")
    (tmp_path / "empty").mkdir()
    empty = make_config(tiny_llama_dir, tmp_path / "w", quantization={"calib_dataset": str(tmp_path / "empty")})
    with pytest.raises(CalibrationError, match="holds no .txt, .jsonl or .parquet files"):
        calibrate(empty, fmt="fp8")


def test_architecture_modelopt_cannot_export(tmp_path: Path) -> None:
    model_dir = fake_model_dir(tmp_path, {"architectures": ["BertForMaskedLM"], "hidden_size": 128})
    config = make_config(model_dir, tmp_path / "w")
    with pytest.raises(CalibrationError) as err:
        calibrate(config, fmt="fp8")
    assert str(err.value) == ("architecture BertForMaskedLM cannot be exported to a TensorRT-LLM checkpoint by "
                              "ModelOpt; use a supported decoder (Llama, Mistral, Mixtral, Qwen, Gemma, Phi, GPT, "
                              "Falcon, ...) or convert the model with TensorRT-LLM's own example scripts")
    assert decoder_type("MistralForCausalLM") == "llama" and decoder_type("Qwen2ForCausalLM") == "qwen"
    with pytest.raises(CalibrationError):
        decoder_type("GptOssForCausalLM")  # ModelOpt exports it only as a Hugging Face checkpoint


def test_four_bit_on_smollm2_widths_names_the_layer(tmp_path: Path) -> None:
    config = make_config(fake_model_dir(tmp_path, SMOLLM2_CONFIG), tmp_path / "w")
    with pytest.raises(CalibrationError) as err:
        calibrate(config, fmt="int4_awq")
    assert str(err.value) == ("int4_awq: model.layers.*.self_attn.q_proj/k_proj/v_proj has 576 input features, not a "
                              "multiple of 128; 4-bit formats quantize weights in groups of 128 input channels. Use "
                              "int8_sq, int8_wo or fp8 for this model")


def test_four_bit_split_by_tensor_parallelism(tiny_llama_dir: Path, tmp_path: Path) -> None:
    config = make_config(tiny_llama_dir, tmp_path / "w", convert={"tp_size": 2})
    with pytest.raises(CalibrationError) as err:
        calibrate(config, fmt="w4a8_awq")
    assert str(err.value) == ("w4a8_awq: model.layers.*.self_attn.o_proj has 128 input features split over tp_size 2 "
                              "= 64 per rank, not a multiple of 128; 4-bit formats quantize weights in groups of 128 "
                              "input channels. Use int8_sq, int8_wo or fp8 for this model, or a smaller "
                              "convert.tp_size")
    check_four_bit_widths(FORMATS["int4_awq"], SMOLLM2_CONFIG | {"hidden_size": 640, "intermediate_size": 1536,
                                                                 "num_attention_heads": 10}, tp_size=1, block_size=128)
    check_four_bit_widths(FORMATS["int8_sq"], SMOLLM2_CONFIG, tp_size=1, block_size=128)  # 8-bit: no constraint


def test_fp8_target_older_than_sm89_warns(tiny_llama_dir: Path, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tiny_llama_dir, tmp_path / "w", build={"target_gpu": "A100-80GB"})
    with caplog.at_level(logging.WARNING):
        plan = plan_calibration(config, "fp8")
    expected = ("quant_algo FP8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); build.target_gpu "
                "A100-80GB (Ampere) is 8.0; use int8_sq or int8_wo (kv_cache_dtype int8), or build on an L4, L40S, "
                "H100 or newer; the build will refuse this checkpoint")
    assert plan.warnings == [expected] and expected in caplog.text
    assert target_gpu_warning(FORMATS["fp8"], "H100") is None
    assert target_gpu_warning(FORMATS["int8_sq"], "A100") is None
    assert target_gpu_warning(FORMATS["fp8"], "L40S") is None


def test_weight_only_formats_keep_only_lm_head_unquantized(tiny_llama_dir: Path, tmp_path: Path) -> None:
    config = make_config(tiny_llama_dir, tmp_path / "w", quantization={"exclude_modules": ["lm_head", "down_proj"]})
    with pytest.raises(CalibrationError) as err:
        calibrate(config, fmt="int8_wo")
    assert str(err.value) == ("int8_wo: TensorRT-LLM quantizes these weights at build time and this exporter only "
                              "leaves lm_head unquantized; remove down_proj from quantization.exclude_modules, or "
                              "use int8_sq or fp8")


def test_config_without_architectures(tmp_path: Path) -> None:
    config = make_config(fake_model_dir(tmp_path, {"hidden_size": 128}), tmp_path / "w")
    with pytest.raises(CalibrationError, match="has no 'architectures' entry"):
        calibrate(config, fmt="fp8")


def test_every_check_runs_without_the_weights(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """plan_calibration reads config.json only: a folder without weights passes every check."""
    folder = tmp_path / "noweights"
    folder.mkdir()
    shutil.copy(tiny_llama_dir / "config.json", folder / "config.json")
    plan = plan_calibration(make_config(folder, tmp_path / "w"), "int4_awq", "fp8")
    assert plan.decoder_type == "llama" and plan.out_dir.name == "int4_awq-kvfp8-float16-tp1-pp1"
    assert plan.manifest.arguments["format"] == "int4_awq"
