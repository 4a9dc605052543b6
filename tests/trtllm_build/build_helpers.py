"""Shared helpers for the build tests: shipped configs, host facts written as data, small checkpoints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from trtkit.config import load_config
from trtkit.config.gpus import lookup_gpu
from trtkit.config.schema import ModelConfig
from trtkit.trtllm_build.host_facts import GpuFact, HostFacts
from trtkit.trtllm_build.preflight import GIB

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ["smollm2-135m", "tiny-llama", "llama3-8b-fp8-h100"]
FORMATS = ["none", "int8_sq", "int8_wo", "int4_wo", "int4_awq", "w4a8_awq", "fp8", "nvfp4"]


def shipped(name: str) -> ModelConfig:
    return load_config(ROOT / "model_configs" / f"{name}.yaml")


def with_quant(config: ModelConfig, fmt: str, kv: str = "auto") -> ModelConfig:
    return replace(config, quantization=replace(config.quantization, format=fmt, kv_cache_dtype=kv))  # type: ignore[arg-type]


def gpu_fact(kind: str, index: int = 0, name: str | None = None) -> GpuFact:
    spec = lookup_gpu(kind)
    return GpuFact(index, name or f"NVIDIA {spec.kind}", spec.memory_bytes, spec.compute_capability)


def gpu_host(kind: str = "H100-80GB", count: int = 1, *, trtllm: str | None = "1.2.1",
             tensorrt: str = "10.13.3.9", free_gib: float = 500.0) -> HostFacts:
    """A GPU host described as data (what runner.collect_host_facts would report there)."""
    return HostFacts(gpus=tuple(gpu_fact(kind, i) for i in range(count)), tensorrt_llm_version=trtllm,
                     tensorrt_version=tensorrt, free_disk_bytes=int(free_gib * GIB))


def write_checkpoint(folder: Path, *, dtype: str = "bfloat16", quant_algo: str | None = None,
                     kv_quant_algo: str | None = None, tp: int = 1, pp: int = 1, max_positions: int = 1024) -> Path:
    """A TensorRT-LLM checkpoint in the documented format: config.json plus rank{N}.safetensors."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architecture": "LlamaForCausalLM", "dtype": dtype, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256, "vocab_size": 512,
        "max_position_embeddings": max_positions, "hidden_act": "silu",
        "mapping": {"world_size": tp * pp, "tp_size": tp, "pp_size": pp},
        "quantization": {"quant_algo": quant_algo, "kv_cache_quant_algo": kv_quant_algo},
    }
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for rank in range(tp * pp):
        torch.manual_seed(rank)
        save_file({"transformer.vocab_embedding.weight": torch.randn(512, 128)}, str(folder / f"rank{rank}.safetensors"))
    return folder
