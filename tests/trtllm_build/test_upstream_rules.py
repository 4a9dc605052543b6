"""Issue 11 items 5, 6, 8, 11, 12: what TensorRT-LLM 1.2 does behind the user's back, modelled in the plan.

Every rule here is checked against the contract file that records its upstream source."""

from __future__ import annotations

from dataclasses import replace

import pytest
from build_helpers import FORMATS, gpu_host, shipped, with_quant
from test_build_preflight import failure, target

from trtkit.checkpoint.formats import FORMATS as CALIB_FORMATS
from trtkit.checkpoint.preflight import target_gpu_warning
from trtkit.config.gpus import lookup_gpu, match_nvml_name
from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError
from trtkit.trtllm_build import plan_build
from trtkit.trtllm_build.planner import plan_kv_cache
from trtkit.trtllm_build.preflight import check_preflight
from trtkit.trtllm_build.shapes import KNOWN_SHAPES


def switch(config: ModelConfig, flag: str) -> tuple[str | None, str]:
    found = [s for s in plan_build(config).switches if s.flag == flag]
    assert len(found) == 1, flag
    return found[0].value, found[0].reason


def combos() -> list[tuple[str, str]]:
    """The 22 format x KV combinations the config validator accepts (int8 KV is refused with fp8/nvfp4)."""
    return [(f, kv) for f in FORMATS for kv in ("auto", "fp8", "int8") if not (kv == "int8" and f in ("fp8", "nvfp4"))]


def test_paged_context_fmha_override_is_in_the_plan_for_11_of_22_combinations() -> None:
    base = shipped("llama3-8b-fp8-h100")  # KV reuse on
    assert len(combos()) == 22
    off = []
    for fmt, kv in combos():
        value, reason = switch(with_quant(base, fmt, kv), "--use_paged_context_fmha")
        if value == "disable":
            off.append((fmt, kv))
            assert reason.startswith("trtllm-build 1.2 turns it off because the checkpoint has")
            assert "trtkit deploy turns" in reason
    assert len(off) == 11
    assert {kv for _, kv in off} == {"int8", "fp8"}
    assert ("fp8", "fp8") not in off and ("w4a8_awq", "fp8") not in off and ("nvfp4", "fp8") not in off
    assert ("int8_sq", "fp8") in off and ("none", "int8") in off


def test_the_plan_warns_that_kv_reuse_will_be_turned_off() -> None:
    plan = plan_build(with_quant(shipped("llama3-8b-fp8-h100"), "int8_sq", "int8"))
    notes = [n for n in plan.notes if "use_paged_context_fmha will be off" in n]
    assert len(notes) == 1 and "serve.enable_kv_cache_reuse" in notes[0] and "int8 KV cache" in notes[0]
    assert not [n for n in plan_build(shipped("llama3-8b-fp8-h100")).notes if "paged_context_fmha" in n]


def test_context_fmha_off_turns_paged_context_fmha_off() -> None:
    base = shipped("tiny-llama")
    config = replace(base, build=replace(base.build, context_fmha=False))
    value, reason = switch(config, "--use_paged_context_fmha")
    assert value == "disable" and "build.context_fmha is false" in reason


def test_reduce_fusion_only_on_supported_architectures() -> None:
    base = shipped("llama3-8b-fp8-h100")
    tp2 = replace(base, convert=replace(base.convert, tp_size=2), build=replace(base.build, reduce_fusion=True))
    assert switch(tp2, "--reduce_fusion")[0] == "enable"
    other = replace(tp2, model=replace(tp2.model, architecture="Qwen2ForCausalLM"))
    value, reason = switch(other, "--reduce_fusion")
    assert value == "disable" and "Qwen2ForCausalLM gets it turned off" in reason


