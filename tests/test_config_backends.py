"""Issue 36: build.backend: tensorrt | pytorch in the one strict validator.

Under pytorch every TensorRT engine switch the YAML sets is refused by name, and so are the formats the PyTorch
backend does not load; pytorch.llm_api_options is held to the TensorRT-LLM 1.2.1 allowlist (TorchLlmArgs forbids
unknown keys, so a misspelt option must fail `trtkit config validate`, not the model load on a GPU), and options
trtkit writes from other sections are refused there, naming the section to set."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtkit.config import parse_config
from trtkit.config.build_backend import PYTORCH_REFUSED_FORMATS, TENSORRT_ONLY_BUILD_KEYS
from trtkit.config.llm_api import MAPPED, allowlist
from trtkit.errors import ConfigError

BASE = {"name": "m", "model": {"source": "bundled:smollm2-135m"}}
ENGINE_VALUES = {"opt_num_tokens": 512, "gpt_attention_plugin": "auto", "gemm_plugin": "auto", "use_fused_mlp": True,
                 "context_fmha": True, "use_paged_context_fmha": True, "remove_input_padding": True,
                 "reduce_fusion": False, "multiple_profiles": False, "gather_logits": False, "workers": 1}


def pytorch(**sections: object) -> dict:
    data = {**BASE, **sections}
    data["build"] = {"backend": "pytorch", **(sections.get("build") or {})}  # type: ignore[dict-item]
    return data


def test_the_default_is_tensorrt_and_pytorch_loads() -> None:
    assert parse_config(BASE).build.backend == "tensorrt"
    config = parse_config(pytorch(pytorch={"cuda_graph": False, "llm_api_options": {"stream_interval": 2}}))
    assert config.build.backend == "pytorch" and config.pytorch.llm_api_options == {"stream_interval": 2}


@pytest.mark.parametrize("key", sorted(TENSORRT_ONLY_BUILD_KEYS))
def test_every_engine_switch_is_refused_by_name_under_pytorch(key: str) -> None:
    assert key in ENGINE_VALUES, "a refused key without a value to test it with"
    with pytest.raises(ConfigError, match=rf"build\.{key}: a TensorRT engine switch .* remove build\.{key}"):
        parse_config(pytorch(build={key: ENGINE_VALUES[key]}))
    parse_config({**BASE, "build": {key: ENGINE_VALUES[key]}})  # the engine path keeps it


@pytest.mark.parametrize("fmt", sorted(PYTORCH_REFUSED_FORMATS))
def test_formats_the_pytorch_backend_does_not_load_are_refused(fmt: str) -> None:
    with pytest.raises(ConfigError, match=rf"quantization\.format: {fmt} .* build\.backend: tensorrt"):
        parse_config(pytorch(quantization={"format": fmt}))
    parse_config({**BASE, "quantization": {"format": fmt}})


def test_kv_int8_fp8_block_and_the_pytorch_section_each_belong_to_one_backend() -> None:
    with pytest.raises(ConfigError, match="kv_cache_dtype: int8 is not in the PyTorch backend"):
        parse_config(pytorch(quantization={"kv_cache_dtype": "int8"}))
    with pytest.raises(ConfigError, match="fp8_block .* is a PyTorch-backend format"):
        parse_config({**BASE, "quantization": {"format": "fp8_block"}})
    with pytest.raises(ConfigError, match="pytorch: these LLM-API options apply only with build.backend: pytorch"):
        parse_config({**BASE, "pytorch": {"cuda_graph": False}})
    for fmt in ("fp8", "fp8_block", "nvfp4", "int4_awq", "w4a8_awq", "none"):
        parse_config(pytorch(quantization={"format": fmt, "kv_cache_dtype": "fp8"}))


@pytest.mark.parametrize("name", sorted(MAPPED))
def test_options_trtkit_writes_are_refused_in_llm_api_options_naming_the_field(name: str) -> None:
    key, _, sub = name.partition(".")
    options = {key: {sub: 1}} if sub else {key: 1}
    with pytest.raises(ConfigError, match=rf"llm_api_options\.{name}: trtkit writes this option .* set "):
        parse_config(pytorch(pytorch={"llm_api_options": options}))


def test_unknown_and_misspelt_options_are_refused_at_every_level() -> None:
    cases = [({"sampler_typ": "auto"}, r"llm_api_options\.sampler_typ: not a TorchLlmArgs option .* 'sampler_type'"),
             ({"kv_cache_config": {"host_cache_sise": 1}}, r"kv_cache_config\.host_cache_sise: not a KvCacheConfig "
              r"option .* 'host_cache_size'"),
             ({"scheduler_config": {"context_chunking_polcy": "x"}}, r"not a SchedulerConfig option .* "
              r"'context_chunking_policy'"),
             ({"build_config": {}}, r"build_config: not a TorchLlmArgs option"),  # a TrtLlmArgs field
             ({"fail_fast_on_attention_window_too_large": True}, "not a TorchLlmArgs option"),
             ({"kv_cache_config": 3}, r"kv_cache_config: must be a mapping of KvCacheConfig options")]
    for options, message in cases:
        with pytest.raises(ConfigError, match=message):
            parse_config(pytorch(pytorch={"llm_api_options": options}))


def test_the_allowlist_holds_every_option_the_issue_maps() -> None:
    allowed = allowlist()
    assert {"kv_cache_config", "max_batch_size", "max_num_tokens", "max_seq_len", "enable_chunked_prefill",
            "scheduler_config", "cuda_graph_config", "guided_decoding_backend", "tensor_parallel_size",
            "pipeline_parallel_size", "disable_overlap_scheduler"} <= set(allowed["TorchLlmArgs"])
    assert {"free_gpu_memory_fraction", "enable_block_reuse", "dtype", "tokens_per_block"} <= set(allowed["KvCacheConfig"])
    assert allowed["SchedulerConfig"][0] == "capacity_scheduler_policy"
    assert set(allowed["CudaGraphConfig"]) == {"batch_sizes", "max_batch_size", "enable_padding"}


def test_config_validate_refuses_a_misspelt_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from trtkit.cli.main import main

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(pytorch(pytorch={"llm_api_options": {"kv_cache_config": {"tokens_per_blok": 8}}})))
    assert main(["config", "validate", str(path)]) == 1
    assert "kv_cache_config.tokens_per_blok: not a KvCacheConfig option" in capsys.readouterr().err


def test_the_server_start_timeout_follows_the_backend_unless_the_config_sets_one() -> None:
    """Issue 45 item 4: 120 s fits the C++ backend deserializing an engine, not the LLM API's start on an 8B model
    (two tensorrt_llm imports, weights, the autotuner, CUDA graphs, the KV-cache estimation pass)."""
    from trtkit.config.build_backend import PYTORCH, TENSORRT
    from trtkit.config.schema import ServeSection

    for data, backend in ((BASE, TENSORRT), (pytorch(), PYTORCH)):
        config = parse_config(data)  # resolved: the backend's default, and why
        assert config.serve.server_start_timeout_s == backend.server_start_timeout_s
        assert [i.reason for i in config.implied if i.field == "serve.server_start_timeout_s"] == [
            f"build.backend {backend.name} (config/build_backend.py says why)"]
    assert (TENSORRT.server_start_timeout_s, PYTORCH.server_start_timeout_s) == (120.0, 900.0)
    assert parse_config(pytorch(serve={"server_start_timeout_s": 200})).serve.server_start_timeout_s == 200
    assert PYTORCH.start_timeout(ServeSection()) == 900.0  # a section never resolved: the same default
