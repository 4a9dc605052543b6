"""Every preflight rule, with its exact message. Hosts are HostFacts records, not mocks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from build_helpers import gpu_fact, gpu_host, shipped, with_quant

from trtkit.config.schema import ModelConfig
from trtkit.errors import BuildError
from trtkit.trtllm_build.checkpoint_info import CheckpointInfo, info_from_config
from trtkit.trtllm_build.host_facts import HostFacts, collect_host_facts
from trtkit.trtllm_build.preflight import GIB, RULES, BuildTarget, check_preflight, run_preflight

OUT = Path("/engines/out")
CONTAINER_HINT = "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3 (TensorRT-LLM 1.2.1)"


def target(config: ModelConfig, ckpt: CheckpointInfo | None = None, need_gib: float = 2.0) -> BuildTarget:
    return BuildTarget(config, ckpt or info_from_config(config), OUT, int(need_gib * GIB))


def failure(t: BuildTarget, facts: HostFacts) -> str:
    with pytest.raises(BuildError) as caught:
        check_preflight(t, facts)
    return str(caught.value)


def test_a_ready_gpu_host_passes_every_rule() -> None:
    t = target(shipped("llama3-8b-fp8-h100"))
    check_preflight(t, gpu_host("H100-80GB"))
    report = run_preflight(t, gpu_host("H100-80GB"))
    assert len(report.results) == len(RULES) and report.failures == []


def test_tensorrt_llm_missing_is_one_line_naming_the_container() -> None:
    facts = HostFacts(tensorrt_llm_error="No module named 'tensorrt_llm'", free_disk_bytes=100 * GIB)
    assert failure(target(shipped("tiny-llama")), facts) == (
        "TensorRT-LLM is not installed on this host (No module named 'tensorrt_llm'); run trtkit build inside "
        f"{CONTAINER_HINT}, or use --dry-run to see the plan")


def test_tensorrt_llm_must_be_1_2() -> None:
    assert failure(target(shipped("tiny-llama")), gpu_host(trtllm="1.1.0")) == (
        "TensorRT-LLM 1.1.0 is installed, but trtkit builds engines with TensorRT-LLM 1.2.x; use "
        "nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3 (TensorRT-LLM 1.2.1) or pip install tensorrt_llm==1.2.1")


def test_gpus_must_be_present() -> None:
    facts = replace(gpu_host(), gpus=(), nvml_error="NVML Shared Library Not Found")
    assert failure(target(shipped("tiny-llama")), facts) == (
        "no NVIDIA GPU is visible (NVML: NVML Shared Library Not Found); run trtkit build on a GPU host, "
        "or use --dry-run to see the plan")


def test_tp_times_pp_must_fit_the_gpus() -> None:
    config = shipped("smollm2-135m")
    config = replace(config, convert=replace(config.convert, tp_size=2, pp_size=2))
    assert failure(target(config), gpu_host(count=2)) == (
        "convert.tp_size x convert.pp_size = 4 needs 4 GPUs, but this host has 2; build on a host with 4 GPUs, "
        "or lower tp_size/pp_size and re-run trtkit convert")
    check_preflight(target(config), gpu_host(count=4))


def test_checkpoint_mapping_must_match_the_config() -> None:
    config = shipped("smollm2-135m")
    ckpt = replace(info_from_config(config), path=Path("/ck/bf16"), tp_size=2)
    assert failure(target(config, ckpt), gpu_host(count=2)) == (
        "the checkpoint in /ck/bf16 was converted for tp_size=2, pp_size=1, but the config asks for tp_size=1, "
        "pp_size=1; re-run trtkit convert CONFIG or pass the matching --checkpoint")


def test_fp8_needs_sm89() -> None:
    config = with_quant(shipped("smollm2-135m"), "fp8")
    facts = replace(gpu_host("A100-80GB"), gpus=(gpu_fact("A100-80GB", name="NVIDIA A100-SXM4-80GB"),))
    assert failure(target(config), facts) == (
        "quant_algo FP8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); GPU 0 "
        "(NVIDIA A100-SXM4-80GB) is 8.0; use int8_sq or int8_wo (kv_cache_dtype int8), or build on an L4, L40S, "
        "H100 or newer")
    kv_only = with_quant(shipped("smollm2-135m"), "int8_wo", "fp8")
    assert failure(target(kv_only), facts).startswith("kv_cache_quant_algo FP8 needs compute capability 8.9")
    check_preflight(target(config), gpu_host("L4"))


def test_nvfp4_needs_blackwell() -> None:
    config = with_quant(shipped("smollm2-135m"), "nvfp4")
    assert failure(target(config), gpu_host("H100-80GB")) == (
        "quant_algo NVFP4 needs a Blackwell GPU (compute capability 10.0 or newer); GPU 0 "
        "(NVIDIA H100-80GB) is 9.0; use fp8 on Hopper or Ada, or build on a B200, B300 or RTX PRO 6000 Blackwell")
    check_preflight(target(config), gpu_host("B200"))


def test_disk_space() -> None:
    assert failure(target(shipped("tiny-llama"), need_gib=20), gpu_host(free_gib=5)) == (
        "building needs about 20.0 GiB free in /engines/out, only 5.0 GiB is free; free some space or pass --out "
        "on a larger disk")


def test_max_seq_len_within_the_checkpoint_positions() -> None:
    config = shipped("tiny-llama")  # max_seq_len 512
    ckpt = replace(info_from_config(config), path=Path("/ck"), max_position_embeddings=256)
    assert failure(target(config, ckpt), gpu_host()) == (
        "build.max_seq_len (512) exceeds the checkpoint's max_position_embeddings (256); "
        "lower build.max_seq_len to 256 or less")


def test_max_num_tokens_cover_input_unless_chunked_context() -> None:
    config = shipped("tiny-llama")  # latency profile: chunked context off
    short = replace(config, build=replace(config.build, max_num_tokens=128))
    assert failure(target(short), gpu_host()) == (
        "build.max_num_tokens (128) is below build.max_input_len (256) and serve.enable_chunked_context is off; "
        "raise max_num_tokens to at least 256 or turn chunked context on")
    chunked = replace(short, serve=replace(short.serve, enable_chunked_context=True))
    check_preflight(target(chunked), gpu_host())


@pytest.mark.parametrize(("fmt", "kv"), [("int8_sq", "int8"), ("int8_wo", "fp8"), ("none", "fp8")])
def test_max_num_tokens_cover_input_when_the_builder_turns_chunking_off(fmt: str, kv: str) -> None:
    """Issue 34 defect 9: chunked context on, but the checkpoint makes trtllm-build turn paged context FMHA off
    (int8 KV, or fp8 KV without fp8 weights), so deploy turns chunking off: refused at plan time."""
    config = with_quant(shipped("tiny-llama"), fmt, kv)
    short = replace(config, build=replace(config.build, max_num_tokens=128),
                    serve=replace(config.serve, enable_chunked_context=True))
    message = failure(target(short), gpu_host())
    assert message.startswith("build.max_num_tokens (128) is below build.max_input_len (256), and chunked context "
                              "cannot run on this engine: trtllm-build turns paged context FMHA off because")
    assert "prompts of 129 to 256 tokens would fail at run time" in message
    fp8 = with_quant(shipped("tiny-llama"), "fp8", "fp8")  # fp8 weights keep paged context FMHA
    check_preflight(target(replace(fp8, build=replace(fp8.build, max_num_tokens=128),
                                   serve=replace(fp8.serve, enable_chunked_context=True))), gpu_host())


def test_multiple_profiles_refuse_opt_num_tokens() -> None:
    config = shipped("llama3-8b-fp8-h100")  # multiple_profiles: true
    both = replace(config, build=replace(config.build, opt_num_tokens=1024))
    assert failure(target(both), gpu_host()) == (
        "build.multiple_profiles is on and build.opt_num_tokens is set (1024); trtllm-build 1.2 refuses the pair, "
        "unset opt_num_tokens or turn multiple_profiles off")


def test_dry_run_report_skips_gpu_rules_without_a_gpu() -> None:
    facts = HostFacts(nvml_error="NVML Shared Library Not Found", free_disk_bytes=100 * GIB)
    report = run_preflight(target(with_quant(shipped("tiny-llama"), "fp8")), facts)
    verdicts = {r.name: (r.ok, r.checked) for r in report.results}
    assert verdicts["gpu_supports_checkpoint"] == (True, False) and verdicts["enough_gpus"] == (True, False)
    assert [r.name for r in report.failures] == ["tensorrt_llm_installed", "gpus_present"]


def test_real_probe_of_this_host(tmp_path: Path) -> None:
    facts = collect_host_facts(tmp_path)
    assert facts.free_disk_bytes > 0
    if not facts.gpus:
        assert facts.nvml_error  # NVML says why there is no GPU
    if facts.tensorrt_llm_version is None:
        assert facts.tensorrt_llm_error


def test_dry_run_off_the_gpu_host_checks_against_build_target_gpu() -> None:
    config = shipped("llama3-8b-fp8-h100")  # fp8, target_gpu H100-80GB
    facts = HostFacts(nvml_error="NVML Shared Library Not Found", free_disk_bytes=100 * GIB)
    ok = {r.name: r for r in run_preflight(target(config), facts).results}
    assert ok["gpu_supports_checkpoint"].ok and ok["gpu_supports_checkpoint"].checked
    on_a100 = replace(config, build=replace(config.build, target_gpu="A100-80GB"))
    verdict = {r.name: r for r in run_preflight(target(on_a100), facts).results}["gpu_supports_checkpoint"]
    assert not verdict.ok and verdict.message.startswith(
        "quant_algo FP8 needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); GPU 0 "
        "(A100-80GB (build.target_gpu)) is 8.0")
