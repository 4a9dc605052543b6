"""Config validation: shipped configs pass; bad files fail with a message naming the path and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trtkit.config import load_config, parse_config
from trtkit.errors import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "model_configs").glob("*.yaml"))
BASE = {"name": "m", "model": {"source": "bundled:smollm2-135m"}}


def with_section(section: str, **values: object) -> dict:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data.setdefault(section, {}).update(values)
    return data


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    config = load_config(path)
    assert config.serve.batch_scheduler_policy in ("guaranteed_no_evict", "max_utilization")
    assert config.client.max_input_tokens is not None and config.client.max_input_tokens <= config.build.max_input_len


def test_at_least_three_configs_ship() -> None:
    names = {p.stem for p in CONFIGS}
    assert {"smollm2-135m", "tiny-llama"} <= names and len(names) >= 3


BAD_CASES = [
    (with_section("build", max_batchsize=4), "build.max_batchsize: unknown key; did you mean 'max_batch_size'?"),
    (with_section("build", max_input_len=4096, max_seq_len=2048),
     "build.max_input_len (4096) must be below build.max_seq_len (2048)"),
    (with_section("build", max_batch_size=0), "build.max_batch_size: must be >= 1, got 0"),
    (with_section("quantization", format="int8sq"), "quantization.format: 'int8sq' is not one of"),
    (with_section("quantization", format="int8sq"), "did you mean 'int8_sq'?"),
    (with_section("convert", dtype="fp16"), "convert.dtype: 'fp16' is not one of"),
    (with_section("serve", kv_cache_free_gpu_mem_fraction=1.5), "serve.kv_cache_free_gpu_mem_fraction: must be < 1.0"),
    (with_section("serve", http_port=9000, grpc_port=9000), "serve.grpc_port (9000) is the same as serve.http_port (9000)"),
    (with_section("build", tokens_per_block=48), "build.tokens_per_block (48) must be a power of two"),
    (with_section("build", max_num_tokens=512, max_input_len=1024),
     "build.max_num_tokens (512) must be at least build.max_input_len (1024) unless serve.enable_chunked_context"),
    (with_section("serve", max_batch_size=64), "serve.max_batch_size (64) must not exceed build.max_batch_size (8)"),
    (with_section("client", max_input_tokens=5000), "client.max_input_tokens (5000) must not exceed build.max_input_len (1024)"),
    (with_section("client", budgets=[{"scope": "user"}]), "client.budgets[0]: set max_tokens or max_cost"),
    (with_section("build", use_fused_mlp="yes"), "build.use_fused_mlp: must be true or false, got 'yes'"),
    (with_section("quantization", format="fp8", kv_cache_dtype="int8"),
     "quantization.kv_cache_dtype (int8) does not combine with quantization.format (fp8)"),
    ({"model": {"source": "x"}}, "name: is required"),
    ({"name": "m", "model": {"source": "x"}, "serve": [1, 2]}, "serve: must be a mapping"),
    (with_section("client", cache={"ttl": 5}), "client.cache.ttl: unknown key; did you mean 'ttl_seconds'?"),
]


@pytest.mark.parametrize(("data", "message"), BAD_CASES, ids=[m[:40] for _, m in BAD_CASES])
def test_bad_config_names_path_and_fix(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert message in str(info.value)


def test_chunked_context_allows_small_num_tokens() -> None:
    data = with_section("build", max_num_tokens=256, max_input_len=1024)
    data["serve"] = {"profile": "throughput"}
    assert parse_config(data).serve.enable_chunked_context is True


def test_profile_fills_only_unset_fields() -> None:
    data = with_section("serve", profile="throughput", max_queue_delay_microseconds=1000)
    serve = parse_config(data).serve
    assert serve.max_queue_delay_microseconds == 1000
    assert serve.batch_scheduler_policy == "max_utilization"
    latency = parse_config(with_section("serve", profile="latency")).serve
    assert latency.max_queue_delay_microseconds == 0 and latency.batch_scheduler_policy == "guaranteed_no_evict"


def test_the_profile_is_resolved_once_at_load_with_where_each_value_came_from() -> None:
    data = with_section("serve", max_queue_delay_microseconds=1000)
    config = parse_config(data, profile="throughput")
    assert config.serve.profile == "throughput" and config.serve.batch_scheduler_policy == "max_utilization"
    why = {i.field: i.reason for i in config.implied}
    assert why["serve.max_queue_delay_microseconds"] == "set in the config"
    assert why["serve.batch_scheduler_policy"].startswith("throughput:")
    assert why["client.max_input_tokens"] == "from build.max_input_len"
    with pytest.raises(ConfigError, match="profile 'fast' is unknown"):
        parse_config(data, profile="fast")


def test_a_value_changed_after_loading_is_no_longer_the_profiles() -> None:
    from dataclasses import replace

    from trtkit.config.profiles import from_profile, serve_provenance

    config = parse_config(with_section("serve", profile="throughput"))
    assert from_profile(config, "serve.max_queue_delay_microseconds")
    changed = replace(config, serve=replace(config.serve, max_queue_delay_microseconds=2000))
    assert not from_profile(changed, "serve.max_queue_delay_microseconds")
    latency = replace(config, serve=replace(config.serve, profile="latency"))  # throughput's values, now set
    assert not any(i.reason.startswith("throughput") for i in serve_provenance(latency))


def test_the_provenance_is_not_a_yaml_key() -> None:
    from trtkit.config import config_to_yaml

    with pytest.raises(ConfigError, match="implied: unknown key"):
        parse_config({**BASE, "implied": []})
    assert "implied" not in yaml.safe_load(config_to_yaml(parse_config(BASE)))


def test_relative_paths_are_anchored_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "m.yaml"
    path.write_text(yaml.safe_dump({"name": "m", "model": {"source": "../hf"}}))
    assert load_config(path).model.source == str((tmp_path / "hf").resolve())


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: m\nmodel: {source: x\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(path)
