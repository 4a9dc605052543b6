"""`trtkit check`: one test per finding, each breaking one field of a consistent repository."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from handmade_repo import handmade_repository, read_config, write_config, write_engine
from transformers import AutoTokenizer

from trtkit.consistency import check_repository, engine_world_size
from trtkit.consistency.findings import Finding
from trtkit.errors import RepositoryError


@pytest.fixture(scope="module")
def eos_id(tiny_llama_dir: Path) -> int:
    return int(AutoTokenizer.from_pretrained(str(tiny_llama_dir)).eos_token_id)


@pytest.fixture
def repo(tmp_path: Path, tiny_llama_dir: Path, eos_id: int) -> Path:
    return handmade_repository(tmp_path, tiny_llama_dir, eos_token_id=eos_id)


def _edit(repo: Path, model: str, change: Callable) -> Path:  # type: ignore[type-arg]
    path = repo / model / "config.pbtxt"
    config = read_config(path)
    change(config)
    return write_config(repo, config)


def _set_param(repo: Path, model: str, key: str, value: str) -> Path:
    return _edit(repo, model, lambda c: c.parameters[key].__setattr__("string_value", value))


def _edit_engine(repo: Path, change: Callable) -> Path:  # type: ignore[type-arg]
    engine = repo.parent / "engine"
    config = json.loads((engine / "config.json").read_text())
    change(config)
    (engine / "config.json").write_text(json.dumps(config))
    return engine / "config.json"


def _only(findings: list[Finding], code: str) -> Finding:
    assert [f.code for f in findings] == [code], [str(f) for f in findings]
    return findings[0]


def _check(repo: Path, gpu_count: int = 1) -> list[Finding]:
    return check_repository(repo, gpu_count=gpu_count)


def test_consistent_repository_has_no_findings(repo: Path) -> None:
    assert _check(repo) == []
    assert engine_world_size(repo) == 1


def test_max_batch_size_above_engine(repo: Path) -> None:
    path = _edit(repo, "tensorrt_llm", lambda c: setattr(c, "max_batch_size", 32))
    finding = _only(_check(repo), "max_batch_size")
    assert finding.file == path and "32" in finding.found and "max_batch_size 8" in finding.expected
    assert "set max_batch_size to 8" in finding.fix


def test_max_input_len_differs_from_engine(repo: Path) -> None:
    path = _set_param(repo, "preprocessing", "max_input_len", "2048")
    finding = _only(_check(repo), "max_input_len")
    assert finding.file == path and "2048" in finding.found and "max_input_len 512" in finding.expected


def test_engine_input_len_not_below_seq_len(repo: Path) -> None:
    path = _edit_engine(repo, lambda c: c["build_config"].update(max_input_len=1024))
    _set_param(repo, "preprocessing", "max_input_len", "1024")
    finding = _only(_check(repo), "max_input_len")
    assert finding.file == path and "1024" in finding.found and "max_seq_len 1024" in finding.expected


def test_max_seq_len_beyond_position_embeddings(repo: Path) -> None:
    _edit_engine(repo, lambda c: c["build_config"].update(max_seq_len=4096))
    finding = _only(_check(repo), "max_seq_len")
    assert "4096" in finding.found and "2048" in finding.expected


def test_beam_width_above_engine(repo: Path) -> None:
    path = _set_param(repo, "tensorrt_llm", "max_beam_width", "4")
    finding = _only(_check(repo), "beam_width")
    assert finding.file == path and "4" in finding.found and "max_beam_width 1" in finding.expected


@pytest.mark.parametrize("switch", ["enable_kv_cache_reuse", "enable_chunked_context"])
def test_reuse_or_chunked_context_needs_paged_context_fmha(repo: Path, switch: str) -> None:
    _edit_engine(repo, lambda c: c["build_config"]["plugin_config"].update(use_paged_context_fmha=False))
    _set_param(repo, "tensorrt_llm", "enable_kv_cache_reuse", "false")
    path = _set_param(repo, "tensorrt_llm", switch, "true")
    finding = _only(_check(repo), "paged_context_fmha")
    assert finding.file == path and switch in finding.found and "use_paged_context_fmha" in finding.fix


def test_paged_context_fmha_off_is_fine_without_reuse_or_chunking(repo: Path) -> None:
    _edit_engine(repo, lambda c: c["build_config"]["plugin_config"].update(use_paged_context_fmha=False))
    _set_param(repo, "tensorrt_llm", "enable_kv_cache_reuse", "false")
    assert _check(repo) == []


def test_streaming_needs_decoupled_engine_model(repo: Path) -> None:
    path = _edit(repo, "tensorrt_llm", lambda c: setattr(c.model_transaction_policy, "decoupled", False))
    finding = _only(_check(repo), "decoupled")
    assert finding.file == path and "decoupled false" in finding.found and "tensorrt_llm_bls" in finding.expected


def test_streaming_from_the_model_config_needs_decoupled(repo: Path, tmp_path: Path) -> None:
    from trtkit.config import load_config

    for name in ("tensorrt_llm", "tensorrt_llm_bls"):
        _edit(repo, name, lambda c: setattr(c.model_transaction_policy, "decoupled", False))
    config = load_config(Path(__file__).parents[2] / "model_configs" / "tiny-llama.yaml")
    findings = [f for f in check_repository(repo, config=config, gpu_count=1) if f.code == "decoupled"]
    assert len(findings) == 2 and all("serve.streaming is true" in f.expected for f in findings)


def test_missing_tokenizer_dir(repo: Path, tmp_path: Path) -> None:
    path = _set_param(repo, "postprocessing", "tokenizer_dir", str(tmp_path / "nowhere"))
    finding = _only(_check(repo), "tokenizer_path")
    assert finding.file == path and "nowhere" in finding.found


def test_tokenizer_dir_parameter_absent(repo: Path) -> None:
    path = _edit(repo, "preprocessing", lambda c: c.parameters.pop("tokenizer_dir"))
    finding = _only(_check(repo), "tokenizer_path")
    assert finding.file == path and "no tokenizer_dir" in finding.found


def test_end_id_differs_from_the_model(repo: Path, eos_id: int) -> None:
    engine = repo.parent / "engine"
    write_engine(engine, json.loads((engine / "config.json").read_text()), eos_token_id=eos_id + 1)
    finding = _only(_check(repo), "end_id")
    assert str(eos_id) in finding.found and str(eos_id + 1) in finding.expected


def test_pad_and_end_ids_outside_the_engine_vocabulary(repo: Path) -> None:
    _edit_engine(repo, lambda c: c["pretrained_config"].update(vocab_size=1))
    codes = sorted(f.code for f in _check(repo))
    assert codes == ["end_id", "pad_id"]


def test_gpu_count_below_world_size(repo: Path) -> None:
    path = _edit_engine(repo, lambda c: c["pretrained_config"]["mapping"].update(world_size=2, tp_size=2))
    finding = _only(_check(repo, gpu_count=1), "gpu_count")
    assert finding.file == path and "world size 2" in finding.found and "1 visible GPU" in finding.expected
    assert engine_world_size(repo) == 2
    assert _check(repo, gpu_count=2) == []


def test_gpu_device_ids_must_match_world_size(repo: Path) -> None:
    path = _set_param(repo, "tensorrt_llm", "gpu_device_ids", "0,1")
    assert _only(_check(repo, gpu_count=2), "gpu_count").file == path


def test_world_size_differs_from_model_config(repo: Path) -> None:
    from trtkit.config import load_config

    _edit_engine(repo, lambda c: c["pretrained_config"]["mapping"].update(world_size=2, tp_size=2))
    config = load_config(Path(__file__).parents[2] / "model_configs" / "tiny-llama.yaml")
    findings = [f for f in check_repository(repo, config=config, gpu_count=2) if f.code == "world_size"]
    assert len(findings) == 1 and "tp_size x pp_size = 1" in findings[0].expected


def test_missing_engine_and_placeholder(repo: Path, tmp_path: Path) -> None:
    _set_param(repo, "tensorrt_llm", "gpt_model_path", str(tmp_path / "no-engine"))
    _set_param(repo, "postprocessing", "skip_special_tokens", "${skip_special_tokens}")
    assert sorted(f.code for f in _check(repo)) == ["engine_path", "placeholder"]


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="trtkit deploy"):
        check_repository(tmp_path)
    with pytest.raises(RepositoryError, match="does not exist"):
        check_repository(tmp_path / "nope")
