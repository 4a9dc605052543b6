"""KV-cache memory planner: how many tokens and sequences fit on a GPU, without the GPU.

Memory model (TensorRT-LLM 1.2 C++ runtime): the engine is loaded first (weights plus the
execution context that holds activations), then the KV cache takes
``kv_cache_free_gpu_mem_fraction`` of the memory that is still FREE, capped by
``max_tokens_in_paged_kv_cache`` when that is set. Everything here is per GPU (per tp/pp rank).

Assumptions, printed with every plan:
- weights: embeddings, lm_head and norms stay in the model dtype (lm_head is in
  quantization.exclude_modules by default); the engine stores lm_head separately even when the
  HF model ties it to the embeddings. The embedding table is replicated on every tp rank
  (use_parallel_embedding is off by default); lm_head and every linear layer are split by tp.
- activations: max_num_tokens x (2 x hidden + fused QKV/tp + 2 x intermediate/tp) 16-bit values
  (32-bit for float32 models), plus fp32 logits for max_batch_size x vocab/tp.
- a fixed 1 GiB runtime overhead: CUDA context, cuBLAS/NCCL workspaces, decoder buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trtkit.config.gpus import GpuSpec
from trtkit.errors import BuildError
from trtkit.trtllm_build.shapes import ModelShape

GIB = 1 << 30
RUNTIME_OVERHEAD_BYTES = 1 * GIB
AWQ_GROUP = 128
NVFP4_BLOCK = 16
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
KV_DTYPE_BYTES = {"fp8": 1, "int8": 1}
# bytes per weight element of a quantized linear layer
WEIGHT_BYTES = {"fp8": 1.0, "fp8_block": 1.0, "int8_sq": 1.0, "int8_wo": 1.0, "int4_wo": 0.5, "int4_awq": 0.5,
                "w4a8_awq": 0.5, "nvfp4": 0.5}
FP8_BLOCK = 128  # FP8 block scales: one fp32 scale per 128 x 128 weight block
ASSUMPTIONS = (
    "KV cache = kv_cache_free_gpu_mem_fraction x (GPU memory - weights - activations - runtime overhead), "
    "as TensorRT-LLM applies the fraction to memory still free after the engine is loaded",
    "embeddings, lm_head and norms stay in the model dtype; lm_head is stored apart from the embeddings; "
    "the embedding table is replicated on each tp rank, linear layers and lm_head are split by tp",
    "activations = max_num_tokens x (2 x hidden + QKV/tp + 2 x intermediate/tp) x 2 bytes "
    "(4 for float32) + fp32 logits for max_batch_size x vocab/tp",
    "runtime overhead = 1 GiB (CUDA context, cuBLAS/NCCL workspaces, decoder buffers)",
)


@dataclass(slots=True, frozen=True)
class KvPlan:
    shape: str
    gpu: str
    quant_format: str
    dtype: str
    kv_dtype: str
    tp: int
    pp: int
    gpu_memory_bytes: int
    weight_bytes: int            # per rank
    activation_bytes: int        # per rank
    runtime_overhead_bytes: int
    free_after_load_bytes: int
    kv_fraction: float
    kv_budget_bytes: int         # fraction x free memory
    kv_cache_bytes: int          # what whole blocks use of that budget
    kv_bytes_per_token: int      # per rank
    tokens_per_block: int
    bytes_per_block: int
    num_blocks: int
    num_tokens: int
    input_len: int
    output_len: int
    blocks_per_sequence: int
    max_sequences: int           # limited by the KV cache alone
    max_batch_size: int
    max_concurrent_sequences: int  # min(max_sequences, max_batch_size)
    max_seq_len: int
    max_sequences_at_max_seq_len: int
    assumptions: tuple[str, ...] = field(default=ASSUMPTIONS)

    @property
    def fits(self) -> bool:
        return self.num_blocks >= self.blocks_per_sequence


def _linear_layers(shape: ModelShape, tp: int) -> list[tuple[int, int]]:
    """(in_features, out_features) of one decoder layer's linears on one tp rank."""
    kv_heads_per_rank = max(1, math.ceil(shape.num_kv_heads / tp))  # kv heads are replicated when tp > kv heads
    kv = kv_heads_per_rank * shape.head_dim
    h, q, inter = shape.hidden_size, shape.q_size // tp, shape.intermediate_size // tp
    return [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]


