"""Issue 11 items 5, 7, 9 and 11 on the deploy side: GPU repositories that TensorRT-LLM 1.2 will load.

Hosts are HostFacts records (what the NVML/importlib probes report on a GPU host), not mocks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trtkit.cli.serve_cmd import run_check
from trtkit.config import load_config
from trtkit.consistency import check_repository
from trtkit.errors import RepositoryError
from trtkit.repository import deploy_repository
from trtkit.repository.pbtxt import read
from trtkit.trtllm_build.host_facts import GpuFact, HostFacts
from trtkit.trtllm_build.manifest import BuildIdentity, write_manifest

CONFIGS = Path(__file__).resolve().parents[2] / "model_configs"
H100 = HostFacts(gpus=(GpuFact(0, "NVIDIA H100 80GB HBM3", 80 << 30, (9, 0)),), tensorrt_llm_version="1.2.1",
                 tensorrt_version="10.14.1.48")
A100 = HostFacts(gpus=(GpuFact(0, "NVIDIA A100-SXM4-80GB", 80 << 30, (8, 0)),), tensorrt_llm_version="1.2.1",
                 tensorrt_version="10.14.1.48")


def _write_small_tokenizer(folder: Path) -> None:
    """A valid three-token tokenizer with an end of sequence (deploy writes guided decoding's vocabulary from it)."""
    from tokenizers import Tokenizer, models

    Tokenizer(models.BPE(vocab={"</s>": 0, "a": 1, "b": 2}, merges=[])).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))


