"""Decode-size projections on weights packed in 16-feature panels (``native/skinny_gemm.c``), fp32 and bf16.

A decode step multiplies at most one row per sequence by each weight, so it reads every weight from memory once
and does little arithmetic with it. oneDNN's packed fp32 product streamed the weights at 15-21 GB/s here, where
this machine reads 29 GB/s; the panel kernel streams them at 27-32 GB/s up to 12 rows (measured: 30 layers of
SmolLM2-135M's four projections, 2 threads, Zen 4: 20.9 -> 13.3 ms at 1 row, 22.4 -> 15.3 ms at 12, 26.1 -> 20.3
ms at 16). bf16 panels hold pairs of k for the CPU's bf16 dot-product instruction (AVX512-BF16; other CPUs widen
to fp32), with fp32 sums rounded to bf16 as torch rounds. Prompt-sized products stay on oneDNN, which runs them
near the cores' peak. The panels are a second copy of each weight, built once at start.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

MAX_ROWS = 16  # above this the product is compute-bound and oneDNN's kernel is the faster one


@dataclass(frozen=True, slots=True)
class SkinnyGemm:
    """The library's panel packing and decode-size product, per dtype: (pack, size, product) functions."""

    functions: dict[torch.dtype, tuple[ctypes._CFuncPtr, ctypes._CFuncPtr, ctypes._CFuncPtr]]  # type: ignore[name-defined]

    @classmethod
    def from_library(cls, library: ctypes.CDLL) -> SkinnyGemm:
        names = {torch.float32: ("pack_panels", "packed_floats", "skinny_gemm"),
                 torch.bfloat16: ("pack_panels_bf16", "packed_halves", "skinny_gemm_bf16")}
        functions = {}
        for dtype, (pack_name, size_name, gemm_name) in names.items():
            pack, size, gemm = getattr(library, pack_name), getattr(library, size_name), getattr(library, gemm_name)
            pack.restype = None
            pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
            size.restype = ctypes.c_int64
            size.argtypes = [ctypes.c_int64, ctypes.c_int64]
            gemm.restype = ctypes.c_int
            gemm.argtypes = ([ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_int])
            functions[dtype] = (pack, size, gemm)
        return cls(functions)

    def handles(self, dtype: torch.dtype) -> bool:
        return dtype in self.functions

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        """weight [out, in] in panels of 16 output features, k-major (only __call__ reads it)."""
        assert self.handles(weight.dtype) and weight.dim() == 2
        pack, size, _ = self.functions[weight.dtype]
        weight = weight.contiguous()
        out_features, in_features = weight.shape
        panels = torch.empty(size(out_features, in_features), dtype=weight.dtype)
        pack(weight.data_ptr(), out_features, in_features, panels.data_ptr())
        return panels

    def __call__(self, x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
        """x [rows, in] @ weight.T for rows <= MAX_ROWS, with panels as pack() returned them (same dtype)."""
        x = x.contiguous()
        rows, in_features = x.shape
        assert x.dtype == panels.dtype and self.handles(x.dtype) and 1 <= rows <= MAX_ROWS
        y = torch.empty(rows, out_features, dtype=x.dtype)
        code = self.functions[x.dtype][2](x.data_ptr(), rows, in_features, panels.data_ptr(), out_features,
                                          y.data_ptr(), torch.get_num_threads())
        if code != 0:
            reason = "out of memory" if code == -2 else "a shape it does not take"
            raise RuntimeError(f"skinny_gemm refused a product of {rows} x {in_features} by {out_features}: {reason}")
        return y
