"""TensorRT-LLM checkpoints as ModelOpt exports them: the engine loads them and reproduces their arithmetic.

The fixture quantizes the tiny model with ModelOpt on CPU and exports it with
export_tensorrt_llm_checkpoint (as trtkit.checkpoint does), keeping the fake-quantized model's logits.
The engine, reading only the exported tensors and scales, must land much closer to those logits than
to the unquantized model's.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import SHARED_CACHE
from tests.refengine.conftest import hf_greedy, random_prompts
from trtkit.errors import EngineError
from trtkit.refengine import EngineConfig, LLMEngine, SamplingParams
from trtkit.refengine.weights import load_model

CACHE_VERSION = "v1"  # bump when the export recipe below changes
PROMPT = random_prompts(1, 48, 48, seed=11)[0]
CALIBRATION = random_prompts(8, 32, 32, seed=12)
SMALL = dict(max_batch_size=2, max_num_tokens=128, max_input_len=64, max_seq_len=96, tokens_per_block=16,
             kv_cache_bytes=2 << 20)
FORMATS = {  # our name -> (ModelOpt config names, quant_algo written to config.json)
    "int8_wo": (["INT8_WEIGHT_ONLY_CFG"], "W8A16"),
    "int4_wo": (["INT4_BLOCKWISE_WEIGHT_ONLY_CFG"], "W4A16_AWQ"),
    "int8_sq": (["INT8_SMOOTHQUANT_CFG"], "W8A8_SQ_PER_CHANNEL"),
    "fp8_fp8kv": (["FP8_DEFAULT_CFG", "FP8_KV_CFG"], "FP8"),
}


def export(model_dir: Path, out: Path, config_names: list[str]) -> torch.Tensor:
    """Quantize (if asked) and export; returns the (fake-quantized) model's logits on PROMPT."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if config_names:
        config = dict(getattr(mtq, config_names[0]))
        config["quant_cfg"] = [rule for name in config_names for rule in getattr(mtq, name)["quant_cfg"]]

        def forward_loop(m: torch.nn.Module) -> None:
            for sample in CALIBRATION:
                m(torch.tensor([sample]))

        mtq.quantize(model, config, forward_loop)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = model(torch.tensor([PROMPT])).logits[0].float()
        export_tensorrt_llm_checkpoint(model, "llama", torch.bfloat16, out, inference_tensor_parallel=1,
                                       inference_pipeline_parallel=1)
    return logits


@pytest.fixture(scope="module")
def checkpoints(tiny_llama_dir: Path) -> dict[str, tuple[Path, torch.Tensor]]:
    """Exports cached across runs in the shared test cache (they take a while on two busy cores)."""
    root = SHARED_CACHE / f"engine-test-checkpoints-{CACHE_VERSION}"
    made = {}
    for name, (config_names, _) in {"bf16": ([], None), **FORMATS}.items():
        folder, logits_file = root / name, root / f"{name}.logits.pt"
        if not logits_file.is_file():
            logits = export(tiny_llama_dir, folder, config_names)
            torch.save(logits, logits_file)
        made[name] = (folder, torch.load(logits_file))
    return made


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_unquantized_checkpoint_matches_transformers(checkpoints, tiny_hf_model) -> None:  # type: ignore[no-untyped-def]
    folder, _ = checkpoints["bf16"]
    engine = LLMEngine.from_pretrained(folder, EngineConfig(**SMALL))  # type: ignore[arg-type]
    assert engine.spec.source_format == "trtllm" and engine.spec.quant_algo is None
    out = engine.generate([PROMPT], SamplingParams(max_tokens=10, end_id=-1))[0]
    assert out.output_token_ids == hf_greedy(tiny_hf_model, PROMPT, 10)


@pytest.mark.parametrize("name", list(FORMATS))
def test_quantized_checkpoint_reproduces_modelopt_simulation(checkpoints, name: str) -> None:  # type: ignore[no-untyped-def]
    folder, fake_quant_logits = checkpoints[name]
    _, unquantized_logits = checkpoints["bf16"]
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"]["quant_algo"] == FORMATS[name][1]
    engine = LLMEngine.from_pretrained(folder, EngineConfig(**SMALL))  # type: ignore[arg-type]
    assert engine.spec.quant_algo == FORMATS[name][1]
    if name == "fp8_fp8kv":
        assert engine.spec.kv_cache_quant_algo == "FP8"
        assert all(layer.kv_scale is not None for layer in engine.runner.model.weights.layers)
    ours = engine.prompt_logits(PROMPT)
    to_simulation = relative_error(ours, fake_quant_logits)
    to_unquantized = relative_error(ours, unquantized_logits)
    if name.startswith("fp8"):
        # Per-tensor fp8 scales of q/k/v (and gate/up) are merged at export, so the weights are requantized
        # with one shared scale: the checkpoint is not bit-identical to the simulation, only close.
        assert to_simulation < 0.1, (to_simulation, to_unquantized)
    else:
        # Exact formats: only the bf16 export of norms/embeddings separates us from ModelOpt's simulation.
        assert to_simulation < 0.02, (to_simulation, to_unquantized)
        assert to_simulation < 0.5 * to_unquantized or to_unquantized < 0.01
    out = engine.generate([PROMPT], SamplingParams(max_tokens=8, end_id=-1))[0]
    assert len(out.output_token_ids) == 8 and out.finish_reason == "length"


def test_fp8_weights_are_the_stored_values_times_their_scale(checkpoints) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file

    folder, _ = checkpoints["fp8_fp8kv"]
    stored = load_file(str(folder / "rank0.safetensors"))
    qkv = load_model(folder).layers[0].qkv  # as loaded: the engine then packs it into oneDNN's layout
    prefix = "transformer.layers.0.attention.qkv."
    assert stored[prefix + "weight"].dtype == torch.float8_e4m3fn
    expected = stored[prefix + "weight"].float() * stored[prefix + "weights_scaling_factor"].float()
    assert torch.equal(qkv.weight, expected)  # type: ignore[union-attr]
    assert qkv.act_quant == "fp8"  # type: ignore[union-attr]
    assert torch.equal(qkv.act_scale, stored[prefix + "activation_scaling_factor"])  # type: ignore[union-attr]


def test_multi_rank_checkpoint_is_refused_with_the_fix(checkpoints, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder, _ = checkpoints["bf16"]
    config = json.loads((folder / "config.json").read_text())
    config["mapping"] = {"world_size": 2, "tp_size": 2, "pp_size": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(EngineError, match="tp_size: 1"):
        LLMEngine.from_pretrained(tmp_path)


def test_not_a_model_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no config.json"):
        LLMEngine.from_pretrained(tmp_path)
