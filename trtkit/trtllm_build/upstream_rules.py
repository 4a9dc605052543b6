"""What TensorRT-LLM 1.2 does to a build or a deployment behind the user's back, as plain functions.

trtllm-build accepts some switches and then silently turns them off; the builder refuses some
formats on Blackwell; the C++ backend checks the logits dtype. Each function here answers one such
question from the checkpoint facts, so the plan, preflight, calibrate and deploy agree with the
builder before a GPU is ever involved. The upstream file each rule comes from is recorded in
``trtkit/contracts/trtllm_1.2_rules.json`` (``rule_sources()`` reads it; a test checks every rule
named here is recorded there).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

# quant_algo values whose fp8 KV cache keeps paged context FMHA (builder.py: the fp8 context-FMHA path)
FP8_KV_PAGED_WEIGHT_ALGOS = ("FP8", "W4A8_AWQ", "NVFP4")
# architectures for which the builder keeps reduce_fusion (all others: overridden to False)
REDUCE_FUSION_ARCHITECTURES = ("LlamaForCausalLM", "Gemma2ForCausalLM", "MedusaForCausalLM")
# upstream perf guidance (and ModelOpt's example build script): the fp8 GEMM plugin pays off only for small batches
FP8_GEMM_PLUGIN_MAX_BATCH = 4
DEFAULT_LOGITS_DTYPE = "float32"  # PretrainedConfig's default when a checkpoint names none
# fillTritonResponse copies context/generation logits only as FP32 or FP16 ("Logits type is not supported")
RETURNABLE_LOGITS_DTYPES = ("float32", "float16")
RULE_IDS = ("paged_context_fmha_overrides", "reduce_fusion_override", "sm100_refusals", "logits_dtype_must_match",
            "logits_fp32_or_fp16_only", "kv_cache_free_gpu_mem_fraction_below_1", "executor_max_batch_size_from_engine",
            "token_counts_on_request", "num_output_tokens_per_response", "perf_metrics_on_request",
            "kv_cache_reused_blocks_granularity", "container_pins")
# claims kept as cautions only: their upstream source was not re-read with a commit (the contract says why)
UNVERIFIED_IDS = ("gather_context_logits_disables_reuse", "fp8_gemm_plugin_small_batch")


def paged_context_fmha_off_reason(quant_algo: str | None, kv_cache_quant_algo: str | None,
                                  context_fmha: bool) -> str | None:
    """Why trtllm-build will turn use_paged_context_fmha off for this checkpoint (None: it keeps it)."""
    if not context_fmha:
        return "build.context_fmha is false, and paged context FMHA is a mode of context FMHA"
    if kv_cache_quant_algo == "INT8":
        return "the checkpoint has an int8 KV cache"
    if kv_cache_quant_algo == "FP8" and quant_algo not in FP8_KV_PAGED_WEIGHT_ALGOS:
        weights = quant_algo or "unquantized"
        return (f"the checkpoint has an fp8 KV cache with {weights} weights (only FP8, W4A8_AWQ and NVFP4 "
                f"weights keep paged context FMHA with an fp8 KV cache)")
    return None


def reduce_fusion_kept(architecture: str, tp_size: int) -> bool:
    return tp_size > 1 and architecture in REDUCE_FUSION_ARCHITECTURES


def fp8_gemm_plugin_pays_off(max_batch_size: int) -> bool:
    return max_batch_size <= FP8_GEMM_PLUGIN_MAX_BATCH


def engine_logits_dtype(engine_config: dict) -> str:
    """The logits dtype a trtllm-build engine (or a checkpoint) was made with: the Triton model must declare it."""
    pretrained = engine_config.get("pretrained_config")
    source = pretrained if isinstance(pretrained, dict) else engine_config
    value = source.get("logits_dtype") or DEFAULT_LOGITS_DTYPE
    return str(value)


def unreturnable_logits_reason(logits_dtype: str) -> str | None:
    """Why the C++ backend cannot return this engine's logits (None: it can)."""
    if logits_dtype in RETURNABLE_LOGITS_DTYPES:
        return None
    return (f"the engine's logits_dtype is {logits_dtype}, and the TensorRT-LLM 1.2 backend returns logits only as "
            f"FP32 or FP16 (fillTritonResponse: \"Logits type is not supported\")")


@lru_cache(maxsize=1)
def rule_sources() -> dict:
    """The contract file: for each rule id, the upstream file(s) and version it was read from."""
    text = resources.files("trtkit.contracts").joinpath("trtllm_1.2_rules.json").read_text(encoding="utf-8")
    return json.loads(text)
