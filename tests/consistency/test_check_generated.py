"""`trtkit check` on a repository made by `trtkit deploy` (CPU target), broken one field at a time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from handmade_repo import read_config, write_config

from trtkit.cli.main import main
from trtkit.config import load_config
from trtkit.config.schema import ModelConfig
from trtkit.consistency import check_repository
from trtkit.consistency.findings import Finding

CONFIG_PATH = Path(__file__).parents[2] / "model_configs" / "tiny-llama.yaml"


@pytest.fixture(scope="module")
def tiny_config() -> ModelConfig:
    return load_config(CONFIG_PATH)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path, tiny_config: ModelConfig) -> Path:
    from trtkit.repository import deploy_repository

    return deploy_repository(tiny_config, tiny_llama_dir, tmp_path_factory.mktemp("gen") / "repo", target="cpu").out_dir


@pytest.fixture
def repo(generated: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(generated, tmp_path / "repo"))


def _set(repo: Path, model: str, key: str, value: str) -> Path:
    config = read_config(repo / model / "config.pbtxt")
    config.parameters[key].string_value = value
    return write_config(repo, config)


def _codes(findings: list[Finding]) -> list[str]:
    return sorted(f.code for f in findings)


def test_generated_repository_is_consistent(repo: Path, tiny_config: ModelConfig) -> None:
    assert check_repository(repo, config=tiny_config, gpu_count=0) == []


def test_triton_batch_above_the_engine_models_limit(repo: Path) -> None:
    config = read_config(repo / "ensemble" / "config.pbtxt")
    limit = int(read_config(repo / "tensorrt_llm" / "config.pbtxt").parameters["cpu_max_batch_size"].string_value)
    config.max_batch_size = limit * 2
    path = write_config(repo, config)
    (finding,) = check_repository(repo, gpu_count=0)
    assert finding.code == "max_batch_size" and finding.file == path
    assert f"cpu_max_batch_size {limit}" in finding.expected


def test_preprocessing_input_limit_differs_from_the_engine(repo: Path) -> None:
    path = _set(repo, "preprocessing", "max_input_len", "9999")
    (finding,) = check_repository(repo, gpu_count=0)
    assert finding.code == "max_input_len" and finding.file == path and "cpu_max_input_len 256" in finding.expected


def test_preprocessing_seq_limit_above_the_engine(repo: Path) -> None:
    _set(repo, "preprocessing", "max_seq_len", "4096")
    assert _codes(check_repository(repo, gpu_count=0)) == ["max_seq_len"]


def test_cpu_engine_has_no_beam_search(repo: Path) -> None:
    _set(repo, "tensorrt_llm", "max_beam_width", "2")
    assert _codes(check_repository(repo, gpu_count=0)) == ["beam_width"]


def test_bls_not_decoupled_while_streaming(repo: Path, tiny_config: ModelConfig) -> None:
    config = read_config(repo / "tensorrt_llm_bls" / "config.pbtxt")
    config.model_transaction_policy.decoupled = False
    write_config(repo, config)
    (finding,) = check_repository(repo, config=tiny_config, gpu_count=0)
    assert finding.code == "decoupled" and "serve.streaming is true" in finding.expected


def test_tokenizer_folder_removed(repo: Path, tmp_path: Path) -> None:
    _set(repo, "postprocessing", "tokenizer_dir", str(tmp_path))
    assert _codes(check_repository(repo, gpu_count=0)) == ["tokenizer_path"]


def test_model_with_another_end_id(repo: Path, tiny_llama_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-model"
    other.mkdir()
    raw = json.loads((tiny_llama_dir / "config.json").read_text())
    raw["eos_token_id"] = raw["eos_token_id"] + 7
    (other / "config.json").write_text(json.dumps(raw))
    _set(repo, "tensorrt_llm", "gpt_model_path", str(other))
    assert _codes(check_repository(repo, gpu_count=0)) == ["end_id"]


def test_cli_prints_findings_and_exits_1(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(repo)]) == 0
    assert "consistent" in capsys.readouterr().err
    _set(repo, "preprocessing", "max_input_len", "9999")
    assert main(["check", str(repo), "--json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)
    assert finding["code"] == "max_input_len" and finding["found"] == "parameter max_input_len 9999"
    assert finding["file"].endswith("preprocessing/config.pbtxt") and finding["fix"]


def test_guided_decoding_file_must_match_the_served_tokenizer(repo: Path, tiny_config: ModelConfig) -> None:
    engine = read_config(repo / "tensorrt_llm" / "config.pbtxt")
    original = Path(engine.parameters["xgrammar_tokenizer_info_path"].string_value)
    info = json.loads(original.read_text(encoding="utf-8"))
    info["encoded_vocab"][10], info["encoded_vocab"][11] = info["encoded_vocab"][11], info["encoded_vocab"][10]
    swapped = repo / "tensorrt_llm" / "other_info.json"
    swapped.write_text(json.dumps(info), encoding="utf-8")
    _set(repo, "tensorrt_llm", "xgrammar_tokenizer_info_path", str(swapped))
    (finding,) = check_repository(repo, config=tiny_config, gpu_count=0)
    assert finding.code == "guided_decoding" and finding.file == swapped and "vocabulary" in finding.found
    _set(repo, "tensorrt_llm", "xgrammar_tokenizer_info_path", str(repo / "nowhere.json"))
    (finding,) = check_repository(repo, config=tiny_config, gpu_count=0)
    assert finding.code == "guided_decoding" and "cannot be read" in finding.expected


def test_guided_decoding_asked_by_the_config_but_not_deployed(repo: Path, tiny_config: ModelConfig) -> None:
    _set(repo, "tensorrt_llm", "guided_decoding_backend", "")
    _set(repo, "tensorrt_llm", "xgrammar_tokenizer_info_path", "")
    (finding,) = check_repository(repo, config=tiny_config, gpu_count=0)
    assert finding.code == "guided_decoding" and "serve.guided_decoding: xgrammar" in finding.expected
    assert finding.severity == "warning"  # it serves (an older repository): only guided requests are refused
    assert check_repository(repo, gpu_count=0) == []  # without the config, off is a valid choice
    _set(repo, "tensorrt_llm", "guided_decoding_backend", "outlines")
    (finding,) = check_repository(repo, gpu_count=0)
    assert finding.code == "guided_decoding" and "'outlines'" in finding.found
