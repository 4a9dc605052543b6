"""KV planner arithmetic against hand-computed cases."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from build_helpers import shipped

from trtkit.config.gpus import lookup_gpu, match_nvml_name
from trtkit.errors import BuildError
from trtkit.trtllm_build import kv_plan_for_config
from trtkit.trtllm_build.planner import (
    RUNTIME_OVERHEAD_BYTES,
    compare_variants,
    kv_bytes_per_token,
    plan_kv_cache,
    weight_bytes_per_rank,
)
from trtkit.trtllm_build.shapes import KNOWN_SHAPES, resolve_shape, shape_from_config_json

LLAMA3_8B = KNOWN_SHAPES["llama-3-8b"]
H100 = lookup_gpu("H100-80GB")


def test_llama3_8b_fp16_on_h100_at_fraction_0_9_by_hand() -> None:
    # Shape: 32 layers, hidden 4096, 32 heads / 8 KV heads of 128, MLP 14336, vocab 128256.
    # Linear weights per layer: q 4096*4096 + k,v 2*4096*1024 + o 4096*4096 + gate/up/down 3*4096*14336
    per_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336
    assert per_layer == 218_103_808
    embedding = lm_head = 128256 * 4096                    # both stored, 525,336,576 values each
    norms = (2 * 32 + 1) * 4096
    weights = (32 * per_layer + embedding + lm_head + norms) * 2   # fp16: 2 bytes
    assert weights == 16_060_522_496                       # 8.03 B parameters -> 14.96 GiB
    # Activations: 8192 tokens x (2*4096 + (4096 + 2*1024) + 2*14336) x 2 bytes, + fp32 logits 64 x 128256 x 4
    activations = 8192 * (2 * 4096 + 6144 + 2 * 14336) * 2 + 64 * 128256 * 4
    assert activations == 737_476_608
    h100_bytes = 81559 * 2**20                             # NVML total of an H100 80GB
    free = h100_bytes - weights - activations - 2**30      # 1 GiB runtime overhead
    assert free == 67_649_069_056
    budget = int(free * 0.9)                               # the fraction applies to FREE memory
    kv_per_token = 2 * 32 * 8 * 128 * 2                    # K and V x layers x kv heads x head_dim x fp16
    assert kv_per_token == 131_072
    blocks = budget // (kv_per_token * 32)                 # 4 MiB blocks of 32 tokens
    assert blocks == 14_515
    per_sequence = -(-(1024 + 1024) // 32)                 # 64 blocks for a 1024 + 1024 sequence
    plan = plan_kv_cache(LLAMA3_8B, H100, quant_format="none", dtype="float16", kv_dtype="auto", kv_fraction=0.9,
                         tokens_per_block=32, max_num_tokens=8192, max_batch_size=64, input_len=1024,
                         output_len=1024)
    assert (plan.weight_bytes, plan.activation_bytes, plan.runtime_overhead_bytes) == (
        weights, activations, RUNTIME_OVERHEAD_BYTES)
    assert (plan.free_after_load_bytes, plan.kv_budget_bytes) == (free, budget)
    assert (plan.kv_bytes_per_token, plan.num_blocks, plan.num_tokens) == (kv_per_token, blocks, blocks * 32)
    assert plan.max_sequences == blocks // per_sequence == 226
    assert plan.max_concurrent_sequences == 64            # capped by max_batch_size


def test_fp8_kv_halves_kv_bytes_per_token() -> None:
    fp16 = kv_bytes_per_token(LLAMA3_8B, kv_dtype="auto", dtype="float16")
    assert kv_bytes_per_token(LLAMA3_8B, kv_dtype="fp8", dtype="float16") * 2 == fp16
    base = plan_kv_cache(LLAMA3_8B, H100)
    fp8 = plan_kv_cache(LLAMA3_8B, H100, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == base.kv_bytes_per_token
    assert fp8.num_blocks in (2 * base.num_blocks, 2 * base.num_blocks + 1)  # same budget, half-size blocks


def test_tensor_parallel_splits_kv_heads_and_replicates_when_too_few() -> None:
    assert kv_bytes_per_token(LLAMA3_8B, kv_dtype="auto", dtype="float16", tp=2) == 131_072 // 2
    smol = KNOWN_SHAPES["smollm2-135m"]  # 3 KV heads: tp=4 leaves one (replicated) head per rank
    assert kv_bytes_per_token(smol, kv_dtype="auto", dtype="bfloat16", tp=4) == 2 * 30 * 1 * 64 * 2


def test_quantized_weights_keep_embeddings_lm_head_and_norms_in_the_model_dtype() -> None:
    linear = 32 * 218_103_808
    unquantized = 2 * 128256 * 4096 * 2 + 65 * 4096 * 2
    assert weight_bytes_per_rank(LLAMA3_8B, quant_format="fp8", dtype="bfloat16") == linear * 1 + unquantized
    # int8 weight-only adds one fp16 scale per output channel of every linear layer
    outs = 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096
    assert weight_bytes_per_rank(LLAMA3_8B, quant_format="int8_wo", dtype="bfloat16") == (
        linear + 32 * outs * 2 + unquantized)
    sizes = [weight_bytes_per_rank(LLAMA3_8B, quant_format=f, dtype="bfloat16")
             for f in ("none", "int8_sq", "fp8", "int4_awq", "int4_wo")]
    assert sizes[0] > sizes[1] > sizes[2] and sizes[3] > sizes[4]
    with pytest.raises(BuildError, match="unknown quantization format 'int3'"):
        weight_bytes_per_rank(LLAMA3_8B, quant_format="int3", dtype="bfloat16")


def test_max_tokens_in_paged_kv_cache_caps_the_blocks() -> None:
    plan = plan_kv_cache(LLAMA3_8B, H100, max_tokens_in_paged_kv_cache=4096, tokens_per_block=32)
    assert plan.num_blocks == 128 and plan.num_tokens == 4096


def test_variants_show_fp8_kv_tp2_and_longer_max_seq_len() -> None:
    variants = compare_variants(LLAMA3_8B, H100, input_len=1024, output_len=1024, max_seq_len=4096)
    labels = [v.label for v in variants]
    assert labels == ["baseline", "fp8 KV cache", "tp=2", "max_seq_len=8192"]
    base, fp8, tp2, longer = (v.plan for v in variants)
    assert fp8.kv_bytes_per_token * 2 == base.kv_bytes_per_token
    assert tp2.weight_bytes < base.weight_bytes and tp2.num_tokens > base.num_tokens
    assert longer.num_blocks == base.num_blocks
    assert longer.max_sequences_at_max_seq_len == base.num_blocks // 256 < base.max_sequences_at_max_seq_len


def test_a_model_that_does_not_fit_says_so() -> None:
    plan = plan_kv_cache(KNOWN_SHAPES["llama-3-70b"], lookup_gpu("L4"), dtype="bfloat16")
    assert plan.num_blocks == 0 and not plan.fits


def test_shape_from_a_hugging_face_config_json(tmp_path: Path) -> None:
    # Meta-Llama-3-8B's config.json fields (its weights are not on this machine)
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 128256}))
    shape = shape_from_config_json(tmp_path, name="llama-3-8b")
    assert shape == LLAMA3_8B
    assert resolve_shape(str(tmp_path / "config.json")).num_kv_heads == 8
    assert resolve_shape("Llama-3-70B").num_layers == 80


def test_gpu_table_and_nvml_names() -> None:
    assert lookup_gpu("h100").kind == "H100-80GB" and lookup_gpu("B200").sm == 100
    assert match_nvml_name("NVIDIA H100 80GB HBM3").kind == "H100-80GB"  # type: ignore[union-attr]
    assert match_nvml_name("NVIDIA A10G").kind == "A10G"  # type: ignore[union-attr]
    assert match_nvml_name("NVIDIA L40S").kind == "L40S"  # type: ignore[union-attr]
    assert match_nvml_name("NVIDIA A100-SXM4-80GB").kind == "A100-80GB"  # type: ignore[union-attr]
    assert match_nvml_name("NVIDIA GH200 480GB").kind == "GH200"  # type: ignore[union-attr]
    assert match_nvml_name("NVIDIA H200").kind == "H200"  # type: ignore[union-attr]
    assert match_nvml_name("Some Other GPU") is None
    with pytest.raises(BuildError, match="unknown GPU 'X100'; use one of T4, A10G"):
        lookup_gpu("X100")


def test_kv_plan_for_config_is_the_plan_deploy_reuses() -> None:
    config = shipped("llama3-8b-fp8-h100")
    plan = kv_plan_for_config(config)
    assert (plan.gpu, plan.shape, plan.kv_dtype, plan.tokens_per_block) == ("H100-80GB", "llama-3-8b", "fp8", 32)
    capped = replace(config, serve=replace(config.serve, max_tokens_in_paged_kv_cache=64_000))
    assert kv_plan_for_config(capped, "H200").num_tokens == 64_000


def test_built_in_shapes_match_the_real_model_folders(smollm2_dir: Path, tiny_llama_dir: Path) -> None:
    assert shape_from_config_json(smollm2_dir, name="smollm2-135m") == KNOWN_SHAPES["smollm2-135m"]
    assert shape_from_config_json(tiny_llama_dir, name="tiny-llama") == KNOWN_SHAPES["tiny-llama"]
