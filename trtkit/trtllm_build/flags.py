"""Model config + checkpoint -> the exact trtllm-build command line, and why each switch was set.

The rules follow TensorRT-LLM 1.2 semantics (sources in trtkit/contracts/trtllm_1.2_rules.json):
gemm_plugin in the model dtype (fp8 for FP8 checkpoints only up to max_batch_size 4, nvfp4 for
NVFP4); KV-cache reuse and chunked context need use_paged_context_fmha. The builder's silent
overrides are modelled here and passed explicitly, so the plan shows what the engine will really
hold: paged context FMHA off without context FMHA, with an int8 KV cache, or with an fp8 KV cache
without fp8-class weights; reduce_fusion only for tp > 1 on the architectures that support it;
use_fused_mlp off for quantized checkpoints other than FP8.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtkit.config.schema import ModelConfig
from trtkit.trtllm_build.checkpoint_info import CheckpointInfo
from trtkit.trtllm_build.upstream_rules import (
    FP8_GEMM_PLUGIN_MAX_BATCH,
    fp8_gemm_plugin_pays_off,
    paged_context_fmha_off_reason,
    reduce_fusion_kept,
    unreturnable_logits_reason,
)

TRTLLM_BUILD = "trtllm-build"
# QuantAlgo values for which trtllm-build 1.2 keeps use_fused_mlp (build.py main()).
FUSED_MLP_QUANT_ALGOS = (None, "FP8", "MIXED_PRECISION")


@dataclass(slots=True, frozen=True)
class DerivedSwitch:
    flag: str
    value: str | None   # None for a flag without value
    reason: str


@dataclass(slots=True)
class BuildFlags:
    switches: list[DerivedSwitch] = field(default_factory=list)

    def add(self, flag: str, value: object, reason: str) -> None:
        if isinstance(value, bool):
            value = "enable" if value else "disable"
        self.switches.append(DerivedSwitch(flag, None if value is None else str(value), reason))

    def argv(self) -> list[str]:
        out: list[str] = []
        for switch in self.switches:
            out.append(switch.flag)
            if switch.value is not None:
                out.append(switch.value)
        return out


def _enable(flag: bool) -> str:
    return "enable" if flag else "disable"


def gemm_plugin_value(config: ModelConfig, ckpt: CheckpointInfo) -> tuple[str, str]:
    chosen = config.build.gemm_plugin
    if chosen != "auto":
        return chosen, "set in build.gemm_plugin"
    if ckpt.quant_algo == "FP8":
        batch = engine_max_batch_size(config)
        if fp8_gemm_plugin_pays_off(batch):
            return "fp8", (f"auto: FP8 checkpoint and max_batch_size {batch} <= {FP8_GEMM_PLUGIN_MAX_BATCH}, so the "
                           f"cuBLASLt GEMM plugin runs in fp8 (it only pays off for small batches)")
        return ckpt.dtype, (f"auto: FP8 checkpoint but max_batch_size {batch} > {FP8_GEMM_PLUGIN_MAX_BATCH}: the fp8 "
                            f"GEMM plugin only helps small batches (upstream perf guidance), so the plugin runs in "
                            f"{ckpt.dtype} and TensorRT picks its own fp8 GEMMs")
    if ckpt.quant_algo == "NVFP4":
        return "nvfp4", "auto: NVFP4 checkpoint, so the GEMM plugin runs in nvfp4"
    return ckpt.dtype, f"auto: matches the checkpoint dtype ({ckpt.dtype})"


def _attention_and_gemm(flags: BuildFlags, config: ModelConfig, ckpt: CheckpointInfo) -> None:
    b = config.build
    if b.gpt_attention_plugin == "auto":
        flags.add("--gpt_attention_plugin", ckpt.dtype, f"auto: fused attention in the checkpoint dtype ({ckpt.dtype})")
    else:
        flags.add("--gpt_attention_plugin", b.gpt_attention_plugin, "set in build.gpt_attention_plugin")
    value, reason = gemm_plugin_value(config, ckpt)
    flags.add("--gemm_plugin", value, reason)
    flags.add("--context_fmha", b.context_fmha, "build.context_fmha: one fused kernel for context attention")
    needs_paged = paged_fmha_users(config)
    off_reason = paged_context_fmha_off_reason(ckpt.quant_algo, ckpt.kv_cache_quant_algo, b.context_fmha)
    if off_reason:
        consequence = (f"; {' and '.join(needs_paged)} cannot work with this engine: trtkit deploy turns "
                       f"{'them' if len(needs_paged) > 1 else 'it'} off" if needs_paged else "")
        flags.add("--use_paged_context_fmha", False,
                  f"trtllm-build 1.2 turns it off because {off_reason}; passed explicitly{consequence}")
    elif needs_paged and not b.use_paged_context_fmha:
        flags.add("--use_paged_context_fmha", True,
                  f"forced on: {' and '.join(needs_paged)} require use_paged_context_fmha "
                  f"(build.use_paged_context_fmha was false)")
    elif needs_paged:
        flags.add("--use_paged_context_fmha", True, f"required by {' and '.join(needs_paged)}")
    else:
        flags.add("--use_paged_context_fmha", b.use_paged_context_fmha, "build.use_paged_context_fmha")


def paged_fmha_users(config: ModelConfig) -> list[str]:
    """The serve settings that need use_paged_context_fmha in the engine."""
    return [name for name, on in (("serve.enable_kv_cache_reuse", config.serve.enable_kv_cache_reuse),
                                  ("serve.enable_chunked_context", config.serve.enable_chunked_context)) if on]


def engine_max_batch_size(config: ModelConfig) -> int:
    """The engine's max_batch_size: the serving cap when the profile sets a smaller one.

    The C++ backend builds its executor without a batch-size override, so in-flight concurrency on
    GPU follows the engine's build-time max_batch_size; Triton's max_batch_size does not cap it."""
    cap = config.serve.max_batch_size
    return min(config.build.max_batch_size, cap) if cap else config.build.max_batch_size


def _fusions(flags: BuildFlags, config: ModelConfig, ckpt: CheckpointInfo) -> None:
    b = config.build
    if b.use_fused_mlp and ckpt.quant_algo not in FUSED_MLP_QUANT_ALGOS:
        flags.add("--use_fused_mlp", False, f"trtllm-build 1.2 turns fused MLP off for {ckpt.quant_algo} "
                                           f"checkpoints (only unquantized and FP8 keep it); passed explicitly")
    else:
        flags.add("--use_fused_mlp", b.use_fused_mlp, "build.use_fused_mlp: gate and up projections in one GEMM")
    tp = ckpt.tp_size
    if b.reduce_fusion and tp == 1:
        flags.add("--reduce_fusion", False, "tp_size is 1: there is no all-reduce to fuse")
    elif b.reduce_fusion and not reduce_fusion_kept(ckpt.architecture, tp):
        flags.add("--reduce_fusion", False, f"trtllm-build 1.2 keeps reduce_fusion only for LlamaForCausalLM, "
                                            f"Gemma2ForCausalLM and MedusaForCausalLM; {ckpt.architecture} gets it "
                                            f"turned off, so it is passed as disable")
    elif b.reduce_fusion:
        flags.add("--reduce_fusion", True, f"tp_size {tp} > 1: fuse residual add + norm into the all-reduce")
    else:
        flags.add("--reduce_fusion", False, "build.reduce_fusion is false" if tp > 1 else "tp_size is 1")
    flags.add("--remove_input_padding", b.remove_input_padding, "build.remove_input_padding: pack tokens, no padding")


def _limits(flags: BuildFlags, config: ModelConfig) -> None:
    b = config.build
    flags.add("--kv_cache_type", "paged", "paged KV cache: needed for in-flight batching and KV reuse")
    flags.add("--tokens_per_block", b.tokens_per_block, "build.tokens_per_block: KV block size")
    batch = engine_max_batch_size(config)
    if batch < b.max_batch_size:
        flags.add("--max_batch_size", batch,
                  f"serve.max_batch_size {batch} ({config.serve.profile} profile) below build.max_batch_size "
                  f"{b.max_batch_size}: the C++ backend's in-flight concurrency follows the engine's max_batch_size, "
                  f"not Triton's, so the cap is built in (serve.profile: throughput builds the full size)")
    else:
        flags.add("--max_batch_size", b.max_batch_size, "build.max_batch_size")
    flags.add("--max_input_len", b.max_input_len, "build.max_input_len")
    flags.add("--max_seq_len", b.max_seq_len, "build.max_seq_len (prompt + output)")
    flags.add("--max_num_tokens", b.max_num_tokens, "build.max_num_tokens: tokens per engine step")
    if b.opt_num_tokens is not None:
        flags.add("--opt_num_tokens", b.opt_num_tokens, "build.opt_num_tokens")
    flags.add("--max_beam_width", b.max_beam_width, "build.max_beam_width")
    flags.add("--multiple_profiles", b.multiple_profiles,
              "build.multiple_profiles: more TensorRT profiles, longer build, faster small batches"
              if b.multiple_profiles else "build.multiple_profiles")


def derive_build_flags(config: ModelConfig, ckpt: CheckpointInfo, *, checkpoint_dir: Path, output_dir: Path,
                       timing_cache: Path, gpu_count: int | None = None) -> BuildFlags:
    """Every trtllm-build switch for this config, in a stable order, each with its reason."""
    flags = BuildFlags()
    flags.add("--checkpoint_dir", checkpoint_dir, "TensorRT-LLM checkpoint from convert/calibrate"
              if ckpt.exists else "checkpoint not found yet: run trtkit convert/calibrate first")
    flags.add("--output_dir", output_dir, "engines and trtkit-manifest.json go here")
    _attention_and_gemm(flags, config, ckpt)
    _fusions(flags, config, ckpt)
    _limits(flags, config)
    workers = min(config.build.workers, ckpt.world_size)
    if gpu_count is not None:
        workers = max(1, min(workers, gpu_count))
    flags.add("--workers", workers, "ranks built in parallel: min(build.workers, tp x pp, GPUs)")
    flags.add("--input_timing_cache", timing_cache, "persistent TensorRT timing cache: rebuilds skip tactic timing")
    flags.add("--output_timing_cache", timing_cache, "timing cache written back for the next build")
    logits_reason = unreturnable_logits_reason(ckpt.logits_dtype)
    if logits_reason:
        flags.add("--logits_dtype", "float32", f"{logits_reason}: built with float32 logits instead")
    if config.build.gather_logits:
        flags.add("--gather_context_logits", None,
                  "build.gather_logits: context_logits outputs (not needed for log-probs: return_log_probs "
                  "suffices); the executor turns KV-cache reuse off for such engines")
        flags.add("--gather_generation_logits", None,
                  "build.gather_logits: generation_logits outputs (1.2 logs this flag as deprecated)")
    return flags


def command_line(flags: BuildFlags) -> list[str]:
    return [TRTLLM_BUILD, *flags.argv()]
