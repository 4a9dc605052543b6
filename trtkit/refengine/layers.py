"""Projection layers that run dequantized weights and simulate activation quantization.

Quantized checkpoints keep their arithmetic visible: weights are dequantized once with the exported
scales; SmoothQuant/AWQ pre-quant scales multiply the input; int8 and fp8 activations are
quantized and dequantized with the exported (static) or per-token (dynamic) scales, as the GPU
kernels would see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from trtkit.refengine.packed_linear import pack, packed_linear
from trtkit.refengine.skinny_gemm import MAX_ROWS, SkinnyGemm

ActQuant = Literal["int8", "int8_per_token", "fp8"]
FP8_MAX = 448.0


def fake_quant_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.round(x / scale), -128, 127) * scale


def fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    scaled = torch.clamp(x / scale, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return scaled.to(x.dtype) * scale


def fake_quant_activation(x: torch.Tensor, kind: ActQuant, scale: torch.Tensor | None) -> torch.Tensor:
    if kind == "int8_per_token":
        token_scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.0
        return fake_quant_int8(x, token_scale)
    assert scale is not None, f"{kind} activations need a scale"
    return fake_quant_int8(x, scale) if kind == "int8" else fake_quant_fp8(x, scale)


@dataclass(slots=True)
class Linear:
    weight: torch.Tensor  # [out_features, in_features], compute dtype; oneDNN's blocked layout once packed
    input_scale: torch.Tensor | None = None  # SmoothQuant / AWQ pre-quant multiplier, [in_features]
    act_quant: ActQuant | None = None
    act_scale: torch.Tensor | None = None
    packed: bool = False
    panels: torch.Tensor | None = None  # decode-size copy of the weight for gemm (skinny_gemm.py)
    gemm: SkinnyGemm | None = None
    out_features: int = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            x = x * self.input_scale
        if self.act_quant is not None:
            x = fake_quant_activation(x, self.act_quant, self.act_scale)
        if self.gemm is not None and self.panels is not None and x.shape[0] <= MAX_ROWS:
            return self.gemm(x, self.panels, self.out_features)
        return packed_linear(x, self.weight) if self.packed else F.linear(x, self.weight)

    def pack(self, gemm: SkinnyGemm | None = None) -> None:
        """Replace the weight by its oneDNN-packed form (packed_linear.py), once; with gemm, also keep the
        weight's panels for decode-size products."""
        if gemm is not None and self.panels is None and gemm.handles(self.weight.dtype) and not self.packed:
            self.panels, self.gemm, self.out_features = gemm.pack(self.weight), gemm, self.weight.shape[0]
        if not self.packed:
            self.weight, self.packed = pack(self.weight), True

    def same_input_path(self, other: Linear) -> bool:
        return (self.act_quant == other.act_quant and _same(self.input_scale, other.input_scale)
                and _same(self.act_scale, other.act_scale))


@dataclass(slots=True)
class MergedLinear:
    """Several projections of one input whose input paths differ, so their weights cannot be fused."""

    parts: list[Linear]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([part(x) for part in self.parts], dim=-1)

    def pack(self, gemm: SkinnyGemm | None = None) -> None:
        for part in self.parts:
            part.pack(gemm)


Projection = Linear | MergedLinear


def fuse(parts: list[Linear]) -> Projection:
    """One matmul for projections that share an input (q/k/v, gate/up), when their input paths agree."""
    assert not any(p.packed for p in parts), "fuse plain weights, then pack"
    if all(parts[0].same_input_path(p) for p in parts[1:]):
        return Linear(torch.cat([p.weight for p in parts], dim=0).contiguous(), parts[0].input_scale,
                      parts[0].act_quant, parts[0].act_scale)
    return MergedLinear(parts)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As Hugging Face's Llama: in fp32, rounded to x's dtype before the weight (native/layer_ops.c alike)."""
    wide = x.float()
    return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(head_dim: int, max_positions: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for GPT-NeoX style (rotate-half) rotary embeddings, [max_positions, head_dim]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(torch.equal(a, b))
