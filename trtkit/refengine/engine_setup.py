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
    if not native_bf16_flags():
        raise EngineError("serve.cpu_dtype: bf16 needs a CPU with native bf16 arithmetic (AVX512-BF16 or AMX); "
                          "this one has neither, so bf16 would run slower than fp32: set serve.cpu_dtype: fp32")
    return torch.bfloat16


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
