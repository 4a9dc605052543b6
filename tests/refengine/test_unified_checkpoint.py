"""The reference engine reads every format of ModelOpt's unified checkpoint that the PyTorch backend takes and the
CPU can calibrate (FP8, FP8 block scales, W4A16 AWQ, W4A8 AWQ): its dequantized weights are ModelOpt's
fake-quantized ones (a misread scale or int4 packing would not be), and NVFP4 is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtkit.errors import EngineError

FORMATS = {"fp8": "FP8_DEFAULT_CFG", "fp8_block": "FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG", "int4_awq": "INT4_AWQ_CFG",
           "w4a8_awq": "W4A8_AWQ_BETA_CFG"}
UNFUSED = {"self_attn.o_proj": "o_proj", "mlp.down_proj": "down"}  # q/k/v and gate/up share scales once exported


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_dequantizes_to_modelopts_fake_quantized_weights(tiny_llama_dir: Path, tmp_path: Path,
                                                                     fmt: str) -> None:
    """Relative error of the engine's weight against ModelOpt's fake quantization of the same layer: a few percent
    (rounding of the export; 0 for block scales), where a misapplied scale or a wrong int4 packing is ~100%."""
    import copy

    import modelopt.torch.quantization as mtq
    import torch
    from transformers import AutoModelForCausalLM

    from trtkit.checkpoint.unified import export_unified
    from trtkit.refengine.weights import load_model

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    calibration = [torch.randint(0, 49152, (1, 32), generator=torch.Generator().manual_seed(i)) for i in range(8)]
    mtq.quantize(model, copy.deepcopy(getattr(mtq, FORMATS[fmt])), lambda m: [m(ids) for ids in calibration])
    with torch.inference_mode():
        fake = {name: model.model.layers[0].get_submodule(name).weight_quantizer(
            model.model.layers[0].get_submodule(name).weight).float() for name in UNFUSED}
        export_unified(model, dtype="bfloat16", out_dir=tmp_path, tokenizer_dir=tiny_llama_dir)
    weights = load_model(tmp_path)
    quant = json.loads((tmp_path / "hf_quant_config.json").read_text())["quantization"]
    assert weights.spec.quant_algo == quant["quant_algo"]
    for name, attr in UNFUSED.items():
        engine = getattr(weights.layers[0], attr).weight.float()
        error = float((engine - fake[name]).norm() / fake[name].norm())
        assert error < 0.05, (fmt, name, error)


def test_nvfp4_and_unknown_weights_are_refused_by_name(tiny_llama_dir: Path, tmp_path: Path) -> None:
    import shutil

    from trtkit.refengine.weights import load_model

    folder = tmp_path / "nvfp4"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    with pytest.raises(EngineError, match="NVFP4 is not simulated by the CPU engine"):
        load_model(folder)
    (folder / "hf_quant_config.json").write_text("{not json")
    with pytest.raises(EngineError, match="is not valid JSON"):
        load_model(folder)
