"""The Llama decoder forward over a flattened batch of chunks, reading and writing the paged KV cache.

All scheduled tokens of all requests go through the projections as one [num_tokens, hidden] matrix
(no padding). Each token's K/V is written straight into its cache slot (slot = block * block_size +
offset). Attention differs by chunk kind:
- single-token chunks (decodes) go to the native kernel (``paged_attention.py``) when it is loaded: it
  reads each sequence's K/V in place, walking its block table, so a step costs what its sequences hold
  and copies nothing. Without it (``serve.cpu_attention: torch``, or no C compiler), decodes are attended
  in torch, in groups of similar context length: a group gathers whole blocks of its members' own block
  tables (one memcpy per block, not per token) and pads only to the longest member of the group;
- prompt chunks go to the kernel's prefill entry point when it is loaded: every chunk of the step in one call,
  each query row attending causally to the cache through its chunk's block table (the step's own K/V is
  written there first), so a fresh prompt and a chunk continuing a cached prefix are the same case. Without
  it, a prompt chunk starting at position 0 attends to its own fresh K/V (causal) and a chunk continuing a
  cached prefix to its blocks gathered from the cache, one scaled_dot_product_attention call per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trtkit.refengine.layer_ops import LayerOps
from trtkit.refengine.layers import (
    Linear,
    fake_quant_fp8,
    fake_quant_int8,
    rms_norm,
    rope_tables,
    rotate_half,
)
from trtkit.refengine.packed_linear import packing_available
from trtkit.refengine.paged_attention import AttentionKernels
from trtkit.refengine.weights import LayerWeights, ModelWeights


@dataclass(slots=True)
class PrefillChunk:
    row_start: int  # first row in the flattened batch
    num_tokens: int
    context_start: int  # tokens already in the cache before this chunk
    blocks: torch.Tensor | None  # block ids holding positions [0, context) when context_start > 0
    mask: torch.Tensor | None  # [num_tokens, context] causal mask for the cached case


@dataclass(slots=True)
class DecodeGroup:
    """Decode rows [row_start, row_start + n) whose contexts are close in length, attended together."""

    row_start: int
    blocks: torch.Tensor  # [n, max_blocks] block ids of each member's context (padding repeats a real block)
    mask: torch.Tensor | None  # [n, 1, 1, max_blocks * block_size] True where a key is real; None when all are


@dataclass(slots=True)
class DecodeTables:
    """Decode rows [0, n) for the native kernel: each row's block table and context length."""

    tables: torch.Tensor  # [n, max_blocks] int64 block ids (a shorter table is padded with block 0, never read)
    lengths: torch.Tensor  # [n] int64 tokens of context, the row's own token included


@dataclass(slots=True)
class PrefillTables:
    """Prompt chunks for the native kernel: chunk c's rows [row_starts[c], + num_tokens[c]) sit at positions
    context_starts[c] onwards and read their context through tables[c]."""

    tables: torch.Tensor  # [chunks, max_blocks] int64 block ids (padded with block 0, never read)
    row_starts: torch.Tensor  # [chunks] int64
    num_tokens: torch.Tensor  # [chunks] int64
    context_starts: torch.Tensor  # [chunks] int64


@dataclass(slots=True)
class AttentionBatch:
    positions: torch.Tensor  # [T]
    slot_mapping: torch.Tensor  # [T] where each token's K/V is written
    decode_groups: list[DecodeGroup]  # torch path: decode rows come first, grouped by context length
    prefills: list[PrefillChunk]
    logit_rows: torch.Tensor  # [S] rows whose next-token logits are needed
    decode_tables: DecodeTables | None = None  # kernel path: the decode rows (then decode_groups is empty)
    prefill_tables: PrefillTables | None = None  # kernel path: the prompt chunks (then prefills is empty)


