"""ModelOpt's unified Hugging Face checkpoint, the one TensorRT-LLM's PyTorch backend loads directly.

``export_hf_checkpoint`` writes the model in Hugging Face names plus ``hf_quant_config.json``
(``quantization {quant_algo, kv_cache_quant_algo, group_size, exclude_modules}``). Each quantized linear layer
keeps its quantized ``weight`` with ``weight_scale`` (W4A8 also a ``weight_scale_2``, a factor of it that the FP8
kernel applies apart: the dequantized weight is int4 x weight_scale, checked against ModelOpt's fake quantization
on CPU), ``input_scale`` for static
activation scales, ``pre_quant_scale`` for AWQ/SmoothQuant, and the attention's ``k_proj.k_scale`` /
``v_proj.v_scale`` for a quantized KV cache. The reader dequantizes every weight once and keeps the activation
quantization visible, as the TensorRT-LLM checkpoint reader (weights.py) does; ``fp8_pb_wo`` is ModelOpt's name
for FP8 block scales (128 x 128 weight blocks), which the PyTorch backend reads as FP8_BLOCK_SCALES.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trtkit.errors import EngineError
from trtkit.refengine.layers import ActQuant, Linear, fuse
from trtkit.refengine.model_spec import LayerWeights, ModelSpec, ModelWeights
from trtkit.refengine.quantized import unpack_int4_rows

QUANT_CONFIG = "hf_quant_config.json"
FP8_BLOCK = 128
BLOCK_ALGOS = ("fp8_pb_wo", "FP8_BLOCK_SCALES")
INT4_ALGOS = ("W4A16_AWQ", "W4A8_AWQ")
# quant_algo -> how its activations are quantized on the GPU (static per-tensor scales from calibration)
ACTIVATIONS: dict[str, ActQuant] = {"FP8": "fp8", "W4A8_AWQ": "fp8", "W8A8_SQ_PER_CHANNEL": "int8"}


def read_quant_config(folder: Path) -> dict[str, Any] | None:
    """``hf_quant_config.json``'s ``quantization`` entry, or None for a plain Hugging Face folder."""
    path = folder / QUANT_CONFIG
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EngineError(f"{path} is not valid JSON ({exc}); export the checkpoint again") from exc
    quant = data.get("quantization") if isinstance(data, dict) else None
    if not isinstance(quant, dict):
        raise EngineError(f"{path} has no 'quantization' mapping; export it with ModelOpt's export_hf_checkpoint")
    algo = quant.get("quant_algo")
    if algo == "NVFP4" or algo == "MIXED_PRECISION":
        raise EngineError(f"{path}: quant_algo {algo} is not simulated by the CPU engine (FP8, FP8 block scales, "
                          "W4A16/W4A8 AWQ and W8A8 SmoothQuant are); serve it on a GPU with the PyTorch backend")
    return quant


@dataclass(slots=True)
class UnifiedReader:
    folder: Path
    tensors: dict[str, torch.Tensor]
    spec: ModelSpec
    dtype: torch.dtype
    quant: dict[str, Any]

    def get(self, name: str) -> torch.Tensor:
        if name not in self.tensors:
            raise EngineError(f"{self.folder}: tensor {name!r} is missing; the checkpoint is incomplete, export it again")
        return self.tensors[name]

    def linear(self, prefix: str) -> Linear:
        weight, algo = self.get(prefix + ".weight"), self.quant.get("quant_algo")
        if weight.is_floating_point() and weight.dtype != torch.float8_e4m3fn:  # excluded (lm_head) or unquantized
            return Linear(weight.to(self.dtype).contiguous())
        values = self._dequantize(prefix, weight, str(algo)).to(self.dtype).contiguous()
        pre = self.tensors.get(prefix + ".pre_quant_scale")
        act = ACTIVATIONS.get(str(algo))
        act_scale = self.tensors.get(prefix + ".input_scale") if act else None
        if act is not None and act_scale is None:
            raise EngineError(f"{self.folder}: {prefix} ({algo}) has no input_scale; export the checkpoint again")
        return Linear(values, None if pre is None else pre.to(self.dtype), act if act_scale is not None else None,
                      None if act_scale is None else act_scale.float().reshape(()).to(self.dtype))

    def _dequantize(self, prefix: str, weight: torch.Tensor, algo: str) -> torch.Tensor:
        scale = self.get(prefix + ".weight_scale").float()
        if weight.dtype == torch.float8_e4m3fn:
            if algo in BLOCK_ALGOS:
                return weight.float() * _block_scales(scale, weight.shape)
            return weight.float() * (scale.reshape(()) if scale.numel() == 1 else scale.reshape(-1, 1))
        if algo in INT4_ALGOS:
            values = unpack_int4_rows(weight).float()  # [out, in]
            groups = scale.reshape(values.shape[0], -1)
            # W4A8: weight_scale is the whole per-group scale; weight_scale_2 only splits it for the FP8 kernel
            return values * groups.repeat_interleave(values.shape[1] // groups.shape[1], dim=1)
        if weight.dtype == torch.int8:
            return weight.float() * scale.reshape(-1, 1)
        raise EngineError(f"{self.folder}: {prefix}.weight is {weight.dtype} under quant_algo {algo}, which the CPU "
                          "engine does not read; export the checkpoint again")

    def layer(self, i: int) -> LayerWeights:
        p = f"model.layers.{i}."
        attn, mlp = p + "self_attn.", p + "mlp."
        k_scale, v_scale = self.tensors.get(attn + "k_proj.k_scale"), self.tensors.get(attn + "v_proj.v_scale")
        quantized_kv = bool(self.quant.get("kv_cache_quant_algo")) and k_scale is not None and v_scale is not None
        return LayerWeights(
            input_norm=self.get(p + "input_layernorm.weight").to(self.dtype),
            qkv=fuse([self.linear(attn + f"{n}_proj") for n in ("q", "k", "v")]),
            o_proj=self.linear(attn + "o_proj"),
            post_norm=self.get(p + "post_attention_layernorm.weight").to(self.dtype),
            gate_up=fuse([self.linear(mlp + "gate_proj"), self.linear(mlp + "up_proj")]),
            down=self.linear(mlp + "down_proj"),
            kv_scale=k_scale.float().reshape(()) if quantized_kv and k_scale is not None else None,
            v_scale=v_scale.float().reshape(()) if quantized_kv and v_scale is not None else None)

    def model(self, layers: list[LayerWeights]) -> ModelWeights:
        embed = self.get("model.embed_tokens.weight").to(self.dtype)
        head = self.tensors.get("lm_head.weight")
        lm_head = embed if head is None else self.linear("lm_head").weight
        return ModelWeights(self.spec, embed, layers, self.get("model.norm.weight").to(self.dtype), lm_head)


def _block_scales(scale: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """One scale per 128 x 128 block of an [out, in] weight, spread over the block's elements."""
    rows, cols = -(-shape[0] // FP8_BLOCK), -(-shape[1] // FP8_BLOCK)
    blocks = scale.reshape(rows, cols) if scale.numel() == rows * cols else scale.reshape(()).expand(rows, cols)
    full = blocks.repeat_interleave(FP8_BLOCK, dim=0).repeat_interleave(FP8_BLOCK, dim=1)
    return full[:shape[0], :shape[1]]
