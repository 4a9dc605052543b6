"""Projections on weights prepacked once into oneDNN's blocked layout, where this torch build offers it.

``F.linear`` on a plain [out, in] weight leaves oneDNN/MKL to reorder or re-block the weight on every call.
At decode sizes that is most of the work: measured here (2 cores, Zen 4, 12 rows, SmolLM2 shapes),
gate/up took 0.40 ms in bf16 and 0.77 ms in fp32 through ``F.linear`` and 0.18 / 0.34 ms on a prepacked
weight; the 49k-row lm_head 5.7 / 18.1 ms against 2.8 / 4.7 ms. Prefill sizes gain 5-25%.

The engine packs each projection once at start (``torch.ops.mkldnn._reorder_linear_weight``, the op that
torch's own inductor uses to freeze linear weights) and calls ``torch.ops.mkldnn._linear_pointwise``. Both
are private torch ops, so ``packing_available`` first checks, on this torch and CPU, that a packed product
equals ``F.linear``'s; where it does not (or torch has no oneDNN), the engine keeps ``F.linear``. Tests skip only
where the ops cannot run at all (``packing_supported``), so a packed product that went wrong fails them. bf16
results are bitwise those of ``F.linear`` here; fp32 ones differ in the last bits (another summation order).
"""

from __future__ import annotations

import logging
from functools import lru_cache

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [out, in] in oneDNN's blocked layout (only packed_linear reads it)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous())


# oneDNN builds (JIT-compiles) and caches one primitive per row count, up to 1,024 of them, each with its own
# buffers: a server whose steps take every row count from 1 to max_num_tokens keeps growing for minutes (the
# engine stub +7% in 2.5 minutes here) and pays a compile for each new count. Rows above ROW_BUCKET are padded
# up to a multiple of it, so the counts are few: with the padding, the same load ran at the same request rate and
# its memory stayed flat (/tmp driver, tiny model, 64 requests in flight, 2-60 token prompts; 2026-12-06).
ROW_BUCKET = 32


def bucketed_rows(rows: int) -> int:
    """The row count a product of ``rows`` rows runs at: itself up to ROW_BUCKET, else the next multiple of it."""
    return rows if rows <= ROW_BUCKET else -(-rows // ROW_BUCKET) * ROW_BUCKET


def packed_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """x [rows, in] @ weight.T, with weight as pack() returned it (rows padded with zeros to a bucket)."""
    rows = x.shape[0]
    padded = bucketed_rows(rows)
    if padded != rows:
        return torch.ops.mkldnn._linear_pointwise(F.pad(x, (0, 0, 0, padded - rows)), packed, None, "none", [],
                                                  "")[:rows]
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


@lru_cache(maxsize=4)
def packing_supported(dtype: torch.dtype) -> bool:
    """True when this torch and CPU can run the packed ops on dtype: oneDNN is present and the private ops exist
    and run. A capability, not a check of their results: tests skip on this alone, then assert the results."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        packed_linear(torch.zeros(1, 64, dtype=dtype), pack(torch.zeros(32, 64, dtype=dtype)))
    except (RuntimeError, AttributeError) as error:
        log.info("oneDNN weight packing is not available for %s (%s); the engine keeps F.linear", dtype, error)
        return False
    return True


@lru_cache(maxsize=4)
def packing_available(dtype: torch.dtype) -> bool:
    """True when packing is supported (packing_supported) and a packed product matches F.linear's: the engine's
    guard against a torch whose private ops changed their meaning (it then keeps F.linear and says so)."""
    if not packing_supported(dtype):
        return False
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 64, generator=generator).to(dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 1e-2
    for rows in (1, 5, 33):
        x = torch.randn(rows, 64, generator=generator).to(dtype)
        got, expected = packed_linear(x, pack(weight)).float(), F.linear(x, weight).float()
        if got.shape != expected.shape or not torch.allclose(got, expected, rtol=tolerance, atol=tolerance):
            log.warning("oneDNN packed weights disagree with F.linear in %s; the engine keeps F.linear", dtype)
            return False
    return True
