"""A decoder layer's elementwise work in the native library (``native/layer_ops.c``): the residual add with the RMS
norm after it, and SiLU(gate) * up, each one call over the step's rows instead of five to seven torch operations.

Rounding as Hugging Face's Llama (the norm in fp32, rounded to the model's dtype before the weight; each add and
product rounded), which is also what the torch path (``layers.rms_norm``) computes.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

DTYPES = (torch.float32, torch.bfloat16)


@dataclass(frozen=True, slots=True)
class LayerOps:
    norm_function: ctypes._CFuncPtr  # type: ignore[name-defined]
    silu_function: ctypes._CFuncPtr  # type: ignore[name-defined]

    @classmethod
    def from_library(cls, library: ctypes.CDLL) -> LayerOps:
        norm, silu = library.residual_rms_norm, library.silu_and_mul
        norm.restype = silu.restype = ctypes.c_int
        norm.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2 + [ctypes.c_float, ctypes.c_int, ctypes.c_int]
        silu.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_int] * 2
        return cls(norm, silu)

    @staticmethod
    def handles(dtype: torch.dtype, dim: int, inner: int) -> bool:
        """True for the model's dtype and widths (multiples of 16) that the library takes."""
        return dtype in DTYPES and dim % 16 == 0 and inner % 16 == 0 and dim >= 16 and inner >= 16

    def residual_rms_norm(self, x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                          eps: float, out: torch.Tensor) -> None:
        """x += delta (in place; delta None: no add), then out = rms_norm(x) * weight; all [rows, dim] contiguous
        in one dtype, weight [dim]."""
        rows, dim = x.shape
        assert x.is_contiguous() and out.is_contiguous() and weight.is_contiguous() and out.shape == x.shape
        assert x.dtype == out.dtype == weight.dtype in DTYPES and weight.shape == (dim,)
        assert delta is None or (delta.is_contiguous() and delta.shape == x.shape and delta.dtype == x.dtype)
        code = self.norm_function(x.data_ptr(), None if delta is None else delta.data_ptr(), weight.data_ptr(),
                                  out.data_ptr(), rows, dim, eps, int(x.dtype == torch.bfloat16),
                                  torch.get_num_threads())
        if code != 0:
            raise RuntimeError(f"residual_rms_norm refused rows of {dim}")

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up of gate_up [rows, 2 inner] (gate first), [rows, inner]."""
        rows, width = gate_up.shape
        assert gate_up.is_contiguous() and gate_up.dtype in DTYPES and width % 2 == 0
        out = torch.empty(rows, width // 2, dtype=gate_up.dtype)
        code = self.silu_function(gate_up.data_ptr(), out.data_ptr(), rows, width // 2,
                                  int(gate_up.dtype == torch.bfloat16), torch.get_num_threads())
        if code != 0:
            raise RuntimeError(f"silu_and_mul refused rows of {width}")
        return out
