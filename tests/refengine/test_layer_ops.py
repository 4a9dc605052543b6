"""The fused elementwise layer work (native/layer_ops.c) against float64 references and against Hugging Face's Llama
expressions, for this CPU's build and the AVX2 (x86-64-v3) build; and the engine that uses it against the one that
does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.refengine.conftest import EngineFactory, random_prompts
from trtkit.refengine import LLMEngine, SamplingParams
from trtkit.refengine import paged_attention as native
from trtkit.refengine.cpu_features import native_bf16_flags
from trtkit.refengine.layers import rms_norm

EPS = 1e-5


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward, verbatim in effect."""
    wide = x.to(torch.float32)
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + EPS)
    return weight * wide.to(x.dtype)


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance in units of the last place between two bf16 tensors of finite values."""
    def ordered(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)
    return int((ordered(a) - ordered(b)).abs().max()) if a.numel() else 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [0, 1, 5, 64])  # 64 x 576 elements: past the one-thread bound, so threads split it
@pytest.mark.parametrize("with_delta", [True, False])
def test_residual_rms_norm_equals_float64_and_hf(kernels: native.AttentionKernels, dtype: torch.dtype, rows: int,
                                                 with_delta: bool) -> None:
    generator = torch.Generator().manual_seed(rows * 2 + with_delta)
    dim = 576
    x = (torch.randn(rows, dim, generator=generator) * 3).to(dtype)
    delta = torch.randn(rows, dim, generator=generator).to(dtype) if with_delta else None
    weight = (torch.rand(dim, generator=generator) + 0.5).to(dtype)
    expected_x = x + delta if delta is not None else x.clone()  # torch rounds the bf16 sum to nearest even
    out = torch.empty_like(x)
    kernels.layer_ops.residual_rms_norm(x, delta, weight, EPS, out)
    assert torch.equal(x, expected_x)  # the residual stream, updated in place, bit for bit
    wide = expected_x.double()
    reference = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()
    rtol, atol = (1e-5, 1e-5) if dtype == torch.float32 else (1.6e-2, 1e-2)
    torch.testing.assert_close(out.double(), reference, rtol=rtol, atol=atol)
    if dtype == torch.bfloat16:  # the same rounding points as transformers: at most a last-place difference
        assert ulps_apart(out, hf_rms_norm(expected_x, weight)) <= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [0, 1, 3, 24])  # 24 x 1536: past the one-thread bound
def test_silu_and_mul_equals_float64_and_torch(kernels: native.AttentionKernels, dtype: torch.dtype,
                                               rows: int) -> None:
    generator = torch.Generator().manual_seed(rows)
    inner = 1536
    gate_up = (torch.randn(rows, 2 * inner, generator=generator) * 4).to(dtype)
    gate_up[:, :8] = torch.tensor([0.0, -0.0, 80.0, -80.0, 100.0, -100.0, 1e-6, -1e-6]).to(dtype)  # the far ends
    got = kernels.layer_ops.silu_and_mul(gate_up)
    gate, up = gate_up.double().chunk(2, dim=-1)
    reference = gate * torch.sigmoid(gate) * up
    rtol, atol = (2e-6, 1e-6) if dtype == torch.float32 else (1.6e-2, 1e-2)
    torch.testing.assert_close(got.double(), reference, rtol=rtol, atol=atol)
    if dtype == torch.bfloat16:  # as transformers' act_fn(gate) * up in bf16
        torch_gate, torch_up = gate_up.chunk(2, dim=-1)
        assert ulps_apart(got, F.silu(torch_gate) * torch_up) <= 1


def test_shapes_the_library_does_not_take_are_refused(kernels: native.AttentionKernels) -> None:
    x = torch.randn(2, 20)  # not a multiple of 16
    with pytest.raises(RuntimeError, match="residual_rms_norm refused rows of 20"):
        kernels.layer_ops.residual_rms_norm(x, None, torch.ones(20), EPS, torch.empty_like(x))
    with pytest.raises(RuntimeError, match="silu_and_mul refused"):
        kernels.layer_ops.silu_and_mul(torch.randn(2, 40))
    assert not kernels.layer_ops.handles(torch.float16, 576, 1536) and not kernels.layer_ops.handles(
        torch.float32, 20, 1536)


def test_torch_norm_rounds_as_transformers() -> None:
    x, weight = (torch.randn(7, 64) * 3).to(torch.bfloat16), (torch.rand(64) + 0.5).to(torch.bfloat16)
    assert torch.equal(rms_norm(x, weight, EPS), hf_rms_norm(x, weight))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_and_torch_layer_work_generate_alike(make_engine: EngineFactory, tiny_llama_dir: Path,
                                                   dtype: str) -> None:
    """The engine with the library's layer work and the one with torch's choose the same greedy tokens."""
    if dtype == "bfloat16" and not native_bf16_flags():
        pytest.skip("bf16 engines need AVX512-BF16 or AMX")
    prompts = random_prompts(4, 5, 60, seed=5)
    params = SamplingParams(max_tokens=10, end_id=-1)
    config = make_engine(attention="native").config
    config.dtype = dtype  # type: ignore[assignment]
    fused, plain = (LLMEngine.from_pretrained(tiny_llama_dir, config) for _ in range(2))
    assert fused.runner.model.layer_ops is not None
    plain.runner.model.layer_ops = None  # the torch expressions, everything else the same
    assert [o.output_token_ids for o in fused.generate(prompts, params)] == \
        [o.output_token_ids for o in plain.generate(prompts, params)]
