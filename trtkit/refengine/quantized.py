"""Dequantize the weight formats ModelOpt exports for TensorRT-LLM (int8, packed int4, fp8)."""

from __future__ import annotations

import torch

from trtkit.errors import EngineError

INT4_ALGOS = ("W4A16", "W4A16_AWQ", "W4A8_AWQ")


def unpack_int4_rows(packed: torch.Tensor) -> torch.Tensor:
    """[out/2, in] bytes -> [out, in] int8 in -8..7; the low nibble is the even output row."""
    raw = packed.view(torch.uint8).to(torch.int16)
    low = raw & 0x0F
    high = (raw >> 4) & 0x0F
    low = torch.where(low >= 8, low - 16, low)
    high = torch.where(high >= 8, high - 16, high)
    rows = torch.stack((low, high), dim=1)  # [out/2, 2, in]
    return rows.reshape(-1, packed.shape[-1]).to(torch.int8)


def dequantize_weight(weight: torch.Tensor, scale: torch.Tensor | None, quant_algo: str | None,
                      out_features: int, *, where: str) -> torch.Tensor:
    """A float32 [out, in] weight from whatever the checkpoint stored for it."""
    if weight.is_floating_point() and weight.dtype != torch.float8_e4m3fn:
        return weight.float()
    if scale is None:
        raise EngineError(f"{where}: quantized weight ({weight.dtype}) has no weights_scaling_factor; "
                          "export the checkpoint again")
    scale = scale.float()
    if weight.dtype == torch.float8_e4m3fn:
        return weight.float() * _per_row(scale)
    if weight.dtype not in (torch.int8, torch.uint8):
        raise EngineError(f"{where}: weight dtype {weight.dtype} is not supported by the CPU engine")
    if quant_algo in INT4_ALGOS or weight.shape[0] * 2 == out_features:
        values = unpack_int4_rows(weight).float()
        if scale.dim() == 2:  # per group along the input dimension
            group = values.shape[1] // scale.shape[1]
            return values * scale.repeat_interleave(group, dim=1)
        return values * _per_row(scale)
    if weight.shape[0] != out_features:
        raise EngineError(f"{where}: int8 weight has {weight.shape[0]} rows, expected {out_features}")
    return weight.float() * _per_row(scale)


def _per_row(scale: torch.Tensor) -> torch.Tensor:
    """A scale that broadcasts over [out, in]: per tensor (one value) or per output channel."""
    return scale.reshape(()) if scale.numel() == 1 else scale.reshape(-1, 1)
