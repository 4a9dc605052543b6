"""`trtkit convert` and `trtkit calibrate` through the real app, and one error through main()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trtkit.cli.main import app, main


@pytest.fixture
def config_file(tiny_llama_dir: Path, tmp_path: Path) -> Path:
    data = {"name": "tiny-cli", "model": {"source": str(tiny_llama_dir), "chat_template": False},
            "workdir": str(tmp_path / "work"), "convert": {"dtype": "bfloat16"},
            "quantization": {"calib_size": 4, "calib_max_seq_len": 32, "calib_batch_size": 4, "eval_samples": 2}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_convert_prints_the_checkpoint(config_file: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["convert", str(config_file), "--tp-size", "2"])
    assert result.exit_code == 0, result.output
    out = Path(result.stdout.strip())
    assert out == tmp_path / "work" / "checkpoints" / "bfloat16-tp2-pp1"
    assert (out / "rank1.safetensors").is_file()


def test_calibrate_prints_table_and_ranges(config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "sq"
    result = CliRunner().invoke(app, ["calibrate", str(config_file), "--format", "int8_sq", "--kv-cache-dtype", "int8",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "tiny-cli unquantized" in result.stdout and "int8_sq + kv int8" in result.stdout
    assert "activation ranges" in result.stdout and f"checkpoint (int8_sq + kv int8): {out}" in result.stdout
    assert "calibrating int8_sq" in result.stderr  # the progress bar goes to stderr, never into the data
    assert json.loads((out / "config.json").read_text())["quantization"]["kv_cache_quant_algo"] == "INT8"
    again = CliRunner().invoke(app, ["calibrate", str(config_file), "--format", "int8_sq", "--kv-cache-dtype", "int8",
                                     "--out", str(out), "--json"])
    assert again.exit_code == 0
    assert "is up to date" in again.stderr
    payload = json.loads(again.stdout)
    assert payload[0]["skipped"] is True and payload[0]["report"]["format"] == "int8_sq"


def test_compare_prints_one_table(config_file: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate", str(config_file), "--compare", "fp8,int8_wo"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["format", "perplexity", "increase"]
    assert any(line.startswith("fp8 ") for line in lines) and any(line.startswith("int8_wo ") for line in lines)
    assert sum("unquantized" in line for line in lines) == 1
    assert "activation ranges" not in result.stdout


def test_compare_refuses_format_and_out(config_file: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate", str(config_file), "--compare", "fp8", "--format", "fp8"])
    assert result.exit_code != 0
    assert "--compare runs several formats into their default folders; drop --format and --out" in str(result.exception)


def test_error_boundary_one_line(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(config_file), "--format", "int3"]) == 1
    captured = capsys.readouterr()
    assert captured.err == ("error: unknown quantization format 'int3'; use one of int8_sq, int8_wo, int4_wo, "
                            "int4_awq, w4a8_awq, fp8, fp8_block, nvfp4\n")
    assert captured.out == ""
    assert main(["convert", str(config_file), "--dtype", "int8"]) == 1
    assert "--dtype 'int8' is not supported; use float16, bfloat16 or float32" in capsys.readouterr().err
