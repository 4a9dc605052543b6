"""Prompt-sized products on oneDNN-packed weights: rows padded to buckets, results those of F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trtkit.refengine.packed_linear import (
    ROW_BUCKET,
    bucketed_rows,
    pack,
    packed_linear,
    packing_available,
    packing_supported,
)


def test_row_counts_fall_into_few_buckets() -> None:
    counts = {bucketed_rows(rows) for rows in range(1, 2049)}
    # every count up to the bucket size is its own; above it, one per bucket: oneDNN compiles and keeps
    # one primitive per count, so 2,048 counts must not mean 2,048 primitives
    assert len(counts) == ROW_BUCKET + (2048 - ROW_BUCKET) // ROW_BUCKET
    assert all(bucketed_rows(rows) >= rows and bucketed_rows(rows) - rows < ROW_BUCKET for rows in range(1, 2049))
    assert bucketed_rows(ROW_BUCKET) == ROW_BUCKET and bucketed_rows(ROW_BUCKET + 1) == 2 * ROW_BUCKET


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, ROW_BUCKET, ROW_BUCKET + 1, 2 * ROW_BUCKET - 1, 2 * ROW_BUCKET, 100, 257])
def test_a_padded_product_returns_the_rows_asked_for_equal_to_f_linear(dtype: torch.dtype, rows: int) -> None:
    if not packing_supported(dtype):
        pytest.skip(f"this torch/CPU packs no {dtype} weights: the engine keeps F.linear")
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 64, generator=generator).to(dtype)
    x = torch.randn(rows, 64, generator=generator).to(dtype)
    got = packed_linear(x, pack(weight))
    rtol, atol = (1e-5, 1e-4) if dtype == torch.float32 else (1.6e-2, 3e-2)
    assert got.shape == (rows, 96) and got.is_contiguous()
    torch.testing.assert_close(got.float(), F.linear(x, weight).float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_engines_guard_keeps_packing_wherever_it_runs(dtype: torch.dtype) -> None:
    """The engine packs only where packing_available also finds the products right; where the ops run and that
    guard still says no, the packed path is broken on this torch, and this fails instead of a silent F.linear."""
    if not packing_supported(dtype):
        pytest.skip(f"this torch/CPU cannot run oneDNN packing for {dtype}")
    assert packing_available(dtype)
