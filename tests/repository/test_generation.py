"""Repository generation: configs from Triton's protobuf, the 1.2 contract, profiles and the CLI."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trtkit.cli.main import app
from trtkit.config import load_config
from trtkit.errors import RepositoryError
from trtkit.repository import deploy_repository
from trtkit.repository.pbtxt import contract, read

CONFIGS = Path(__file__).resolve().parents[2] / "model_configs"
MODELS = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")


@pytest.fixture
def gpu_engine_dir(tmp_path: Path, tiny_llama_dir: Path) -> Path:
    """What trtkit build writes on a GPU host: rank engines, a config.json with build_config, the tokenizer."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "rank0.engine").write_bytes(b"\0")
    build = {"max_batch_size": 6, "max_input_len": 200, "max_seq_len": 400, "max_num_tokens": 512,
             "max_beam_width": 1, "plugin_config": {"tokens_per_block": 16, "use_paged_context_fmha": True}}
    (engine / "config.json").write_text(json.dumps({"build_config": build}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_llama_dir / name, engine / name)
    return engine


def _params(config) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


def test_gpu_engine_config_meets_the_1_2_contract(tmp_path: Path, gpu_engine_dir: Path) -> None:
    config = load_config(CONFIGS / "tiny-llama.yaml")
    result = deploy_repository(config, gpu_engine_dir, tmp_path / "repo", target="gpu")
    engine = read(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    params = _params(engine)
    spec = contract()["parameters"]
    assert set(params) <= set(spec), set(params) - set(spec)
    assert {n for n, p in spec.items() if p.get("mandatory")} <= set(params)
    assert not set(params) & set(contract()["forbidden_parameters"])
    assert engine.backend == "tensorrtllm"
    assert params["gpt_model_type"] == "inflight_fused_batching"
    assert params["gpt_model_path"] == str(gpu_engine_dir.resolve())
    assert params["batch_scheduler_policy"] == "guaranteed_no_evict"  # latency profile
    assert engine.max_batch_size == 4 and engine.model_transaction_policy.decoupled
    assert engine.dynamic_batching.max_queue_delay_microseconds == 0
    for name, value in params.items():
        kind = spec[name]["type"]
        if kind == "enum":
            assert value in spec[name]["values"], (name, value)
        elif kind == "bool":
            assert value in ("true", "false"), (name, value)
        elif kind == "int":
            int(value)
        elif kind == "float":
            float(value)
    assert result.settings.max_input_len == 200 and result.settings.tokens_per_block == 16  # from the engine


def test_gpu_guided_decoding_file_is_what_the_cpp_backend_reads(tmp_path: Path, gpu_engine_dir: Path) -> None:
    """model_instance_state.cc (getGuidedDecodingConfigFromParams, TensorRT-LLM 0c8de69) builds a GuidedDecodingConfig
    only when guided_decoding_backend is "xgrammar" and xgrammar_tokenizer_info_path names a file, then reads its
    encoded_vocab (strings), tokenizer_str (string) and stop_token_ids (ints)."""
    from trtkit.tokenizer.fast_tokenizer import load_fast_tokenizer

    deploy_repository(load_config(CONFIGS / "tiny-llama.yaml"), gpu_engine_dir, tmp_path / "repo", target="gpu")
    params = _params(read(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt"))
    assert params["guided_decoding_backend"] == "xgrammar"
    info_path = Path(params["xgrammar_tokenizer_info_path"])
    assert info_path.is_absolute() and info_path.parent == (tmp_path / "repo" / "tensorrt_llm").resolve()
    info = json.loads(info_path.read_text(encoding="utf-8"))
    tokenizer = load_fast_tokenizer(gpu_engine_dir)
    assert all(isinstance(t, str) for t in info["encoded_vocab"]) and len(info["encoded_vocab"]) == len(tokenizer)
    assert [info["encoded_vocab"][i] for i in tokenizer.encode("Paris, 2026", add_special_tokens=False)] == \
        tokenizer.backend.encode("Paris, 2026", add_special_tokens=False).tokens
    assert info["stop_token_ids"] == [tokenizer.eos_token_id]
    assert json.loads(info["tokenizer_str"])["model"]["type"] == "BPE"

    config = load_config(CONFIGS / "tiny-llama.yaml")
    off = replace(config, serve=replace(config.serve, guided_decoding="none"))
    deploy_repository(off, gpu_engine_dir, tmp_path / "off", target="gpu")
    params = _params(read(tmp_path / "off" / "tensorrt_llm" / "config.pbtxt"))
    assert params["guided_decoding_backend"] == params["xgrammar_tokenizer_info_path"] == ""
    assert not list((tmp_path / "off").rglob("xgrammar_tokenizer_info.json"))


def test_engine_tensors_match_the_template_on_both_targets(tmp_path: Path, gpu_engine_dir: Path,
                                                          tiny_llama_dir: Path) -> None:
    config = load_config(CONFIGS / "tiny-llama.yaml")
    deploy_repository(config, gpu_engine_dir, tmp_path / "gpu", target="gpu")
    deploy_repository(config, tiny_llama_dir, tmp_path / "cpu", target="cpu")
    template = contract()["models"]["tensorrt_llm"]
    for target in ("gpu", "cpu"):
        engine = read(tmp_path / target / "tensorrt_llm" / "config.pbtxt")
        inputs = {i.name: (i.data_type, list(i.dims), i.optional) for i in engine.input}
        for t in template["inputs"]:
            assert inputs[t["name"]][1] == t["dims"] and inputs[t["name"]][2] == bool(t.get("optional"))
        outputs = {o.name for o in engine.output}
        assert {t["name"] for t in template["outputs"]} <= outputs
    cpu = read(tmp_path / "cpu" / "tensorrt_llm" / "config.pbtxt")
    assert cpu.backend == "python" and _params(cpu)["gpt_model_path"] == str(tiny_llama_dir.resolve())


def test_every_config_parses_and_has_no_placeholder(tmp_path: Path, tiny_llama_dir: Path) -> None:
    deploy_repository(load_config(CONFIGS / "tiny-llama.yaml"), tiny_llama_dir, tmp_path / "repo")
    for model in MODELS:
        text = (tmp_path / "repo" / model / "config.pbtxt").read_text()
        assert "${" not in text
        assert read(tmp_path / "repo" / model / "config.pbtxt").name == model
        assert (tmp_path / "repo" / model / "1").is_dir()
    for model in ("preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls"):
        assert "triton_python_backend_utils" in (tmp_path / "repo" / model / "1" / "model.py").read_text()


def test_ensemble_wiring_is_consistent(tmp_path: Path, tiny_llama_dir: Path) -> None:
    """Every ensemble input is used, every output produced, every mapped tensor declared by its model."""
    repo = tmp_path / "repo"
    deploy_repository(load_config(CONFIGS / "tiny-llama.yaml"), tiny_llama_dir, repo)
    ens = read(repo / "ensemble" / "config.pbtxt")
    produced = {i.name for i in ens.input}
    used: set[str] = set()
    for step in ens.ensemble_scheduling.step:
        model = read(repo / step.model_name / "config.pbtxt")
        assert set(step.input_map) <= {i.name for i in model.input}, step.model_name
        assert set(step.output_map) <= {o.name for o in model.output}, step.model_name
        assert set(step.input_map.values()) <= produced, step.model_name
        used |= set(step.input_map.values())
        produced |= set(step.output_map.values())
    assert {i.name for i in ens.input} <= used
    assert {o.name for o in ens.output} <= produced
    front = {t["name"]: t for t in contract()["models"]["ensemble"]["inputs"]}
    for i in ens.input:
        if i.name in front:
            assert list(i.dims) == front[i.name]["dims"]
    assert {"text_input", "max_tokens", "stream", "min_length", "exclude_input_in_output"} <= {i.name for i in ens.input}
    assert {"text_output", "num_input_tokens", "num_output_tokens", "num_cached_tokens", "finish_reason"} <= {
        o.name for o in ens.output}


def test_profile_override_changes_the_configs(tmp_path: Path, tiny_llama_dir: Path) -> None:
    config = load_config(CONFIGS / "tiny-llama.yaml", profile="throughput")
    result = deploy_repository(config, tiny_llama_dir, tmp_path / "repo")
    engine = read(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    assert engine.dynamic_batching.max_queue_delay_microseconds == 50_000
    assert _params(engine)["batch_scheduler_policy"] == "max_utilization"
    assert _params(engine)["enable_chunked_context"] == "true"
    assert engine.max_batch_size == 8
    assert any(i.field == "serve.max_queue_delay_microseconds" and "throughput" in i.reason for i in result.implied)


def test_cpu_engine_has_a_triton_batcher_only_for_a_gathering_window(tmp_path: Path, tiny_llama_dir: Path) -> None:
    # the CPU engine batches in flight and bounds its own queue; Triton's dynamic batcher would only add its
    # waits for a free instance (models.engine_cpu), so the latency profile (no queue delay) has none
    config = load_config(CONFIGS / "tiny-llama.yaml")
    deploy_repository(config, tiny_llama_dir, tmp_path / "latency", target="cpu")
    latency = read(tmp_path / "latency" / "tensorrt_llm" / "config.pbtxt")
    assert not latency.HasField("dynamic_batching")
    assert _params(latency)["cpu_max_queue_size"] == "1024"  # the engine's own bound stays
    assert read(tmp_path / "latency" / "preprocessing" / "config.pbtxt").HasField("dynamic_batching")
    throughput_config = load_config(CONFIGS / "tiny-llama.yaml", profile="throughput")
    deploy_repository(throughput_config, tiny_llama_dir, tmp_path / "throughput", target="cpu")
    throughput = read(tmp_path / "throughput" / "tensorrt_llm" / "config.pbtxt")
    assert throughput.dynamic_batching.max_queue_delay_microseconds == 50_000
    assert throughput.dynamic_batching.default_queue_policy.max_queue_size == 1024


def test_refuses_to_overwrite_a_foreign_folder(tmp_path: Path, tiny_llama_dir: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(RepositoryError, match="not made by trtkit deploy"):
        deploy_repository(load_config(CONFIGS / "tiny-llama.yaml"), tiny_llama_dir, out)


def test_gpu_target_without_engines_names_the_fix(tmp_path: Path, tiny_llama_dir: Path) -> None:
    with pytest.raises(RepositoryError, match="trtkit build"):
        deploy_repository(load_config(CONFIGS / "tiny-llama.yaml"), tiny_llama_dir, tmp_path / "r", target="gpu")


def test_cli_prints_each_implied_setting(tmp_path: Path, tiny_llama_dir: Path) -> None:
    out = tmp_path / "repo"
    result = CliRunner().invoke(app, ["deploy", str(CONFIGS / "tiny-llama.yaml"), "--engine", str(tiny_llama_dir),
                                      "--out", str(out), "--profile", "throughput"])
    assert result.exit_code == 0, result.output
    for expected in ("target: cpu", "serve.max_queue_delay_microseconds = 50000", "max_utilization",
                     "serve.enable_chunked_context = True"):
        assert expected in result.output
    assert (out / "ensemble" / "config.pbtxt").is_file()


@pytest.mark.gpu
def test_gpu_repository_serves_on_a_gpu_host(tmp_path: Path) -> None:
    """On a GPU host with TensorRT-LLM 1.2 (tests/gpu_host.py gates it) and an engine from `trtkit build`
    (TRTKIT_GPU_ENGINE_DIR, which scripts/gpu_smoke.sh exports), the generated repository loads in the container's
    tritonserver and answers. Its CPU counterpart is test_gpu_engine_config_meets_the_1_2_contract."""
    import os

    engine_dir = os.environ.get("TRTKIT_GPU_ENGINE_DIR")
    if not engine_dir:  # on a GPU host this test must run: a missing engine is the caller's mistake, not a skip
        pytest.fail("set TRTKIT_GPU_ENGINE_DIR to an engine folder from `trtkit build` (scripts/gpu_smoke.sh does)")
    from live_client import Live, inputs

    from trtkit.serve import TritonServer

    config = load_config(os.environ.get("TRTKIT_GPU_CONFIG", str(CONFIGS / "smollm2-135m.yaml")))
    deploy_repository(config, Path(engine_dir), tmp_path / "repo", target="gpu")
    with TritonServer(tmp_path / "repo", start_timeout_s=600) as server:
        live = Live(server, Path(engine_dir))
        for model in ("ensemble", "tensorrt_llm_bls"):
            reply = live.stream(model, inputs("The capital of France is", 8, stream=True))
            assert reply.error is None and reply.text.strip()


def test_token_path_sends_only_what_the_engine_model_declares_on_both_targets(tmp_path: Path, gpu_engine_dir: Path,
                                                                              tiny_llama_dir: Path, tiny_counter) -> None:
    """The gateway's token path (transport/triton/token_path.py) on the generated tensorrt_llm of either target: every input
    it may send is declared with the datatype it sends, and every output it asks for is declared (a request
    naming an undeclared tensor fails as a whole in Triton)."""
    from tritonclient.grpc import model_config_pb2

    from trtkit.governance.vocabulary import SamplingParams
    from trtkit.transport.triton.token_path import TokenPath, is_engine_model

    config = load_config(CONFIGS / "tiny-llama.yaml")
    deploy_repository(config, gpu_engine_dir, tmp_path / "gpu", target="gpu")
    deploy_repository(config, tiny_llama_dir, tmp_path / "cpu", target="cpu")
    everything = SamplingParams(max_tokens=8, temperature=0.7, top_k=5, top_p=0.9, seed=3, repetition_penalty=1.1,
                                presence_penalty=0.2, frequency_penalty=0.1, min_tokens=2, stop_words=("the",),
                                bad_words=("a b",), end_id=2, pad_id=2, return_log_probs=True)
    for target in ("gpu", "cpu"):
        engine = read(tmp_path / target / "tensorrt_llm" / "config.pbtxt")
        type_name = model_config_pb2.DataType.Name
        metadata = {"inputs": [{"name": i.name, "datatype": type_name(i.data_type).removeprefix("TYPE_")
                                .replace("STRING", "BYTES")} for i in engine.input],
                    "outputs": [{"name": o.name} for o in engine.output]}
        assert is_engine_model(metadata)
        wire = TokenPath(metadata, tiny_counter, tokens_per_block=16)
        inputs, outputs = wire.request(tiny_counter.prompt_ids("Hello"), everything, stream=True)
        declared = {i["name"]: i["datatype"] for i in metadata["inputs"]}
        assert {i.name(): i.datatype() for i in inputs}.items() <= declared.items(), target
        assert {o.name() for o in outputs} <= {o["name"] for o in metadata["outputs"]}
        assert {"output_ids", "num_output_tokens"} <= {o.name() for o in outputs}


def test_generated_tensors_hold_every_documented_tensor(tmp_path: Path, gpu_engine_dir: Path,
                                                        tiny_llama_dir: Path) -> None:
    """Issue 34: an independent check. The tensors are generated from trtkit's contract file; this compares
    what is generated with a fixture taken from another upstream file (r26.04's docs/model_config.md), so a
    tensor lost from the contract file fails here."""
    fixture = json.loads((Path(__file__).resolve().parents[1] / "contracts" / "r26.04-model-io.json").read_text())
    assert len(fixture["source"]["commit"]) == 40
    config = load_config(CONFIGS / "tiny-llama.yaml")
    deploy_repository(config, gpu_engine_dir, tmp_path / "gpu", target="gpu")
    deploy_repository(config, tiny_llama_dir, tmp_path / "cpu", target="cpu")
    left_out = set(fixture["left_out"])
    for target in ("gpu", "cpu"):
        for model in ("tensorrt_llm", "tensorrt_llm_bls"):
            generated = read(tmp_path / target / model / "config.pbtxt")
            inputs, outputs = {i.name for i in generated.input}, {o.name for o in generated.output}
            assert set(fixture[model]["inputs"]) - left_out <= inputs, (target, model)
            assert set(fixture[model]["outputs"]) <= outputs, (target, model)
