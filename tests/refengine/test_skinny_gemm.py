"""The decode-size projection on panel-packed weights against F.linear (fp32 and bf16), and where the engine uses
it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.refengine.conftest import EngineFactory
from trtkit.refengine import paged_attention as native
from trtkit.refengine.layers import Linear
from trtkit.refengine.packed_linear import packing_supported
from trtkit.refengine.skinny_gemm import MAX_ROWS


@pytest.mark.parametrize(("out_features", "in_features"), [
    (960, 576),  # SmolLM2's fused q/k/v: a whole number of panel pairs
    (48, 33),  # one pair and a half: the last pair's second panel is padding, odd in_features
    (7, 5),  # less than one panel
    (100, 64),  # a panel cut short at the end
])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_panel_product_equals_f_linear(kernels: native.AttentionKernels, out_features: int, in_features: int,
                                       threads: int, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(out_features + in_features)
    weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
    panels = kernels.gemm.pack(weight)
    # bf16: both round fp32 sums to bf16 (2^-8 relative), and the sums' order differs
    rtol, atol = (1e-5, 1e-4) if dtype == torch.float32 else (1.6e-2, 3e-2)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows in (1, 2, 5, 8, 11, 12, 13, 14, 15, MAX_ROWS):  # 13-16: one panel against every row
            x = torch.randn(rows, in_features, generator=generator).to(dtype)
            got = kernels.gemm(x, panels, out_features)
            assert got.shape == (rows, out_features) and got.dtype == dtype
            expected = F.linear(x.double(), weight.double())
            torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol)
    finally:
        torch.set_num_threads(before)


def test_a_strided_input_is_read_as_its_values(kernels: native.AttentionKernels) -> None:
    weight = torch.randn(64, 40)
    x = torch.randn(40, 6).t()  # not contiguous
    torch.testing.assert_close(kernels.gemm(x, kernels.gemm.pack(weight), 64), F.linear(x, weight), rtol=1e-5,
                               atol=1e-4)


def test_linear_uses_panels_up_to_max_rows_and_onednn_above() -> None:
    if not packing_supported(torch.float32):
        pytest.skip("this torch has no oneDNN weight packing")
    gemm = native.load_kernel().gemm
    weight = torch.randn(96, 64)
    calls: list[int] = []

    class Counting:
        def __call__(self, x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
            calls.append(x.shape[0])
            return gemm(x, panels, out_features)

        def pack(self, w: torch.Tensor) -> torch.Tensor:
            return gemm.pack(w)

        def handles(self, dtype: torch.dtype) -> bool:
            return gemm.handles(dtype)

    linear = Linear(weight.clone())
    linear.pack(Counting())  # type: ignore[arg-type]
    for rows in (1, MAX_ROWS, MAX_ROWS + 1, 100):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(linear(x), F.linear(x, weight), rtol=1e-4, atol=1e-4)
    assert calls == [1, MAX_ROWS]  # prompt-sized products stay on oneDNN


def test_fp32_engines_decode_on_panels(make_engine: EngineFactory) -> None:
    engine = make_engine(attention="native")
    model = engine.runner.model
    projections = [model.lm_head, *(p for layer in model.weights.layers for p in (layer.qkv, layer.down))]
    if packing_supported(torch.float32):
        assert all(p.panels is not None for p in projections)
    assert make_engine(attention="torch").runner.model.lm_head.panels is None  # no library, no panels