def _linear_bytes(in_f: int, out_f: int, quant_format: str, dtype_bytes: int) -> float:
    elements = in_f * out_f
    if quant_format == "none":
        return elements * dtype_bytes
    weight = elements * WEIGHT_BYTES[quant_format]
    if quant_format in ("int8_wo", "int4_wo"):
        return weight + out_f * 2                               # fp16 per-channel scales
    if quant_format == "int8_sq":
        return weight + out_f * 4                               # fp32 per-channel scales
    if quant_format in ("int4_awq", "w4a8_awq"):
        return weight + math.ceil(in_f / AWQ_GROUP) * out_f * 2 + in_f * 2  # group scales + pre-quant scale
    if quant_format == "nvfp4":
        return weight + math.ceil(in_f / NVFP4_BLOCK) * out_f + 4  # fp8 block scales + global scale
    if quant_format == "fp8_block":
        return weight + math.ceil(in_f / FP8_BLOCK) * math.ceil(out_f / FP8_BLOCK) * 4
    return weight                                               # fp8: per-tensor scales only


def weight_bytes_per_rank(shape: ModelShape, *, quant_format: str, dtype: str, tp: int = 1, pp: int = 1) -> int:
    if quant_format != "none" and quant_format not in WEIGHT_BYTES:
        raise BuildError(f"unknown quantization format {quant_format!r}; use none or one of {', '.join(WEIGHT_BYTES)}")
    dtype_bytes = DTYPE_BYTES[dtype]
    layers = math.ceil(shape.num_layers / pp)  # the fullest pipeline stage
    per_layer = sum(_linear_bytes(i, o, quant_format, dtype_bytes) for i, o in _linear_layers(shape, tp))
    norms = (2 * layers + 1) * shape.hidden_size * dtype_bytes
    embedding = shape.vocab_size * shape.hidden_size * dtype_bytes
    lm_head = math.ceil(shape.vocab_size / tp) * shape.hidden_size * dtype_bytes
    return int(layers * per_layer + norms + embedding + lm_head)


