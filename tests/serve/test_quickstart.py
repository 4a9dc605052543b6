"""The whole quickstart once, on the tiny model: convert -> deploy -> check -> real tritonserver ->
streamed answer with usage -> clean stop. Progress on stderr, the answer on stdout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import leftovers

from trtkit.cli.main import main
from trtkit.consistency import check_repository
from trtkit.serve.state import read_records

pytestmark = pytest.mark.slow
CONFIG = Path(__file__).parents[2] / "model_configs" / "tiny-llama.yaml"


def test_quickstart_streams_an_answer_prints_usage_and_stops_cleanly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tiny_llama_dir: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["quickstart", str(CONFIG), "--prompt", "Hello there", "--max-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    assert out.strip(), "the answer goes to stdout"
    assert "[1/5]" not in out and "usage:" not in out
    steps = [line for line in err.splitlines() if line.startswith("[")]
    assert [s[:5] for s in steps] == ["[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"]
    usage = re.search(r"usage: prompt_tokens=(\d+) completion_tokens=(\d+) total_tokens=(\d+)", err)
    assert usage is not None
    prompt, completion, total = map(int, usage.groups())
    assert prompt > 0 and 0 < completion <= 8 and total == prompt + completion
    repo = tmp_path / "triton_repo" / "tiny-llama"
    assert (repo / "tensorrt_llm" / "config.pbtxt").is_file() and check_repository(repo, gpu_count=0) == []
    log_path = re.search(r"log: (\S+)\)", err)
    assert log_path is not None
    prefix = re.search(r"trtkit_[0-9a-f]{8}_", Path(log_path.group(1)).read_text())
    assert prefix is not None and leftovers(prefix.group(0)) == ([], [])
    assert read_records() == []
