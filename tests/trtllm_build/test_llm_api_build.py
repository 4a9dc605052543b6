"""Issue 36: `trtkit build` under build.backend: pytorch builds no engine; it writes the LLM-API options file
(the same mapping deploy and trtllm-serve get) after a preflight: TensorRT-LLM 1.2, GPUs for tp x pp, the GPU's
SM against the PyTorch backend's support matrix, memory and the KV plan of `trtkit plan`."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from build_helpers import gpu_host, shipped, with_quant

from trtkit.config.build_backend import PYTORCH
from trtkit.config.gpus import lookup_gpu
from trtkit.config.llm_api_options import OPTIONS_FILE, model_dir_of, options_for
from trtkit.errors import BuildError
from trtkit.trtllm_build.gpu_support import PYTORCH_MATRIX, family, pytorch_refusals, refusals_for
from trtkit.trtllm_build.llm_api_build import build_llm_api

# the PyTorch backend's Hardware Support Matrix (docs/source/features/quantization.md; the contract records it)
RUNS = {"fp8": {"L4", "H100-80GB", "B200", "RTX-5090"}, "fp8_block": {"H100-80GB", "B200"},
        "nvfp4": {"B200", "RTX-5090"}, "w4a8_awq": {"L4", "H100-80GB"}, "int4_awq": {"A100-80GB", "L4", "H100-80GB"}}
GPUS = ["A100-80GB", "L4", "H100-80GB", "B200", "RTX-5090"]
QUANT = {"fp8": "FP8", "fp8_block": "FP8_BLOCK_SCALES", "nvfp4": "NVFP4", "w4a8_awq": "W4A8_AWQ",
         "int4_awq": "W4A16_AWQ"}


@pytest.mark.parametrize("fmt", sorted(RUNS))
def test_the_pytorch_support_matrix_by_gpu(fmt: str) -> None:
    for kind in GPUS:
        cc = lookup_gpu(kind).compute_capability
        refused = pytorch_refusals(QUANT[fmt], None, cc)
        assert (not refused) == (kind in RUNS[fmt]), (fmt, kind, refused)
        assert refusals_for(PYTORCH, QUANT[fmt], None, cc) == refused
    assert set(PYTORCH_MATRIX) == set(QUANT.values())
    assert pytorch_refusals(None, "FP8", lookup_gpu("A100-80GB").compute_capability) == []  # FP8 KV: Ampere on
    assert family((7, 5)) == "older" and pytorch_refusals(None, "FP8", (7, 5))


def pytorch_smollm2(fmt: str = "none", kv: str = "auto"):  # type: ignore[no-untyped-def]
    config = with_quant(shipped("smollm2-135m-pytorch"), fmt, kv)
    return config


def test_the_options_come_from_one_field_each(tmp_path: Path) -> None:
    config = pytorch_smollm2(kv="fp8")
    config = replace(config, serve=replace(config.serve, max_tokens_in_paged_kv_cache=4096),
                     pytorch=replace(config.pytorch, llm_api_options={"stream_interval": 4,
                                                                      "kv_cache_config": {"host_cache_size": 1 << 30}}))
    options = options_for(config, tmp_path, tokenizer_dir=tmp_path / "tok")
    b, s = config.build, config.serve
    assert options["model"] == str(tmp_path) and options["tokenizer"] == str(tmp_path / "tok")
    assert options["max_batch_size"] == min(s.max_batch_size or b.max_batch_size, b.max_batch_size)
    assert (options["max_num_tokens"], options["max_seq_len"], options["max_input_len"]) == (
        b.max_num_tokens, b.max_seq_len, b.max_input_len)
    assert options["kv_cache_config"] == {"free_gpu_memory_fraction": s.kv_cache_free_gpu_mem_fraction,
                                          "enable_block_reuse": True, "tokens_per_block": 32, "dtype": "fp8",
                                          "max_tokens": 4096, "host_cache_size": 1 << 30}
    assert options["scheduler_config"] == {"capacity_scheduler_policy": "MAX_UTILIZATION"}  # the throughput profile
    assert options["enable_chunked_prefill"] is True and options["guided_decoding_backend"] == "xgrammar"
    assert options["cuda_graph_config"] == {"max_batch_size": options["max_batch_size"], "enable_padding": True}
    assert options["stream_interval"] == 4 and options["enable_iter_perf_stats"] is True
    off = replace(config, pytorch=replace(config.pytorch, cuda_graph=False))
    assert options_for(off, tmp_path)["cuda_graph_config"] is None


def test_a_dry_run_reports_options_kv_plan_and_preflight_without_a_gpu(tmp_path: Path) -> None:
    config = pytorch_smollm2("fp8_block")
    config = replace(config, build=replace(config.build, target_gpu="L4"))
    result = build_llm_api(config, facts=gpu_host("L4", trtllm=None), out_dir=tmp_path / "out", dry_run=True)
    verdicts = {r.name: r for r in result.preflight.results}  # type: ignore[union-attr]
    assert not verdicts["tensorrt_llm_installed"].ok
    assert not verdicts["gpu_runs_format"].ok and "FP8_BLOCK_SCALES on the PyTorch backend runs only on Hopper" in \
        verdicts["gpu_runs_format"].message
    assert verdicts["memory_and_kv_plan"].ok and result.kv_plan is not None
    assert not result.written and not (tmp_path / "out").exists() and result.notes  # no checkpoint yet


def test_it_writes_the_options_once_the_preflight_passes(tmp_path: Path, tiny_llama_dir: Path) -> None:
    config = with_quant(shipped("tiny-llama-pytorch"), "none")
    with pytest.raises(BuildError, match="no NVIDIA GPU is visible"):
        build_llm_api(config, facts=replace(gpu_host(), gpus=()), checkpoint_dir=tiny_llama_dir, out_dir=tmp_path)
    result = build_llm_api(config, facts=gpu_host("H100-80GB"), checkpoint_dir=tiny_llama_dir, out_dir=tmp_path)
    assert result.written and result.options_path == tmp_path / OPTIONS_FILE
    written = yaml.safe_load(result.options_path.read_text())
    assert written["model"] == str(tiny_llama_dir) and model_dir_of(tmp_path) == tiny_llama_dir
    big = replace(config, convert=replace(config.convert, tp_size=2))
    with pytest.raises(BuildError, match="needs 2 GPUs, but this host has 1"):
        build_llm_api(big, facts=gpu_host("H100-80GB"), checkpoint_dir=tiny_llama_dir, out_dir=tmp_path / "tp2")


def test_the_gpu_must_run_the_checkpoint_format(tmp_path: Path, tiny_llama_dir: Path) -> None:
    model = tmp_path / "nvfp4"
    shutil.copytree(tiny_llama_dir, model)
    (model / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    config = with_quant(shipped("tiny-llama-pytorch"), "nvfp4")
    with pytest.raises(BuildError, match="NVFP4 on the PyTorch backend runs only on Blackwell"):
        build_llm_api(config, facts=gpu_host("H100-80GB"), checkpoint_dir=model, out_dir=tmp_path / "out")
    assert build_llm_api(config, facts=gpu_host("B200"), checkpoint_dir=model, out_dir=tmp_path / "b200").written


def test_trtllm_checkpoints_and_empty_folders_are_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "LlamaForCausalLM", "mapping": {}}))
    with pytest.raises(BuildError, match="is a TensorRT-LLM checkpoint"):
        model_dir_of(tmp_path)
    with pytest.raises(BuildError, match="holds no config.json"):
        model_dir_of(tmp_path / "nothing")


def test_the_engine_builder_refuses_a_pytorch_config() -> None:
    from trtkit.trtllm_build import build_engines

    with pytest.raises(BuildError, match="builds no engine"):
        build_engines(shipped("smollm2-135m-pytorch"), facts=gpu_host())


def test_trtkit_build_prints_the_options_and_the_preflight(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trtkit.cli.main import app

    result = CliRunner().invoke(app, ["build", str(Path(__file__).resolve().parents[2] / "model_configs" /
                                                  "smollm2-135m-pytorch.yaml"), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["backend"] == "pytorch" and not data["built"] and data["options"]["backend"] == "pytorch"
    assert {r["name"] for r in data["preflight"]} >= {"gpu_runs_format", "memory_and_kv_plan", "enough_gpus"}
