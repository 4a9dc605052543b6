"""Load a Llama-architecture model from a Hugging Face folder or a TensorRT-LLM checkpoint folder.

Both end up as ModelWeights: fused q/k/v and gate/up projections in the compute dtype, with
quantized TensorRT-LLM checkpoints dequantized by their exported scales (see layers.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from trtkit.errors import EngineError
from trtkit.refengine.layers import ActQuant, Linear, fuse
from trtkit.refengine.model_spec import LayerWeights, ModelSpec, ModelWeights
from trtkit.refengine.quantized import dequantize_weight
from trtkit.refengine.unified_checkpoint import UnifiedReader, read_quant_config

log = logging.getLogger(__name__)
LLAMA_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")


def load_model(path: str | Path, dtype: torch.dtype = torch.float32) -> ModelWeights:
    folder = Path(path)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise EngineError(f"{folder}: no config.json; pass a Hugging Face model folder or a TensorRT-LLM "
                          "checkpoint folder (trtkit convert writes one)")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if (folder / "rank0.safetensors").is_file() or "mapping" in config:
        return _load_trtllm(folder, config, dtype)
    return _load_hf(folder, config, dtype, read_quant_config(folder))


def _check_architecture(folder: Path, architecture: str) -> None:
    if architecture not in LLAMA_ARCHITECTURES:
        raise EngineError(f"{folder}: architecture {architecture!r} is not supported by the CPU engine; "
                          f"use a Llama-architecture model ({', '.join(LLAMA_ARCHITECTURES)})")


def _hf_rope_theta(folder: Path, config: dict[str, Any]) -> float:
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise EngineError(f"{folder}: rope type {rope_type!r} is not supported by the CPU engine; "
                          "only default rotary embeddings are")
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def _eos_id(folder: Path, config: dict[str, Any]) -> int | None:
    eos = config.get("eos_token_id")
    generation = folder / "generation_config.json"
    if eos is None and generation.is_file():
        eos = json.loads(generation.read_text(encoding="utf-8")).get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return int(eos) if eos is not None else None


def _load_hf(folder: Path, config: dict[str, Any], dtype: torch.dtype, quant: dict[str, Any] | None = None,
             ) -> ModelWeights:
    """An HF folder; with ``quant`` (its hf_quant_config.json), ModelOpt's unified checkpoint: each linear layer
    dequantized by its exported scales, as refengine/unified_checkpoint.py reads them."""
    _check_architecture(folder, (config.get("architectures") or ["?"])[0])
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise EngineError(f"{folder}: attention or MLP biases are not supported by the CPU engine")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise EngineError(f"{folder}: no *.safetensors weights; save the model with safe_serialization=True")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    spec = ModelSpec(
        hidden_size=hidden, num_layers=config["num_hidden_layers"], num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads", heads), head_dim=config.get("head_dim") or hidden // heads,
        intermediate_size=config["intermediate_size"], vocab_size=config["vocab_size"],
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)), rope_theta=_hf_rope_theta(folder, config),
        max_position_embeddings=config.get("max_position_embeddings", 2048),
        eos_token_id=_eos_id(folder, config), source_format="hf",
        quant_algo=(quant or {}).get("quant_algo"), kv_cache_quant_algo=(quant or {}).get("kv_cache_quant_algo"))
    if quant is not None:
        reader = UnifiedReader(folder, tensors, spec, dtype, quant)
        return reader.model([reader.layer(i) for i in range(spec.num_layers)])

    def get(name: str) -> torch.Tensor:
        if name not in tensors:
            raise EngineError(f"{folder}: weight {name!r} is missing; the checkpoint is incomplete")
        return tensors[name].to(dtype)

    def linear(name: str) -> Linear:
        return Linear(get(name + ".weight").contiguous())

    layers = []
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        layers.append(LayerWeights(
            input_norm=get(p + "input_layernorm.weight"),
            qkv=fuse([linear(p + f"self_attn.{n}_proj") for n in ("q", "k", "v")]),
            o_proj=linear(p + "self_attn.o_proj"),
            post_norm=get(p + "post_attention_layernorm.weight"),
            gate_up=fuse([linear(p + "mlp.gate_proj"), linear(p + "mlp.up_proj")]),
            down=linear(p + "mlp.down_proj")))
    embed = get("model.embed_tokens.weight")
    lm_head = tensors["lm_head.weight"].to(dtype) if "lm_head.weight" in tensors else embed
    return ModelWeights(spec, embed, layers, get("model.norm.weight"), lm_head)


def _load_trtllm(folder: Path, config: dict[str, Any], dtype: torch.dtype) -> ModelWeights:
    _check_architecture(folder, config.get("architecture", "?"))
    mapping = config.get("mapping") or {}
    tp, pp = mapping.get("tp_size", 1), mapping.get("pp_size", 1)
    if tp != 1 or pp != 1:
        raise EngineError(f"{folder}: checkpoint has tp_size={tp}, pp_size={pp}; the CPU engine runs one rank: "
                          "convert again with convert.tp_size: 1 and convert.pp_size: 1")
    if config.get("position_embedding_type", "rope_gpt_neox") != "rope_gpt_neox" or config.get("rotary_scaling"):
        raise EngineError(f"{folder}: only plain rope_gpt_neox rotary embeddings are supported by the CPU engine")
    weights_path = folder / "rank0.safetensors"
    if not weights_path.is_file():
        raise EngineError(f"{folder}: rank0.safetensors is missing; convert the model again")
    tensors = load_file(str(weights_path))
    quant = config.get("quantization") or {}
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    spec = ModelSpec(
        hidden_size=hidden, num_layers=config["num_hidden_layers"], num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads, head_dim=config.get("head_size") or hidden // heads,
        intermediate_size=config["intermediate_size"], vocab_size=config["vocab_size"],
        rms_norm_eps=float(config.get("norm_epsilon", 1e-6)), rope_theta=float(config.get("rotary_base", 10000.0)),
        max_position_embeddings=config.get("max_position_embeddings", 2048),
        eos_token_id=_eos_id(folder, config), source_format="trtllm",
        quant_algo=quant.get("quant_algo"), kv_cache_quant_algo=quant.get("kv_cache_quant_algo"))
    reader = _TrtllmReader(folder, tensors, spec, dtype)
    layers = [reader.layer(i) for i in range(spec.num_layers)]
    embed = reader.plain("transformer.vocab_embedding.weight")
    lm_head = reader.plain("lm_head.weight") if "lm_head.weight" in tensors else embed
    log.info("loaded TensorRT-LLM checkpoint %s (quant_algo=%s, kv_cache_quant_algo=%s)", folder,
             spec.quant_algo, spec.kv_cache_quant_algo)
    return ModelWeights(spec, embed, layers, reader.plain("transformer.ln_f.weight"), lm_head)


@dataclass(slots=True)
class _TrtllmReader:
    folder: Path
    tensors: dict[str, torch.Tensor]
    spec: ModelSpec
    dtype: torch.dtype

    def plain(self, name: str) -> torch.Tensor:
        return self.plain_raw(name).to(self.dtype)

    def linear(self, prefix: str, out_features: int) -> Linear:
        t = self.tensors
        weight = dequantize_weight(self.plain_raw(prefix + ".weight"), t.get(prefix + ".weights_scaling_factor"),
                                   self.spec.quant_algo, out_features, where=f"{self.folder}: {prefix}")
        pre = t.get(prefix + ".prequant_scaling_factor")
        act_scale = t.get(prefix + ".activation_scaling_factor")
        return Linear(weight.to(self.dtype).contiguous(), None if pre is None else pre.to(self.dtype),
                      self._act_quant(prefix, act_scale), None if act_scale is None else act_scale.to(self.dtype))

    def plain_raw(self, name: str) -> torch.Tensor:
        if name not in self.tensors:
            raise EngineError(f"{self.folder}: tensor {name!r} is missing from rank0.safetensors; convert again")
        return self.tensors[name]

    def _act_quant(self, prefix: str, act_scale: torch.Tensor | None) -> ActQuant | None:
        algo = self.spec.quant_algo or ""
        if "PER_TOKEN" in algo:
            return "int8_per_token"
        if act_scale is None:
            return None
        if algo.startswith("W8A8"):
            return "int8"
        if algo in ("FP8", "W4A8_AWQ") or "FP8" in algo:
            return "fp8"
        raise EngineError(f"{self.folder}: {prefix} has activation scales but quant_algo {algo!r} is not one "
                          "the CPU engine simulates (W8A8_SQ_*, FP8, W4A8_AWQ)")

    def layer(self, i: int) -> LayerWeights:
        s, p = self.spec, f"transformer.layers.{i}."
        qkv_out = (s.num_heads + 2 * s.num_kv_heads) * s.head_dim
        kv_scale = self.tensors.get(p + "attention.kv_cache_scaling_factor")
        return LayerWeights(
            input_norm=self.plain(p + "input_layernorm.weight"),
            qkv=self.linear(p + "attention.qkv", qkv_out),
            o_proj=self.linear(p + "attention.dense", s.hidden_size),
            post_norm=self.plain(p + "post_layernorm.weight"),
            # TensorRT-LLM names: mlp.fc is the activated (HF gate_proj) branch, mlp.gate is HF up_proj.
            gate_up=fuse([self.linear(p + "mlp.fc", s.intermediate_size),
                          self.linear(p + "mlp.gate", s.intermediate_size)]),
            down=self.linear(p + "mlp.proj", s.hidden_size),
            kv_scale=None if kv_scale is None or not s.kv_cache_quant_algo else kv_scale.float().reshape(()))
