"""Derived trtllm-build switches: each follows an upstream rule and carries the reason it was set."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from build_helpers import shipped, with_quant, write_checkpoint

from trtkit.config import paths
from trtkit.trtllm_build import plan_build
from trtkit.trtllm_build.builder import BuildPlan
from trtkit.trtllm_build.checkpoint_info import find_checkpoint


def switch(plan: BuildPlan, flag: str) -> tuple[str | None, str]:
    found = [s for s in plan.switches if s.flag == flag]
    assert len(found) == 1, flag
    return found[0].value, found[0].reason


def test_gemm_plugin_follows_the_checkpoint() -> None:
    base = shipped("smollm2-135m")
    assert switch(plan_build(base), "--gemm_plugin")[0] == "bfloat16"
    assert switch(plan_build(with_quant(base, "int8_sq")), "--gemm_plugin")[0] == "bfloat16"
    small = replace(base, build=replace(base.build, max_batch_size=4), serve=replace(base.serve, max_batch_size=4))
    value, reason = switch(plan_build(with_quant(small, "fp8")), "--gemm_plugin")
    assert value == "fp8" and "max_batch_size 4 <= 4" in reason
    assert switch(plan_build(with_quant(base, "nvfp4")), "--gemm_plugin")[0] == "nvfp4"
    explicit = replace(base, build=replace(base.build, gemm_plugin="disable"))
    assert switch(plan_build(explicit), "--gemm_plugin") == ("disable", "set in build.gemm_plugin")


def test_kv_reuse_forces_paged_context_fmha_and_says_so() -> None:
    base = shipped("tiny-llama")  # latency profile: chunked context off
    off = replace(base.build, use_paged_context_fmha=False)
    reuse = replace(base, build=off, serve=replace(base.serve, enable_kv_cache_reuse=True))
    assert switch(plan_build(reuse), "--use_paged_context_fmha") == (
        "enable", "forced on: serve.enable_kv_cache_reuse require use_paged_context_fmha "
                  "(build.use_paged_context_fmha was false)")
    chunked = replace(base, build=off, serve=replace(base.serve, enable_kv_cache_reuse=False,
                                                     enable_chunked_context=True))
    assert switch(plan_build(chunked), "--use_paged_context_fmha")[0] == "enable"
    neither = replace(base, build=off, serve=replace(base.serve, enable_kv_cache_reuse=False))
    assert switch(plan_build(neither), "--use_paged_context_fmha") == ("disable", "build.use_paged_context_fmha")


def test_reduce_fusion_only_with_tensor_parallelism() -> None:
    base = shipped("smollm2-135m")
    assert switch(plan_build(base), "--reduce_fusion") == ("disable", "tp_size is 1")
    tp2 = replace(base, convert=replace(base.convert, tp_size=2), build=replace(base.build, reduce_fusion=True))
    value, reason = switch(plan_build(tp2), "--reduce_fusion")
    assert value == "enable" and reason.startswith("tp_size 2 > 1")


def test_logits_only_when_asked() -> None:
    base = shipped("tiny-llama")
    assert not any("gather" in s.flag for s in plan_build(base).switches)
    asked = plan_build(replace(base, build=replace(base.build, gather_logits=True)))
    assert {s.flag for s in asked.switches} >= {"--gather_context_logits", "--gather_generation_logits"}


def test_fused_mlp_off_for_quantized_formats_trtllm_build_would_override() -> None:
    base = shipped("smollm2-135m")
    value, reason = switch(plan_build(with_quant(base, "int8_sq")), "--use_fused_mlp")
    assert value == "disable" and "W8A8_SQ_PER_CHANNEL" in reason
    assert switch(plan_build(with_quant(base, "fp8")), "--use_fused_mlp")[0] == "enable"


def test_limits_paged_kv_and_persistent_timing_cache() -> None:
    config = shipped("llama3-8b-fp8-h100")
    plan = plan_build(config)
    argv = plan.command
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert pairs["--kv_cache_type"] == "paged" and pairs["--tokens_per_block"] == "32"
    assert (pairs["--max_batch_size"], pairs["--max_input_len"], pairs["--max_seq_len"], pairs["--max_num_tokens"]) == (
        "64", "7168", "8192", "8192")
    assert pairs["--multiple_profiles"] == "enable" and "--opt_num_tokens" not in pairs
    cache = Path(pairs["--input_timing_cache"])
    assert cache == Path(pairs["--output_timing_cache"]) and cache.parent.parent == paths.workdir(config)
    assert cache.name == "h100-80gb.cache"  # one timing cache per GPU kind (build.target_gpu)


def test_reads_the_checkpoint_written_by_convert(tmp_path: Path) -> None:
    config = shipped("tiny-llama")
    ckpt = write_checkpoint(paths.workdir(config) / "checkpoints" / "float32-tp1-pp1", dtype="float32",
                            max_positions=1024)
    assert find_checkpoint(config) == ckpt
    plan = plan_build(config)
    assert plan.checkpoint.exists and plan.checkpoint.max_position_embeddings == 1024
    assert switch(plan, "--checkpoint_dir") == (str(ckpt), "TensorRT-LLM checkpoint from convert/calibrate")
    assert plan.notes == []
    other = write_checkpoint(tmp_path / "ckpt", dtype="float16")
    assert switch(plan_build(config, checkpoint_dir=other), "--gemm_plugin")[0] == "float16"


def test_without_a_checkpoint_the_plan_says_where_facts_came_from() -> None:
    plan = plan_build(shipped("tiny-llama"))
    assert not plan.checkpoint.exists
    assert plan.notes == ["no checkpoint found yet: dtype, quantization and mapping are taken from the config; "
                          "run trtkit convert (or calibrate) before building"]


def test_find_checkpoint_picks_the_one_matching_the_config() -> None:
    config = with_quant(shipped("smollm2-135m"), "fp8", "fp8")
    root = paths.workdir(config) / "checkpoints"
    write_checkpoint(root / "bfloat16-tp1-pp1", dtype="bfloat16")
    write_checkpoint(root / "int8", dtype="bfloat16", quant_algo="W8A8_SQ_PER_CHANNEL")
    assert find_checkpoint(config) is None
    fp8 = write_checkpoint(root / "fp8", dtype="bfloat16", quant_algo="FP8", kv_quant_algo="FP8")
    assert find_checkpoint(config) == fp8
    assert find_checkpoint(shipped("smollm2-135m")) == root / "bfloat16-tp1-pp1"