def engine_dir(tmp_path: Path, *, paged: bool = True, logits_dtype: str | None = None, built_on: HostFacts = H100,
               max_batch_size: int = 8, max_num_tokens: int = 512) -> Path:
    """What trtkit build leaves on a GPU host: rank engine, config.json (build + pretrained config), manifest."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "rank0.engine").write_bytes(b"\0")
    build = {"max_batch_size": max_batch_size, "max_input_len": 200, "max_seq_len": 400, "max_num_tokens": max_num_tokens,
             "max_beam_width": 1, "plugin_config": {"tokens_per_block": 16, "use_paged_context_fmha": paged}}
    pretrained = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16"}
    if logits_dtype:
        pretrained["logits_dtype"] = logits_dtype
    (engine / "config.json").write_text(json.dumps({"build_config": build, "pretrained_config": pretrained}))
    _write_small_tokenizer(engine)
    gpu = built_on.gpus[0]
    identity = BuildIdentity("c" * 64, "a" * 64, str(built_on.tensorrt_llm_version), str(built_on.tensorrt_version),
                             gpu.name, f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}")
    write_manifest(engine, identity, ["--checkpoint_dir", "x"], world_size=1)
    return engine


def deploy(tmp_path: Path, engine: Path, *, profile: str | None = None, host: HostFacts = H100,
           tokenizer: Path | None = None):  # type: ignore[no-untyped-def]
    config = load_config(CONFIGS / "tiny-llama.yaml", profile=profile)
    return deploy_repository(config, engine, tmp_path / "repo", target="gpu", host=host, tokenizer_dir=tokenizer)


def dtype_of(config, name: str) -> str:  # type: ignore[no-untyped-def]
    from tritonclient.grpc import model_config_pb2 as mc

    return mc.DataType.Name(next(o.data_type for o in config.output if o.name == name))


def test_engine_without_paged_context_fmha_gets_reuse_and_chunking_off(tmp_path: Path, tiny_llama_dir: Path) -> None:
    result = deploy(tmp_path, engine_dir(tmp_path, paged=False), profile="throughput", tokenizer=tiny_llama_dir)
    assert not result.settings.enable_kv_cache_reuse and not result.settings.enable_chunked_context
    reasons = {i.field: i.reason for i in result.implied if i.value is False and i.reason.startswith("gpu:")}
    assert set(reasons) == {"serve.enable_kv_cache_reuse", "serve.enable_chunked_context"}
    assert "use_paged_context_fmha false" in reasons["serve.enable_kv_cache_reuse"]
    params = {k: v.string_value for k, v in read(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt").parameters.items()}
    assert params["enable_kv_cache_reuse"] == "false" and params["enable_chunked_context"] == "false"
    findings = check_repository(tmp_path / "repo", gpu_count=1, host=H100)
    assert [f for f in findings if f.code == "paged_context_fmha"] == []


def test_engine_with_paged_context_fmha_keeps_reuse(tmp_path: Path) -> None:
    result = deploy(tmp_path, engine_dir(tmp_path, paged=True), profile="throughput")
    assert result.settings.enable_kv_cache_reuse and result.settings.enable_chunked_context


@pytest.mark.parametrize(("logits_dtype", "declared"), [("float16", "TYPE_FP16"), (None, "TYPE_FP32"),
                                                        ("float32", "TYPE_FP32")])
def test_logits_outputs_are_declared_in_the_engines_logits_dtype(tmp_path: Path, logits_dtype: str | None,
                                                                  declared: str) -> None:
    deploy(tmp_path, engine_dir(tmp_path, logits_dtype=logits_dtype))
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        config = read(tmp_path / "repo" / model / "config.pbtxt")
        assert dtype_of(config, "context_logits") == declared, model
        assert dtype_of(config, "generation_logits") == declared, model


def test_bf16_logits_engine_is_refused_at_deploy(tmp_path: Path) -> None:
    """Issue 34 defect 8: fillTritonResponse returns logits only as FP32 or FP16; a bf16 logits dtype declared as
    TYPE_BF16 would fail the first request for logits, so deploy refuses it and names the rebuild."""
    with pytest.raises(RepositoryError, match=r"logits_dtype is bfloat16.*only as FP32 or FP16.*--logits_dtype float32"):
        deploy(tmp_path, engine_dir(tmp_path, logits_dtype="bfloat16"))


def test_bf16_checkpoints_build_with_float32_logits() -> None:
    from trtkit.trtllm_build.checkpoint_info import info_from_config
    from trtkit.trtllm_build.flags import derive_build_flags

    config = load_config(CONFIGS / "tiny-llama.yaml")
    bf16 = replace(info_from_config(config), logits_dtype="bfloat16")
    switches = {s.flag: (s.value, s.reason) for s in derive_build_flags(
        config, bf16, checkpoint_dir=Path("/c"), output_dir=Path("/e"), timing_cache=Path("/t")).switches}
    assert switches["--logits_dtype"][0] == "float32" and "Logits type is not supported" in switches["--logits_dtype"][1]
    fp16 = replace(bf16, logits_dtype="float16")
    assert "--logits_dtype" not in {s.flag for s in derive_build_flags(
        config, fp16, checkpoint_dir=Path("/c"), output_dir=Path("/e"), timing_cache=Path("/t")).switches}


def test_serving_batch_cap_below_the_engine_warns_with_the_rebuild(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Issue 34 defect 6: the latency profile's serve.max_batch_size (4) below an engine built for 8 only lowers
    Triton's max_batch_size; the executor still runs 8 in flight. Deploy warns and names the rebuild."""
    import logging

    with caplog.at_level(logging.WARNING):
        result = deploy(tmp_path, engine_dir(tmp_path, max_batch_size=8), profile="latency")
    assert result.settings.max_batch_size == 4
    assert "requests are NOT capped at 4" in caplog.text and "trtkit build CONFIG --force" in caplog.text
    caplog.clear()
    (tmp_path / "built-capped").mkdir()
    with caplog.at_level(logging.WARNING):
        deploy(tmp_path / "built-capped", engine_dir(tmp_path / "built-capped", max_batch_size=4), profile="latency")
    assert "NOT capped" not in caplog.text


