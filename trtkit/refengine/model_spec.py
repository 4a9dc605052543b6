"""What the engine runs: the model's shape and its weights, in the compute dtype, however they were stored."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trtkit.refengine.layers import Projection


@dataclass(slots=True)
class ModelSpec:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    eos_token_id: int | None
    source_format: str  # "hf" or "trtllm"
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None


@dataclass(slots=True)
class LayerWeights:
    input_norm: torch.Tensor
    qkv: Projection
    o_proj: Projection
    post_norm: torch.Tensor
    gate_up: Projection  # output is [gate | up]; the MLP computes silu(gate) * up
    down: Projection
    kv_scale: torch.Tensor | None = None  # K/V cache quantization scale (fp8/int8 KV cache); K's when v_scale is set
    v_scale: torch.Tensor | None = None  # V's own scale (unified HF checkpoints carry k_scale and v_scale apart)


@dataclass(slots=True)
class ModelWeights:
    spec: ModelSpec
    embed: torch.Tensor
    layers: list[LayerWeights]
    final_norm: torch.Tensor
    lm_head: torch.Tensor
