"""`trtkit tokens count` and `trtkit usage` through the real CLI entry point."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trtkit.cli.main import main
from trtkit.store.ledger import Ledger, LedgerRow

TINY_CONFIG = Path(__file__).resolve().parents[2] / "model_configs" / "tiny-llama.yaml"


def test_tokens_count_shows_chinese_costs_more_than_its_length(tiny_llama_dir: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokens", "count", str(TINY_CONFIG), "我们今天下午去公园散步，天气很好。", "--json"]) == 0
    chinese = json.loads(capsys.readouterr().out)
    english_file = tmp_path / "en.txt"
    english_file.write_text("We went for a walk in the park this afternoon.", encoding="utf-8")
    assert main(["tokens", "count", str(TINY_CONFIG), f"@{english_file}"]) == 0
    out = capsys.readouterr()
    rows = dict(line.rsplit(None, 1) for line in out.out.splitlines())
    assert rows["characters"] == "46" and int(rows["tokens"]) < 46
    assert chinese["characters"] == 17 and chinese["tokens"] > chinese["characters"]
    assert "note:" not in out.err


def test_usage_reports_by_user_as_json_and_csv(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Ledger() as ledger:
        for user, tokens in (("ann", 10), ("ann", 5), ("ben", 7)):
            ledger.record(LedgerRow(time.time(), "tiny-llama", user, "", "s", "r", tokens, 1, 0, 2.0, 9.0, "length",
                                    0.0))
    assert main(["usage", "--by", "user", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["user"], r["requests"], r["prompt_tokens"]) for r in report] == [("ann", 2, 15), ("ben", 1, 7)]
    assert main(["usage", "--by", "model", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("tiny-llama,3,22,3,0,25,0")
    assert main(["usage", "--by", "week"]) == 2  # a usage error (issue 38 item 10)
    assert "'week' is not one of 'day', 'model', 'user', 'key', 'session'" in capsys.readouterr().err
