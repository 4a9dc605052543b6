"""Issue 36: what deploy writes under build.backend: pytorch, what `trtkit check` finds in it, trtllm-serve's files
and the Kubernetes manifests; generated here, the GPU variant included (its engine model runs only there)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.conftest import REPO_ROOT
from tests.trtllm_build.build_helpers import gpu_host
from trtkit.config import load_config, parse_config
from trtkit.consistency import check_repository, engine_world_size
from trtkit.errors import ConfigError, RepositoryError
from trtkit.repository import deploy_repository
from trtkit.repository.deploy import deploy_trtllm_serve

CONFIG = REPO_ROOT / "model_configs" / "tiny-llama-pytorch.yaml"


def pbtxt(repo: Path, model: str) -> mc.ModelConfig:
    return text_format.Parse((repo / model / "config.pbtxt").read_text(), mc.ModelConfig())


def params(config: mc.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


@pytest.fixture(scope="module")
def gpu_repo(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("pt-gpu") / "repo"
    result = deploy_repository(load_config(CONFIG), tiny_llama_dir, repo, target="gpu")
    assert result.target == "gpu" and result.settings.llm_api_engine == "tensorrt_llm"
    return repo


def test_the_gpu_repository_puts_the_llm_api_engine_model_in_the_slot(gpu_repo: Path, tiny_llama_dir: Path) -> None:
    engine = pbtxt(gpu_repo, "tensorrt_llm")
    p = params(engine)
    assert engine.backend == "python" and (gpu_repo / "tensorrt_llm" / "1" / "model.py").is_file()
    assert p["llm_api_engine"] == "tensorrt_llm" and not any(k.startswith("cpu_") for k in p)
    options = yaml.safe_load(Path(p["llm_api_options"]).read_text())
    assert options["model"] == p["gpt_model_path"] == str(tiny_llama_dir.resolve())
    assert options["max_batch_size"] == engine.max_batch_size == pbtxt(gpu_repo, "ensemble").max_batch_size
    outputs = {o.name for o in engine.output}
    assert {"num_cached_tokens", "finish_reason", "cpu_request_key"} <= outputs  # the CPU engine model's extras
    ensemble = pbtxt(gpu_repo, "ensemble")
    assert {s.model_name for s in ensemble.ensemble_scheduling.step} == {"preprocessing", "tensorrt_llm",
                                                                         "postprocessing"}  # no stream_gate
    assert engine.model_transaction_policy.decoupled and not engine.HasField("dynamic_batching")  # latency: no delay
    assert engine_world_size(gpu_repo) == 1  # one tritonserver: the LLM API starts its own workers


def test_the_manifest_names_the_backend_and_serve_reads_it_back(gpu_repo: Path) -> None:
    """trtkit_deploy.json records build.backend by its name, as before the BuildBackend object: `trtkit serve` without
    --config reads it back for the start timeout's default (900 s, not the C++ backend's 120 s)."""
    from trtkit.cli.serve_cmd import _repo_backend
    from trtkit.config.build_backend import PYTORCH, TENSORRT

    manifest = json.loads((gpu_repo / "trtkit_deploy.json").read_text())
    assert manifest["settings"]["backend"] == "pytorch"
    assert _repo_backend(gpu_repo) is PYTORCH and _repo_backend(gpu_repo / "missing") is TENSORRT


def test_check_passes_on_it_with_a_gpu_and_names_what_breaks(gpu_repo: Path, tiny_llama_dir: Path) -> None:
    config = load_config(CONFIG)
    assert check_repository(gpu_repo, config=config, gpu_count=1, host=gpu_host("H100-80GB")) == []
    none = check_repository(gpu_repo, config=config, gpu_count=0, host=gpu_host("H100-80GB"))
    assert [f.code for f in none] == ["gpu_count"]
    path = Path(params(pbtxt(gpu_repo, "tensorrt_llm"))["llm_api_options"])
    saved = path.read_text()
    try:
        options = yaml.safe_load(saved)
        options["kv_cache_config"]["tokens_per_blok"] = 8
        options["guided_decoding_backend"] = None
        path.write_text(yaml.safe_dump(options))
        codes = {f.code: str(f) for f in check_repository(gpu_repo, config=config, gpu_count=1,
                                                          host=gpu_host("H100-80GB"))}
        assert "tokens_per_blok, but not a KvCacheConfig option of TensorRT-LLM 1.2.1" in codes["llm_api_allowlist"]
        del options["kv_cache_config"]["tokens_per_blok"]
        options["max_batch_size"], options["tensor_parallel_size"] = 2, 2
        path.write_text(yaml.safe_dump(options))
        findings = check_repository(gpu_repo, config=config, gpu_count=1, host=gpu_host("H100-80GB"))
        codes = {f.code for f in findings}
        assert {"max_batch_size", "world_size", "gpu_count", "guided_decoding"} <= codes, findings
        options["tensor_parallel_size"], options["model"] = 1, "/nowhere"
        path.write_text(yaml.safe_dump(options))
        assert "llm_api_model" in {f.code for f in check_repository(gpu_repo, config=config, gpu_count=1,
                                                                   host=gpu_host("H100-80GB"))}
    finally:
        path.write_text(saved)


def test_check_knows_what_this_gpu_runs(tiny_llama_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "nvfp4"
    shutil.copytree(tiny_llama_dir, model)
    (model / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    config = load_config(CONFIG)
    config = replace(config, quantization=replace(config.quantization, format="nvfp4"))
    deploy_repository(config, model, tmp_path / "repo", target="gpu")
    on_h100 = check_repository(tmp_path / "repo", config=config, gpu_count=1, host=gpu_host("H100-80GB"))
    assert [f.code for f in on_h100] == ["gpu_support"] and "runs only on Blackwell" in str(on_h100[0])
    assert check_repository(tmp_path / "repo", config=config, gpu_count=1, host=gpu_host("B200")) == []


def test_deploy_refuses_trtllm_checkpoints_under_pytorch(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({"architecture": "LlamaForCausalLM", "mapping": {}}))
    with pytest.raises(RepositoryError, match="is a TensorRT-LLM checkpoint"):
        deploy_repository(load_config(CONFIG), tmp_path / "ckpt", tmp_path / "repo", target="gpu")


def test_trtllm_serve_gets_its_yaml_and_the_exact_command(tiny_llama_dir: Path, tmp_path: Path) -> None:
    files = deploy_trtllm_serve(load_config(CONFIG), tiny_llama_dir, tmp_path / "serve")
    options = yaml.safe_load(files.config_path.read_text())
    assert "model" not in options and "backend" not in options and options["max_batch_size"] == 4
    assert files.command == ["trtllm-serve", "serve", str(tiny_llama_dir.resolve()), "--backend", "pytorch", "--host",
                             "127.0.0.1", "--port", "8000", "--extra_llm_api_options", str(files.config_path)]
    assert files.script_path.read_text().splitlines()[-1].startswith("exec trtllm-serve serve ")
    with pytest.raises(RepositoryError, match="set build.backend: pytorch"):
        deploy_trtllm_serve(load_config(REPO_ROOT / "model_configs" / "tiny-llama.yaml"), tiny_llama_dir,
                            tmp_path / "other")


def test_k8s_runs_one_tritonserver_over_the_pods_gpus_and_refuses_multi_node() -> None:
    from trtkit.k8s import make_plan, render_manifests

    data = yaml.safe_load((REPO_ROOT / "model_configs" / "smollm2-135m-pytorch.yaml").read_text())
    data["convert"].update(tp_size=2, pp_size=2)
    plan = make_plan(parse_config(data), yaml.safe_dump(data))
    deployment = next(obj for _, obj in render_manifests(plan) if obj["kind"] == "Deployment"
                      and obj["metadata"]["name"] == plan.triton_name)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][0] == "/opt/tritonserver/bin/tritonserver" and "mpirun" not in container["command"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    data["convert"].update(tp_size=4, pp_size=4)
    with pytest.raises(ConfigError, match="build.backend: pytorch runs the LLM API in one pod"):
        make_plan(parse_config(data), yaml.safe_dump(data))