class KVCache:
    """Keys and values of every layer, addressed by slot = block_id * tokens_per_block + offset."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype):
        shape = (num_layers, num_blocks * block_size, num_kv_heads, head_dim)
        self.block_size = block_size
        self.key = torch.zeros(shape, dtype=dtype)
        self.value = torch.zeros(shape, dtype=dtype)

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


class LlamaModel:
    def __init__(self, weights: ModelWeights, max_positions: int, dtype: torch.dtype, block_size: int,
                 kernels: AttentionKernels | None = None) -> None:
        self.weights = weights
        self.block_size = block_size
        self.kernels = kernels  # None: decodes are attended in torch, by length group
        # The vocabulary projection gets a Linear of its own: with tied embeddings, the embedding lookup
        # keeps reading the plain table.
        self.lm_head = Linear(weights.lm_head)
        if packing_available(dtype):  # oneDNN-packed weights: 2-4x faster projections at decode sizes
            # decode-size products on the kernel's panels (skinny_gemm.py): 1.3-1.6x faster again in fp32
            gemm = kernels.gemm if kernels is not None else None
            for layer in weights.layers:
                for projection in (layer.qkv, layer.o_proj, layer.gate_up, layer.down):
                    projection.pack(gemm)
            self.lm_head.pack(gemm)
        spec = weights.spec
        self.cos, self.sin = rope_tables(spec.head_dim, max_positions, spec.rope_theta, dtype)
        self.q_size = spec.num_heads * spec.head_dim
        self.kv_size = spec.num_kv_heads * spec.head_dim
        # Layers whose K/V the GPU would store quantized keep the torch path for the rotary embedding and the
        # cache write (the kernel writes K/V as computed).
        self.torch_rope = kernels is None or any(layer.kv_scale is not None for layer in weights.layers)
        self.layer_ops = kernels.layer_ops if kernels is not None and kernels.layer_ops.handles(
            dtype, spec.hidden_size, spec.intermediate_size) else None

    def forward(self, input_ids: torch.Tensor, batch: AttentionBatch, cache: KVCache) -> torch.Tensor:
        """Next-token logits [S, vocab] for batch.logit_rows."""
        w = self.weights
        x = F.embedding(input_ids, w.embed)
        rope = None
        if self.torch_rope:
            # index_select, not advanced indexing: it is several times faster for row gathers on CPU.
            rope = (self.cos.index_select(0, batch.positions).unsqueeze(1),  # [T, 1, head_dim]
                    self.sin.index_select(0, batch.positions).unsqueeze(1))
        if self.layer_ops is not None:
            return self._forward_fused(x, rope, batch, cache, self.layer_ops)
        for index, layer in enumerate(w.layers):
            h = rms_norm(x, layer.input_norm, w.spec.rms_norm_eps)
            x = x + layer.o_proj(self._attention(layer, h, rope, batch, cache.key[index], cache.value[index]))
            h = rms_norm(x, layer.post_norm, w.spec.rms_norm_eps)
            gate, up = layer.gate_up(h).chunk(2, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        if batch.logit_rows.numel() == 0:  # every chunk of the step is the middle of a prompt: nothing to sample
            return x.new_empty((0, w.spec.vocab_size))
        x = rms_norm(x.index_select(0, batch.logit_rows), w.final_norm, w.spec.rms_norm_eps)
        return self._lm_head(x)

    def _forward_fused(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, batch: AttentionBatch,
                       cache: KVCache, ops: LayerOps) -> torch.Tensor:
        """forward() with each residual add and the norm after it in one library call, and SiLU * up in one."""
        w = self.weights
        eps, layers = w.spec.rms_norm_eps, w.layers
        h = torch.empty_like(x)
        ops.residual_rms_norm(x, None, layers[0].input_norm, eps, h)
        mlp = x
        for index, layer in enumerate(layers):
            attended = layer.o_proj(self._attention(layer, h, rope, batch, cache.key[index], cache.value[index]))
            ops.residual_rms_norm(x, attended, layer.post_norm, eps, h)
            mlp = layer.down(ops.silu_and_mul(layer.gate_up(h)))
            if index + 1 < len(layers):
                ops.residual_rms_norm(x, mlp, layers[index + 1].input_norm, eps, h)
        if batch.logit_rows.numel() == 0:
            return x.new_empty((0, w.spec.vocab_size))
        # the last residual add, only for the rows whose logits are needed
        last = x.index_select(0, batch.logit_rows).add_(mlp.index_select(0, batch.logit_rows))
        normed = torch.empty_like(last)
        ops.residual_rms_norm(last, None, w.final_norm, eps, normed)
        return self._lm_head(normed)

    def _lm_head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(x)

    def _attention(self, layer: LayerWeights, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                   batch: AttentionBatch, key_cache: torch.Tensor, value_cache: torch.Tensor) -> torch.Tensor:
        spec = self.weights.spec
        num_tokens = h.shape[0]
        qkv = layer.qkv(h)
        if self.kernels is not None and layer.kv_scale is None:
            q, k = self.kernels.rope_and_store(qkv, batch.positions, batch.slot_mapping, self.cos, self.sin,
                                               key_cache, value_cache, spec.num_heads)
            v = qkv[:, self.q_size + self.kv_size:].view(num_tokens, spec.num_kv_heads, spec.head_dim)
        else:
            assert rope is not None
            q, k, v = self._rope_and_store(layer, qkv, rope, batch.slot_mapping, key_cache, value_cache)
        out = torch.empty_like(q)
        if batch.decode_tables is not None and self.kernels is not None:
            decodes = batch.decode_tables.lengths.shape[0]
            self.kernels.decode(q[:decodes], key_cache, value_cache, batch.decode_tables.tables,
                                batch.decode_tables.lengths, self.block_size, out[:decodes])
        for group in batch.decode_groups:
            rows = slice(group.row_start, group.row_start + group.blocks.shape[0])
            out[rows] = self._decode_attention(q[rows], group, key_cache, value_cache)
        if batch.prefill_tables is not None and self.kernels is not None:
            chunks = batch.prefill_tables
            self.kernels.prefill(q, key_cache, value_cache, chunks.tables, chunks.row_starts, chunks.num_tokens,
                                 chunks.context_starts, self.block_size, out)
        for chunk in batch.prefills:
            rows = slice(chunk.row_start, chunk.row_start + chunk.num_tokens)
            out[rows] = self._prefill_attention(q[rows], k[rows], v[rows], chunk, key_cache, value_cache)
        return out.view(num_tokens, self.q_size)

    def _rope_and_store(self, layer: LayerWeights, qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                        slots: torch.Tensor, key_cache: torch.Tensor,
                        value_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The torch path of rope_and_store, plus the quantized-KV round trip the kernel does not do."""
        spec = self.weights.spec
        num_tokens = qkv.shape[0]
        cos, sin = rope
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, spec.num_heads, spec.head_dim)
        k = k.view(num_tokens, spec.num_kv_heads, spec.head_dim)
        v = v.view(num_tokens, spec.num_kv_heads, spec.head_dim)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if layer.kv_scale is not None:  # the GPU stores K/V quantized: attend to what it would read back
            quant = fake_quant_fp8 if spec.kv_cache_quant_algo == "FP8" else fake_quant_int8
            v_scale = layer.kv_scale if layer.v_scale is None else layer.v_scale
            k, v = quant(k, layer.kv_scale), quant(v, v_scale)
        key_cache.index_copy_(0, slots, k)
        value_cache.index_copy_(0, slots, v)
        return q, k, v

    def _gather_blocks(self, cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        """[*blocks.shape[:-1], num_blocks * block_size, kv_heads, head_dim]: whole blocks, one copy each."""
        spec = self.weights.spec
        per_block = cache.view(-1, self.block_size * spec.num_kv_heads * spec.head_dim)
        gathered = per_block.index_select(0, blocks.flatten())
        return gathered.view(*blocks.shape[:-1], -1, spec.num_kv_heads, spec.head_dim)

    def _decode_attention(self, q: torch.Tensor, group: DecodeGroup, key_cache: torch.Tensor,
                          value_cache: torch.Tensor) -> torch.Tensor:
        spec = self.weights.spec
        num_seqs = q.shape[0]
        # GQA without repeating K/V: the query heads of one KV head act as that head's query rows.
        q = q.view(num_seqs, spec.num_kv_heads, spec.num_heads // spec.num_kv_heads, spec.head_dim)
        keys = self._gather_blocks(key_cache, group.blocks).transpose(1, 2)  # [n, kv, context, head_dim]
        values = self._gather_blocks(value_cache, group.blocks).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=group.mask)
        return out.reshape(num_seqs, spec.num_heads, spec.head_dim)

    def _prefill_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: PrefillChunk,
                           key_cache: torch.Tensor, value_cache: torch.Tensor) -> torch.Tensor:
        if chunk.blocks is not None:
            context = chunk.context_start + chunk.num_tokens
            k = self._gather_blocks(key_cache, chunk.blocks.unsqueeze(0))[0, :context]
            v = self._gather_blocks(value_cache, chunk.blocks.unsqueeze(0))[0, :context]
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0),
            attn_mask=chunk.mask, is_causal=chunk.mask is None, enable_gqa=True)
        return out.squeeze(0).transpose(0, 1)