def kv_bytes_per_token(shape: ModelShape, *, kv_dtype: str, dtype: str, tp: int = 1, pp: int = 1) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x bytes, on one rank."""
    kv_bytes = KV_DTYPE_BYTES.get(kv_dtype, DTYPE_BYTES[dtype])
    kv_heads = max(1, math.ceil(shape.num_kv_heads / tp))
    return 2 * math.ceil(shape.num_layers / pp) * kv_heads * shape.head_dim * kv_bytes


def activation_bytes(shape: ModelShape, *, dtype: str, tp: int, max_num_tokens: int, max_batch_size: int) -> int:
    act = 4 if dtype == "float32" else 2
    per_token = 2 * shape.hidden_size + (shape.q_size + 2 * shape.kv_size) // tp + 2 * shape.intermediate_size // tp
    logits = max_batch_size * math.ceil(shape.vocab_size / tp) * 4
    return max_num_tokens * per_token * act + logits


def plan_kv_cache(shape: ModelShape, gpu: GpuSpec, *, quant_format: str = "none", dtype: str = "float16",
                  kv_dtype: str = "auto", tp: int = 1, pp: int = 1, kv_fraction: float = 0.9,
                  tokens_per_block: int = 32, max_num_tokens: int = 8192, max_batch_size: int = 64,
                  input_len: int = 1024, output_len: int = 1024, max_seq_len: int | None = None,
                  max_tokens_in_paged_kv_cache: int | None = None) -> KvPlan:
    """The KV-cache budget on one GPU of kind ``gpu`` (see the module docstring for the model)."""
    if not 0.0 < kv_fraction < 1.0:
        raise BuildError(f"kv fraction must be in (0, 1) (TensorRT-LLM's KvCacheConfig refuses 1.0), got {kv_fraction}")
    max_seq_len = max_seq_len or input_len + output_len
    weights = weight_bytes_per_rank(shape, quant_format=quant_format, dtype=dtype, tp=tp, pp=pp)
    acts = activation_bytes(shape, dtype=dtype, tp=tp, max_num_tokens=max_num_tokens, max_batch_size=max_batch_size)
    free = max(0, gpu.memory_bytes - weights - acts - RUNTIME_OVERHEAD_BYTES)
    kv_cache = int(free * kv_fraction)
    per_token = kv_bytes_per_token(shape, kv_dtype=kv_dtype, dtype=dtype, tp=tp, pp=pp)
    per_block = per_token * tokens_per_block
    blocks = kv_cache // per_block
    if max_tokens_in_paged_kv_cache is not None:
        blocks = min(blocks, max_tokens_in_paged_kv_cache // tokens_per_block)
    per_sequence = math.ceil((input_len + output_len) / tokens_per_block)
    max_sequences = blocks // per_sequence
    return KvPlan(
        shape=shape.name, gpu=gpu.kind, quant_format=quant_format, dtype=dtype,
        kv_dtype=kv_dtype if kv_dtype in KV_DTYPE_BYTES else dtype, tp=tp, pp=pp,
        gpu_memory_bytes=gpu.memory_bytes, weight_bytes=weights, activation_bytes=acts,
        runtime_overhead_bytes=RUNTIME_OVERHEAD_BYTES, free_after_load_bytes=free, kv_fraction=kv_fraction,
        kv_budget_bytes=kv_cache,
        kv_cache_bytes=blocks * per_block, kv_bytes_per_token=per_token, tokens_per_block=tokens_per_block,
        bytes_per_block=per_block, num_blocks=blocks, num_tokens=blocks * tokens_per_block,
        input_len=input_len, output_len=output_len, blocks_per_sequence=per_sequence,
        max_sequences=max_sequences, max_batch_size=max_batch_size,
        max_concurrent_sequences=min(max_sequences, max_batch_size), max_seq_len=max_seq_len,
        max_sequences_at_max_seq_len=blocks // math.ceil(max_seq_len / tokens_per_block),
    )


@dataclass(slots=True, frozen=True)
class PlanVariant:
    label: str
    plan: KvPlan


def compare_variants(shape: ModelShape, gpu: GpuSpec, **kwargs: object) -> list[PlanVariant]:
    """The baseline and what changes with the other KV dtype (fp8 <-> model dtype), twice the tp, twice the max_seq_len."""
    base = plan_kv_cache(shape, gpu, **kwargs)  # type: ignore[arg-type]
    variants = [PlanVariant("baseline", base)]
    # The KV-dtype row shows the other side of the trade: fp8 when the baseline is 16-bit, and back.
    other_kv = "auto" if base.kv_dtype in KV_DTYPE_BYTES else "fp8"
    other = plan_kv_cache(shape, gpu, **{**kwargs, "kv_dtype": other_kv})  # type: ignore[arg-type]
    variants.append(PlanVariant(f"{other.kv_dtype} KV cache", other))
    variants.append(PlanVariant(f"tp={base.tp * 2}", plan_kv_cache(shape, gpu, **{**kwargs, "tp": base.tp * 2})))  # type: ignore[arg-type]
    longer = base.max_seq_len * 2
    variants.append(PlanVariant(f"max_seq_len={longer}",
                                plan_kv_cache(shape, gpu, **{**kwargs, "max_seq_len": longer})))  # type: ignore[arg-type]
    return variants