def test_prompt_longer_than_one_step_without_chunking_is_refused(tmp_path: Path) -> None:
    """Issue 34 defect 9: deploy turns chunked context off for an engine without paged context FMHA; prompts
    above max_num_tokens (but within max_input_len) would then fail at run time: refused at deploy."""
    short_steps = engine_dir(tmp_path, paged=False, max_num_tokens=128)  # max_input_len 200
    with pytest.raises(RepositoryError, match=r"max_num_tokens \(128\) is below its max_input_len \(200\) and "
                                              r"chunked context is off \(the engine has no paged context FMHA\)"):
        deploy(tmp_path, short_steps, profile="throughput")
    (tmp_path / "ok").mkdir()
    roomy = engine_dir(tmp_path / "ok", paged=True, max_num_tokens=128)
    assert deploy(tmp_path / "ok", roomy, profile="throughput").settings.enable_chunked_context


def test_cpu_repository_keeps_fp32_logits(tmp_path: Path, tiny_llama_dir: Path) -> None:
    deploy_repository(load_config(CONFIGS / "tiny-llama.yaml"), tiny_llama_dir, tmp_path / "cpu", target="cpu")
    assert dtype_of(read(tmp_path / "cpu" / "tensorrt_llm" / "config.pbtxt"), "context_logits") == "TYPE_FP32"


def test_deploy_refuses_engines_built_for_another_gpu(tmp_path: Path) -> None:
    engine = engine_dir(tmp_path)
    with pytest.raises(RepositoryError, match=r"built on NVIDIA H100 80GB HBM3 \(SM 9.0\).*NVIDIA A100"):
        deploy(tmp_path, engine, host=A100)
    newer = replace(H100, tensorrt_version="10.15.0.1")
    with pytest.raises(RepositoryError, match="TensorRT 10.15.0.1"):
        deploy(tmp_path, engine, host=newer)
    assert deploy(tmp_path, engine, host=H100).target == "gpu"


def test_deploy_refuses_engines_without_a_manifest_on_a_gpu_host(tmp_path: Path) -> None:
    engine = engine_dir(tmp_path)
    (engine / "trtkit-manifest.json").unlink()
    with pytest.raises(RepositoryError, match="has no trtkit-manifest.json"):
        deploy(tmp_path, engine)


def test_check_and_serve_refuse_engines_built_for_another_gpu(tmp_path: Path, tiny_llama_dir: Path) -> None:
    deploy(tmp_path, engine_dir(tmp_path), tokenizer=tiny_llama_dir)
    repo = tmp_path / "repo"
    assert [f for f in check_repository(repo, gpu_count=1, host=H100) if f.code == "engine_host"] == []
    findings = [f for f in check_repository(repo, gpu_count=1, host=A100) if f.code == "engine_host"]
    assert len(findings) == 1 and findings[0].severity == "error" and "rebuild" in findings[0].fix
    with pytest.raises(RepositoryError, match="failed 1 consistency check"):
        run_check(repo, host=A100, echo=False)  # what `trtkit serve` runs before it launches anything
    run_check(repo, host=H100, echo=False)


def test_throughput_queue_delay_is_zero_on_gpu_unless_set(tmp_path: Path, tiny_llama_dir: Path) -> None:
    result = deploy(tmp_path, engine_dir(tmp_path), profile="throughput")
    engine = read(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    assert engine.dynamic_batching.max_queue_delay_microseconds == 0
    reason = next(i.reason for i in result.implied if i.field == "serve.max_queue_delay_microseconds")
    assert reason.startswith("gpu:") and "time-to-first-token" in reason
    cpu = deploy_repository(load_config(CONFIGS / "tiny-llama.yaml", profile="throughput"), tiny_llama_dir,
                            tmp_path / "cpu", target="cpu")
    assert cpu.settings.max_queue_delay_us == 50_000
    base = load_config(CONFIGS / "tiny-llama.yaml")
    explicit = replace(base, serve=replace(base.serve, profile="throughput", max_queue_delay_microseconds=2000))
    kept = deploy_repository(explicit, tmp_path / "engine", tmp_path / "repo2", target="gpu", host=H100)
    assert kept.settings.max_queue_delay_us == 2000
