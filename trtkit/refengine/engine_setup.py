"""What an engine is built from, checked once: its compute dtype, its native kernels and its KV pool size."""

from __future__ import annotations

import logging

import torch

from trtkit.errors import EngineError
from trtkit.refengine.config import EngineConfig
from trtkit.refengine.cpu_features import native_bf16_flags
from trtkit.refengine.model import KVCache
from trtkit.refengine.paged_attention import (
    AttentionKernels,
    KernelUnavailable,
    load_kernel,
    unsupported_shape,
)
from trtkit.refengine.weights import ModelSpec

log = logging.getLogger(__name__)


def compute_dtype(config: EngineConfig) -> torch.dtype:
    if config.dtype == "float32":
        return torch.float32
    if config.dtype == "auto":
        return chosen_dtype()[0]
    if not native_bf16_flags():
        raise EngineError("serve.cpu_dtype: bf16 needs a CPU with native bf16 arithmetic (AVX512-BF16 or AMX); "
                          "this one has neither, so bf16 would run slower than fp32: set serve.cpu_dtype: fp32 "
                          "(or auto, which picks fp32 here)")
    return torch.bfloat16


def chosen_dtype() -> tuple[torch.dtype, str]:
    """serve.cpu_dtype auto: bf16 where this CPU multiplies bf16 natively, else fp32; and why, for the start log.

    The rule, from measurements: with AMX, bf16 products ran 1.8-7x faster than fp32 (a Xeon with AMX); with
    AVX512-BF16 and no AMX, the bf16 dot-product instruction does twice the multiply-adds of an fp32 one and every
    weight and K/V row is half the bytes (on a 2-core Zen 4: oneDNN's prompt-sized products 200 against 100 GFLOP/s
    per core, decode-size ones 1.8x, the serving workload of benchmarks/cpu_peers.py 1.5-1.7x); without either,
    bf16 is converted to fp32 in software and runs slower than fp32."""
    flags = native_bf16_flags()
    if "amx_bf16" in flags:
        return torch.bfloat16, "this CPU has AMX (amx_bf16): its tile units multiply bf16 several times faster than fp32"
    if "avx512_bf16" in flags:
        return torch.bfloat16, ("this CPU has AVX512-BF16 (no AMX): its dot-product instruction does twice fp32's "
                                "multiply-adds, and bf16 weights and K/V are half the bytes")
    return torch.float32, ("this CPU has neither AMX nor AVX512-BF16: bf16 would be converted in software and run "
                           "slower than fp32")


def log_dtype_choice(config: EngineConfig, dtype: torch.dtype) -> None:
    """The start line that says what serve.cpu_dtype auto chose and why (nothing when the config named a dtype)."""
    if config.dtype == "auto":
        log.info("serve.cpu_dtype auto: the CPU engine computes in %s, because %s",
                 "bf16" if dtype == torch.bfloat16 else "fp32", chosen_dtype()[1])


def attention_kernels(config: EngineConfig, spec: ModelSpec) -> AttentionKernels | None:
    """The native kernels (decode and prompt attention, decode-size projections) for attention native/auto; None for
    torch (or auto without a compiler)."""
    if config.attention == "torch":
        return None
    try:
        reason = unsupported_shape(spec.num_heads, spec.num_kv_heads, spec.head_dim)
        if reason is not None:
            raise KernelUnavailable(reason)
        return load_kernel()
    except KernelUnavailable as error:
        if config.attention == "native":
            raise EngineError(f"serve.cpu_attention: native: {error}") from error
        log.warning("attention and projections run in torch (slower): %s", error)
        return None


def kv_block_count(config: EngineConfig, spec: ModelSpec, dtype: torch.dtype) -> int:
    """The KV pool's blocks for the configured memory; at least one max_seq_len sequence must fit."""
    num_blocks = config.num_blocks_for(KVCache.bytes_per_token(spec.num_layers, spec.num_kv_heads, spec.head_dim,
                                                               dtype))
    blocks_per_seq = -(-config.max_seq_len // config.tokens_per_block)
    if num_blocks < blocks_per_seq:
        raise EngineError(f"the KV cache holds {num_blocks} blocks of {config.tokens_per_block} tokens, fewer "
                          f"than one max_seq_len={config.max_seq_len} sequence needs ({blocks_per_seq}); raise "
                          "serve.cpu_kv_cache_mb (or max_tokens_in_paged_kv_cache) or lower build.max_seq_len")
    return num_blocks