def test_kv_fraction_of_one_is_refused_by_config_and_planner(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from trtkit.config import load_config
    from trtkit.errors import ConfigError

    target_yaml = tmp_path / "c.yaml"
    target_yaml.write_text("name: x\nmodel: {source: bundled:smollm2-135m}\nserve: {kv_cache_free_gpu_mem_fraction: 1.0}\n")
    with pytest.raises(ConfigError, match=r"serve.kv_cache_free_gpu_mem_fraction: must be < 1.0, got 1.0"):
        load_config(target_yaml)
    with pytest.raises(BuildError, match="KvCacheConfig refuses 1.0"):
        plan_kv_cache(KNOWN_SHAPES["llama-3-8b"], lookup_gpu("H100-80GB"), kv_fraction=1.0)
    assert plan_kv_cache(KNOWN_SHAPES["llama-3-8b"], lookup_gpu("H100-80GB"), kv_fraction=0.95).num_blocks > 0


@pytest.mark.parametrize(("fmt", "kv", "refused"), [
    ("int8_sq", "auto", "quant_algo W8A8_SQ_PER_CHANNEL (SmoothQuant)"),
    ("int8_wo", "auto", "quant_algo W8A16 (INT8/INT4 weights"), ("int4_wo", "auto", "quant_algo W4A16 (INT8/INT4"),
    ("int4_awq", "auto", "quant_algo W4A16_AWQ (INT8/INT4"),
    # issue 34 defect 2: W4A8 AWQ has INT4 weights (QuantMode: int4 weight-only, per group): refused on SM 10.x
    ("w4a8_awq", "fp8", "quant_algo W4A8_AWQ (INT8/INT4"),
    ("none", "int8", "an int8 KV cache")])
@pytest.mark.parametrize("gpu", ["B200", "GB200", "B300"])
def test_blackwell_refusals_in_preflight(fmt: str, kv: str, refused: str, gpu: str) -> None:
    t = target(with_quant(shipped("tiny-llama"), fmt, kv))
    message = failure(t, gpu_host(gpu))
    assert message.startswith(f"TensorRT-LLM 1.2 refuses {refused}") and "on SM 10.x and 11.x" in message
    assert "use quantization.format fp8 or nvfp4" in message
    check_preflight(t, gpu_host("H100-80GB"))  # Hopper builds them


@pytest.mark.parametrize("gpu", ["RTX-PRO-6000-BLACKWELL", "RTX-5090", "GB10"])
@pytest.mark.parametrize(("fmt", "kv"), [("int8_sq", "auto"), ("int8_wo", "int8"), ("int4_awq", "auto"),
                                          ("w4a8_awq", "fp8"), ("fp8", "fp8"), ("nvfp4", "fp8")])
def test_sm12_is_outside_the_builder_refusal_range(gpu: str, fmt: str, kv: str) -> None:
    """Issue 34 defect 3: the 1.2 builder refuses only at 100 <= sm < 120; SM 12.x builds what Hopper builds."""
    assert lookup_gpu(gpu).sm >= 120
    check_preflight(target(with_quant(shipped("tiny-llama"), fmt, kv)), gpu_host(gpu))
    assert target_gpu_warning(CALIB_FORMATS[fmt], gpu, "INT8" if kv == "int8" else None) is None


def test_blackwell_accepts_fp8_and_nvfp4() -> None:
    for gpu in ("B200", "GB200", "B300"):
        for fmt in ("fp8", "nvfp4"):
            check_preflight(target(with_quant(shipped("tiny-llama"), fmt, "fp8")), gpu_host(gpu))


def test_calibrate_warns_for_blackwell_refusals() -> None:
    warning = target_gpu_warning(CALIB_FORMATS["int8_sq"], "B200")
    assert warning is not None and "refuses quant_algo W8A8_SQ_PER_CHANNEL" in warning and "fp8 or nvfp4" in warning
    w4a8 = target_gpu_warning(CALIB_FORMATS["w4a8_awq"], "B300", "FP8")
    assert w4a8 is not None and "refuses quant_algo W4A8_AWQ" in w4a8
    kv_only = target_gpu_warning(None, "B200", "INT8")
    assert kv_only is not None and "an int8 KV cache" in kv_only
    assert target_gpu_warning(CALIB_FORMATS["fp8"], "B200", "FP8") is None
    assert target_gpu_warning(CALIB_FORMATS["int8_sq"], "H100", "INT8") is None


def test_the_gpu_table_has_the_blackwell_parts_people_deploy() -> None:
    """Issue 34 defect 3: compute capabilities from NVIDIA's CUDA GPUs table; NVML names match each part."""
    expected = {"B200": (10, 0), "GB200": (10, 0), "B300": (10, 3), "RTX-PRO-6000-BLACKWELL": (12, 0),
                "RTX-5090": (12, 0), "GB10": (12, 1)}
    for kind, cc in expected.items():
        assert lookup_gpu(kind).compute_capability == cc, kind
    names = {"NVIDIA GB200": "GB200", "NVIDIA B300 SXM6 AC": "B300", "NVIDIA GeForce RTX 5090": "RTX-5090",
             "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX-PRO-6000-BLACKWELL", "NVIDIA GB10": "GB10",
             "NVIDIA B200": "B200", "NVIDIA H100 PCIe": "H100-PCIE"}
    for nvml, kind in names.items():
        spec = match_nvml_name(nvml)
        assert spec is not None and spec.kind == kind, nvml
    assert lookup_gpu("GB10").memory_source == "spec sheet" and lookup_gpu("H100-80GB").memory_source == "nvml"


def test_latency_profile_caps_the_engine_batch() -> None:
    base = shipped("tiny-llama")
    assert base.serve.profile == "latency" and base.serve.max_batch_size == 4 < base.build.max_batch_size
    value, reason = switch(base, "--max_batch_size")
    assert value == "4" and "in-flight concurrency follows the engine's max_batch_size" in reason
    throughput = replace(base, serve=replace(base.serve, profile="throughput", max_batch_size=base.build.max_batch_size))
    assert switch(throughput, "--max_batch_size") == (str(base.build.max_batch_size), "build.max_batch_size")


def test_fp8_gemm_plugin_only_for_small_batches() -> None:
    big = shipped("llama3-8b-fp8-h100")  # max_batch_size 64
    value, reason = switch(big, "--gemm_plugin")
    assert value == "bfloat16" and "max_batch_size 64 > 4" in reason
    small = replace(big, build=replace(big.build, max_batch_size=4), serve=replace(big.serve, max_batch_size=4))
    assert switch(small, "--gemm_plugin")[0] == "fp8"


def test_gather_logits_reason_and_warning() -> None:
    base = shipped("tiny-llama")
    on = replace(base, build=replace(base.build, gather_logits=True))
    reason = switch(on, "--gather_context_logits")[1]
    assert "not needed for log-probs: return_log_probs suffices" in reason and "turns KV-cache reuse off" in reason
    warnings = [n for n in plan_build(on).notes if "gather_logits" in n]
    assert len(warnings) == 1 and warnings[0].startswith("warning:")
    no_reuse = replace(on, serve=replace(on.serve, enable_kv_cache_reuse=False))
    assert not [n for n in plan_build(no_reuse).notes if "gather_logits" in n]
    from trtkit.config.schema import BuildSection

    doc = BuildSection.__dataclass_fields__["gather_logits"].metadata["doc"]
    assert "not needed for log-probs" in doc
